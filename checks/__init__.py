"""factgate: checks layer."""
