"""factgate: simulator layer."""
