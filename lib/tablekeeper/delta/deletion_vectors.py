"""Delta Lake deletion vectors, read as Iceberg ``deletion-vector-v1`` blobs.

A Delta ``.bin`` file is a version byte ``1``, then blocks that are byte-for-byte DV blobs (the
same length prefix, magic and CRC-32 as Iceberg's), so a vector can be copied into a Puffin file
verbatim. Inline vectors (storage type ``i``) and the ids of stored ones (``u``) are Z85 text.
Everything here works on bytes; callers own all I/O.
"""

from __future__ import annotations

import struct
from typing import Final
from uuid import UUID

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.puffin import deserialize_dv, wrap_dv
from tablekeeper.iceberg.roaring import RoaringBitmap64

_BE_U32: Final = struct.Struct(">I")
_DELTA_DV_FILE_VERSION: Final = 1
_Z85_ALPHABET: Final = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_DIGITS: Final = {char: index for index, char in enumerate(_Z85_ALPHABET)}
_Z85_UUID_CHARS: Final = 20
# The descriptor's offset where it has none: the protocol says 0 for stored (non-inline) DVs, as
# delta-spark and delta-kernel read it.
ABSENT_OFFSET: Final = 0


def dv_from_delta_bytes(bitmap_data: bytes | bytearray | memoryview) -> tuple[RoaringBitmap64, bytes]:
    """Delta's serialised bitmap (magic + vector, as stored inline) -> (bitmap, Iceberg DV blob)."""
    blob = wrap_dv(bytes(bitmap_data))
    return deserialize_dv(blob), blob


def read_delta_inline_dv(
    path_or_inline_dv: str, size_in_bytes: int, cardinality: int | None = None
) -> tuple[RoaringBitmap64, bytes]:
    """Decode a storage-type ``i`` descriptor into (bitmap, Iceberg DV blob)."""
    decoded = z85_decode(path_or_inline_dv)
    # Z85 works on 4-byte groups, so the writer zero-pads the bitmap up to a multiple of 4.
    if not 0 <= len(decoded) - size_in_bytes < 4:
        raise CorruptMetadataError(
            f"inline Delta deletion vector decodes to {len(decoded)} bytes but sizeInBytes is {size_in_bytes}"
        )
    bitmap, blob = dv_from_delta_bytes(decoded[:size_in_bytes])
    _check_cardinality(bitmap, cardinality)
    return bitmap, blob


def read_delta_dv(
    data: bytes | bytearray | memoryview, offset: int, size_in_bytes: int, cardinality: int | None = None
) -> tuple[RoaringBitmap64, bytes]:
    """Read one DV from a Delta ``.bin`` file's bytes; returns (bitmap, Iceberg DV blob).

    The blob is the file's bytes ``[offset, offset + size_in_bytes + 8)`` unchanged: Delta chose
    the same length prefix and CRC, so it can be copied into a Puffin file verbatim.
    """
    if not data:
        raise CorruptMetadataError("Delta deletion vector file is empty")
    if data[0] != _DELTA_DV_FILE_VERSION:
        raise UnsupportedFeatureError(
            f"Delta deletion vector file version {data[0]} is not supported (expected 1)"
        )
    if offset < 1:
        raise CorruptMetadataError(
            f"Delta deletion vector offset {offset} points at the file's version byte"
            + (" (a descriptor without offset is read at 0, as the protocol says)" if offset == 0 else "")
        )
    if size_in_bytes < 12:
        # Magic plus the uint64 bitmap count is the smallest possible (empty) vector.
        raise CorruptMetadataError(
            f"Delta deletion vector sizeInBytes {size_in_bytes} is below the minimum of 12"
        )
    end = offset + size_in_bytes + 8
    if end > len(data):
        raise CorruptMetadataError(
            f"Delta deletion vector at offset {offset} needs {end} bytes but the file has {len(data)}"
        )
    blob = bytes(data[offset:end])
    (declared,) = _BE_U32.unpack_from(blob, 0)
    if declared != size_in_bytes:
        raise CorruptMetadataError(
            f"Delta deletion vector at offset {offset} has size {declared}, descriptor says {size_in_bytes}"
        )
    bitmap = deserialize_dv(blob)
    _check_cardinality(bitmap, cardinality)
    return bitmap, blob


def _check_cardinality(bitmap: RoaringBitmap64, expected: int | None) -> None:
    if expected is not None and bitmap.cardinality != expected:
        raise CorruptMetadataError(
            f"deletion vector holds {bitmap.cardinality} positions but its cardinality says {expected}"
        )


def stored_dv_offset(offset: int | None) -> int:
    """Where a stored (``u``/``p``) DV starts in its file: the descriptor's offset, else 0."""
    return ABSENT_OFFSET if offset is None else offset


def z85_decode(text: str) -> bytes:
    """ZeroMQ Z85: each 5 characters are one big-endian uint32 in base 85.

    A group whose value passes 32 bits (text no Z85 encoder writes) keeps its low 32 bits, as
    delta-spark's and delta-kernel's Base85 codecs decode it (they store the sum as an int), so
    a descriptor reads here as the reference readers read it."""
    if len(text) % 5:
        raise CorruptMetadataError(f"Z85 text length {len(text)} is not a multiple of 5")
    out = bytearray()
    for group in range(0, len(text), 5):
        value = 0
        for position in range(group, group + 5):
            digit = _Z85_DIGITS.get(text[position])
            if digit is None:
                raise CorruptMetadataError(f"Z85 text has invalid character {text[position]!r} at {position}")
            value = value * 85 + digit
        out += _BE_U32.pack(value & 0xFFFFFFFF)
    return bytes(out)


def z85_encode(data: bytes) -> str:
    """The inverse of :func:`z85_decode`; ``data`` must be a multiple of 4 bytes (pad it first)."""
    if len(data) % 4:
        raise ValueError(f"Z85 input length {len(data)} is not a multiple of 4")
    chars: list[str] = []
    for (word,) in struct.iter_unpack(">I", data):
        chars.extend(_Z85_ALPHABET[word // 85**power % 85] for power in range(4, -1, -1))
    return "".join(chars)


def delta_dv_relative_path(path_or_inline_dv: str) -> str:
    """Where a storage-type ``u`` DV lives, relative to the table root.

    The descriptor is an optional random prefix followed by the file's UUID in 20 Z85 characters.
    """
    if len(path_or_inline_dv) < _Z85_UUID_CHARS:
        raise CorruptMetadataError(
            f"Delta deletion vector id {path_or_inline_dv!r} is shorter than a 20-character Z85 UUID"
        )
    prefix = path_or_inline_dv[:-_Z85_UUID_CHARS]
    uuid = UUID(bytes=z85_decode(path_or_inline_dv[-_Z85_UUID_CHARS:]))
    name = f"deletion_vector_{uuid}.bin"
    return f"{prefix}/{name}" if prefix else name
