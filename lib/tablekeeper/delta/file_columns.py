"""Iceberg data files from Delta adds as columns (``AddedFiles``), without a model per file.

The stats JSON of every add is parsed in one Arrow call against a schema built from the table's
columns, so a value of a type the column does not expect (a string where a number belongs, a
duplicated key, an integer beyond 64 bits) fails the whole batch instead of being read another
way. The bounds of the common types (integers, doubles, strings) are computed over the arrays;
the other types go through ``to_iceberg``'s per-value rules once per distinct value. Whatever
this cannot take the same way the per-file path would (a deletion vector, stats missing or
unreadable, no record count, a decimal column) returns ``None``: the caller then builds
``DataFile`` models through ``to_iceberg.data_file``, which owns every rule.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from tablekeeper.delta.schema import ColumnMapping, DeltaDecimal, DeltaPrimitive, DeltaStruct, DeltaType
from tablekeeper.delta.to_iceberg import (
    MappedSchema,
    MetricColumn,
    lower_bytes,
    metric_plan,
    partition_plan,
    upper_bytes,
)
from tablekeeper.delta.values import INTEGER_TYPES, parse_partition_value
from tablekeeper.iceberg import entry_columns as ec

log = logging.getLogger(__name__)

_JSON_TYPES: dict[str, pa.DataType] = {
    **{name: pa.int64() for name in INTEGER_TYPES},
    "double": pa.float64(),
    "float": pa.float64(),
    "string": pa.string(),
    "binary": pa.string(),
    "date": pa.string(),
    "timestamp": pa.string(),
    "timestamp_ntz": pa.string(),
    "boolean": pa.bool_(),
}
_INT_RANGES = {"int": (-(2**31), 2**31 - 1, "<i4"), "long": (-(2**63), 2**63 - 1, "<i8")}


class _Fallback(Exception):
    """These adds need the per-file path."""


def _json_type(t: DeltaType) -> pa.DataType:
    if isinstance(t, DeltaPrimitive) and t.name in _JSON_TYPES:
        return _JSON_TYPES[t.name]
    raise _Fallback(f"stats of a {t} column")


def _nested(paths: Sequence[tuple[tuple[str, ...], pa.DataType]]) -> pa.StructType:
    tree: dict[str, Any] = {}
    for path, leaf in paths:
        node = tree
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _Fallback("a stats path is both a column and a struct")
            node = child
        if path[-1] in node:
            raise _Fallback("two columns share a stats path")
        node[path[-1]] = leaf

    def build(node: dict[str, Any]) -> pa.StructType:
        return pa.struct([(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return build(tree)


def _stats_schema(plan: Sequence[MetricColumn]) -> pa.Schema:
    leaves = [(c.physical, _json_type(c.delta_type)) for c in plan]
    fields = [("numRecords", pa.int64()), ("tightBounds", pa.bool_())]
    if leaves:
        values = _nested(leaves)
        fields += [
            ("minValues", values),
            ("maxValues", values),
            ("nullCount", _nested([(p, pa.int64()) for p, _ in leaves])),
        ]
    return pa.schema(fields)


# One JSON object on one line, nothing before or after: Arrow's reader then gives one row per
# value. It also reads what orjson refuses (a byte-order mark) and crashes on a leading ``null``,
# and two objects on one line would shift every later file's stats: all of those hand back.
_ONE_OBJECT = r"^\{[^\n\r]*\}$"


def _parse(stats: pa.Array, schema: pa.Schema) -> pa.Table:
    stats = stats.cast(pa.large_string())
    if not pc.all(pc.match_substring_regex(stats, _ONE_OBJECT)).as_py():
        raise _Fallback("a stats value is not one JSON object on one line")
    newline, empty = pa.scalar("\n", pa.large_string()), pa.scalar("", pa.large_string())
    body = pc.binary_join_element_wise(stats, newline, empty, null_handling="skip")
    data = body.buffers()[2]
    offsets = np.frombuffer(body.buffers()[1], np.int64)[body.offset : body.offset + len(body) + 1]
    buf = data[int(offsets[0]) : int(offsets[-1])] if len(body) else pa.py_buffer(b"")
    try:
        table = pj.read_json(
            pa.BufferReader(buf),
            read_options=pj.ReadOptions(block_size=1 << 24),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise _Fallback(f"stats JSON: {err}") from err
    if table.num_rows != len(stats):
        raise _Fallback("a stats value spans lines")
    return table.combine_chunks()


def _leaf(parent: pa.Array, path: tuple[str, ...]) -> pa.Array:
    node = parent
    for part in path:
        # flatten() applies the parent's nulls to its children; .field() would not.
        node = node.flatten()[node.type.get_field_index(part)]
    return node


def _fixed(values: np.ndarray, valid: pa.Array, dtype: str) -> pa.Array:
    raw = np.ascontiguousarray(values.astype(dtype))
    width = raw.dtype.itemsize
    fixed = pa.Array.from_buffers(pa.binary(width), len(raw), [None, pa.py_buffer(raw.tobytes())])
    return pc.if_else(valid, fixed.cast(pa.binary()), pa.scalar(None, pa.binary()))


def _by_value(values: pa.Array, convert: Callable[[Any], bytes | None]) -> pa.Array:
    """Bounds of a type without a column rule: the per-value rule once per distinct value."""
    distinct = pc.unique(values.drop_null())
    out = pa.array([convert(v) for v in distinct.to_pylist()], pa.binary())
    return out.take(pc.index_in(values, value_set=distinct))


def _bounds(c: MetricColumn, values: pa.Array, lower: bool) -> pa.Array:
    kind = getattr(c.iceberg_type, "name", None)
    delta = c.delta_type.name if isinstance(c.delta_type, DeltaPrimitive) else None
    valid = pc.is_valid(values)
    if c.fast is not None and delta in INTEGER_TYPES and kind in _INT_RANGES:
        lo, hi, dtype = _INT_RANGES[kind]
        ints = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        if len(ints) and (ints.min() < lo or ints.max() > hi):
            raise _Fallback(f"a {kind} stat out of range")
        return _fixed(ints, valid, dtype)
    if c.fast is not None and delta == "double" and kind == "double":
        floats = np.asarray(values.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
        # Spark's min/max cannot tell -0.0 from +0.0: the bounds widen to take both.
        floats = np.where(floats == 0.0, -0.0 if lower else 0.0, floats)
        return _fixed(floats, pc.and_(valid, pa.array(np.isfinite(floats))), "<f8")
    if c.fast is not None and delta == "string" and kind == "string":
        binary = values.cast(pa.binary())
        if lower:
            return binary
        # An old writer's truncation marker: such a max is no upper bound in UTF-8 order.
        marked = pc.fill_null(pc.ends_with(values, "\ufffd"), False)
        return pc.if_else(marked, pa.scalar(None, pa.binary()), binary)
    return _by_value(
        values, (lambda raw: lower_bytes(c, raw)) if lower else (lambda raw: upper_bytes(c, raw))
    )


def _partitions(
    adds: pa.Table,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    partition_columns: tuple[str, ...],
    zone: dt.tzinfo | None,
) -> tuple[tuple[tuple[Any, ...], ...], np.ndarray]:
    n = adds.num_rows
    plan = partition_plan(struct, mapping, partition_columns)
    if not plan:
        return ((),), np.zeros(n, np.int64)
    has_values = "partition_values" in adds.column_names
    pv = adds.column("partition_values").combine_chunks() if has_values else None
    distinct_values: list[list[Any]] = []
    key = np.zeros(n, np.int64)
    for name, t in plan:
        values = pc.map_lookup(pv, pa.scalar(name), "last") if pv is not None else pa.nulls(n, pa.string())
        distinct = pc.unique(values)
        distinct_values.append([parse_partition_value(t, v, zone=zone) for v in distinct.to_pylist()])
        index = np.asarray(pc.index_in(values, value_set=distinct).to_numpy(zero_copy_only=False), np.int64)
        if len(distinct) and key.max(initial=0) > (2**62) // len(distinct):
            raise _Fallback("too many partitions to key")
        key = key * len(distinct) + index
    keys, inverse = np.unique(key, return_inverse=True)
    tuples = []
    for combined in keys.tolist():
        parts, rest = [], combined
        for values in reversed(distinct_values):
            rest, i = divmod(rest, len(values))
            parts.append(values[i])
        tuples.append(tuple(reversed(parts)))
    return tuple(tuples), inverse.astype(np.int64)


def added_files(
    adds: pa.Table,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    mapped: MappedSchema,
    partition_columns: tuple[str, ...],
    zone: dt.tzinfo | None = None,
) -> ec.AddedFiles | None:
    """The adds (live-file rows of a Delta state) as Iceberg data files, or ``None`` when one of
    them needs the per-file path. ``zone``: the writer's, for zone-less timestamp partition values."""
    try:
        return _added_files(adds, struct, mapping, mapped, partition_columns, zone)
    except _Fallback as why:
        log.debug("data files built one at a time: %s", why)
    except pa.ArrowException as err:
        # Column types this module did not expect (e.g. Spark's large strings): the per-file path.
        log.debug("data files built one at a time: %s", err)
    return None


