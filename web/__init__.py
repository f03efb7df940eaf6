"""factgate: web layer."""
