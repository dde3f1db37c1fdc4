"""Table statistics: ``apache-datasketches-theta-v1`` blobs in Puffin statistics files.

What keeps our sketches mergeable with the ones Iceberg Java's ``compute_table_stats`` writes:

* A value is hashed as DataSketches' ``UpdateSketch.update(ByteBuffer)`` hashes it: the first 64
  bits of MurmurHash3_x64_128 over its bytes with seed 9001, shifted right by one. Nulls and empty
  byte strings are not counted.
* The bytes are Iceberg's single-value serialization (``Conversions.toByteBuffer``) of the value
  *as Spark reads it*: Java's aggregate takes the Iceberg type from the Spark column type. So a
  ``uuid`` column (a Spark string) hashes its canonical text, not its 16 bytes, and a ``fixed``
  column hashes as binary. ``int``/``date``: 4 bytes LE; ``long``/timestamps: 8 bytes LE
  (microseconds); ``float``/``double``: IEEE LE; ``boolean``: one byte; strings: UTF-8; decimals:
  the unscaled value's minimal big-endian two's complement (``BigInteger.toByteArray``).
* A blob holds the serialized compact theta sketch (serial version 3, ``CompactSketch.toByteArray``),
  zstd-compressed in the Puffin file, with ``fields`` = [field id], the snapshot's id and sequence
  number, and property ``ndv``: the estimate truncated to a whole number (Java's ``(long)`` cast).
* Sketches hold at most 4096 entries (DataSketches' default ``lg_k`` 12, as Java's). Below that
  every distinct hash is kept, so ours and Java's over the same rows hold the same hashes.
"""

from __future__ import annotations

import decimal
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import datasketches  # type: ignore[import-untyped]
import mmh3
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tablekeeper.errors import ConfigError, CorruptMetadataError
from tablekeeper.iceberg.conversions import decimal_bytes, decimal_to_unscaled, to_bytes
from tablekeeper.iceberg.metadata import BlobMetadata, StatisticsFile
from tablekeeper.iceberg.puffin import ZSTD, PuffinFile, PuffinWriter, Source, read_blob, read_puffin_footer
from tablekeeper.iceberg.types import (
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    PrimitiveType,
    Schema,
    StructType,
)

THETA_BLOB_TYPE: Final = "apache-datasketches-theta-v1"
NDV_PROPERTY: Final = "ndv"
DEFAULT_SEED: Final = 9001
DEFAULT_LG_K: Final = 12

Hashes = npt.NDArray[np.uint64]

# Primitive types Spark reads into a value Java's aggregate can serialize.
_WIDTHS: Final = {"boolean": 1, "int": 4, "date": 4, "float": 4, "long": 8, "double": 8}
_WIDTHS_TIMESTAMP: Final = {"timestamp": 8, "timestamptz": 8}
_BYTES_TYPES: Final = frozenset({"string", "uuid", "binary"})
# Primitive in Iceberg Java's sense (so Java picks them by default), yet Spark cannot read them or
# reads them lossily: Java's procedure fails on them; we leave them out and say so.
_UNREADABLE: Final = {
    "time": "Iceberg Spark cannot read time columns",
    "timestamp_ns": "Iceberg Spark reads nanosecond timestamps only as microseconds",
    "timestamptz_ns": "Iceberg Spark reads nanosecond timestamps only as microseconds",
    "unknown": "a column of type unknown holds only nulls",
}


# --- columns -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatsColumn:
    """A column to sketch: its field id, dotted name, the struct path Spark selects, its type."""

    field_id: int
    name: str
    path: tuple[str, ...]
    type: IcebergType


def _is_java_primitive(t: IcebergType) -> bool:
    # Iceberg Java models variant as its own kind, not a primitive.
    return isinstance(t, (DecimalType, FixedType)) or (isinstance(t, PrimitiveType) and t.name != "variant")


def unsupported_reason(t: IcebergType) -> str | None:
    """Why values of ``t`` cannot be sketched as Java sketches them, or None when they can."""
    if isinstance(t, (DecimalType, FixedType)):
        return None
    if not _is_java_primitive(t):
        return f"only primitive columns have stats, and {_kind(t)} is not primitive"
    assert isinstance(t, PrimitiveType)
    if t.name in _WIDTHS or t.name in _WIDTHS_TIMESTAMP or t.name in _BYTES_TYPES:
        return None
    return _UNREADABLE.get(t.name, f"Iceberg Spark cannot read {t.name} columns")


