"""What users take away: ratios they can trust, the report, kernel bundles."""
