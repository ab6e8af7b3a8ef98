"""How fast is it? Timing protocols, sessions, baselines, statistics, ratios one can trust."""
