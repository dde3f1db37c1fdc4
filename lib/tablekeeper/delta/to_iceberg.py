"""Delta -> Iceberg mapping (pure): schema with field ids, name mapping, partition spec, and data
files whose metrics come from Delta stats, with bounds that stay safe.

Field ids: column-mapping ids (and nested ids for list/map children) where the table has them;
otherwise fresh ids, assigned depth-first. Delta partition columns become identity fields.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from struct import Struct
from typing import Any

import pyarrow as pa

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.schema import (
    ColumnMapping,
    DeltaArray,
    DeltaDecimal,
    DeltaField,
    DeltaMap,
    DeltaPrimitive,
    DeltaStruct,
    DeltaType,
    parse_type,
)
from tablekeeper.delta.values import (
    INTEGER_TYPES,
    FileStats,
    parse_partition_value,
    parse_stats,
    stats_value,
    timestamp_lower_bound,
    timestamp_upper_bound,
    zoneless_timestamp_columns,
)
from tablekeeper.errors import ConfigError, CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg import types as it
from tablekeeper.iceberg.bounds import widen_zero
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.conversions import to_bytes
from tablekeeper.iceberg.name_mapping import MappedField, NameMapping
from tablekeeper.iceberg.partitioning import PARTITION_DATA_ID_START, PartitionField, PartitionSpec

_PRIMITIVES: Mapping[str, it.IcebergType] = {
    "string": it.STRING,
    "long": it.LONG,
    "integer": it.INT,
    "short": it.INT,
    "byte": it.INT,
    "float": it.FLOAT,
    "double": it.DOUBLE,
    "boolean": it.BOOLEAN,
    "binary": it.BINARY,
    "date": it.DATE,
    "timestamp": it.TIMESTAMPTZ,  # Delta timestamps are instants (UTC-adjusted)
    "timestamp_ntz": it.TIMESTAMP,
}


# Delta types Iceberg has only from v3 on. A variant is stored alike in both formats (a Parquet
# group of metadata and value binaries, shredded or not); a void column is never written to the
# files and reads as null, as Iceberg's unknown (always optional, never stored) does.
_V3_ONLY: Mapping[str, it.IcebergType] = {"variant": it.VARIANT, "void": it.UNKNOWN}


def _v3_only(name: str, path: tuple[str, ...], format_version: int) -> it.IcebergType:
    if format_version < 3:
        iceberg = _V3_ONLY[name]
        raise UnsupportedFeatureError(
            f"Delta column {'.'.join(path)!r} of type {name} needs Iceberg's {iceberg} type, which "
            f"a v{format_version} table cannot hold: convert with --format-version 3"
        )
    return _V3_ONLY[name]


# The convert-delta option that rewrites the data files Iceberg readers could not read.
REWRITE_OPTION = "--rewrite-unreadable-files"


@dataclass(frozen=True)
class Unreadable:
    """A column some data files hold in a form Iceberg readers cannot read under the mapped
    schema: only a rewrite of those files makes them readable (``REWRITE_OPTION``)."""

    path: tuple[str, ...]  # logical top-level path of the column
    reason: str
    # Widened from this Iceberg type (None: list/map children without ids in column-mapped files).
    widened_from: it.IcebergType | None = None


@dataclass(frozen=True)
class MappedSchema:
    schema: it.Schema
    name_mapping: NameMapping
    # logical top-level path -> Iceberg field id, for partition columns and stats
    ids_by_path: Mapping[tuple[str, ...], int]
    # logical path -> physical path (the names stats and files use)
    physical_by_path: Mapping[tuple[str, ...], tuple[str, ...]]
    # Columns whose files may need a rewrite (only when map_schema was asked to allow them).
    unreadable: tuple[Unreadable, ...] = ()


class _Ids:
    def __init__(self, start: int) -> None:
        self.next = start

    def take(self) -> int:
        value = self.next
        self.next += 1
        return value


def _max_column_id(struct: DeltaStruct, configuration: Mapping[str, str]) -> int:
    best = int(configuration.get("delta.columnMapping.maxColumnId", "0") or 0)
    for f in _all_fields(struct):
        best = max(best, f.column_id or 0, *(f.nested_ids.values() or [0]))
    return best


def ids_by_name_path(schema: it.Schema) -> dict[tuple[str, ...], int]:
    """Field id of every field and list/map child, by name path (children as element/key/value)."""
    out: dict[tuple[str, ...], int] = {}

    def visit(t: it.IcebergType, path: tuple[str, ...]) -> None:
        if isinstance(t, it.StructType):
            for f in t.fields:
                child = (*path, f.name)
                out[child] = f.id
                visit(f.type, child)
        elif isinstance(t, it.ListType):
            element = (*path, "element")
            out[element] = t.element_id
            visit(t.element, element)
        elif isinstance(t, it.MapType):
            key, value = (*path, "key"), (*path, "value")
            out[key] = t.key_id
            out[value] = t.value_id
            visit(t.key, key)
            visit(t.value, value)

    visit(it.StructType(schema.fields), ())
    return out


TYPE_CHANGES = "delta.typeChanges"


def _iceberg_of(delta_type_name: str) -> it.IcebergType | None:
    try:
        t = parse_type(delta_type_name)
    except (UnsupportedFeatureError, CorruptMetadataError):
        return None
    if isinstance(t, DeltaDecimal):
        return it.DecimalType(t.precision, t.scale)
    return _PRIMITIVES.get(t.name) if isinstance(t, DeltaPrimitive) else None


def check_type_changes(
    f: DeltaField, path: tuple[str, ...], format_version: int, rewrite: bool = False
) -> list[Unreadable]:
    """Columns Delta widened in a way Iceberg readers do not promote: refused, or with ``rewrite``
    returned (their files holding the old type get rewritten).

    Type widening changes the schema without rewriting files: files written before the change
    still hold the old type, and an Iceberg schema claiming the new one is read correctly only
    where Iceberg itself promotes (int to long, float to double, decimal precision, and on v3
    date to timestamp). byte and short are Iceberg ints, so widening among them changes nothing.
    """
    changes = f.metadata.get(TYPE_CHANGES) or []
    if not isinstance(changes, list):
        raise CorruptMetadataError(f"Delta column {'.'.join(path)!r} has a malformed {TYPE_CHANGES}")
    out: list[Unreadable] = []
    for change in changes:
        try:
            old_name, new_name = str(change["fromType"]), str(change["toType"])
        except (KeyError, TypeError):
            raise CorruptMetadataError(
                f"Delta column {'.'.join(path)!r} has a malformed {TYPE_CHANGES} entry {change!r}"
            ) from None
        where = ".".join((*path, *([str(change["fieldPath"])] if change.get("fieldPath") else [])))
        old, new = _iceberg_of(old_name), _iceberg_of(new_name)
        if old is None or new is None:
            raise UnsupportedFeatureError(
                f"Delta column {where!r} was widened from {old_name} to {new_name}, which has no "
                "Iceberg equivalent"
            )
        if it.is_valid_promotion(old, new, format_version):
            continue
        reason = (
            f"Delta column {where!r} was widened from {old_name} to {new_name}, which Iceberg "
            f"readers of a v{format_version} table do not promote, so files written before the "
            "change would be read wrong"
        )
        if not rewrite:
            raise ConfigError(
                f"{reason}: convert with {REWRITE_OPTION} (those files are rewritten into the "
                "target), or have Delta rewrite them (ALTER TABLE ... DROP FEATURE typeWidening)"
            )
        out.append(Unreadable(path, reason, old))
    return out


def map_schema(
    struct: DeltaStruct,
    mapping: ColumnMapping,
    configuration: Mapping[str, str],
    *,
    previous: it.Schema | None = None,
    previous_names: NameMapping | None = None,
    last_column_id: int = 0,
    format_version: int = 2,
    rewrite_unreadable: bool = False,
) -> MappedSchema:
    """``previous``: the Iceberg schema this one evolves (``previous_names``: the name mapping it
    was written with). Without column-mapping ids, a field keeps the id its name path had there;
    new fields take ids above ``last_column_id``. Columns Delta
    widened are checked against the promotions Iceberg allows at ``format_version``. Columns some
    files hold in a form Iceberg readers cannot read are refused, or with ``rewrite_unreadable``
    listed in ``unreadable`` (the caller rewrites those files)."""
    start = _max_column_id(struct, configuration) + 1 if mapping.enabled else 1
    ids = _Ids(max(start, last_column_id + 1))
    reuse = ids_by_name_path(previous) if previous is not None else {}
    # With column mapping, a name's previous id is only reused for children Delta gives no id.
    taken = (
        {i for f in _all_fields(struct) for i in (f.column_id, *f.nested_ids.values()) if i}
        if mapping.enabled
        else set()
    )

    def fresh(path: tuple[str, ...]) -> int:
        old = reuse.get(path)
        return old if old is not None and old not in taken else ids.take()

    ids_by_path: dict[tuple[str, ...], int] = {}
    physical_by_path: dict[tuple[str, ...], tuple[str, ...]] = {}
    unreadable: list[Unreadable] = []

    def convert_type(
        t: DeltaType, path: tuple[str, ...], phys: tuple[str, ...], owner: DeltaField | None, nested_key: str
    ) -> tuple[it.IcebergType, list[MappedField]]:
        if isinstance(t, DeltaPrimitive):
            if t.name in _V3_ONLY:
                return _v3_only(t.name, path, format_version), []
            return _PRIMITIVES[t.name], []
        if isinstance(t, DeltaDecimal):
            return it.DecimalType(t.precision, t.scale), []
        if isinstance(t, DeltaStruct):
            fields, mapped = convert_fields(t.fields, path, phys)
            return it.StructType(tuple(fields)), mapped
        nested = owner.nested_ids if owner is not None else {}
        if mapping.enabled:
            children = (
                [("element", t.element)]
                if isinstance(t, DeltaArray)
                else [("key", t.key), ("value", t.value)]
            )
            for part, child in children:
                if not isinstance(child, DeltaStruct) and f"{nested_key}.{part}" not in nested:
                    # The files carry field ids for columns but none for this child, and Iceberg
                    # readers resolve a file with ids by id only: they would not find it.
                    reason = (
                        f"Delta column {'.'.join(path)!r}: its {part}s have no column-mapping id, so "
                        "Iceberg readers cannot find them in the data files"
                    )
                    if not rewrite_unreadable:
                        raise ConfigError(
                            f"{reason}: convert with {REWRITE_OPTION} (files holding the column are "
                            "rewritten into the target with ids), or enable delta.enableIcebergCompatV2 "
                            "on the Delta table (it assigns nested ids) and rewrite its files"
                        )
                    unreadable.append(Unreadable(path[:1], reason))
        if isinstance(t, DeltaArray):
            eid = nested.get(f"{nested_key}.element") or fresh((*path, "element"))
            etype, emapped = convert_type(
                t.element, (*path, "element"), (*phys, "element"), owner, f"{nested_key}.element"
            )
            return it.ListType(eid, etype, not t.contains_null), [
                MappedField(("element",), eid, tuple(emapped))
            ]
        assert isinstance(t, DeltaMap)
        kid = nested.get(f"{nested_key}.key") or fresh((*path, "key"))
        vid = nested.get(f"{nested_key}.value") or fresh((*path, "value"))
        ktype, kmapped = convert_type(t.key, (*path, "key"), (*phys, "key"), owner, f"{nested_key}.key")
        vtype, vmapped = convert_type(
            t.value, (*path, "value"), (*phys, "value"), owner, f"{nested_key}.value"
        )
        return it.MapType(kid, ktype, vid, vtype, not t.value_contains_null), [
            MappedField(("key",), kid, tuple(kmapped)),
            MappedField(("value",), vid, tuple(vmapped)),
        ]

    def convert_fields(
        fields: tuple[DeltaField, ...], path: tuple[str, ...], phys: tuple[str, ...]
    ) -> tuple[list[it.NestedField], list[MappedField]]:
        out: list[it.NestedField] = []
        mapped: list[MappedField] = []
        # Ids of a struct's own fields first, so top-level columns get the lowest fresh ids.
        own = [(f.column_id if mapping.enabled and f.column_id else fresh((*path, f.name))) for f in fields]
        for f, fid in zip(fields, own, strict=True):
            physical = mapping.physical_name(f)
            fpath, fphys = (*path, f.name), (*phys, physical)
            unreadable.extend(check_type_changes(f, fpath, format_version, rewrite_unreadable))
            ids_by_path[fpath] = fid
            physical_by_path[fpath] = fphys
            ftype, children = convert_type(f.type, fpath, fphys, f, physical)
            doc = f.metadata.get("comment")
            out.append(
                it.NestedField(
                    fid,
                    f.name,
                    ftype,
                    # Iceberg's unknown is always optional (spec), whatever the Delta field says.
                    required=not f.nullable and ftype != it.UNKNOWN,
                    doc=None if doc is None else str(doc),
                )
            )
            # Files carry physical names (the logical ones without column mapping, and files
            # written before it was enabled in place, which made each name its physical name). Not
            # the logical name too: a file holding that name holds another column, such as one
            # dropped before this one was added under its name, which Delta reads as null.
            mapped.append(MappedField((physical,), fid, tuple(children)))
        return out, mapped

    fields, mapped = convert_fields(struct.fields, (), ())
    if mapping.enabled and previous is not None:
        _refuse_moved_ids(ids_by_path, physical_by_path, previous, previous_names)
    return MappedSchema(
        it.Schema(0, tuple(fields)),
        NameMapping(tuple(mapped)),
        ids_by_path,
        physical_by_path,
        tuple(unreadable),
    )


def _refuse_moved_ids(
    ids: Mapping[tuple[str, ...], int],
    physical: Mapping[tuple[str, ...], tuple[str, ...]],
    previous: it.Schema,
    previous_names: NameMapping | None,
) -> None:
    """Column mapping enabled on a table that had none gives its columns Delta's ids, which need
    not be the ones the target gave them by name (Delta numbers nested fields depth first). A
    column keeps its physical name for life (enabling in place makes each name its physical
    name), so a physical name path the target held under another id is the same column moved:
    under its new id the target's earlier metrics and partition fields would describe another
    column. A column added again after a drop has a physical name of its own."""
    # A target written before it kept a name mapping: its names as they were.
    by_name = ids_by_name_path(previous) if previous_names is None else {}
    moved = []
    for path, fid in ids.items():
        phys = physical.get(path)
        if phys is None:
            continue
        if previous_names is not None:
            before = previous_names.find(phys)
            old = before.field_id if before is not None else None
        else:
            old = by_name.get(phys)
        # An id the previous schema no longer held (a dropped column's, kept for its files) moves nothing.
        if old is not None and old != fid and previous.find_field(old) is not None:
            moved.append(f"{'.'.join(path)} {old} -> {fid}")
    if moved:
        raise UnsupportedFeatureError(
            "this Delta version enables column mapping and gives columns the target already holds "
            f"other field ids ({', '.join(moved[:5])}{', ...' if len(moved) > 5 else ''}); the "
            "target's metrics and partition fields would then describe the wrong columns: convert "
            "into a new target with --mode full --history latest"
        )


def _all_fields(struct: DeltaStruct) -> list[DeltaField]:
    out: list[DeltaField] = []
    stack: list[DeltaType] = [struct]
    while stack:
        t = stack.pop()
        if isinstance(t, DeltaStruct):
            out.extend(t.fields)
            stack.extend(f.type for f in t.fields)
        elif isinstance(t, DeltaArray):
            stack.append(t.element)
        elif isinstance(t, DeltaMap):
            stack.extend((t.key, t.value))
    return out


def partition_spec(mapped: MappedSchema, partition_columns: tuple[str, ...]) -> PartitionSpec:
    fields = []
    for i, name in enumerate(partition_columns):
        fid = mapped.ids_by_path.get((name,))
        if fid is None:
            match = next(
                (p for p in mapped.ids_by_path if len(p) == 1 and p[0].lower() == name.lower()), None
            )
            if match is None:
                raise UnsupportedFeatureError(f"partition column {name!r} is not a top-level column")
            fid = mapped.ids_by_path[match]
        fields.append(PartitionField(fid, PARTITION_DATA_ID_START + i, name, "identity"))
    return PartitionSpec(0, tuple(fields))


# (struct, mapping, partition columns) -> (partitionValues key, Delta type) per column.
_PartitionPlan = tuple[tuple[str, DeltaType], ...]
_PARTITION_PLANS: dict[
    tuple[int, int, tuple[str, ...]], tuple[DeltaStruct, ColumnMapping, _PartitionPlan]
] = {}


def partition_plan(
    struct: DeltaStruct, mapping: ColumnMapping, partition_columns: tuple[str, ...]
) -> _PartitionPlan:
    key = (id(struct), id(mapping), partition_columns)
    cached = _PARTITION_PLANS.get(key)
    if cached is not None and cached[0] is struct and cached[1] is mapping:
        return cached[2]
    physical = mapping.physical_partition_columns(struct, partition_columns)
    plan = []
    for name in partition_columns:
        field = struct.field(name)
        assert field is not None
        plan.append((physical[name], field.type))
    if len(_PARTITION_PLANS) > 64:
        _PARTITION_PLANS.clear()
    _PARTITION_PLANS[key] = (struct, mapping, tuple(plan))
    return tuple(plan)


def partition_tuple(
    add: AddFile,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    partition_columns: tuple[str, ...],
    zone: dt.tzinfo | None = None,
) -> tuple[Any, ...]:
    """``zone``: the writer's, for zone-less ``timestamp`` values (``values.parse_partition_value``)."""
    values = add.partition_values
    plan = partition_plan(struct, mapping, partition_columns)
    return tuple(parse_partition_value(t, values.get(key), zone=zone) for key, t in plan)


