"""compact's row order and output spec: what the new files are sorted by, which spec they are
written in, what cannot be rewritten (refused before any work), and how well the result is
clustered."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tablekeeper.errors import ConfigError, NotOnThisSparkLine, UnsupportedFeatureError
from tablekeeper.iceberg.arrow_project import unsupported
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.conversions import from_bytes
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.sort_keys import ZOrder
from tablekeeper.iceberg.transforms import parse_transform
from tablekeeper.iceberg.types import (
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    PrimitiveType,
    StructType,
)
from tablekeeper.jobs.common.options import SortKey, parse_sort_order
from tablekeeper.jobs.compact.options import CompactOptions
from tablekeeper.spark.arrow_sort import Ordering, SortTerm


@dataclass(frozen=True)
class RowOrder:
    ordering: Ordering
    sort_order_id: int | None  # what the new files record
    global_sort: bool  # range-partitioned (sort strategy) or sorted within each task (bin-pack)
    spec: PartitionSpec  # the output spec

    @property
    def spark_sort(self) -> tuple[tuple[str, bool, bool], ...] | None:
        """The sort as Spark SQL columns, or None when it needs transforms or a Z-order."""
        if self.ordering.zorder is not None:
            return None
        if any(t.transform != "identity" for t in self.ordering.terms):
            return None
        return tuple((t.name, t.ascending, t.nulls_first) for t in self.ordering.terms)


def resolve(options: CompactOptions, meta: TableMetadata) -> RowOrder:
    spec = output_spec(options, meta)
    order = meta.sort_order()
    schema = meta.schema()
    table_keys = [
        SortKey(name, f.direction.lower() == "asc", f.null_order.lower() == "nulls-first", f.transform)
        for f in order.fields
        if (name := schema.column_name(f.source_id)) is not None
    ]
    complete = bool(table_keys) and len(table_keys) == len(order.fields)
    table_id = order.order_id if complete else 0
    if options.strategy == "binpack":
        if options.sort_order:
            raise ConfigError("--sort-order goes with --strategy sort: bin-pack keeps the table's own order")
        return RowOrder(_ordering(table_keys if complete else [], meta, options), table_id, False, spec)
    if options.sort_order:
        parsed = parse_sort_order(options.sort_order)
        if parsed.zorder:
            return RowOrder(_zordering(parsed.zorder, meta, options), 0, True, spec)
        keys = list(parsed.keys)
        return RowOrder(_ordering(keys, meta, options), table_id if keys == table_keys else 0, True, spec)
    if not complete:
        raise ConfigError(
            f'{options.table} has no sort order: give --sort-order "c1 ASC, bucket(16, c2)" '
            'or "zorder(c1, c2)"'
        )
    return RowOrder(_ordering(table_keys, meta, options), table_id, True, spec)


def output_spec(options: CompactOptions, meta: TableMetadata) -> PartitionSpec:
    wanted = meta.default_spec_id if options.output_spec_id is None else options.output_spec_id
    ids = sorted(s.spec_id for s in meta.partition_specs)
    if wanted not in ids:
        raise ConfigError(
            f"--output-spec-id {wanted} is not a partition spec of {options.table}: it has {ids}"
        )
    spec = meta.spec(wanted)
    for f in spec.fields:
        if f.transform == "void":
            continue
        if f.source_ids and len(f.source_ids) > 1:
            raise UnsupportedFeatureError(f"partition field {f.name} has a multi-argument transform")
    return spec


def coerce_into(
    meta: TableMetadata, spec: PartitionSpec
) -> Callable[[DataFile], tuple[int, tuple[object, ...]]]:
    """Iceberg's grouping for a rewrite into ``spec``: a file's partition as ``spec``'s fields
    (matched by partition field id; null where the file's spec lacks one), so files of older specs
    are packed with the files they will share partitions with."""
    ids = [f.field_id for f in spec.fields]

    def scope(f: DataFile) -> tuple[int, tuple[object, ...]]:
        if f.spec_id == spec.spec_id:
            return spec.spec_id, f.partition
        own = {pf.field_id: i for i, pf in enumerate(meta.spec(f.spec_id).fields)}
        return spec.spec_id, tuple(f.partition[own[i]] if i in own else None for i in ids)

    return scope


def check_plan(order: RowOrder, meta: TableMetadata, specs: Sequence[int]) -> None:
    """Refuse, before any file is written, a repartition into a spec whose fields tablekeeper
    cannot compute per row (``specs``: the specs of the files to rewrite)."""
    if all(s == order.spec.spec_id for s in specs):
        return  # every file keeps its partition: nothing is computed per row
    top = {c.id for c in meta.schema().fields}
    for f in order.spec.fields:
        if f.transform != "void" and f.source_id not in top:
            raise UnsupportedFeatureError(
                f"partition field {f.name} of spec {order.spec.spec_id} partitions by a nested column "
                f"(field id {f.source_id}): tablekeeper repartitions rows by top-level columns only; "
                "files of other specs cannot be rewritten into it"
            )


def _field(meta: TableMetadata, column: str, what: str) -> int:
    names = {f.name: f.id for f in meta.schema().fields}
    if column not in names:
        raise ConfigError(f"{what} column {column!r} is not a top-level column of {sorted(names)}")
    return names[column]


def _ordering(keys: Sequence[SortKey], meta: TableMetadata, options: CompactOptions) -> Ordering:
    terms = []
    for k in keys:
        fid = _field(meta, k.column, "--sort-order")
        t = meta.schema().find_type(fid)
        assert t is not None
        try:
            transform = parse_transform(k.transform)
            if not transform.can_transform(t):
                raise ValueError(f"{k.transform} does not apply to {t}")
        except (ValueError, UnsupportedFeatureError) as err:
            raise ConfigError(f"--sort-order {k.transform}({k.column}): {err}") from err
        terms.append(SortTerm(fid, k.column, k.transform, k.ascending, k.nulls_first))
    return Ordering(tuple(terms))


def _zordering(columns: Sequence[str], meta: TableMetadata, options: CompactOptions) -> Ordering:
    ids = tuple(_field(meta, c, "zorder") for c in columns)
    for c, fid in zip(columns, ids, strict=True):
        t = meta.schema().find_type(fid)
        if not isinstance(t, (PrimitiveType, DecimalType, FixedType)):
            raise ConfigError(f"zorder column {c!r} is a {t}: Z-order takes primitive columns")
    return Ordering(
        zorder=ZOrder(tuple(columns), options.var_length_contribution, options.max_output_size),
        zorder_ids=ids,
    )


def refuse_unwritable(options: CompactOptions, meta: TableMetadata, row_order: RowOrder) -> None:
    """Refuse, before any work, what neither writer can rewrite, naming the column and type."""
    schema = meta.schema()
    blocked = [(f, r) for f in schema.fields if (r := unsupported(f.type, f.name)) is not None]
    reason = blocked[0][1] if blocked else None
    spark_only = bool(blocked) and all(_only_variants(f.type) for f, _ in blocked)
    variants = [f.name for f, _ in blocked if _has_variant(f.type)]
    if variants:
        from tablekeeper.spark.compat import variant_type

        # Arrow cannot write a variant and Spark's writer needs a line that has the type: on one
        # without it the refusal names the line, whatever else the column holds.
        variant_type(f"{options.table}.{variants[0]}")
    if reason is not None and not spark_only:
        raise UnsupportedFeatureError(f"{options.table}: {reason}; nothing was rewritten")
    if options.writer == "spark" or spark_only:
        from tablekeeper.spark.rewrite import refuse_for_spark

        try:
            refuse_for_spark(meta)
        except UnsupportedFeatureError as err:
            if not spark_only or isinstance(err, NotOnThisSparkLine):
                raise
            raise UnsupportedFeatureError(
                f"{options.table}: {reason}, and Spark's writer cannot take the table either: {err.message}"
            ) from err
        if row_order.spark_sort is None:
            why = "tables with variant columns are rewritten by" if spark_only else "--writer spark is"
            raise ConfigError(
                f"{why} Spark's writer, which sorts by plain columns only: transforms and zorder(...) need "
                "--writer auto"
            )


def _only_variants(t: IcebergType) -> bool:
    """Whether every column of ``t`` Arrow cannot write is a variant (Spark's writer takes it)."""
    parts = _children(t)
    if parts is not None:
        return all(unsupported(c, "") is None or _only_variants(c) for c in parts)
    return isinstance(t, PrimitiveType) and t.name == "variant"


def _has_variant(t: IcebergType) -> bool:
    parts = _children(t)
    if parts is not None:
        return any(_has_variant(c) for c in parts)
    return isinstance(t, PrimitiveType) and t.name == "variant"


def _children(t: IcebergType) -> list[IcebergType] | None:
    """The types a nested type holds (a struct's fields, a list's element, a map's key and
    value); None for a primitive."""
    if isinstance(t, StructType):
        return [f.type for f in t.fields]
    if isinstance(t, ListType):
        return [t.element]
    if isinstance(t, MapType):
        return [t.key, t.value]
    return None


# ---------------------------------------------------------------------------------------------
# Clustering


def clustering(
    meta: TableMetadata, columns: Sequence[int], files: Sequence[DataFile]
) -> dict[str, float | None]:
    """Per column: the average fraction of ``files`` a range of 1% of the column's span
    overlaps (100 ranges across the span, by the files' bounds); None for a column whose bounds
    are not numbers, dates or times."""
    out: dict[str, float | None] = {}
    schema = meta.schema()
    for fid in columns:
        t = schema.find_type(fid)
        name = schema.column_name(fid) or str(fid)
        spans = []
        for f in files:
            lo, hi = (f.lower_bounds or {}).get(fid), (f.upper_bounds or {}).get(fid)
            if lo is None or hi is None or t is None:
                continue
            a, b = from_bytes(t, lo), from_bytes(t, hi)
            if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or isinstance(a, bool):
                break
            spans.append((float(a), float(b)))
        else:
            if spans and len(spans) == len(files):
                low, high = min(a for a, _ in spans), max(b for _, b in spans)
                width = (high - low) / 100 or 1.0
                hits = 0.0
                for i in range(100):
                    q0, q1 = low + i * width, low + (i + 1) * width
                    hits += sum(1 for a, b in spans if a <= q1 and b >= q0) / len(spans)
                out[name] = round(hits / 100, 4)
                continue
        out[name] = None
    return out
