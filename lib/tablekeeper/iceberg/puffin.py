"""Puffin files and Iceberg ``deletion-vector-v1`` blobs (Delta's own vectors: ``delta.deletion_vectors``).

Layouts (see the Iceberg spec digest, sections 4.1-4.4):

* Puffin file: ``PFA1 | blob ... | PFA1 | footer JSON | int32 LE JSON size | 4 flag bytes | PFA1``.
* DV blob: ``uint32 BE len(magic + vector) | D1 D3 39 64 | portable Roaring64 | uint32 BE CRC-32``.
* Blob compression: none, or ``zstd`` (one frame that records its content size, as Java writes
  it); ``lz4`` is refused. DV blobs are never compressed.

Everything here works on bytes or seekable binary file objects; callers own all I/O.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeAlias

import pyarrow as pa

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.roaring import RoaringBitmap64

PUFFIN_MAGIC: Final = b"PFA1"
DV_MAGIC: Final = (1681511377).to_bytes(4, "little")
# Delta's older "native" bitmap-array layout; only Delta test code writes it.
DELTA_NATIVE_DV_MAGIC: Final = (1681511376).to_bytes(4, "little")
DV_BLOB_TYPE: Final = "deletion-vector-v1"
ROW_POSITION_FIELD_ID: Final = 2147483645
REFERENCED_DATA_FILE: Final = "referenced-data-file"
CARDINALITY: Final = "cardinality"
CREATED_BY: Final = "created-by"
ZSTD: Final = "zstd"
_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"

# Bytes of the footer outside its JSON payload: leading magic + size + flags + trailing magic.
FOOTER_OVERHEAD: Final = 16
_FOOTER_TAIL: Final = struct.Struct("<i4s4s")
_FLAG_FOOTER_COMPRESSED: Final = 0x01
_BE_U32: Final = struct.Struct(">I")


class SeekableReader(Protocol):
    """The part of a binary file object the reader needs (``open(..., "rb")``, pyarrow files)."""

    def seek(self, offset: int, whence: int = ..., /) -> int: ...

    def read(self, size: int = ..., /) -> bytes: ...


Source: TypeAlias = "bytes | bytearray | memoryview | SeekableReader"


# --- deletion-vector-v1 blobs -------------------------------------------------------------------


def serialize_dv(bitmap: RoaringBitmap64) -> bytes:
    """The complete ``deletion-vector-v1`` blob for ``bitmap``."""
    return wrap_dv(DV_MAGIC + bitmap.serialize())


def deserialize_dv(blob: bytes | bytearray | memoryview) -> RoaringBitmap64:
    """Parse a ``deletion-vector-v1`` blob, checking its length prefix, magic and CRC-32."""
    data = bytes(blob)
    if len(data) < 12:
        raise CorruptMetadataError(f"deletion vector blob is truncated: {len(data)} bytes, need at least 12")
    (declared,) = _BE_U32.unpack_from(data, 0)
    if declared != len(data) - 8:
        raise CorruptMetadataError(
            f"deletion vector blob length prefix says {declared} bytes but the blob holds {len(data) - 8}"
        )
    magic = data[4:8]
    if magic == DELTA_NATIVE_DV_MAGIC:
        raise UnsupportedFeatureError(
            "deletion vector uses Delta's legacy native bitmap format (magic 1681511376); "
            "only the portable format is supported"
        )
    if magic != DV_MAGIC:
        raise CorruptMetadataError(
            f"deletion vector blob has bad magic {magic.hex(' ')} (expected d1 d3 39 64)"
        )
    (stored_crc,) = _BE_U32.unpack_from(data, len(data) - 4)
    actual_crc = zlib.crc32(data[4:-4])
    if stored_crc != actual_crc:
        raise CorruptMetadataError(
            f"deletion vector blob CRC-32 mismatch: stored {stored_crc:08x}, computed {actual_crc:08x}"
        )
    return RoaringBitmap64.deserialize(data[8:-4])


def wrap_dv(magic_and_vector: bytes) -> bytes:
    """A ``deletion-vector-v1`` blob around a vector and its magic: length prefix and CRC-32."""
    return _BE_U32.pack(len(magic_and_vector)) + magic_and_vector + _BE_U32.pack(zlib.crc32(magic_and_vector))


# --- Puffin models ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PuffinBlobMetadata:
    type: str
    fields: tuple[int, ...]
    snapshot_id: int
    sequence_number: int
    offset: int
    length: int
    compression_codec: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        # Key order is Java's FileMetadataParser order; optional keys are left out, not null.
        out: dict[str, Any] = {
            "type": self.type,
            "fields": list(self.fields),
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.sequence_number,
            "offset": self.offset,
            "length": self.length,
        }
        if self.compression_codec is not None:
            out["compression-codec"] = self.compression_codec
        if self.properties:
            out["properties"] = dict(self.properties)
        return out


@dataclass(frozen=True)
class PuffinFooter:
    blobs: tuple[PuffinBlobMetadata, ...]
    # JSON payload + 16: the value Iceberg stores as ``file-footer-size-in-bytes``.
    footer_size: int
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class PuffinFile:
    """A complete Puffin file as written, with the footer that describes it."""

    data: bytes
    footer: PuffinFooter

    @property
    def file_size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class DVBlobLocation:
    """Where one DV landed: the manifest's ``content_offset``/``content_size_in_bytes``/``record_count``."""

    referenced_data_file: str
    offset: int
    length: int
    cardinality: int