def zoneless_partition_columns(
    partition_values: pa.Array | pa.ChunkedArray,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    partition_columns: tuple[str, ...],
) -> tuple[str, ...]:
    """The ``timestamp`` partition columns (logical names) holding a value without a zone in
    ``partition_values`` (the live-files map column): read in the writer's zone, which the log
    does not record."""
    plan = partition_plan(struct, mapping, partition_columns)
    keys = set(zoneless_timestamp_columns(partition_values, plan))
    return tuple(name for name, (key, _) in zip(partition_columns, plan, strict=True) if key in keys)


_PACK_I32 = Struct("<i").pack
_PACK_I64 = Struct("<q").pack
_PACK_F64 = Struct("<d").pack
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)


_Encoder = Callable[[Any], bytes | None]


def _fast_encoder(delta_type: DeltaType, iceberg_type: it.IcebergType) -> _Encoder | None:
    """For the common column types, the bound bytes straight from the JSON value; ``None`` from the
    encoder sends the value down the general path (which owns every rule and error)."""
    if not isinstance(delta_type, DeltaPrimitive) or not isinstance(iceberg_type, it.PrimitiveType):
        return None
    kind = iceberg_type.name
    if delta_type.name in INTEGER_TYPES and kind in ("int", "long"):
        lo, hi = _I32 if kind == "int" else _I64
        pack = _PACK_I32 if kind == "int" else _PACK_I64

        def integer(raw: Any) -> bytes | None:
            return pack(raw) if type(raw) is int and lo <= raw <= hi else None

        return integer
    if delta_type.name == "double" and kind == "double":

        def double(raw: Any) -> bytes | None:
            return _PACK_F64(raw) if type(raw) is float and math.isfinite(raw) else None

        return double
    if delta_type.name == "string" and kind == "string":

        def string(raw: Any) -> bytes | None:
            # A value ending in U+FFFD may be a truncation marker: the general path decides.
            return raw.encode("utf-8") if type(raw) is str and not raw.endswith("\ufffd") else None

        return string
    return None


