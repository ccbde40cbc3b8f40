"""The installed distribution's version: what `--version`, /openapi.json and traces report. A module
of its own so that those read it without importing the package's face (its __init__ builds the app)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("api-like-oai")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
