"""Manifests of added data files encoded a column at a time, without a Python object per file.

A conversion of a million files spent most of its time building a ``DataFile`` per file and
encoding its entry field by field. Here each Avro field of every entry is encoded at once over
Arrow arrays (zigzag varints with numpy, byte strings with their length prefixes, each metric map
from one array per column) and the entries' bytes are joined row-wise by Arrow. Only what repeats
goes through Python: a partition tuple is encoded once per distinct tuple.

The bytes are those ``entry_encoder`` writes for the same files (the tests hold both equal), so
readers cannot tell the paths apart. A schema field this module does not know makes it return
``None``: the caller then builds the models and takes the per-entry path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.iceberg.avro_encoder import Unencodable, optional, write_container_data, write_long
from tablekeeper.iceberg.content import ADDED, DATA, MANIFEST_DATA, V1_BLOCK_SIZE, ManifestFile
from tablekeeper.iceberg.entry_encoder import compile_record_encoder
from tablekeeper.iceberg.manifest import AVRO_CODEC, _manifest_header, _Tally
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.types import Schema

_EMPTY = pa.scalar(b"", pa.binary())
_COUNT_MAPS = ("null_value_counts",)
_BOUND_MAPS = ("lower_bounds", "upper_bounds")


@dataclass(frozen=True, eq=False)
class MetricColumn:
    """One column's values in one metric map: int64 counts or binary bounds, null where a file
    has none."""

    field_id: int
    values: pa.Array


@dataclass(frozen=True, eq=False)
class AddedFiles:
    """Data files to add, as columns. ``partitions``: the distinct partition tuples (values as a
    ``DataFile.partition`` holds them); ``partition_index``: each file's tuple."""

    file_path: pa.Array
    record_count: pa.Array
    file_size: pa.Array
    partitions: tuple[tuple[Any, ...], ...]
    partition_index: np.ndarray
    null_value_counts: tuple[MetricColumn, ...] = ()
    lower_bounds: tuple[MetricColumn, ...] = ()
    upper_bounds: tuple[MetricColumn, ...] = ()

    @property
    def num_files(self) -> int:
        return len(self.file_path)

    def slice(self, start: int, stop: int) -> AddedFiles:
        def cut(cols: tuple[MetricColumn, ...]) -> tuple[MetricColumn, ...]:
            return tuple(MetricColumn(c.field_id, c.values.slice(start, stop - start)) for c in cols)

        n = stop - start
        return AddedFiles(
            self.file_path.slice(start, n),
            self.record_count.slice(start, n),
            self.file_size.slice(start, n),
            self.partitions,
            self.partition_index[start:stop],
            cut(self.null_value_counts),
            cut(self.lower_bounds),
            cut(self.upper_bounds),
        )


class _Unsupported(Exception):
    """The schema has a field or type this module does not encode."""


