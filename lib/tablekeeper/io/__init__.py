"""Storage: FileIO over pyarrow.fs and location (URI) helpers. Knows nothing about tables."""

from __future__ import annotations

from tablekeeper.io.fileio import DeleteReport, FileInfo, FileIO, InputStream
from tablekeeper.io.uri import (
    DEFAULT_EQUIVALENT_SCHEMES,
    LocationParts,
    decode_percent,
    is_under,
    join_location,
    location_to_path,
    normalize_location,
    strip_trailing_slash,
)

__all__ = [
    "DEFAULT_EQUIVALENT_SCHEMES",
    "DeleteReport",
    "FileIO",
    "FileInfo",
    "InputStream",
    "LocationParts",
    "decode_percent",
    "is_under",
    "join_location",
    "location_to_path",
    "normalize_location",
    "strip_trailing_slash",
]
