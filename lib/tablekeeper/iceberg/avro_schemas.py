"""The Avro schemas of manifests and manifest lists, built the way Iceberg Java builds them.

The manifest structs are defined once as Iceberg structs (with Java's docs); one converter turns an
Iceberg struct into Avro (record names ``r<field id>``, int-keyed maps as ``k<id>_v<id>`` record
arrays, optional = ``["null", T]`` with default null, named fixed types emitted once), so the
``avro.schema`` and ``iceberg.schema`` file metadata always agree.
"""

from __future__ import annotations

import re
from typing import Any

from tablekeeper.iceberg.types import (
    BINARY,
    BOOLEAN,
    INT,
    LONG,
    STRING,
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    field_to_json,
)

_VALID_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _opt(fid: int, name: str, t: IcebergType, doc: str | None = None) -> NestedField:
    return NestedField(fid, name, t, required=False, doc=doc)


def _req(fid: int, name: str, t: IcebergType, doc: str | None = None) -> NestedField:
    return NestedField(fid, name, t, required=True, doc=doc)


def _int_map(fid: int, name: str, key_id: int, value_id: int, value: IcebergType, doc: str) -> NestedField:
    return _opt(fid, name, MapType(key_id, INT, value_id, value, value_required=True), doc)


CONTENT = _req(134, "content", INT, "Contents of the file: 0=data, 1=position deletes, 2=equality deletes")
FILE_PATH = _req(100, "file_path", STRING, "Location URI with FS scheme")
FILE_FORMAT = _req(101, "file_format", STRING, "File format name: avro, orc, or parquet")
PARTITION_DOC = "Partition data tuple, schema based on the partition spec"
RECORD_COUNT = _req(103, "record_count", LONG, "Number of records in the file")
FILE_SIZE = _req(104, "file_size_in_bytes", LONG, "Total file size in bytes")
BLOCK_SIZE = _req(105, "block_size_in_bytes", LONG)
COLUMN_SIZES = _int_map(108, "column_sizes", 117, 118, LONG, "Map of column id to total size on disk")
VALUE_COUNTS = _int_map(
    109, "value_counts", 119, 120, LONG, "Map of column id to total count, including null and NaN"
)
NULL_COUNTS = _int_map(110, "null_value_counts", 121, 122, LONG, "Map of column id to null value count")
NAN_COUNTS = _int_map(
    137, "nan_value_counts", 138, 139, LONG, "Map of column id to number of NaN values in the column"
)
LOWER_BOUNDS = _int_map(125, "lower_bounds", 126, 127, BINARY, "Map of column id to lower bound")
UPPER_BOUNDS = _int_map(128, "upper_bounds", 129, 130, BINARY, "Map of column id to upper bound")
KEY_METADATA = _opt(131, "key_metadata", BINARY, "Encryption key metadata blob")
SPLIT_OFFSETS = _opt(132, "split_offsets", ListType(133, LONG, True), "Splittable offsets")
EQUALITY_IDS = _opt(135, "equality_ids", ListType(136, INT, True), "Equality comparison field IDs")
SORT_ORDER_ID = _opt(140, "sort_order_id", INT, "Sort order ID")
FIRST_ROW_ID = _opt(142, "first_row_id", LONG, "The first row ID assigned to the first row in the data file")
REFERENCED_DATA_FILE = _opt(
    143,
    "referenced_data_file",
    STRING,
    "Fully qualified location (URI with FS scheme) of a data file that all deletes reference",
)
CONTENT_OFFSET = _opt(144, "content_offset", LONG, "The offset in the file where the content starts")
CONTENT_SIZE = _opt(145, "content_size_in_bytes", LONG, "The length of referenced content stored in the file")