def _kind(t: IcebergType) -> str:
    if isinstance(t, StructType):
        return "struct"
    if isinstance(t, ListType):
        return "list"
    if isinstance(t, MapType):
        return "map"
    return str(t)


def _struct_paths(fields: Sequence[Any], prefix: tuple[str, ...] = ()) -> dict[str, StatsColumn]:
    """Every field reachable through structs only, by dotted name (Java's ``Schema.findField``
    names; list elements and map keys/values are left out: Spark cannot select them by name)."""
    out: dict[str, StatsColumn] = {}
    for f in fields:
        path = (*prefix, f.name)
        out[".".join(path)] = StatsColumn(f.id, ".".join(path), path, f.type)
        if isinstance(f.type, StructType):
            out.update(_struct_paths(f.type.fields, path))
    return out


def resolve_columns(
    schema: Schema, names: Sequence[str] | None
) -> tuple[tuple[StatsColumn, ...], dict[str, str]]:
    """The columns to sketch and the ones left out with the reason.

    No names: every top-level primitive column, as Java's procedure picks them (nested struct
    fields only when named); columns Spark cannot read are left out. Named columns must exist,
    reach through structs only and have a type that can be sketched, else ``ConfigError``."""
    by_name = _struct_paths(schema.fields)
    if names is None:
        chosen: list[StatsColumn] = []
        skipped: dict[str, str] = {}
        for f in schema.fields:
            if not _is_java_primitive(f.type):
                continue
            reason = unsupported_reason(f.type)
            if reason is None:
                chosen.append(by_name[f.name])
            else:
                skipped[f.name] = reason
        if not chosen:
            raise ConfigError(
                "no columns to compute stats on: the table has no top-level primitive column Spark "
                "can read; name nested struct fields with --columns"
            )
        return tuple(chosen), skipped
    out: list[StatsColumn] = []
    for name in dict.fromkeys(names):  # Java drops repeats, keeping the first
        col = by_name.get(name)
        if col is None:
            known = [n for n, c in by_name.items() if _is_java_primitive(c.type)]
            raise ConfigError(f"--columns names {name!r}, not a column of the table: use some of {known}")
        reason = unsupported_reason(col.type)
        if reason is not None:
            raise ConfigError(f"cannot compute stats on column {name!r} of type {_kind(col.type)}: {reason}")
        out.append(col)
    if not out:
        raise ConfigError("--columns is empty: name at least one column")
    return tuple(out), {}


# --- value serialization and hashing -------------------------------------------------------------------


def single_value_bytes(t: IcebergType, value: Any) -> bytes:
    """The bytes Java's aggregate hashes for one non-null ``value`` of a column of type ``t``
    (Python values: int, float, bool, str, bytes, ``decimal.Decimal``, ``uuid.UUID``; dates as
    days and timestamps as microseconds): Iceberg's single-value form, except that a uuid is
    hashed as its text, as Java's aggregate converts it."""
    if isinstance(t, PrimitiveType) and t.name == "uuid":
        return str(uuid.UUID(str(value))).encode("utf-8")
    if isinstance(t, DecimalType) and not isinstance(value, decimal.Decimal):
        value = decimal.Decimal(value)
    return to_bytes(t, value)


def theta_hash(data: bytes, seed: int = DEFAULT_SEED) -> int | None:
    """DataSketches' hash of one byte string, or None for the empty string (never counted)."""
    if not data:
        return None
    return int(mmh3.hash64(data, seed, signed=False)[0]) >> 1


_C1: Final = np.uint64(0x87C37B91114253D5)
_C2: Final = np.uint64(0x4CF5AD432745937F)


def _rotl(x: Hashes, r: int) -> Hashes:
    out: Hashes = (x << np.uint64(r)) | (x >> np.uint64(64 - r))
    return out


def _fmix(k: Hashes) -> Hashes:
    k = k ^ (k >> np.uint64(33))
    k = k * np.uint64(0xFF51AFD7ED558CCD)
    k = k ^ (k >> np.uint64(33))
    k = k * np.uint64(0xC4CEB9FE1A85EC53)
    out: Hashes = k ^ (k >> np.uint64(33))
    return out


