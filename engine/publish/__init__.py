"""What users take away: the report and kernel bundles."""