# --- Puffin writer ------------------------------------------------------------------------------------


class PuffinWriter:
    """Builds a Puffin file in memory; blobs are written uncompressed, starting at offset 4."""

    def __init__(self, *, created_by: str | None = None, properties: Mapping[str, str] | None = None) -> None:
        self._buffer = bytearray(PUFFIN_MAGIC)
        self._blobs: list[PuffinBlobMetadata] = []
        self._properties = dict(properties or {})
        if created_by is not None:
            self._properties[CREATED_BY] = created_by
        self._finished = False

    def add_blob(
        self,
        blob_type: str,
        fields: Sequence[int],
        payload: bytes | bytearray | memoryview,
        *,
        snapshot_id: int = -1,
        sequence_number: int = -1,
        properties: Mapping[str, str] | None = None,
        compression_codec: str | None = None,
    ) -> PuffinBlobMetadata:
        """Append a blob; with ``compression_codec`` (only ``zstd``) ``payload`` is stored compressed."""
        if self._finished:
            raise ValueError("PuffinWriter.finish() was already called")
        if compression_codec is not None:
            payload = compress_blob(compression_codec, payload)
        meta = PuffinBlobMetadata(
            type=blob_type,
            fields=tuple(fields),
            snapshot_id=snapshot_id,
            sequence_number=sequence_number,
            offset=len(self._buffer),
            length=len(payload),
            compression_codec=compression_codec,
            properties=dict(properties or {}),
        )
        self._buffer += payload
        self._blobs.append(meta)
        return meta

    def add_dv(self, referenced_data_file: str, dv: RoaringBitmap64 | bytes) -> DVBlobLocation:
        """Add a ``deletion-vector-v1`` blob from a bitmap, or from ready blob bytes copied verbatim."""
        if isinstance(dv, RoaringBitmap64):
            bitmap, blob = dv, serialize_dv(dv)
        else:
            bitmap, blob = deserialize_dv(dv), bytes(dv)
        meta = self.add_blob(
            DV_BLOB_TYPE,
            (ROW_POSITION_FIELD_ID,),
            blob,
            properties={REFERENCED_DATA_FILE: referenced_data_file, CARDINALITY: str(bitmap.cardinality)},
        )
        return DVBlobLocation(referenced_data_file, meta.offset, meta.length, bitmap.cardinality)

    def finish(self) -> PuffinFile:
        if self._finished:
            raise ValueError("PuffinWriter.finish() was already called")
        self._finished = True
        document: dict[str, Any] = {"blobs": [blob.to_json() for blob in self._blobs]}
        if self._properties:
            document["properties"] = self._properties
        # Compact and raw UTF-8, like Jackson's output.
        payload = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self._buffer += PUFFIN_MAGIC + payload + _FOOTER_TAIL.pack(len(payload), bytes(4), PUFFIN_MAGIC)
        footer = PuffinFooter(tuple(self._blobs), len(payload) + FOOTER_OVERHEAD, dict(self._properties))
        return PuffinFile(bytes(self._buffer), footer)