def data_file_struct(format_version: int, partition_type: StructType) -> StructType:
    doc = None if format_version == 1 else PARTITION_DOC
    partition = _req(102, "partition", partition_type, doc)
    metrics = (COLUMN_SIZES, VALUE_COUNTS, NULL_COUNTS, NAN_COUNTS, LOWER_BOUNDS, UPPER_BOUNDS)
    if format_version == 1:
        fields = (FILE_PATH, FILE_FORMAT, partition, RECORD_COUNT, FILE_SIZE, BLOCK_SIZE, *metrics)
        return StructType((*fields, KEY_METADATA, SPLIT_OFFSETS, SORT_ORDER_ID))
    head = (CONTENT, FILE_PATH, FILE_FORMAT, partition, RECORD_COUNT, FILE_SIZE, *metrics)
    tail: tuple[NestedField, ...] = (KEY_METADATA, SPLIT_OFFSETS, EQUALITY_IDS, SORT_ORDER_ID)
    if format_version == 2:
        return StructType((*head, *tail, REFERENCED_DATA_FILE))
    return StructType((*head, *tail, FIRST_ROW_ID, REFERENCED_DATA_FILE, CONTENT_OFFSET, CONTENT_SIZE))


def manifest_entry_struct(format_version: int, partition_type: StructType) -> StructType:
    status = _req(0, "status", INT)
    snapshot_id = _opt(1, "snapshot_id", LONG)
    data_file = _req(2, "data_file", data_file_struct(format_version, partition_type))
    if format_version == 1:
        return StructType((status, snapshot_id, data_file))
    seq = _opt(3, "sequence_number", LONG)
    file_seq = _opt(4, "file_sequence_number", LONG)
    return StructType((status, snapshot_id, seq, file_seq, data_file))


FIELD_SUMMARY = StructType(
    (
        _req(509, "contains_null", BOOLEAN, "True if any file has a null partition value"),
        _opt(518, "contains_nan", BOOLEAN, "True if any file has a nan partition value"),
        _opt(510, "lower_bound", BINARY, "Partition lower bound for all files"),
        _opt(511, "upper_bound", BINARY, "Partition upper bound for all files"),
    )
)


def manifest_file_struct(format_version: int) -> StructType:
    path = _req(500, "manifest_path", STRING, "Location URI with FS scheme")
    length = _req(501, "manifest_length", LONG, "Total file size in bytes")
    spec_id = _req(502, "partition_spec_id", INT, "Spec ID used to write")
    content = _req(517, "content", INT, "Contents of the manifest: 0=data, 1=deletes")
    seq = _req(515, "sequence_number", LONG, "Sequence number when the manifest was added")
    min_seq = _req(516, "min_sequence_number", LONG, "Lowest sequence number in the manifest")
    snap = _req(503, "added_snapshot_id", LONG, "Snapshot ID that added the manifest")
    counts = (
        (504, "added_files_count", INT, "Added entry count"),
        (505, "existing_files_count", INT, "Existing entry count"),
        (506, "deleted_files_count", INT, "Deleted entry count"),
        (512, "added_rows_count", LONG, "Added rows count"),
        (513, "existing_rows_count", LONG, "Existing rows count"),
        (514, "deleted_rows_count", LONG, "Deleted rows count"),
    )
    partitions = _opt(507, "partitions", ListType(508, FIELD_SUMMARY, True), "Summary for each partition")
    key_metadata = _opt(519, "key_metadata", BINARY, "Encryption key metadata blob")
    if format_version == 1:
        files = tuple(_opt(*c) for c in counts[:3])
        rows = tuple(_opt(*c) for c in counts[3:])
        return StructType((path, length, spec_id, snap, *files, partitions, *rows, key_metadata))
    required = tuple(_req(*c) for c in counts)
    fields = (path, length, spec_id, content, seq, min_seq, snap, *required, partitions, key_metadata)
    if format_version == 2:
        return StructType(fields)
    first_row_id = _opt(
        520, "first_row_id", LONG, "Starting row ID to assign to new rows in ADDED data files"
    )
    return StructType((*fields, first_row_id))


# -----------------------------------------------------------------------------------------------
# Iceberg -> Avro


def avro_name(name: str) -> str:
    """Java's rule for names Avro cannot hold: leading digit gets ``_``, other bad chars ``_x<HEX>``."""
    if _VALID_NAME.match(name):
        return name
    out = []
    for i, ch in enumerate(name):
        if ch.isascii() and (ch.isalpha() or ch == "_" or (ch.isdigit() and i > 0)):
            out.append(ch)
        elif ch.isascii() and ch.isdigit():
            out.append("_" + ch)
        else:
            out.append(f"_x{ord(ch):X}")
    return "".join(out)


