"""factgate: settings, read from the environment in one typed place (imported by every layer but checks/ and clients/)."""

from config.settings import Settings

__all__ = ["Settings"]
