"""factgate: workers layer."""
