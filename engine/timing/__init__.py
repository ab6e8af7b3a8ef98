"""How fast is it? Timing protocols, measurement sessions, baselines, statistics, physics."""