@dataclass(frozen=True)
class MetricColumn:
    field_id: int
    iceberg_type: it.IcebergType
    delta_type: DeltaType
    physical: tuple[str, ...]
    fast: _Encoder | None = None

    @property
    def floating(self) -> bool:
        t = self.iceberg_type
        return isinstance(t, it.PrimitiveType) and t.name in ("float", "double")


# (mapped, struct) -> the columns that get metrics; both kept so their ids stay unique.
_PLANS: dict[tuple[int, int], tuple[MappedSchema, DeltaStruct, tuple[MetricColumn, ...], bool]] = {}


def metric_plan(struct: DeltaStruct, mapped: MappedSchema) -> tuple[tuple[MetricColumn, ...], bool]:
    """The primitive columns that get metrics, and whether any is a decimal (exact parsing)."""
    key = (id(mapped), id(struct))
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is mapped and cached[1] is struct:
        return cached[2], cached[3]
    columns = []
    for path, fid in mapped.ids_by_path.items():
        field = mapped.schema.find_field(fid)
        if field is None or not it.is_primitive(field.type):
            continue
        delta_field = _delta_field(struct, path)
        if delta_field is None:
            continue
        columns.append(
            MetricColumn(
                fid,
                field.type,
                delta_field.type,
                mapped.physical_by_path[path],
                _fast_encoder(delta_field.type, field.type),
            )
        )
    plan = tuple(columns)
    decimals = any(isinstance(c.delta_type, DeltaDecimal) for c in plan)
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[key] = (mapped, struct, plan, decimals)
    return plan, decimals


