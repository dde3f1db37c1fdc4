"""health of one Delta table, from its log replayed through the last checkpoint.

The estimates follow what delta-spark does when tablekeeper runs it: ``compact`` is OPTIMIZE
(files under its minimum size, packed per partition in size order into bins of its maximum size;
a bin of one file is left alone), ``remove-orphans`` is VACUUM (files removed longer ago than
``delta.deletedFileRetentionDuration``), ``expire-snapshots`` is a checkpoint and log cleanup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.values import (
    DEFAULT_RETENTION,
    OPTIMIZE_MAX_FILE_SIZE,
    OPTIMIZE_MIN_FILE_SIZE,
    RETENTION_PROPERTY,
    interval_hours,
)
from tablekeeper.iceberg.rewrite_plan import pack
from tablekeeper.io import FileIO
from tablekeeper.jobs.common.result import iso_ms
from tablekeeper.jobs.health.delta_layout import check_delta_layout
from tablekeeper.jobs.health.model import Recommendation, TableHealth, Thresholds
from tablekeeper.tables.delta import Replay, load_snapshot

# Above this many removed files past retention, one listing of the table beats a look at each.
EXISTS_CHECKS = 2_000
EXISTS_THREADS = 8
_BOUNDS = (1 << 20, 16 << 20, 128 << 20, 512 << 20, OPTIMIZE_MIN_FILE_SIZE)


def _partition(value: object) -> tuple[tuple[str, str | None], ...]:
    # pyarrow gives a map column as a list of (key, value) pairs
    pairs = value.items() if isinstance(value, dict) else (value or [])
    return tuple(sorted((str(k), None if v is None else str(v)) for k, v in pairs))  # type: ignore[attr-defined]


def _bins(files: pa.Table) -> tuple[int, int, int, int]:
    """(files rewritten, their bytes, bins written, partitions) as OPTIMIZE packs them."""
    by_part: dict[object, list[int]] = {}
    for size, part in zip(
        files.column("size").to_pylist(), files.column("partition_values").to_pylist(), strict=True
    ):
        if size is not None and size < OPTIMIZE_MIN_FILE_SIZE:
            by_part.setdefault(_partition(part), []).append(int(size))
    rewritten = size = bins = parts = 0
    for sizes in by_part.values():
        kept = [b for b in pack(sorted(sizes), OPTIMIZE_MAX_FILE_SIZE, int) if len(b) > 1]
        if kept:
            parts += 1
        for b in kept:
            rewritten += len(b)
            size += sum(b)
            bins += 1
    return rewritten, size, bins, parts


def _histogram(sizes: list[int]) -> list[dict[str, int | None]]:
    counts = [[0, 0] for _ in range(len(_BOUNDS) + 1)]
    for s in sizes:
        i = next((i for i, b in enumerate(_BOUNDS) if s < b), len(_BOUNDS))
        counts[i][0] += 1
        counts[i][1] += s
    rows: list[dict[str, int | None]] = []
    low = 0
    for i, (n, b) in enumerate(counts):
        high = _BOUNDS[i] if i < len(_BOUNDS) else None
        rows.append({"from_bytes": low, "below_bytes": high, "files": n, "bytes": b})
        low = high or low
    return rows


def _still_there(root: str, candidates: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The removed files that still exist: one listing of the table for many, a look each for
    a few (a tombstone's path is all the log says; VACUUM decides by what is there)."""
    if not candidates:
        return []
    io = FileIO.for_location(root)
    if len(candidates) > EXISTS_CHECKS:
        present = {i.location for i in io.list(root)}
        return [c for c in candidates if c[0] in present]
    with ThreadPoolExecutor(EXISTS_THREADS) as pool:
        found = list(pool.map(lambda c: io.exists(c[0]), candidates))
    return [c for c, there in zip(candidates, found, strict=True) if there]


def _records(files: pa.Table) -> int | None:
    """Rows the live files hold, from ``add.stats`` or, where a checkpoint wrote only the typed
    form, ``stats_parsed``; None when a file has neither (unknown, never a guess)."""
    stats = files.column("stats").to_pylist()
    parsed: list[Any] = (
        files.column("stats_parsed").to_pylist() if "stats_parsed" in files.column_names else []
    )
    total = 0
    for i, text in enumerate(stats):
        count = _json_records(text) if text else None
        if count is None and i < len(parsed) and isinstance(parsed[i], dict):
            typed = parsed[i].get("numRecords")
            count = typed if isinstance(typed, int) and typed >= 0 else None
        if count is None:
            return None
        total += count
    return total