def short_theta_hashes(words: Hashes, width: int, seed: int = DEFAULT_SEED) -> Hashes:
    """``theta_hash`` of many ``width``-byte values (1 to 8 bytes, given as their little-endian
    integers), vectorised: MurmurHash3_x64_128 with no full block, only the tail."""
    if not 1 <= width <= 8:
        raise ValueError(f"width {width} is not 1-8 bytes")
    k1 = _rotl(words * _C1, 31) * _C2
    h1 = np.full(words.shape, seed, dtype=np.uint64) ^ k1
    h1 = h1 ^ np.uint64(width)
    h2 = np.full(words.shape, seed ^ width, dtype=np.uint64)
    h1 = h1 + h2
    h2 = h2 + h1
    out: Hashes = (_fmix(h1) + _fmix(h2)) >> np.uint64(1)
    return out


def arrow_theta_hashes(values: pa.Array, t: IcebergType, seed: int = DEFAULT_SEED) -> Hashes:
    """The hashes of the non-null values of one Arrow column read by Spark from a column of
    Iceberg type ``t`` (Spark's Arrow types: date32, timestamp[us], decimal128, string, binary)."""
    values = values.drop_null()
    if len(values) == 0:
        return np.empty(0, dtype=np.uint64)
    name = t.name if isinstance(t, PrimitiveType) else None
    if name == "boolean":
        words = values.to_numpy(zero_copy_only=False).astype(np.uint64)
        return short_theta_hashes(words, 1, seed)
    if name in ("int", "date", "float"):
        kind = pa.float32() if name == "float" else pa.int32()
        raw = values.view(kind).to_numpy(zero_copy_only=False).astype(f"<{'f' if name == 'float' else 'i'}4")
        return short_theta_hashes(raw.view("<u4").astype(np.uint64), 4, seed)
    if name in ("long", "double", "timestamp", "timestamptz"):
        kind = pa.float64() if name == "double" else pa.int64()
        raw = values.view(kind).to_numpy(zero_copy_only=False).astype(f"<{'f' if name == 'double' else 'i'}8")
        return short_theta_hashes(raw.view("<u8").astype(np.uint64), 8, seed)
    if isinstance(t, DecimalType):
        items: Iterable[bytes] = (decimal_bytes(decimal_to_unscaled(v, t.scale)) for v in values.to_pylist())
    elif name in _BYTES_TYPES or isinstance(t, FixedType):
        items = values.cast(pa.large_binary()).to_pylist()
    else:
        raise ValueError(f"cannot hash values of type {t}: {unsupported_reason(t)}")
    found = (theta_hash(b, seed) for b in items)
    return np.fromiter((h for h in found if h is not None), dtype=np.uint64)


# --- sketches ----------------------------------------------------------------------------------------


def seed_hash(seed: int = DEFAULT_SEED) -> int:
    """DataSketches' 16-bit seed check: MurmurHash3 of the seed as one long, with seed 0."""
    return int(mmh3.hash64(struct.pack("<q", seed), 0, signed=False)[0]) & 0xFFFF


def exact_sketch(hashes: Hashes, seed: int = DEFAULT_SEED) -> bytes:
    """A compact theta sketch (serial version 3) holding exactly the distinct ``hashes``."""
    distinct = np.unique(hashes[hashes != 0])  # DataSketches never keeps hash 0
    # flags: read-only 2, empty 4, compact 8, ordered 16
    if len(distinct) == 0:
        return struct.pack("<BBBBBBH", 1, 3, 3, 0, 0, 0x1E, seed_hash(seed))
    head = struct.pack("<BBBBBBHII", 2, 3, 3, 0, 0, 0x1A, seed_hash(seed), len(distinct), 0)
    return head + distinct.astype("<u8").tobytes()


