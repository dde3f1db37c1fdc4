"""Delta (Spark) schemas: the ``schemaString`` JSON as frozen models, with column mapping.

Under column mapping (``delta.columnMapping.mode`` = id or name) every field has a physical name
and an id; files, partition values and stats use the physical names, ``partitionColumns`` the
logical ones. These helpers answer both directions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.errors import CorruptMetadataError, UnsupportedFeatureError

PRIMITIVES = frozenset(
    {
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
        "void",
    }
)
_DECIMAL = re.compile(r"^decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")

CM_ID = "delta.columnMapping.id"
CM_PHYSICAL = "delta.columnMapping.physicalName"
CM_NESTED_IDS = "delta.columnMapping.nested.ids"


@dataclass(frozen=True)
class DeltaPrimitive:
    name: str


@dataclass(frozen=True)
class DeltaDecimal:
    precision: int
    scale: int


@dataclass(frozen=True)
class DeltaArray:
    element: DeltaType
    contains_null: bool


@dataclass(frozen=True)
class DeltaMap:
    key: DeltaType
    value: DeltaType
    value_contains_null: bool


@dataclass(frozen=True)
class DeltaField:
    name: str
    type: DeltaType
    nullable: bool
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def column_id(self) -> int | None:
        value = self.metadata.get(CM_ID)
        return None if value is None else int(value)

    @property
    def physical_name_or_none(self) -> str | None:
        value = self.metadata.get(CM_PHYSICAL)
        return None if value is None else str(value)

    @property
    def nested_ids(self) -> Mapping[str, int]:
        raw = self.metadata.get(CM_NESTED_IDS) or {}
        return {str(k): int(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


@dataclass(frozen=True)
class DeltaStruct:
    fields: tuple[DeltaField, ...]

    def field(self, name: str) -> DeltaField | None:
        for f in self.fields:
            if f.name == name:
                return f
        lowered = name.lower()  # Delta names are case-insensitive
        return next((f for f in self.fields if f.name.lower() == lowered), None)


DeltaType = DeltaPrimitive | DeltaDecimal | DeltaArray | DeltaMap | DeltaStruct


def parse_type(value: Any) -> DeltaType:
    if isinstance(value, str):
        name = value.strip()
        if name in PRIMITIVES:
            return DeltaPrimitive(name)
        if name == "decimal":
            return DeltaDecimal(10, 0)
        if m := _DECIMAL.match(name):
            return DeltaDecimal(int(m.group(1)), int(m.group(2)))
        if name.startswith("interval"):
            raise UnsupportedFeatureError(f"Delta column type {name!r} has no Iceberg equivalent")
        if name.startswith(("geometry", "geography")):
            # Iceberg v3 has both types, but no reference engine reads them: delta-spark 4.4
            # refuses geospatial columns, and Iceberg Spark 1.11 has no Spark type for them (its
            # TypeToSparkType fails on geometry and geography), so no conversion could be proven
            # and its target could not be read in Spark.
            raise UnsupportedFeatureError(
                f"Delta column type {name!r} is not converted (neither delta-spark nor Iceberg Spark "
                "reads geospatial columns, so the target could not be read in Spark nor checked "
                "against the source): store the column as WKB binary in Delta (ST_AsBinary), then "
                "convert"
            )
        raise CorruptMetadataError(f"unknown Delta column type {name!r} in schemaString")
    if isinstance(value, dict):
        kind = value.get("type")
        try:
            if kind == "struct":
                return DeltaStruct(tuple(parse_field(f) for f in value["fields"]))
            if kind == "array":
                return DeltaArray(parse_type(value["elementType"]), bool(value.get("containsNull", True)))
            if kind == "map":
                return DeltaMap(
                    parse_type(value["keyType"]),
                    parse_type(value["valueType"]),
                    bool(value.get("valueContainsNull", True)),
                )
        except KeyError as err:
            raise CorruptMetadataError(f"Delta {kind} type is missing {err}") from err
    raise CorruptMetadataError(f"malformed Delta type in schemaString: {str(value)[:80]}")


def parse_field(value: Mapping[str, Any]) -> DeltaField:
    try:
        return DeltaField(
            name=str(value["name"]),
            type=parse_type(value["type"]),
            nullable=bool(value.get("nullable", True)),
            metadata=dict(value.get("metadata") or {}),
        )
    except (KeyError, TypeError) as err:
        raise CorruptMetadataError(f"malformed Delta schema field: {err}") from err


def parse_schema_string(schema_string: str) -> DeltaStruct:
    try:
        doc = json.loads(schema_string)
    except json.JSONDecodeError as err:
        raise CorruptMetadataError(f"metaData.schemaString is not valid JSON ({err.msg})") from err
    parsed = parse_type(doc)
    if not isinstance(parsed, DeltaStruct):
        raise CorruptMetadataError("metaData.schemaString is not a struct")
    return parsed


def type_to_json(t: DeltaType) -> Any:
    if isinstance(t, DeltaPrimitive):
        return t.name
    if isinstance(t, DeltaDecimal):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, DeltaArray):
        return {"type": "array", "elementType": type_to_json(t.element), "containsNull": t.contains_null}
    if isinstance(t, DeltaMap):
        return {
            "type": "map",
            "keyType": type_to_json(t.key),
            "valueType": type_to_json(t.value),
            "valueContainsNull": t.value_contains_null,
        }
    return {
        "type": "struct",
        "fields": [
            {
                "name": f.name,
                "type": type_to_json(f.type),
                "nullable": f.nullable,
                "metadata": dict(f.metadata),
            }
            for f in t.fields
        ],
    }


@dataclass(frozen=True)
class ColumnMapping:
    """Column-mapping mode of a table and the name lookups it implies."""

    mode: str  # none | id | name

    @property
    def enabled(self) -> bool:
        return self.mode in ("id", "name")

    def physical_name(self, f: DeltaField) -> str:
        if not self.enabled:
            return f.name
        physical = f.physical_name_or_none
        if physical is None:
            raise CorruptMetadataError(
                f"column {f.name!r} has no {CM_PHYSICAL} although column mapping mode is {self.mode}"
            )
        return physical

    def physical_partition_columns(
        self, schema: DeltaStruct, partition_columns: tuple[str, ...]
    ) -> dict[str, str]:
        """logical partition column -> the key partitionValues and stats use."""
        out: dict[str, str] = {}
        for name in partition_columns:
            f = schema.field(name)
            if f is None:
                raise CorruptMetadataError(f"partition column {name!r} is not in the table schema")
            out[name] = self.physical_name(f)
        return out


def column_mapping(configuration: Mapping[str, str], supports_column_mapping: bool) -> ColumnMapping:
    mode = (configuration.get("delta.columnMapping.mode") or "none").lower()
    if mode not in ("none", "id", "name"):
        raise UnsupportedFeatureError(f"delta.columnMapping.mode={mode!r} is not supported")
    # The property counts only where the protocol supports column mapping (spec).
    return ColumnMapping(mode if supports_column_mapping else "none")


def walk(struct: DeltaStruct, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], DeltaField]]:
    """Every struct field (recursing into structs inside arrays and maps), with its logical path."""
    for f in struct.fields:
        path = (*prefix, f.name)
        yield path, f
        yield from _walk_type(f.type, path)


def _walk_type(t: DeltaType, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], DeltaField]]:
    if isinstance(t, DeltaStruct):
        yield from walk(t, path)
    elif isinstance(t, DeltaArray):
        yield from _walk_type(t.element, (*path, "element"))
    elif isinstance(t, DeltaMap):
        yield from _walk_type(t.key, (*path, "key"))
        yield from _walk_type(t.value, (*path, "value"))