def _lookup(stats: Any, phys: tuple[str, ...]) -> Any:
    node: Any = stats
    for part in phys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def metrics_from_stats(
    stats: FileStats | None, struct: DeltaStruct, mapped: MappedSchema, has_dv: bool
) -> dict[str, dict[int, Any]]:
    """Iceberg metric maps from Delta stats, keeping only bounds that stay safe."""
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    nulls: dict[int, int] = {}
    if stats is None:
        return {"lower": lower, "upper": upper, "nulls": nulls}
    plan, _ = metric_plan(struct, mapped)
    exact_nulls = not has_dv and stats.tight_bounds
    mins, maxes, null_counts = (
        m if isinstance(m, Mapping) else {} for m in (stats.min_values, stats.max_values, stats.null_count)
    )
    for c in plan:
        fid = c.field_id
        top = c.physical[0] if len(c.physical) == 1 else None
        raw = mins.get(top) if top is not None else _lookup(mins, c.physical)
        if raw is not None and (b := lower_bytes(c, raw)) is not None:
            lower[fid] = b
        raw = maxes.get(top) if top is not None else _lookup(maxes, c.physical)
        if raw is not None and (b := upper_bytes(c, raw)) is not None:
            upper[fid] = b
        nc = null_counts.get(top) if top is not None else _lookup(null_counts, c.physical)
        if type(nc) is int and (exact_nulls or nc == 0):
            nulls[fid] = nc
    return {"lower": lower, "upper": upper, "nulls": nulls}