def _json_records(text: str) -> int | None:
    try:
        value = json.loads(text)["numRecords"]
    except (ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def delta_health(
    root: str,
    base: Thresholds,
    cli: Mapping[str, str],
    *,
    now_ms: int,
    replay: Replay | None = None,
    layout_columns: Sequence[str] | None = None,
) -> TableHealth:
    snapshot = load_snapshot(root, replay=replay)
    configuration = snapshot.metadata.configuration
    thresholds = base.for_table(configuration, cli)
    return _health(root, snapshot, thresholds, now_ms, layout_columns)


def _health(
    root: str, snapshot: DeltaSnapshot, th: Thresholds, now_ms: int, layout: Sequence[str] | None = None
) -> TableHealth:
    files = snapshot.files
    sizes = [int(s or 0) for s in files.column("size").to_pylist()]
    dvs = files.column("dv").to_pylist()
    with_dv = [d for d in dvs if d]
    records = _records(files)
    dv_rows = sum(int(d.get("cardinality") or 0) for d in with_dv)
    retention = snapshot.metadata.configuration.get(RETENTION_PROPERTY, DEFAULT_RETENTION)
    cutoff = now_ms - int(interval_hours(retention) * 3_600_000)
    stones = snapshot.tombstones
    stamps = stones.column("deletion_timestamp").to_pylist()
    stone_sizes = stones.column("size").to_pylist()
    live = set(files.column("absolute_path").to_pylist())
    # A remove whose path is still live only swapped its deletion vector; a removed file VACUUM
    # already deleted stays in the log until a checkpoint drops it: neither is VACUUM's to delete.
    # A remove without deletionTimestamp counts as removed at 0, as delta-spark's VACUUM reads it
    # (RemoveFile.delTimestamp): always past retention.
    past = [
        (p, int(s or 0))
        for p, t, s in zip(stones.column("absolute_path").to_pylist(), stamps, stone_sizes, strict=True)
        if (t or 0) < cutoff and p not in live
    ]
    expired = _still_there(snapshot.root, past)
    expired_bytes = sum(size for _, size in expired)
    since_checkpoint = snapshot.version - (
        snapshot.checkpoint_version if snapshot.checkpoint_version is not None else -1
    )
    rewritten, rewritten_bytes, bins, parts = _bins(files)
    metrics: dict[str, Any] = {
        "version": snapshot.version,
        "data_files": len(sizes),
        "data_bytes": sum(sizes),
        "data_records": records,
        "small_file_size": OPTIMIZE_MIN_FILE_SIZE,
        "small_files": sum(1 for s in sizes if s < OPTIMIZE_MIN_FILE_SIZE),
        "size_histogram": _histogram(sizes),
        "files_with_deletion_vectors": len(with_dv),
        "deletion_vector_rows": dv_rows,
        "deleted_rows_share": round(dv_rows / records, 4) if records else None,
        "tombstones": stones.num_rows,
        "tombstone_bytes": sum(int(s or 0) for s in stone_sizes),
        "tombstones_past_retention": len(expired),
        "tombstone_bytes_past_retention": expired_bytes,
        "deleted_file_retention": retention,
        "commits_since_checkpoint": since_checkpoint,
        "checkpoint_version": snapshot.checkpoint_version,
        "last_commit_at": iso_ms(snapshot.timestamp_ms) if snapshot.timestamp_ms else None,
    }
    advice: list[Recommendation] = []
    if rewritten >= max(2, th.compact_min_files):
        after = len(sizes) - rewritten + bins
        advice.append(
            Recommendation(
                "compact",
                f"{rewritten} of {len(sizes)} files are under OPTIMIZE's "
                f"{OPTIMIZE_MIN_FILE_SIZE}-byte minimum in {parts} partitions",
                f"compact.min-files={th.compact_min_files}",
                {
                    "data_files_before": len(sizes),
                    "data_files_after": after,
                    "files_rewritten": rewritten,
                    "bytes_rewritten": rewritten_bytes,
                },
                files_removed=len(sizes) - after,
            )
        )
    if len(expired) >= max(1, th.remove_orphans_min_files):
        advice.append(
            Recommendation(
                "remove-orphans",
                f"{len(expired)} removed files are past {RETENTION_PROPERTY} ({retention}): "
                "VACUUM deletes them",
                f"remove-orphans.min-files={th.remove_orphans_min_files}",
                {"files_deleted": len(expired), "bytes_freed": expired_bytes},
                bytes_freed=expired_bytes,
                files_removed=len(expired),
            )
        )
    notes: list[str] = []
    check_delta_layout(advice, metrics, snapshot, th, layout, notes)
    if notes:
        metrics["notes"] = notes
    if since_checkpoint >= max(1, th.delta_max_commits_since_checkpoint):
        advice.append(
            Recommendation(
                "expire-snapshots",
                f"{since_checkpoint} commits since the last checkpoint: readers replay them all",
                f"delta.max-commits-since-checkpoint={th.delta_max_commits_since_checkpoint}",
                {"commits_since_checkpoint_before": since_checkpoint, "commits_since_checkpoint_after": 0},
            )
        )
    return TableHealth(
        root, "delta", metrics, tuple(advice), thresholds=th.as_keys(snapshot.metadata.configuration)
    )
