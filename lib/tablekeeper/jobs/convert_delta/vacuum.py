"""Converted history against Delta's VACUUM.

A target converted with ``--history all`` keeps a snapshot per Delta version, and those snapshots
reference the Delta table's files. Once Delta removes a file and the removal is older than
``delta.deletedFileRetentionDuration``, VACUUM may delete it, and every Iceberg snapshot that
still references it becomes unreadable (time travel to it fails). Each conversion run finds those
snapshots and expires them, metadata only: only their manifests and lists go, never a data file
(the files are Delta's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.values import DEFAULT_RETENTION, RETENTION_PROPERTY, interval_hours
from tablekeeper.files.engine import DRIVER_MAX_FILES
from tablekeeper.files.local import parallel_map
from tablekeeper.files.manifests import live_count, read
from tablekeeper.iceberg.manifest import read_manifest_list
from tablekeeper.iceberg.reachable import DATA_FILE, live_files
from tablekeeper.io import FileIO
from tablekeeper.jobs.convert_delta.rewrite import rewrites_home
from tablekeeper.jobs.convert_delta.versions import DELTA_VERSION_SUMMARY
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire

log = logging.getLogger(__name__)

# Snapshots older than any time: expire-snapshots then expires exactly the ids it is given.
_NOTHING_BY_AGE = "1970-01-01T00:00:00Z"


def broken_snapshots(
    table: LoadedTable,
    delta_version: int,
    delta: Callable[[Sequence[str]], DeltaSnapshot],
    now_ms: int,
    spark: Any = None,
) -> dict[int, str]:
    """Snapshots (other than the current one and those refs name) referencing a data file Delta
    no longer has live and whose removal VACUUM may act on, or that is already gone (a VACUUM run
    with a shorter retention than the table's): id -> one such file.

    ``delta(paths)`` gives the Delta state at ``delta_version`` holding at least those paths'
    files and tombstones: only the files older snapshots reference are asked about."""
    meta = table.metadata
    pinned = {ref.snapshot_id for ref in meta.refs.values()} | {meta.current_snapshot_id}
    others = [s for s in meta.snapshots if s.snapshot_id not in pinned and s.manifest_list]
    if not others:
        return {}
    lists = parallel_map(
        lambda s: read_manifest_list(read(s.manifest_list or ""), f"manifest list {s.manifest_list}"), others
    )
    # A manifest the current snapshot lists holds only files live at its Delta version: when
    # that is the version checked, none of its files is at risk, and it is not opened.
    current = meta.current_snapshot()
    current_manifests: dict[str, int] = {}
    if (
        current is not None
        and current.manifest_list
        and current.summary.get(DELTA_VERSION_SUMMARY) == str(delta_version)
    ):
        listed = read_manifest_list(read(current.manifest_list), f"manifest list {current.manifest_list}")
        current_manifests = {m.manifest_path: live_count(m) for m in listed}
    wanted = {
        m.manifest_path: live_count(m)
        for ms in lists
        for m in ms
        if m.has_live_files() and m.manifest_path not in current_manifests
    }
    files: dict[str, list[str]] = {}
    if spark is not None and current_manifests and sum(max(n, 1) for n in wanted.values()) > DRIVER_MAX_FILES:
        from tablekeeper.spark.reachability import unlisted_data_files

        # Old manifests hold the current files too (a delete rewrites every manifest it touches):
        # only their files the current snapshot lacks can be at risk, and only those come here.
        for path, manifest in unlisted_data_files(spark, wanted.items(), current_manifests.items()):
            files.setdefault(str(manifest), []).append(path)
    else:
        names = sorted(wanted)
        for path, found in zip(names, parallel_map(lambda p: live_files(read(p), p), names), strict=True):
            files[path] = [f.path for f in found if f.kind == DATA_FILE]
    # Rewrites of Delta files (--rewrite-unreadable-files) are the target's own: VACUUM never
    # deletes them, whatever becomes of the Delta file they were made from.
    home = rewrites_home(meta.location)
    candidates = sorted({p for paths in files.values() for p in paths if not p.startswith(home)})
    if not candidates:
        return {}
    state = delta(candidates)
    live = set(state.files.column("absolute_path").to_pylist())
    removed_at = dict(
        zip(
            state.tombstones.column("absolute_path").to_pylist(),
            state.tombstones.column("deletion_timestamp").to_pylist(),
            strict=True,
        )
    )
    retention = interval_hours(state.metadata.configuration.get(RETENTION_PROPERTY, DEFAULT_RETENTION))
    horizon = now_ms - int(retention * 3_600_000)
    # Removed within retention: VACUUM honouring the table's retention keeps them, one run with
    # a shorter RETAIN does not; only a file still there keeps its snapshots readable.
    recent = [
        p for p in candidates if p not in live and removed_at.get(p) is not None and removed_at[p] >= horizon
    ]
    data_io = FileIO.for_location(state.root)
    gone = {p for p, there in zip(recent, parallel_map(data_io.exists, recent), strict=True) if not there}

    def at_risk(path: str) -> bool:
        if path in live or path.startswith(home):
            return False
        when = removed_at.get(path)
        # No tombstone left: the removal is older than the retention still.
        return when is None or when < horizon or path in gone

    broken: dict[int, str] = {}
    for snapshot, manifests in zip(others, lists, strict=True):
        paths = (p for m in manifests for p in files.get(m.manifest_path, ()))
        hit = next((p for p in paths if at_risk(p)), None)
        if hit is not None:
            broken[snapshot.snapshot_id] = hit
    return broken


def vacuum_exposed(
    table: LoadedTable, delta_version: int, delta: DeltaSnapshot, now_ms: int
) -> list[int] | None:
    """Dry run: the snapshots a run would expire for VACUUM."""
    if len(table.metadata.snapshots) < 2:
        return None
    return sorted(broken_snapshots(table, delta_version, lambda _: delta, now_ms)) or None


def expire_broken(
    catalog: Catalog,
    target: str,
    delta_version: int,
    delta: Callable[[Sequence[str]], DeltaSnapshot],
    now_ms: int,
    spark: Any = None,
) -> dict[str, Any] | None:
    """Expire, metadata only, the target's snapshots VACUUM breaks; what it did, or None.
    ``delta(paths)`` gives the newest Delta state, at least those paths' files and tombstones
    (only loaded when there is history to check)."""
    table = catalog.require(target)
    if len(table.metadata.snapshots) < 2:
        return None
    broken = broken_snapshots(table, delta_version, delta, now_ms, spark)
    if not broken:
        return None
    log.info("%d snapshots of %s reference files Delta may vacuum: expiring them", len(broken), target)
    options = ExpireSnapshotsOptions(
        table=target, older_than=_NOTHING_BY_AGE, snapshot_ids=tuple(sorted(broken)), metadata_only=True
    )
    result = run_expire(options, catalog, target, spark)
    versions = {
        s.snapshot_id: s.summary.get(DELTA_VERSION_SUMMARY)
        for s in table.metadata.snapshots
        if s.snapshot_id in broken
    }
    return {
        "expired_snapshot_ids": sorted(broken),
        "delta_versions": sorted(int(v) for v in versions.values() if v is not None),
        "reason": (
            f"they reference files Delta removed past {RETENTION_PROPERTY}, which VACUUM may delete "
            f"(e.g. {next(iter(broken.values()))})"
        ),
        "deleted_manifest_files_count": result.metrics.get("deleted_manifest_files_count"),
        "deleted_manifest_lists_count": result.metrics.get("deleted_manifest_lists_count"),
    }