def _added_files(
    adds: pa.Table,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    mapped: MappedSchema,
    partition_columns: tuple[str, ...],
    zone: dt.tzinfo | None,
) -> ec.AddedFiles:
    n = adds.num_rows
    if n == 0:
        raise _Fallback("no files")
    if "dv" in adds.column_names and adds.column("dv").null_count != n:
        raise _Fallback("deletion vectors")
    if "stats" not in adds.column_names:
        raise _Fallback("no stats column")
    stats = adds.column("stats").combine_chunks()
    if stats.null_count:
        raise _Fallback("files without stats")
    plan, decimals = metric_plan(struct, mapped)
    if decimals or any(isinstance(c.delta_type, DeltaDecimal) for c in plan):
        raise _Fallback("decimal stats are parsed exactly")
    parsed = _parse(stats, _stats_schema(plan))
    records = parsed.column("numRecords").combine_chunks()
    if records.null_count or (pc.min(records).as_py() or 0) < 0:
        raise _Fallback("files without a record count")
    tight = pc.fill_null(parsed.column("tightBounds").combine_chunks(), True)
    lower, upper, nulls = [], [], []
    if plan:
        mins, maxes, counts = (
            parsed.column(k).combine_chunks() for k in ("minValues", "maxValues", "nullCount")
        )
        for c in plan:
            lower.append(ec.MetricColumn(c.field_id, _bounds(c, _leaf(mins, c.physical), lower=True)))
            upper.append(ec.MetricColumn(c.field_id, _bounds(c, _leaf(maxes, c.physical), lower=False)))
            nc = _leaf(counts, c.physical)
            # Without tight bounds Delta's null counts may be low: only a zero stays exact.
            keep = pc.fill_null(pc.and_(pc.is_valid(nc), pc.or_(tight, pc.equal(nc, 0))), False)
            nulls.append(ec.MetricColumn(c.field_id, pc.if_else(keep, nc, pa.scalar(None, pa.int64()))))
    partitions, index = _partitions(adds, struct, mapping, partition_columns, zone)

    def present(cols: list[ec.MetricColumn]) -> tuple[ec.MetricColumn, ...]:
        return tuple(c for c in cols if c.values.null_count < n)

    return ec.AddedFiles(
        file_path=adds.column("absolute_path").combine_chunks(),
        record_count=records,
        file_size=adds.column("size").combine_chunks().cast(pa.int64()),
        partitions=partitions,
        partition_index=index,
        null_value_counts=present(nulls),
        lower_bounds=present(lower),
        upper_bounds=present(upper),
    )