def write_dv_file(
    dvs: Iterable[tuple[str, RoaringBitmap64 | bytes]], created_by: str
) -> tuple[bytes, list[DVBlobLocation]]:
    """One Puffin file holding a DV per referenced data file, in the given order."""
    writer = PuffinWriter(created_by=created_by)
    locations: list[DVBlobLocation] = []
    seen: set[str] = set()
    for referenced_data_file, dv in dvs:
        if referenced_data_file in seen:
            raise ValueError(f"two deletion vectors for one data file: {referenced_data_file}")
        seen.add(referenced_data_file)
        locations.append(writer.add_dv(referenced_data_file, dv))
    return writer.finish().data, locations


# --- Puffin reader ------------------------------------------------------------------------------------


def _source_size(source: Source) -> int:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return len(source)
    return source.seek(0, 2)


def _read_range(source: Source, offset: int, length: int) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        chunk = bytes(source[offset : offset + length])
    else:
        source.seek(offset, 0)
        chunk = source.read(length)
    if len(chunk) != length:
        raise CorruptMetadataError(f"Puffin file is truncated: wanted {length} bytes at offset {offset}")
    return chunk


def read_puffin_footer(source: Source, file_size: int | None = None) -> PuffinFooter:
    """Read and validate the footer of a Puffin file given as bytes or a seekable binary file."""
    size = _source_size(source) if file_size is None else file_size
    if size < len(PUFFIN_MAGIC) + FOOTER_OVERHEAD:
        raise CorruptMetadataError(
            f"Puffin file is truncated: {size} bytes is too short for magic and footer"
        )
    head = _read_range(source, 0, 4)
    if head != PUFFIN_MAGIC:
        raise CorruptMetadataError(f"Puffin file does not start with magic PFA1 (found {head!r})")
    payload_size, flags, tail_magic = _FOOTER_TAIL.unpack(_read_range(source, size - 12, 12))
    if tail_magic != PUFFIN_MAGIC:
        raise CorruptMetadataError(f"Puffin file does not end with magic PFA1 (found {tail_magic!r})")
    if flags[0] & _FLAG_FOOTER_COMPRESSED:
        raise UnsupportedFeatureError(
            "Puffin footer payload is LZ4-compressed; only uncompressed footers are supported"
        )
    if any(flags):
        raise UnsupportedFeatureError(f"Puffin footer has unknown flags {flags.hex()}")
    footer_start = size - FOOTER_OVERHEAD - payload_size
    if payload_size < 0 or footer_start < len(PUFFIN_MAGIC):
        raise CorruptMetadataError(
            f"Puffin footer payload size {payload_size} does not fit in a {size}-byte file"
        )
    footer_magic = _read_range(source, footer_start, 4)
    if footer_magic != PUFFIN_MAGIC:
        raise CorruptMetadataError(f"Puffin footer does not start with magic PFA1 (found {footer_magic!r})")
    payload = _read_range(source, footer_start + 4, payload_size)
    try:
        document = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptMetadataError(f"Puffin footer payload is not valid UTF-8 JSON: {err}") from None
    if not isinstance(document, dict) or not isinstance(document.get("blobs"), list):
        raise CorruptMetadataError("Puffin footer JSON is not an object with a 'blobs' list")
    blobs = tuple(_blob_from_json(blob, index) for index, blob in enumerate(document["blobs"]))
    for index, blob in enumerate(blobs):
        if blob.offset < len(PUFFIN_MAGIC) or blob.offset + blob.length > footer_start:
            raise CorruptMetadataError(
                f"Puffin blob {index} spans [{blob.offset}, {blob.offset + blob.length}) outside the blob "
                f"area [4, {footer_start})"
            )
    properties = _string_map(document.get("properties", {}), "footer properties")
    return PuffinFooter(blobs, payload_size + FOOTER_OVERHEAD, properties)


