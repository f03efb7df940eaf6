"""factgate: clients layer."""
