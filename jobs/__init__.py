"""factgate: jobs layer."""