def lower_bytes(c: MetricColumn, raw: Any) -> bytes | None:
    """A column's lower bound from its Delta min as written in the stats JSON, if it is safe."""
    b = c.fast(raw) if c.fast is not None else None
    if b is None:
        lo = stats_value(c.delta_type, raw)
        if lo is not None and isinstance(c.delta_type, DeltaPrimitive) and c.delta_type.name == "timestamp":
            lo = timestamp_lower_bound(lo, zoned=True)  # an offset cut to minutes: see the function
        if lo is not None:
            b = to_bytes(c.iceberg_type, lo)
    if b is not None and c.floating:
        return widen_zero(c.iceberg_type, b, lower=True)  # Spark's min cannot tell -0.0 from +0.0
    return b


def upper_bytes(c: MetricColumn, raw: Any) -> bytes | None:
    """A column's upper bound from its Delta max as written in the stats JSON, if it is safe."""
    b = c.fast(raw) if c.fast is not None else None
    if b is None:
        hi = stats_value(c.delta_type, raw)
        upper_value = _safe_upper(c.delta_type, hi) if hi is not None else None
        if upper_value is not None:
            b = to_bytes(c.iceberg_type, upper_value)
    if b is not None and c.floating:
        return widen_zero(c.iceberg_type, b, lower=False)
    return b


