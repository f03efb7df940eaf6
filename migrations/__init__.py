"""factgate: migrations layer."""