def _blob_from_json(obj: object, index: int) -> PuffinBlobMetadata:
    if not isinstance(obj, dict):
        raise CorruptMetadataError(f"Puffin blob {index} metadata is not a JSON object")

    def required_int(key: str) -> int:
        value = obj.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise CorruptMetadataError(f"Puffin blob {index} is missing integer field {key!r}")
        return value

    blob_type = obj.get("type")
    if not isinstance(blob_type, str):
        raise CorruptMetadataError(f"Puffin blob {index} is missing string field 'type'")
    fields = obj.get("fields")
    if not isinstance(fields, list) or not all(
        isinstance(f, int) and not isinstance(f, bool) for f in fields
    ):
        raise CorruptMetadataError(f"Puffin blob {index} is missing integer list 'fields'")
    codec = obj.get("compression-codec")
    if codec is not None and not isinstance(codec, str):
        raise CorruptMetadataError(f"Puffin blob {index} has a non-string 'compression-codec'")
    length = required_int("length")
    if length < 0:
        raise CorruptMetadataError(f"Puffin blob {index} has negative length {length}")
    return PuffinBlobMetadata(
        type=blob_type,
        fields=tuple(fields),
        snapshot_id=required_int("snapshot-id"),
        sequence_number=required_int("sequence-number"),
        offset=required_int("offset"),
        length=length,
        compression_codec=codec,
        properties=_string_map(obj.get("properties", {}), f"blob {index} properties"),
    )


def _string_map(obj: object, what: str) -> dict[str, str]:
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
    ):
        raise CorruptMetadataError(f"Puffin {what} are not a JSON object of strings")
    return dict(obj)


def read_blob(source: Source, blob: PuffinBlobMetadata, *, decompress: bool = False) -> bytes:
    """The payload bytes of one blob. A compressed blob is decompressed when the caller expects
    compression (``decompress``: statistics blobs); otherwise it is refused rather than returned
    raw, since a blob type that is never compressed (deletion vectors) would be misread."""
    if blob.compression_codec is not None and not (decompress and blob.compression_codec == ZSTD):
        raise UnsupportedFeatureError(
            f"Puffin blob compression codec {blob.compression_codec!r} is not supported"
        )
    raw = _read_range(source, blob.offset, blob.length)
    return raw if blob.compression_codec is None else decompress_blob(blob.compression_codec, raw)


# --- blob compression ----------------------------------------------------------------------------------


def compress_blob(codec: str, payload: bytes | bytearray | memoryview) -> bytes:
    if codec != ZSTD:
        raise UnsupportedFeatureError(f"Puffin blob compression codec {codec!r} is not supported: use zstd")
    return bytes(pa.Codec(ZSTD).compress(bytes(payload), asbytes=True))


def decompress_blob(codec: str, data: bytes) -> bytes:
    if codec != ZSTD:
        raise UnsupportedFeatureError(f"Puffin blob compression codec {codec!r} is not supported")
    size = zstd_content_size(data)
    try:
        return bytes(pa.Codec(ZSTD).decompress(data, decompressed_size=size, asbytes=True))
    except (OSError, ValueError) as err:
        raise CorruptMetadataError(f"Puffin blob is not valid zstd data: {err}") from None


def zstd_content_size(data: bytes) -> int:
    """The decompressed size a zstd frame header records (Java's compressors always record it;
    the decompressor needs it to size its output)."""
    if len(data) < 6 or data[:4] != _ZSTD_MAGIC:
        raise CorruptMetadataError("Puffin blob says zstd but does not start with a zstd frame")
    descriptor = data[4]
    size_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if width == 0:
        raise UnsupportedFeatureError("zstd Puffin blob does not record its decompressed size")
    if len(data) < pos + width:
        raise CorruptMetadataError("zstd Puffin blob is truncated inside its frame header")
    size = int.from_bytes(data[pos : pos + width], "little")
    return size + 256 if width == 2 else size


def read_dv_file(source: Source) -> list[tuple[str, RoaringBitmap64]]:
    """Every ``deletion-vector-v1`` blob as (referenced data file, bitmap), in footer order."""
    out: list[tuple[str, RoaringBitmap64]] = []
    for index, blob in enumerate(read_puffin_footer(source).blobs):
        if blob.type != DV_BLOB_TYPE:
            continue
        referenced = blob.properties.get(REFERENCED_DATA_FILE)
        if referenced is None:
            raise CorruptMetadataError(f"Puffin DV blob {index} has no '{REFERENCED_DATA_FILE}' property")
        bitmap = deserialize_dv(read_blob(source, blob))
        declared = blob.properties.get(CARDINALITY)
        if declared is not None and declared != str(bitmap.cardinality):
            raise CorruptMetadataError(
                f"Puffin DV blob {index} holds {bitmap.cardinality} positions but says cardinality {declared}"
            )
        out.append((referenced, bitmap))
    return out
