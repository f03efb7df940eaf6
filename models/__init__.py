"""factgate: models layer."""