def _safe_upper(t: DeltaType, value: Any) -> Any | None:
    if isinstance(t, DeltaPrimitive) and t.name in ("timestamp", "timestamp_ntz"):
        # Delta writes maxima truncated to milliseconds (and some offsets cut to minutes).
        return timestamp_upper_bound(value, zoned=t.name == "timestamp")
    if (
        isinstance(t, DeltaPrimitive)
        and t.name == "string"
        and isinstance(value, str)
        and value.endswith("\ufffd")
    ):
        return None  # old writers' truncation marker is not an upper bound in UTF-8 order
    return value


def _delta_field(struct: DeltaStruct, path: tuple[str, ...]) -> DeltaField | None:
    node: DeltaType = struct
    found: DeltaField | None = None
    for part in path:
        if not isinstance(node, DeltaStruct):
            return None
        found = node.field(part)
        if found is None:
            return None
        node = found.type
    return found


class MissingRecordCount(ValueError):
    """The log has no record count for a file: the caller reads the Parquet footer and retries."""


def data_file(
    add: AddFile,
    *,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    mapped: MappedSchema,
    partition_columns: tuple[str, ...],
    record_count: int | None = None,
    spec_id: int = 0,
    zone: dt.tzinfo | None = None,
) -> DataFile:
    _, decimals = metric_plan(struct, mapped)
    stats = parse_stats(add.stats, exact_decimals=decimals)
    count = record_count if record_count is not None else (stats.num_records if stats else None)
    if count is None:
        raise MissingRecordCount(f"{add.absolute_path}: no numRecords in the log; read its footer first")
    m = metrics_from_stats(stats, struct, mapped, add.deletion_vector is not None)
    return DataFile(
        content=DATA,
        file_path=add.absolute_path,
        file_format="PARQUET",
        partition=partition_tuple(add, struct, mapping, partition_columns, zone),
        record_count=count,
        file_size_in_bytes=add.size,
        null_value_counts=m["nulls"] or None,
        lower_bounds=m["lower"] or None,
        upper_bounds=m["upper"] or None,
        spec_id=spec_id,
    )
