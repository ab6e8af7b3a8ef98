"""Is a candidate correct? Verifier, GPU checks, numerics, sanitizer, audit, timed checks."""
