"""Iceberg types and schemas: frozen models and their JSON form (Java's SchemaParser layout)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.errors import CorruptMetadataError

PRIMITIVE_NAMES = (
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "timestamp_ns",
    "timestamptz_ns",
    "string",
    "uuid",
    "binary",
    "unknown",
    "variant",
)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_FIXED = re.compile(r"^fixed\[\s*(\d+)\s*\]$")
_GEO = re.compile(r"^(geometry|geography)(\(.*\))?$")


def is_geospatial(t: object) -> bool:
    return isinstance(t, PrimitiveType) and _GEO.match(t.name) is not None


@dataclass(frozen=True)
class PrimitiveType:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class DecimalType:
    precision: int
    scale: int

    def __str__(self) -> str:
        return f"decimal({self.precision}, {self.scale})"


@dataclass(frozen=True)
class FixedType:
    length: int

    def __str__(self) -> str:
        return f"fixed[{self.length}]"


@dataclass(frozen=True)
class NestedField:
    id: int
    name: str
    type: IcebergType
    required: bool = False
    doc: str | None = None
    # Kept as their JSON form (Appendix D JSON single values); only round-tripped here.
    initial_default: Any = None
    write_default: Any = None


@dataclass(frozen=True)
class StructType:
    fields: tuple[NestedField, ...] = ()


@dataclass(frozen=True)
class ListType:
    element_id: int
    element: IcebergType
    element_required: bool = False


@dataclass(frozen=True)
class MapType:
    key_id: int
    key: IcebergType
    value_id: int
    value: IcebergType
    value_required: bool = False


IcebergType = PrimitiveType | DecimalType | FixedType | StructType | ListType | MapType

BOOLEAN = PrimitiveType("boolean")
INT = PrimitiveType("int")
LONG = PrimitiveType("long")
FLOAT = PrimitiveType("float")
DOUBLE = PrimitiveType("double")
DATE = PrimitiveType("date")
TIME = PrimitiveType("time")
TIMESTAMP = PrimitiveType("timestamp")
TIMESTAMPTZ = PrimitiveType("timestamptz")
TIMESTAMP_NS = PrimitiveType("timestamp_ns")
TIMESTAMPTZ_NS = PrimitiveType("timestamptz_ns")
STRING = PrimitiveType("string")
UUID = PrimitiveType("uuid")
BINARY = PrimitiveType("binary")
UNKNOWN = PrimitiveType("unknown")
VARIANT = PrimitiveType("variant")


def is_primitive(t: IcebergType) -> bool:
    return isinstance(t, (PrimitiveType, DecimalType, FixedType))


@dataclass(frozen=True)
class Schema:
    schema_id: int
    fields: tuple[NestedField, ...]
    identifier_field_ids: tuple[int, ...] = ()
    _index: Mapping[int, NestedField] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {f.id: f for f in walk_fields(self.as_struct())})

    def as_struct(self) -> StructType:
        return StructType(self.fields)

    def find_field(self, field_id: int) -> NestedField | None:
        return self._index.get(field_id)

    def find_type(self, field_id: int) -> IcebergType | None:
        found = self._index.get(field_id)
        return found.type if found else None

    def highest_field_id(self) -> int:
        return max(self._index, default=0)

    def column_name(self, field_id: int) -> str | None:
        """Dotted path of a field (``a.b.element``), as Iceberg names columns in metrics."""
        return _names(self.as_struct()).get(field_id)


def walk_fields(t: IcebergType) -> Iterator[NestedField]:
    """Every nested field (struct fields, list elements, map keys/values) depth first."""
    if isinstance(t, StructType):
        for f in t.fields:
            yield f
            yield from walk_fields(f.type)
    elif isinstance(t, ListType):
        yield NestedField(t.element_id, "element", t.element, t.element_required)
        yield from walk_fields(t.element)
    elif isinstance(t, MapType):
        yield NestedField(t.key_id, "key", t.key, True)
        yield from walk_fields(t.key)
        yield NestedField(t.value_id, "value", t.value, t.value_required)
        yield from walk_fields(t.value)


def clashing_names(schema: Schema) -> list[str]:
    """Full names (dotted, list and map children as element/key/value) two fields share, such
    as a column ``a.b`` beside a struct ``a`` holding ``b``: Iceberg Java cannot index such a
    schema ("multiple fields for name"), so no engine could load a table holding it."""
    seen: set[str] = set()
    clashes: list[str] = []
    for name in _names(schema.as_struct()).values():
        if name in seen:
            clashes.append(name)
        seen.add(name)
    return clashes


def _names(t: IcebergType, prefix: str = "") -> dict[int, str]:
    out: dict[int, str] = {}
    children: list[tuple[int, str, IcebergType]] = []
    if isinstance(t, StructType):
        children = [(f.id, f.name, f.type) for f in t.fields]
    elif isinstance(t, ListType):
        children = [(t.element_id, "element", t.element)]
    elif isinstance(t, MapType):
        children = [(t.key_id, "key", t.key), (t.value_id, "value", t.value)]
    for fid, name, child in children:
        full = f"{prefix}{name}"
        out[fid] = full
        out.update(_names(child, full + "."))
    return out


# ---------------------------------------------------------------------------------------------
# JSON


def type_from_json(value: Any) -> IcebergType:
    if isinstance(value, str):
        name = value.strip()
        if name in PRIMITIVE_NAMES:
            return PrimitiveType(name)
        if m := _DECIMAL.match(name):
            return DecimalType(int(m.group(1)), int(m.group(2)))
        if m := _FIXED.match(name):
            return FixedType(int(m.group(1)))
        if _GEO.match(name):
            # Kept by name (with its CRS and algorithm) so metadata-only jobs handle such tables;
            # jobs that rewrite data refuse the column by name.
            return PrimitiveType(name)
        raise CorruptMetadataError(f"unknown Iceberg type {name!r} in schema")
    if isinstance(value, dict):
        kind = value.get("type")
        try:
            if kind == "struct":
                return StructType(tuple(field_from_json(f) for f in value["fields"]))
            if kind == "list":
                return ListType(
                    int(value["element-id"]),
                    type_from_json(value["element"]),
                    bool(value["element-required"]),
                )
            if kind == "map":
                return MapType(
                    int(value["key-id"]),
                    type_from_json(value["key"]),
                    int(value["value-id"]),
                    type_from_json(value["value"]),
                    bool(value["value-required"]),
                )
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptMetadataError(f"malformed {kind} type in schema: missing or bad {err}") from err
    raise CorruptMetadataError(f"malformed Iceberg type in schema: {str(value)[:80]}")


def field_from_json(value: Mapping[str, Any]) -> NestedField:
    try:
        return NestedField(
            id=int(value["id"]),
            name=str(value["name"]),
            type=type_from_json(value["type"]),
            required=bool(value["required"]),
            doc=value.get("doc"),
            initial_default=value.get("initial-default"),
            write_default=value.get("write-default"),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptMetadataError(f"malformed schema field: missing or bad {err}") from err


def type_to_json(t: IcebergType) -> Any:
    if isinstance(t, (PrimitiveType, DecimalType, FixedType)):
        return str(t)
    if isinstance(t, StructType):
        return {"type": "struct", "fields": [field_to_json(f) for f in t.fields]}
    if isinstance(t, ListType):
        return {
            "type": "list",
            "element-id": t.element_id,
            "element": type_to_json(t.element),
            "element-required": t.element_required,
        }
    return {
        "type": "map",
        "key-id": t.key_id,
        "key": type_to_json(t.key),
        "value-id": t.value_id,
        "value": type_to_json(t.value),
        "value-required": t.value_required,
    }


def field_to_json(f: NestedField) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f.id, "name": f.name, "required": f.required, "type": type_to_json(f.type)}
    if f.doc is not None:
        out["doc"] = f.doc
    if f.initial_default is not None:
        out["initial-default"] = f.initial_default
    if f.write_default is not None:
        out["write-default"] = f.write_default
    return out


def schema_from_json(value: Mapping[str, Any], default_id: int = 0) -> Schema:
    if not isinstance(value, Mapping) or value.get("type") != "struct" or "fields" not in value:
        raise CorruptMetadataError("malformed schema: expected a struct with fields")
    struct = type_from_json(dict(value))
    assert isinstance(struct, StructType)
    return Schema(
        schema_id=int(value.get("schema-id", default_id)),
        fields=struct.fields,
        identifier_field_ids=tuple(int(i) for i in value.get("identifier-field-ids", ())),
    )


def schema_to_json(schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "struct", "schema-id": schema.schema_id}
    if schema.identifier_field_ids:
        out["identifier-field-ids"] = list(schema.identifier_field_ids)
    out["fields"] = [field_to_json(f) for f in schema.fields]
    return out


# ---------------------------------------------------------------------------------------------
# Evolution

_PROMOTIONS: Mapping[str, frozenset[str]] = {
    "int": frozenset({"long"}),
    "float": frozenset({"double"}),
    "date": frozenset({"timestamp", "timestamp_ns"}),  # v3
}


def is_valid_promotion(old: IcebergType, new: IcebergType, format_version: int = 2) -> bool:
    """Type changes Iceberg allows for an existing field id (same type is always allowed)."""
    if old == new:
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return old.scale == new.scale and new.precision >= old.precision
    if isinstance(old, PrimitiveType) and isinstance(new, PrimitiveType):
        if old.name == "unknown":
            return format_version >= 3
        if old.name == "date":
            return format_version >= 3 and new.name in _PROMOTIONS["date"]
        return new.name in _PROMOTIONS.get(old.name, frozenset())
    return False


def check_evolution(
    old: Schema, new: Schema, format_version: int = 2, retyped: frozenset[int] = frozenset()
) -> list[str]:
    """Problems with replacing ``old`` by ``new``: each kept field id must keep a compatible type.
    ``retyped``: primitive fields whose values are rewritten into every file the new schema
    reads, so they may change type beyond Iceberg's promotions."""
    problems: list[str] = []
    for f in walk_fields(new.as_struct()):
        before = old.find_field(f.id)
        if before is None:
            if f.required and f.initial_default is None:
                problems.append(f"new required field {f.name!r} (id {f.id}) needs an initial default")
            continue
        if is_primitive(before.type) != is_primitive(f.type):
            problems.append(f"field id {f.id} changed between primitive and nested type")
        elif (
            is_primitive(f.type)
            and f.id not in retyped
            and not is_valid_promotion(before.type, f.type, format_version)
        ):
            problems.append(f"field id {f.id} ({f.name}): {before.type} cannot be promoted to {f.type}")
        if f.required and not before.required:
            problems.append(f"field id {f.id} ({f.name}) cannot change from optional to required")
    return problems