def varints(values: np.ndarray) -> pa.Array:
    """Avro longs (zigzag varints) of an int64 array, one binary value each."""
    v = np.ascontiguousarray(values, dtype=np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    sizes = np.ones(len(z), np.int64)
    rest = z >> np.uint64(7)
    while rest.any():
        sizes += rest > 0
        rest >>= np.uint64(7)
    width = int(sizes.max()) if len(z) else 1
    matrix = np.empty((len(z), width), np.uint8)
    rest = z.copy()
    for k in range(width):
        more = (k < sizes - 1).astype(np.uint8) << 7
        matrix[:, k] = (rest & np.uint64(0x7F)).astype(np.uint8) | more
        rest >>= np.uint64(7)
    data = matrix[np.arange(width) < sizes[:, None]]
    offsets = np.zeros(len(z) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(z), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _ints(array: pa.Array) -> np.ndarray:
    return np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _join(*parts: pa.Array | pa.Scalar, skip_nulls: bool = True) -> pa.Array:
    """Row-wise concatenation; a null part is left out, or with ``skip_nulls=False`` nulls the row."""
    return pc.binary_join_element_wise(*parts, _EMPTY, null_handling="skip" if skip_nulls else "emit_null")


def _bytes(value: bytes) -> pa.Scalar:
    return pa.scalar(value, pa.binary())


def _long(n: int) -> bytes:
    buf = bytearray()
    write_long(buf, n)
    return bytes(buf)


def _prefixed(array: pa.Array) -> pa.Array:
    """Avro bytes/string: the length, then the bytes; null stays null."""
    binary = array.cast(pa.binary())
    return _join(varints(_ints(pc.binary_length(binary))), binary, skip_nulls=False)


def _encoded(schema: Any, rows: Sequence[tuple[Any, ...]]) -> list[bytes]:
    """Each tuple as the Avro record ``schema``, by the generated record encoder."""
    encoder = compile_record_encoder(schema)
    if encoder is None:
        raise _Unsupported(schema)
    out = []
    for row in rows:
        buf = bytearray()
        try:
            encoder(buf, row)
        except Unencodable as err:
            raise _Unsupported(schema) from err
        out.append(bytes(buf))
    return out


def _const(schema: Any, value: Any) -> bytes:
    return _encoded({"type": "record", "name": "c", "fields": [{"name": "v", "type": schema}]}, [(value,)])[0]


def _plain(schema: Any, array: pa.Array) -> pa.Array:
    """A required long or string column (no nulls)."""
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if kind == "long":
        return varints(_ints(array))
    if kind == "string":
        return _prefixed(array)
    raise _Unsupported(schema)


def _metric_map(schema: Any, columns: tuple[MetricColumn, ...], n: int) -> pa.Array | bytes:
    union = optional(schema)
    if union is None or not isinstance(union[1], dict) or union[1].get("logicalType") != "map":
        raise _Unsupported(schema)
    null_tag, items = bytes([2 * union[0]]), union[1]["items"]
    if not columns:
        return null_tag
    key_type, value_type = (f["type"] for f in items["fields"])
    if key_type != "int" or value_type not in ("long", "bytes"):
        raise _Unsupported(schema)
    ids = [c.field_id for c in columns]
    if len(set(ids)) != len(ids):
        raise _Unsupported(schema)
    count = np.zeros(n, np.int64)
    pieces: list[pa.Array] = []
    for c in sorted(columns, key=lambda c: c.field_id):
        values = c.values
        encoded = varints(_ints(values)) if value_type == "long" else _prefixed(values)
        valid = pc.is_valid(values)
        count += np.asarray(valid.to_numpy(zero_copy_only=False), dtype=np.int64)
        encoded = pc.if_else(valid, encoded, pa.scalar(None, pa.binary()))
        pieces.append(_join(_bytes(_long(c.field_id)), encoded, skip_nulls=False))
    tag = _bytes(bytes([2 * (1 - union[0])]))
    encoded_map = _join(tag, varints(count), *pieces, _bytes(b"\x00"))
    return pc.if_else(pa.array(count == 0), _bytes(null_tag), encoded_map)


def _partitions(schema: Any, files: AddedFiles) -> pa.Array:
    distinct = _encoded(schema, files.partitions)  # once per distinct tuple
    return pa.array(distinct, pa.binary()).take(pa.array(files.partition_index))


def _data_file(schema: Any, files: AddedFiles) -> list[pa.Array | bytes]:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise _Unsupported(schema)
    n = files.num_files
    out: list[pa.Array | bytes] = []
    for field in schema["fields"]:
        name, kind = field["name"], field["type"]
        if name == "content":
            out.append(_const(kind, DATA))
        elif name == "file_path":
            out.append(_plain(kind, files.file_path))
        elif name == "file_format":
            out.append(_const(kind, "PARQUET"))
        elif name == "partition":
            out.append(_partitions(kind, files))
        elif name == "record_count":
            out.append(_plain(kind, files.record_count))
        elif name == "file_size_in_bytes":
            out.append(_plain(kind, files.file_size))
        elif name == "block_size_in_bytes":
            out.append(_const(kind, V1_BLOCK_SIZE))
        elif name in _COUNT_MAPS or name in _BOUND_MAPS:
            out.append(_metric_map(kind, getattr(files, name), n))
        elif optional(kind) is not None:
            out.append(_const(kind, None))  # a field these files leave null
        else:
            raise _Unsupported(name)
    return out


def encode_added(schema: dict[str, Any], files: AddedFiles, snapshot_id: int) -> pa.Array | None:
    """Each file's manifest_entry (ADDED by ``snapshot_id``, sequence numbers inherited) as
    Avro bytes, or ``None`` when ``schema`` has something this module does not write."""
    parts: list[pa.Array | bytes] = []
    try:
        for field in schema["fields"]:
            name, kind = field["name"], field["type"]
            if name == "status":
                parts.append(_const(kind, ADDED))
            elif name == "snapshot_id":
                parts.append(_const(kind, snapshot_id))
            elif name in ("sequence_number", "file_sequence_number"):
                parts.append(_const(kind, None))
            elif name == "data_file":
                parts.extend(_data_file(kind, files))
            else:
                raise _Unsupported(name)
    except _Unsupported:
        return None
    merged: list[pa.Array | pa.Scalar] = []
    for p in parts:
        if isinstance(p, bytes) and merged and isinstance(merged[-1], pa.Scalar):
            merged[-1] = _bytes(merged[-1].as_py() + p)
        else:
            merged.append(_bytes(p) if isinstance(p, bytes) else p)
    if not any(isinstance(p, pa.Array) for p in merged):
        merged.append(pa.array([b""] * files.num_files, pa.binary()))
    return _join(*merged)


def write_added_manifest(
    path: str,
    files: AddedFiles,
    *,
    format_version: int,
    spec: PartitionSpec,
    schema: Schema,
    snapshot_id: int,
) -> tuple[bytes, ManifestFile] | None:
    """Avro bytes of one data manifest of ``files``, all ADDED by ``snapshot_id``, and its
    manifest-list row; ``None`` when the per-entry writer must write it."""
    partition_type, avro_schema, metadata = _manifest_header(format_version, spec, schema, MANIFEST_DATA)
    entries = encode_added(avro_schema, files, snapshot_id)
    if entries is None:
        return None
    data = write_container_data(avro_schema, entries, metadata=metadata, codec=AVRO_CODEC)
    if data is None:
        return None
    tally = _Tally(partition_type, format_version)
    tally.counts[ADDED] = [files.num_files, int(pc.sum(files.record_count).as_py() or 0)]
    for i in np.unique(files.partition_index):
        tally.summaries.update(files.partitions[int(i)])
    return data, tally.manifest(path, len(data), spec, snapshot_id, MANIFEST_DATA)


def chunks(n: int, size: int) -> Sequence[tuple[int, int]]:
    return [(start, min(n, start + size)) for start in range(0, n, size)]
