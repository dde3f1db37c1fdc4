"""An Iceberg table as the Hive Metastore records it: an EXTERNAL_TABLE whose parameters say
``table_type=ICEBERG`` and hold the current ``metadata_location`` (and the one before it), with the
table's properties, schema and summary statistics mirrored for Hive-side readers, as Iceberg Java's
HiveTableOperations records them. Pure: Table structs in, Table structs out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tablekeeper import clock
from tablekeeper.catalog.hive_metastore import SdField, TableField
from tablekeeper.catalog.hive_thrift import TList, TStruct, TType, string_map, struct_of, text
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.partitioning import partition_spec_to_json, sort_order_to_json
from tablekeeper.iceberg.types import (
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    PrimitiveType,
    Schema,
    StructType,
    schema_to_json,
)

TABLE_TYPE = "table_type"
ICEBERG = "ICEBERG"
METADATA_LOCATION = "metadata_location"
PREVIOUS_METADATA_LOCATION = "previous_metadata_location"
EXTERNAL_TABLE = "EXTERNAL_TABLE"
# Iceberg's own key for the HMS owner: a property that sets the owner, never mirrored as one.
HMS_TABLE_OWNER = "hive.metastore.table.owner"
# Iceberg property -> the HMS parameter that means the same to Hive.
_TRANSLATED = {"gc.enabled": "external.table.purge"}
# Values Iceberg Java leaves out of the parameters when longer (its default
# iceberg.hive.table-property-max-size: the backing databases' column width).
MAX_PARAMETER_SIZE = 32672
# Hive's statistics switches: the metastore must not recompute stats of files it does not own.
DO_NOT_UPDATE_STATS = "DO_NOT_UPDATE_STATS"
_COLUMN_STATS_ACCURATE = "COLUMN_STATS_ACCURATE"
# The metastore compares this parameter with the expected value before an alter (Hive 4's
# HIVE-26882, which Iceberg's lock-free commits use); older servers ignore the keys.
EXPECTED_KEY = "expected_parameter_key"
EXPECTED_VALUE = "expected_parameter_value"

_INPUT_FORMAT = "org.apache.hadoop.mapred.FileInputFormat"
_OUTPUT_FORMAT = "org.apache.hadoop.mapred.FileOutputFormat"
_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
_INT_MAX = 2**31 - 1
# Hive's basic statistics, from the current snapshot's summary totals.
_STATS = {"numFiles": "total-data-files", "numRows": "total-records", "totalSize": "total-files-size"}

# Delta tables registered by Spark's session catalog carry their provider here.
SPARK_PROVIDER = "spark.sql.sources.provider"


def parameters(table: TStruct) -> dict[str, str]:
    return table.string_map(TableField.PARAMETERS)


def is_iceberg(table: TStruct) -> bool:
    return parameters(table).get(TABLE_TYPE, "").lower() == ICEBERG.lower()


def metadata_location(table: TStruct) -> str | None:
    return parameters(table).get(METADATA_LOCATION) or None


def table_location(table: TStruct) -> str | None:
    sd = table.struct(TableField.SD)
    return sd.text(SdField.LOCATION) if sd is not None else None


def delta_location(table: TStruct) -> str | None:
    """Where a Delta table Spark registered lives (its serde ``path``, else the table's location);
    None for tables of other formats."""
    if parameters(table).get(SPARK_PROVIDER, "").lower() != "delta":
        return None
    sd = table.struct(TableField.SD)
    serde = sd.struct(SdField.SERDE) if sd is not None else None
    path = serde.string_map(3).get("path") if serde is not None else None
    return path or table_location(table)


def hive_type(t: IcebergType) -> str:
    """The Hive column type Iceberg Java records for an Iceberg type (informational: Iceberg
    readers take the schema from the metadata file)."""
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, FixedType):
        return "binary"
    if isinstance(t, StructType):
        return "struct<" + ",".join(f"{f.name}:{hive_type(f.type)}" for f in t.fields) + ">"
    if isinstance(t, ListType):
        return f"array<{hive_type(t.element)}>"
    if isinstance(t, MapType):
        return f"map<{hive_type(t.key)},{hive_type(t.value)}>"
    assert isinstance(t, PrimitiveType)
    return {
        "boolean": "boolean",
        "int": "int",
        "long": "bigint",
        "float": "float",
        "double": "double",
        "date": "date",
        "time": "string",
        "string": "string",
        "uuid": "string",
        "binary": "binary",
        # Hive's plain timestamp: what every metastore version and Hive 2 clients read.
        "timestamp": "timestamp",
        "timestamptz": "timestamp",
        "timestamp_ns": "timestamp",
        "timestamptz_ns": "timestamp",
    }.get(t.name, "unknown")


def columns(schema: Schema) -> TList:
    return TList(
        TType.STRUCT,
        tuple(
            struct_of(
                (1, TType.STRING, text(f.name)),
                (2, TType.STRING, text(hive_type(f.type))),
                (3, TType.STRING, text(f.doc) if f.doc else None),
            )
            for f in schema.fields
        ),
    )


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def iceberg_parameters(
    current: Mapping[str, str],
    metadata: TableMetadata,
    location: str,
    previous: str | None,
    removed_properties: set[str],
) -> dict[str, str]:
    """The table's parameters after a commit to ``location``: the table's properties pushed (those
    removed since the base dropped), the pointers, and the schema, spec, sort order and snapshot
    summary Hive-side readers see; every other parameter as it was."""
    params = dict(current)
    for key in removed_properties:
        params.pop(_TRANSLATED.get(key, key), None)
    for key, value in metadata.properties.items():
        if key.lower() != HMS_TABLE_OWNER:
            params[_TRANSLATED.get(key, key)] = value
    params["uuid"] = metadata.table_uuid
    params[TABLE_TYPE] = ICEBERG
    params[METADATA_LOCATION] = location
    if previous:
        params[PREVIOUS_METADATA_LOCATION] = previous
    for key in (
        "current-schema",
        "current-snapshot-id",
        "current-snapshot-timestamp-ms",
        "current-snapshot-summary",
        "default-partition-spec",
        "default-sort-order",
        _COLUMN_STATS_ACCURATE,
    ):
        params.pop(key, None)
    _put_bounded(params, "current-schema", _json(schema_to_json(metadata.schema())))
    snapshot = metadata.current_snapshot()
    if snapshot is not None:
        summary = snapshot.summary
        for stat, key in (
            ("numFiles", "total-data-files"),
            ("numRows", "total-records"),
            ("totalSize", "total-files-size"),
        ):
            if key in summary:
                params[stat] = summary[key]
        params["current-snapshot-id"] = str(snapshot.snapshot_id)
        params["current-snapshot-timestamp-ms"] = str(snapshot.timestamp_ms)
        _put_bounded(params, "current-snapshot-summary", _json(dict(summary)))
    params["snapshot-count"] = str(len(metadata.snapshots))
    if not metadata.spec().is_unpartitioned:
        _put_bounded(params, "default-partition-spec", _json(partition_spec_to_json(metadata.spec())))
    if not metadata.sort_order().is_unsorted:
        _put_bounded(params, "default-sort-order", _json(sort_order_to_json(metadata.sort_order())))
    params[DO_NOT_UPDATE_STATS] = "true"
    return params


def _put_bounded(params: dict[str, str], key: str, value: str) -> None:
    if len(value) <= MAX_PARAMETER_SIZE:
        params[key] = value


def committed_table(
    table: TStruct, base: TableMetadata, metadata: TableMetadata, location: str, previous: str
) -> TStruct:
    """``table`` as the server returned it, changed where a commit of ``metadata`` changes it:
    its parameters; its columns when the schema changed; its location when the table moved."""
    removed = set(base.properties) - set(metadata.properties)
    params = iceberg_parameters(parameters(table), metadata, location, previous, removed)
    new = table.with_field(TableField.PARAMETERS, TType.MAP, string_map(params))
    sd = table.struct(TableField.SD)
    if sd is not None:
        changed = sd
        if base.schema().fields != metadata.schema().fields:
            changed = changed.with_field(SdField.COLS, TType.LIST, columns(metadata.schema()))
        if base.location != metadata.location:
            changed = changed.with_field(SdField.LOCATION, TType.STRING, text(metadata.location))
        if changed is not sd:
            new = new.with_field(TableField.SD, TType.STRUCT, changed)
    return new


def new_table(db: str, name: str, owner: str, metadata: TableMetadata, location: str) -> TStruct:
    """The Table a new Iceberg table is created as: external, not partitioned in Hive's terms, its
    storage descriptor only naming where the table lives (as Iceberg Java creates it)."""
    now = clock.now_ms() // 1000
    params = iceberg_parameters({"EXTERNAL": "TRUE"}, metadata, location, None, set())
    serde = struct_of((2, TType.STRING, text(_SERDE)), (3, TType.MAP, string_map({})))
    sd = struct_of(
        (SdField.COLS, TType.LIST, columns(metadata.schema())),
        (SdField.LOCATION, TType.STRING, text(metadata.location)),
        (SdField.INPUT_FORMAT, TType.STRING, text(_INPUT_FORMAT)),
        (SdField.OUTPUT_FORMAT, TType.STRING, text(_OUTPUT_FORMAT)),
        (SdField.SERDE, TType.STRUCT, serde),
    )
    return struct_of(
        (TableField.NAME, TType.STRING, text(name)),
        (TableField.DB, TType.STRING, text(db)),
        (TableField.OWNER, TType.STRING, text(metadata.properties.get(HMS_TABLE_OWNER, owner))),
        (TableField.CREATE_TIME, TType.I32, now),
        (TableField.LAST_ACCESS_TIME, TType.I32, now),
        (TableField.RETENTION, TType.I32, _INT_MAX),
        (TableField.SD, TType.STRUCT, sd),
        (TableField.PARTITION_KEYS, TType.LIST, TList(TType.STRUCT)),
        (TableField.PARAMETERS, TType.MAP, string_map(params)),
        (TableField.TABLE_TYPE, TType.STRING, text(EXTERNAL_TABLE)),
    )