class _Converter:
    def __init__(self) -> None:
        self.named: set[str] = set()

    def _named(self, name: str, schema: dict[str, Any]) -> Any:
        # Avro forbids redefining a named type; later uses refer to it by name.
        if name in self.named:
            return name
        self.named.add(name)
        return schema

    def primitive(self, t: IcebergType) -> Any:
        if isinstance(t, DecimalType):
            size = _decimal_bytes(t.precision)
            return self._named(
                f"decimal_{t.precision}_{t.scale}",
                {
                    "type": "fixed",
                    "name": f"decimal_{t.precision}_{t.scale}",
                    "size": size,
                    "logicalType": "decimal",
                    "precision": t.precision,
                    "scale": t.scale,
                },
            )
        if isinstance(t, FixedType):
            return self._named(
                f"fixed_{t.length}", {"type": "fixed", "name": f"fixed_{t.length}", "size": t.length}
            )
        assert isinstance(t, PrimitiveType)
        simple = {
            "boolean": "boolean",
            "int": "int",
            "long": "long",
            "float": "float",
            "double": "double",
            "string": "string",
            "binary": "bytes",
            "unknown": "null",
        }
        if t.name in simple:
            return simple[t.name]
        if t.name == "date":
            return {"type": "int", "logicalType": "date"}
        if t.name == "time":
            return {"type": "long", "logicalType": "time-micros"}
        if t.name in ("timestamp", "timestamptz"):
            return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": t.name.endswith("tz")}
        if t.name in ("timestamp_ns", "timestamptz_ns"):
            return {
                "type": "long",
                "logicalType": "timestamp-nanos",
                "adjust-to-utc": t.name.endswith("tz_ns"),
            }
        if t.name == "uuid":
            return self._named(
                "uuid_fixed", {"type": "fixed", "name": "uuid_fixed", "size": 16, "logicalType": "uuid"}
            )
        raise ValueError(f"no Avro form for Iceberg type {t}")

    def convert(self, t: IcebergType, record_name: str) -> Any:
        if isinstance(t, StructType):
            return self.struct(t, record_name)
        if isinstance(t, ListType):
            element = self.convert(t.element, f"r{t.element_id}")
            items = element if t.element_required else ["null", element]
            return {"type": "array", "items": items, "element-id": t.element_id}
        if isinstance(t, MapType):
            value = self.convert(t.value, f"r{t.value_id}")
            value = value if t.value_required else ["null", value]
            if t.key == STRING:
                return {"type": "map", "values": value, "key-id": t.key_id, "value-id": t.value_id}
            pair = {
                "type": "record",
                "name": f"k{t.key_id}_v{t.value_id}",
                "fields": [
                    {"name": "key", "type": self.convert(t.key, f"r{t.key_id}"), "field-id": t.key_id},
                    {"name": "value", "type": value, "field-id": t.value_id},
                ],
            }
            return {"type": "array", "items": pair, "logicalType": "map"}
        return self.primitive(t)

    def struct(self, t: StructType, record_name: str) -> dict[str, Any]:
        fields = []
        for f in t.fields:
            inner = self.convert(f.type, f"r{f.id}")
            name = avro_name(f.name)
            out: dict[str, Any] = {"name": name, "type": inner if f.required else ["null", inner]}
            if f.doc is not None:
                out["doc"] = f.doc
            if not f.required:
                out["default"] = None
            if name != f.name:
                out["iceberg-field-name"] = f.name
            out["field-id"] = f.id
            fields.append(out)
        return {"type": "record", "name": record_name, "fields": fields}


def _decimal_bytes(precision: int) -> int:
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def to_avro_schema(struct: StructType, record_name: str) -> dict[str, Any]:
    return _Converter().struct(struct, record_name)


def manifest_entry_avro(format_version: int, partition_type: StructType) -> dict[str, Any]:
    return to_avro_schema(manifest_entry_struct(format_version, partition_type), "manifest_entry")


def manifest_file_avro(format_version: int) -> dict[str, Any]:
    return to_avro_schema(manifest_file_struct(format_version), "manifest_file")


def iceberg_schema_json(struct: StructType) -> dict[str, Any]:
    """The ``iceberg.schema`` file metadata: the file's own struct as Iceberg schema JSON."""
    return {"type": "struct", "schema-id": 0, "fields": [field_to_json(f) for f in struct.fields]}
