"""tablekeeper: Spark-native maintenance jobs for Iceberg and Delta Lake tables."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tablekeeper")
except _metadata.PackageNotFoundError:  # running from a source tree or a --py-files zip
    __version__ = "0.1.0"

__all__ = ["__version__"]
