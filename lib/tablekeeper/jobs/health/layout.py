"""health's layout check of an Iceberg table: files a point lookup opens on the sort key, and what a
sort (or Z-order) rewrite would leave.

The columns are the ones ``--layout-columns`` names, else the table's sort order's; a table with
neither is not judged (nothing says which lookups matter). Bin-pack compaction is recommended for
file sizes; this recommends ``compact --strategy sort --rewrite-all`` when sizes are fine but every
lookup opens most of a partition's files (Iceberg #17489: such tables look healthy to size-based
checks forever).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tablekeeper.catalog.base import LoadedTable
from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.layout import (
    ColumnLayout,
    LayoutTally,
    PartitionLayout,
    placeable,
    sorted_lookup,
    summarize,
)
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.rewrite_plan import RewriteOptions
from tablekeeper.iceberg.types import Schema, walk_fields
from tablekeeper.io import FileIO
from tablekeeper.jobs.health.model import Recommendation, Thresholds
from tablekeeper.tables.iceberg import iter_entries

# Theta sketches (compute-stats, Iceberg's analyze) carry the column's distinct count.
_THETA = "apache-datasketches-theta-v1"
# Below this many manifests a table's bounds are read in this process (more cost more to start).
PROCESS_MIN_MANIFESTS = 64
# A sort rewrite is worth recommending only when it at least cuts lookups by this factor.
_MIN_GAIN = 1.5


def layout_columns(
    meta: TableMetadata, named: Sequence[str] | None, notes: list[str]
) -> tuple[str, list[tuple[str, int]]]:
    """(where the columns came from, [(name, field id)]) of the columns to judge."""
    schema = meta.schema()
    ids = {schema.column_name(f.id): f.id for f in walk_fields(schema.as_struct())}
    chosen: list[tuple[str, int]] = []
    if named:
        for name in named:
            fid = ids.get(name)
            if fid is None:
                notes.append(f"layout column {name!r} is not in the table's schema: not judged")
            elif not placeable(schema.find_type(fid) or schema.as_struct()):  # a struct: refused
                notes.append(f"layout column {name!r} has no ordered bounds: not judged")
            else:
                chosen.append((name, fid))
        return "columns", chosen
    order = meta.sort_order()
    for sort_field in order.fields:
        column = schema.column_name(sort_field.source_id)
        t = schema.find_type(sort_field.source_id)
        if column is not None and t is not None and placeable(t):
            chosen.append((column, sort_field.source_id))
    return "sort-order", chosen


def _bounds_slice(args: tuple[TableMetadata, Sequence[ManifestFile], Sequence[int]]) -> list[LayoutTally]:
    meta, manifests, ids = args
    schema: Schema = meta.schema()
    tallies = [LayoutTally(fid, schema.find_type(fid) or schema.as_struct()) for fid in ids]
    io = FileIO.for_location(manifests[0].manifest_path)
    for entry in iter_entries(io, meta, manifests):
        for tally in tallies:
            tally.add(entry)
    return tallies


def read_bounds(
    table: LoadedTable, manifests: Sequence[ManifestFile], ids: Sequence[int]
) -> list[LayoutTally]:
    """The columns' bounds from the live data files of ``manifests``: in this process for a few
    manifests, else one contiguous slice per core in its own process (decoding Avro holds the
    GIL), as health's size tally reads them."""
    live = [m for m in manifests if m.has_live_files()]
    meta = table.metadata
    workers = max(1, min(os.cpu_count() or 1, len(live) // PROCESS_MIN_MANIFESTS * 2 or 1))
    if workers == 1 or not live:
        if not live:
            schema = meta.schema()
            return [LayoutTally(fid, schema.find_type(fid) or schema.as_struct()) for fid in ids]
        return _bounds_slice((meta, live, ids))
    step = -(-len(live) // workers)
    slices = [live[i : i + step] for i in range(0, len(live), step)]
    # forkserver: a fork of a process that holds a JVM gateway or threads is not safe.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(len(slices), mp_context=context) as pool:
        parts = list(pool.map(_bounds_slice, [(meta, part, ids) for part in slices]))
    merged = parts[0]
    for part in parts[1:]:
        for mine, theirs in zip(merged, part, strict=True):
            mine.merge(theirs)
    return merged


def _distinct(meta: TableMetadata, field_id: int) -> int | None:
    """The column's distinct count from the newest theta sketch of it: the current snapshot's,
    else an older one's (a rewrite keeps the rows, so the count still holds; without it a table
    of few keys would be advised to sort again after every sort)."""
    times = {s.snapshot_id: s.timestamp_ms for s in meta.snapshots}
    current = meta.current_snapshot()
    best: tuple[tuple[bool, int], int] | None = None
    for stats in meta.statistics:
        for blob in stats.blob_metadata:
            if blob.type != _THETA or tuple(blob.fields) != (field_id,) or "ndv" not in blob.properties:
                continue
            try:
                ndv = int(blob.properties["ndv"])
            except ValueError:
                continue
            rank = (
                current is not None and stats.snapshot_id == current.snapshot_id,
                times.get(stats.snapshot_id, -1),
            )
            if best is None or rank > best[0]:
                best = (rank, ndv)
    return best[1] if best is not None else None


def check_layout(
    advice: list[Recommendation],
    metrics: dict[str, Any],
    table: LoadedTable,
    data_manifests: Sequence[ManifestFile],
    options: RewriteOptions,
    thresholds: Thresholds,
    named: Sequence[str] | None,
    notes: list[str],
) -> None:
    meta = table.metadata
    source, columns = layout_columns(meta, named, notes)
    if not columns:
        return
    tallies = read_bounds(table, data_manifests, [fid for _, fid in columns])
    names = {s.spec_id: tuple(f.name for f in s.fields) for s in meta.partition_specs}
    measured = measure_columns(columns, tallies)
    zorder = source == "columns" and len(columns) > 1
    lead, parts = measured[0]
    after, files_after = after_rewrite(
        parts,
        options.expected_output_files,
        options.max_file_size,
        _distinct(meta, lead.field_id),
        len(columns) if zorder else 1,
    )
    sort_order = None
    if source == "columns":
        joined = ", ".join(n for n, _ in columns)
        sort_order = f"zorder({joined})" if zorder else joined
    command = "compact --strategy sort --rewrite-all" + (
        f' --sort-order "{sort_order}"' if sort_order else ""
    )
    advise(
        advice,
        metrics,
        source,
        names,
        measured,
        (after, files_after),
        thresholds,
        strategy="zorder" if zorder else "sort",
        files_word="data files",
        how=f", whatever their sizes; a {'Z-order' if zorder else 'sort'} rewrite",
        effect={"strategy": "sort", "sort_order": sort_order, "rewrite_all": True, "command": command},
    )


def measure_columns(
    columns: Sequence[tuple[str, int]], tallies: Sequence[LayoutTally]
) -> list[tuple[ColumnLayout, list[PartitionLayout]]]:
    """Each column's layout over the table, and its partitions' (the first column leads)."""
    measured: list[tuple[ColumnLayout, list[PartitionLayout]]] = []
    for (name, fid), tally in zip(columns, tallies, strict=True):
        parts = tally.measure()
        unbounded = sum(p.unbounded for p in tally.partitions.values())
        measured.append((summarize(name, fid, parts, unbounded), parts))
    return measured


def advise(
    advice: list[Recommendation],
    metrics: dict[str, Any],
    source: str,
    names: Mapping[int, tuple[str, ...]],
    measured: Sequence[tuple[ColumnLayout, Sequence[PartitionLayout]]],
    predicted: tuple[float, int],
    thresholds: Thresholds,
    *,
    strategy: str,
    files_word: str,
    how: str,
    effect: Mapping[str, Any],
) -> None:
    """The layout metrics, and the compact advice when a lookup on the lead column opens too many
    files and the rewrite (``how``, with the options in ``effect``) would cut that enough; it
    replaces a bin-pack advice (a rewrite of every file fixes sizes too)."""
    lead, parts = measured[0]
    after, files_after = predicted
    metrics["layout"] = {
        "source": source,
        "columns": [c.to_json(names) for c, _ in measured],
        "sort_compaction": {
            "strategy": strategy,
            "column": lead.column,
            "files_per_lookup_after": round(after, 3),
            "data_files_after": files_after,
        },
    }
    limit = thresholds.compact_max_files_per_lookup
    before = lead.files_per_lookup
    if before < limit or after * _MIN_GAIN > before:
        return
    binpack = next((r for r in advice if r.job == "compact"), None)
    if binpack is not None:
        advice.remove(binpack)
    advice.append(
        Recommendation(
            "compact",
            f"a point lookup on {lead.column} opens {before:.1f} {files_word} of its partition on average "
            f"({lead.lookup_share:.0%} of them): the files' {lead.column} ranges overlap{how} leaves "
            f"about {after:.1f}"
            + (f" (and also does what bin-packing would: {binpack.reason})" if binpack else ""),
            f"compact.max-files-per-lookup={limit:g}",
            {
                **effect,
                "column": lead.column,
                "files_per_lookup_before": round(before, 3),
                "files_per_lookup_after": round(after, 3),
                "overlap_depth_before": round(lead.overlap_depth, 3),
                "data_files_before": lead.files,
                "data_files_after": files_after,
                "files_rewritten": lead.files,
                "bytes_rewritten": sum(p.data_bytes for p in parts),
            },
            files_removed=max(0, lead.files - files_after),
        )
    )


def after_rewrite(
    parts: Sequence[PartitionLayout],
    files_of: Callable[[int], int],
    max_file_bytes: int,
    distinct: int | None,
    columns: int,
) -> tuple[float, int]:
    """Files per lookup after rewriting every partition in key order (rows-weighted), and the
    files written; ``files_of`` says how many files a partition's bytes make."""
    total_rows = weighted = 0.0
    files = 0
    for p in parts:
        k = files_of(p.data_bytes) if p.files else 0
        files += k
        if not p.rows:
            continue
        keys = min(distinct, p.rows) if distinct else None
        weighted += p.rows * sorted_lookup(k, p.data_bytes, max_file_bytes, keys, columns)
        total_rows += p.rows
    return (weighted / total_rows if total_rows else 0.0), files


def parse_columns(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(c.strip() for c in text.split(",") if c.strip()) or None
