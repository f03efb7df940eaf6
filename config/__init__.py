"""factgate: settings read from the environment in one typed place.

Every layer but checks/ and clients/ imports it.
"""

from config.settings import Settings

__all__ = ["Settings"]
