"""tablekeeper: Spark-native maintenance jobs for Iceberg and Delta Lake tables."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # Looked up on first use: importlib.metadata costs every process that imports the package
    # (each Spark worker daemon, every CLI start) over 0.1 s, and only results print the version.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("tablekeeper")
    except metadata.PackageNotFoundError:  # running from a source tree or a --py-files zip
        version = "0.1.0"
    globals()["__version__"] = version
    return version