class ThetaAccumulator:
    """The union of many batches' hashes, bounded at 2**lg_k entries (one per column and task)."""

    def __init__(self, lg_k: int = DEFAULT_LG_K, seed: int = DEFAULT_SEED) -> None:
        self._seed = seed
        self._union = datasketches.theta_union(lg_k, 1.0, seed)

    def add_hashes(self, hashes: Hashes) -> None:
        if len(hashes):
            self.add_sketch(exact_sketch(hashes, self._seed))

    def add_sketch(self, sketch: bytes) -> None:
        try:
            parsed = datasketches.compact_theta_sketch.deserialize(sketch, self._seed)
        except (RuntimeError, ValueError) as err:
            raise CorruptMetadataError(f"theta sketch does not parse: {err}") from None
        self._union.update(parsed)

    def result(self) -> tuple[bytes, float]:
        """The ordered compact sketch, serialized uncompressed, and its estimate."""
        sketch = self._union.get_result(True)
        return java_layout(bytes(sketch.serialize())), float(sketch.get_estimate())


def java_layout(sketch: bytes) -> bytes:
    """The bytes DataSketches-java writes for the same sketch: it fills the preamble's sampling
    probability field (bytes 12-15, float 1.0 in a compact sketch) that the C++ library leaves 0.
    Readers of either ignore it; filling it makes our blobs byte-identical to Java's."""
    if len(sketch) >= 16 and sketch[0] & 0x3F >= 2:
        return sketch[:12] + struct.pack("<f", 1.0) + sketch[16:]
    return sketch


def merge_sketches(sketches: Iterable[bytes], lg_k: int = DEFAULT_LG_K) -> tuple[bytes, float]:
    acc = ThetaAccumulator(lg_k)
    for s in sketches:
        acc.add_sketch(s)
    return acc.result()


def sketch_estimate(sketch: bytes, seed: int = DEFAULT_SEED) -> float:
    try:
        return float(datasketches.compact_theta_sketch.deserialize(sketch, seed).get_estimate())
    except (RuntimeError, ValueError) as err:
        raise CorruptMetadataError(f"theta sketch does not parse: {err}") from None


def ndv(estimate: float) -> int:
    """The ``ndv`` property: Java's ``(long) sketch.getEstimate()``, truncation toward zero."""
    return int(estimate)


# --- Puffin statistics files -------------------------------------------------------------------------


@dataclass(frozen=True)
class ThetaBlob:
    field_id: int
    snapshot_id: int
    sequence_number: int
    sketch: bytes  # the serialized compact sketch, uncompressed
    ndv: int


def write_statistics(blobs: Sequence[ThetaBlob], created_by: str) -> PuffinFile:
    """The Puffin file Java's procedure writes: one zstd-compressed theta blob per column."""
    writer = PuffinWriter(created_by=created_by)
    for b in blobs:
        writer.add_blob(
            THETA_BLOB_TYPE,
            (b.field_id,),
            b.sketch,
            snapshot_id=b.snapshot_id,
            sequence_number=b.sequence_number,
            properties={NDV_PROPERTY: str(b.ndv)},
            compression_codec=ZSTD,
        )
    return writer.finish()


def statistics_file(path: str, snapshot_id: int, puffin: PuffinFile) -> StatisticsFile:
    """The table metadata's ``statistics`` entry for a written Puffin file."""
    return StatisticsFile(
        snapshot_id=snapshot_id,
        statistics_path=path,
        file_size_in_bytes=puffin.file_size,
        file_footer_size_in_bytes=puffin.footer.footer_size,
        blob_metadata=tuple(
            BlobMetadata(b.type, b.snapshot_id, b.sequence_number, b.fields, dict(b.properties))
            for b in puffin.footer.blobs
        ),
    )


def read_theta_blobs(source: Source) -> list[ThetaBlob]:
    """Every theta blob of a statistics file, decompressed (other blob types are skipped)."""
    out: list[ThetaBlob] = []
    for index, blob in enumerate(read_puffin_footer(source).blobs):
        if blob.type != THETA_BLOB_TYPE:
            continue
        if len(blob.fields) != 1:
            raise CorruptMetadataError(f"theta blob {index} names {len(blob.fields)} fields, not one")
        sketch = read_blob(source, blob, decompress=True)
        declared = blob.properties.get(NDV_PROPERTY)
        try:
            count = ndv(sketch_estimate(sketch)) if declared is None else int(declared)
        except ValueError:
            raise CorruptMetadataError(f"theta blob {index} has ndv {declared!r}, not a number") from None
        out.append(ThetaBlob(blob.fields[0], blob.snapshot_id, blob.sequence_number, sketch, count))
    return out
