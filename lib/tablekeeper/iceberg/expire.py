"""Which snapshots and refs expire, and the metadata without them (pure; the caller brings the clock).

The rules are Iceberg's (``RemoveSnapshots``), so a table expired here keeps exactly what Iceberg
would keep:

- ``main`` is never removed. Another ref is removed when the snapshot it points to is older than
  its ``max-ref-age-ms`` (the table's ``history.expire.max-ref-age-ms`` by default, unlimited if
  unset), or when that snapshot does not exist.
- Each retained branch keeps its ancestors while fewer than ``min-snapshots-to-keep`` are kept or
  while they are newer than its ``max-snapshot-age-ms``; the branch's own settings win over the
  job's ``retain_last`` / ``older_than``, which win over the table's ``history.expire.*``.
- A tag keeps its snapshot. A snapshot no ref reaches (a staged WAP snapshot, history cut off by a
  rollback) is kept while it is newer than the job's cut-off.
- Snapshots named explicitly expire too, unless a retained ref points at one: that is refused.

Removing snapshots also removes their statistics and partition-statistics entries, and trims the
snapshot log the way Java does (an entry for a removed snapshot drops the history before it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from tablekeeper.errors import ConfigError, SafetyRefusal
from tablekeeper.iceberg.metadata import MAIN_BRANCH, SnapshotLogEntry, SnapshotRef, TableMetadata, validate

MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_REF_AGE_MS = "history.expire.max-ref-age-ms"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1
UNLIMITED = 2**63 - 1


@dataclass(frozen=True)
class ExpirePolicy:
    """What the job was asked; ``None`` means "the table's property, else Iceberg's default"."""

    now_ms: int
    older_than_ms: int | None = None
    retain_last: int | None = None
    snapshot_ids: tuple[int, ...] = ()
    # Bounds from an earlier plan, for a commit retried on a newer base: nothing outside them
    # goes, so the files that plan found to delete cover everything the commit expires.
    expirable: frozenset[int] | None = None
    removable_refs: frozenset[str] | None = None

    def within(self, plan: ExpirePlan) -> ExpirePolicy:
        return replace(
            self,
            expirable=frozenset(plan.expired_snapshot_ids),
            removable_refs=frozenset(plan.removed_refs),
        )

    def __post_init__(self) -> None:
        if self.retain_last is not None and self.retain_last < 1:
            raise ConfigError(f"--retain-last must be at least 1, got {self.retain_last}")


@dataclass(frozen=True)
class ExpirePlan:
    expired_snapshot_ids: tuple[int, ...]
    removed_refs: tuple[str, ...]
    retained_snapshot_ids: tuple[int, ...]
    expire_older_than_ms: int
    min_snapshots_to_keep: int

    @property
    def changes_anything(self) -> bool:
        return bool(self.expired_snapshot_ids or self.removed_refs)


def _refs(meta: TableMetadata) -> dict[str, SnapshotRef]:
    refs = dict(meta.refs)
    if MAIN_BRANCH not in refs and meta.current_snapshot_id is not None:
        refs[MAIN_BRANCH] = SnapshotRef(meta.current_snapshot_id, "branch")  # v1 tables without refs
    return refs


def plan_expiry(meta: TableMetadata, policy: ExpirePolicy) -> ExpirePlan:
    now = policy.now_ms
    older_than = (
        policy.older_than_ms
        if policy.older_than_ms is not None
        else now - meta.property_int(MAX_SNAPSHOT_AGE_MS, DEFAULT_MAX_SNAPSHOT_AGE_MS)
    )
    min_keep = (
        policy.retain_last
        if policy.retain_last is not None
        else meta.property_int(MIN_SNAPSHOTS_TO_KEEP, DEFAULT_MIN_SNAPSHOTS_TO_KEEP)
    )
    max_ref_age = meta.property_int(MAX_REF_AGE_MS, UNLIMITED)
    refs = _refs(meta)
    retained_refs: dict[str, SnapshotRef] = {}
    for name, ref in refs.items():
        if name == MAIN_BRANCH:
            retained_refs[name] = ref
            continue
        snapshot = meta.snapshot(ref.snapshot_id)
        limit = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else max_ref_age
        bounded = policy.removable_refs is not None and name not in policy.removable_refs
        if snapshot is not None and (bounded or now - snapshot.timestamp_ms <= limit):
            retained_refs[name] = ref
    pinned: dict[int, list[str]] = {}
    for name, ref in retained_refs.items():
        pinned.setdefault(ref.snapshot_id, []).append(name)
    for sid in policy.snapshot_ids:
        if sid in pinned:
            raise SafetyRefusal(
                f"cannot expire snapshot {sid}: still referenced by {', '.join(sorted(pinned[sid]))}; "
                "remove or move the ref first"
            )
    keep: set[int] = set(pinned)
    reachable: set[int] = set()
    for ref in retained_refs.values():
        if not ref.is_branch:
            reachable.add(ref.snapshot_id)
            continue
        age = ref.max_snapshot_age_ms
        branch_older_than = now - age if age is not None else older_than
        branch_keep = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else min_keep
        kept = 0
        stopped = False
        for ancestor in meta.ancestors(ref.snapshot_id):
            reachable.add(ancestor.snapshot_id)
            if not stopped and (kept < branch_keep or ancestor.timestamp_ms >= branch_older_than):
                keep.add(ancestor.snapshot_id)
                kept += 1
            else:
                stopped = True
    for s in meta.snapshots:
        if s.snapshot_id not in reachable and s.timestamp_ms >= older_than:
            keep.add(s.snapshot_id)
    explicit = set(policy.snapshot_ids)
    expired = tuple(
        s.snapshot_id
        for s in meta.snapshots
        if (s.snapshot_id not in keep or s.snapshot_id in explicit)
        and (policy.expirable is None or s.snapshot_id in policy.expirable)
    )
    return ExpirePlan(
        expired_snapshot_ids=expired,
        removed_refs=tuple(sorted(set(meta.refs) - set(retained_refs))),
        retained_snapshot_ids=tuple(s.snapshot_id for s in meta.snapshots if s.snapshot_id not in expired),
        expire_older_than_ms=older_than,
        min_snapshots_to_keep=min_keep,
    )


def apply_expiry(
    meta: TableMetadata,
    plan: ExpirePlan,
    *,
    timestamp_ms: int,
    spec_ids_of: Callable[[Iterable[int]], set[int]] | None = None,
) -> TableMetadata:
    """``meta`` without the plan's snapshots and refs. With ``spec_ids_of`` (the spec ids the
    manifests of the given snapshots use), also without the partition specs and schemas no
    retained snapshot uses (Iceberg's ``clean_expired_metadata``)."""
    gone = set(plan.expired_snapshot_ids)
    if meta.current_snapshot_id in gone:
        raise SafetyRefusal(f"refusing to expire the current snapshot {meta.current_snapshot_id}")
    refs: Mapping[str, SnapshotRef] = {k: v for k, v in meta.refs.items() if k not in plan.removed_refs}
    snapshots = tuple(s for s in meta.snapshots if s.snapshot_id not in gone)
    log: list[SnapshotLogEntry] = list(meta.snapshot_log)
    if gone:
        kept = {s.snapshot_id for s in snapshots}
        log = []
        for entry in meta.snapshot_log:
            if entry.snapshot_id in kept:
                log.append(entry)
            else:
                log.clear()  # history before a missing entry would claim a wrong current snapshot
    updated = replace(
        meta,
        snapshots=snapshots,
        refs=refs,
        snapshot_log=tuple(log),
        statistics=tuple(s for s in meta.statistics if s.snapshot_id not in gone),
        partition_statistics=tuple(s for s in meta.partition_statistics if s.snapshot_id not in gone),
        last_updated_ms=max(timestamp_ms, meta.last_updated_ms),
    )
    if spec_ids_of is not None:
        retained = [s.snapshot_id for s in snapshots]
        specs = spec_ids_of(retained) | {meta.default_spec_id}
        schema_ids = {s.schema_id for s in snapshots}
        changes: dict[str, object] = {
            "partition_specs": tuple(p for p in meta.partition_specs if p.spec_id in specs)
        }
        # A snapshot without a schema id could use any schema: then every schema stays.
        if None not in schema_ids:
            keep = schema_ids | {meta.current_schema_id}
            changes["schemas"] = tuple(s for s in meta.schemas if s.schema_id in keep)
        updated = replace(updated, **changes)  # type: ignore[arg-type]
    validate(updated)
    return updated
