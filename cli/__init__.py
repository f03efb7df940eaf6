"""factgate: cli layer."""
