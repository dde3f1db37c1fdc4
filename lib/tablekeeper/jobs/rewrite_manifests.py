"""rewrite-manifests: regroup a table's manifests by partition into target-size manifests.

Iceberg's ``rewrite_manifests`` semantics: the data manifests of one spec (default: the current
one), and separately its delete manifests, are read; their live entries, ordered by the partition
tuple (or ``--sort-by`` partition fields first), become ``ceil(bytes / target)`` manifests of
``commit.manifest.target-size-bytes`` (8 MB by default), committed as one ``replace`` snapshot.

Unlike Iceberg 1.11's action, every entry keeps all it had: its snapshot id, data and file
sequence numbers and, on v3, its ``first_row_id``, written explicitly as the spec requires for
EXISTING entries. So ``_row_id`` and ``_last_updated_sequence_number`` of every row are unchanged.

Large tables are rewritten on the executors (entries read, sorted and written there; the driver
writes only the manifest list), small ones in this process. Known commit failures delete the new
manifests; an unknown commit state deletes nothing. A concurrent commit that replaced one of the
manifests makes the job plan again; manifests committed meanwhile (appends) are kept.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.commit.service import plan_again, staging
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import (
    ConfigError,
    CorruptMetadataError,
    ManifestsChanged,
    UnsupportedFeatureError,
)
from tablekeeper.files.containment import require_home
from tablekeeper.files.engine import DRIVER_MAX_FILES
from tablekeeper.files.journal import Staged
from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.manifest import write_encoded_manifest
from tablekeeper.iceberg.manifest_rewrite import (
    CONTENT_NAMES,
    DEFAULT_TARGET_MANIFEST_SIZE,
    ContentRewrite,
    ManifestRewritePlan,
    new_manifest_path,
    partition_sort_key,
    plan_manifest_rewrite,
    split_evenly,
)
from tablekeeper.iceberg.manifest_splice import existing_entries
from tablekeeper.iceberg.metadata import MAIN_BRANCH, TableMetadata
from tablekeeper.iceberg.transforms import UnknownTransform, parse_transform
from tablekeeper.iceberg.types import UNKNOWN
from tablekeeper.iceberg.updates import new_snapshot_id
from tablekeeper.jobs.common.context import (
    JobContext,
    add_engine_argument,
    add_run_arguments,
    add_table_arguments,
    options_from_args,
)
from tablekeeper.jobs.common.engines import SparkSource, check_engine, spark_session
from tablekeeper.jobs.common.options import parse_size
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.tables.iceberg import load_manifests, read_manifest_bytes, with_counts

log = logging.getLogger(__name__)

JOB = "rewrite-manifests"
TARGET_SIZE_PROPERTY = "commit.manifest.target-size-bytes"
# A concurrent commit that replaced a planned manifest makes the job plan again, this often.
MAX_PLANS = 4


@dataclass(frozen=True)
class RewriteManifestsOptions:
    table: str
    spec_id: int | None = None
    sort_by: tuple[str, ...] = ()
    target_manifest_size: str | None = None
    rewrite_all: bool = False
    branch: str = MAIN_BRANCH
    engine: str = "auto"
    dry_run: bool = False
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RewriteManifestsOptions:
        sort_by = tuple(x for x in (args.sort_by or "").replace(" ", "").split(",") if x)
        return options_from_args(cls, args, sort_by=sort_by)


def _target_size(options: RewriteManifestsOptions, meta: TableMetadata) -> int:
    if options.target_manifest_size is not None:
        given = parse_size(options.target_manifest_size, "--target-manifest-size")
        if given < 1:
            raise ConfigError(f"--target-manifest-size {options.target_manifest_size} must be positive")
        return given
    try:
        size = meta.property_int(TARGET_SIZE_PROPERTY, DEFAULT_TARGET_MANIFEST_SIZE)
    except CorruptMetadataError:
        size = 0
    if size < 1:
        raw = meta.properties.get(TARGET_SIZE_PROPERTY)
        raise ConfigError(
            f"table property {TARGET_SIZE_PROPERTY}={raw!r} is not a positive size in bytes: "
            "fix the property, or pass --target-manifest-size"
        )
    return size


def plan_rewrite(
    options: RewriteManifestsOptions, table: LoadedTable, identifier: str
) -> tuple[ManifestRewritePlan, list[ManifestFile]]:
    """The plan on the table as it is, and the branch's manifests it was made from."""
    meta = table.metadata
    spec_id = meta.default_spec_id if options.spec_id is None else options.spec_id
    if spec_id not in {s.spec_id for s in meta.partition_specs}:
        known = ", ".join(str(s.spec_id) for s in meta.partition_specs)
        raise ConfigError(
            f"--spec-id {spec_id}: {identifier} has no such partition spec (its specs: {known})"
        )
    ref = meta.refs.get(options.branch)
    if options.branch != MAIN_BRANCH and (ref is None or not ref.is_branch):
        raise ConfigError(
            f"--branch {options.branch!r} is not a branch of {identifier}: use one of {sorted(meta.refs)}"
        )
    spec = meta.spec(spec_id)
    dropped = [
        pf.name
        for pf, f in zip(spec.fields, spec.partition_type(meta.schema()).fields, strict=True)
        if f.type == UNKNOWN
    ]
    if dropped:
        raise UnsupportedFeatureError(
            f"spec {spec_id} of {identifier} partitions by a dropped column (field {dropped[0]}): its "
            "manifests cannot be rewritten with their partition values; rewrite the current spec's"
        )
    unknown = [
        pf.transform for pf in spec.fields if isinstance(parse_transform(pf.transform), UnknownTransform)
    ]
    if unknown:
        # Read as strings, their values could not be written back in the writer's own type.
        raise UnsupportedFeatureError(
            f"spec {spec_id} of {identifier} uses partition transform {unknown[0]!r}, which tablekeeper "
            "reads but cannot write: rewrite its manifests with an engine that knows the transform"
        )
    # A v1 list may leave the counts out: the manifests then say them themselves.
    manifests = with_counts(table.io, meta, load_manifests(table.io, meta.ref_snapshot(options.branch)))
    plan = plan_manifest_rewrite(
        manifests,
        spec=spec,
        sort_by=options.sort_by,
        target_size=_target_size(options, meta),
        rewrite_all=options.rewrite_all,
    )
    return plan, manifests


def _on_driver(
    table: LoadedTable, group: ContentRewrite, plan: ManifestRewritePlan, snapshot_id: int, prefix: str
) -> list[ManifestFile]:
    meta = table.metadata
    spec = meta.spec(plan.spec_id)
    keyed = []
    for m in group.manifests:
        data = read_manifest_bytes(table.io, m)
        for e in existing_entries(
            data, m, format_version=meta.format_version, spec=spec, schema=meta.schema()
        ):
            keyed.append(((partition_sort_key(e.partition, plan.sort_positions), e.path), e))
    keyed.sort(key=lambda kv: kv[0])
    out = []
    for index, run in enumerate(split_evenly(keyed, group.target_count)):
        path = new_manifest_path(meta.location, prefix, index)
        data, manifest = write_encoded_manifest(
            path,
            (e for _, e in run),
            format_version=meta.format_version,
            spec=spec,
            schema=meta.schema(),
            snapshot_id=snapshot_id,
            content=group.content,
        )
        table.io.create_if_absent(path, data)
        out.append(manifest)
    return out


def _use_spark(options: RewriteManifestsOptions, plan: ManifestRewritePlan, source: SparkSource) -> bool:
    check_engine(options.engine)
    if options.engine != "auto":
        return options.engine == "spark"
    entries = sum(g.live_entries for g in plan.groups)
    return entries > DRIVER_MAX_FILES and source is not None


def _write(
    table: LoadedTable,
    plan: ManifestRewritePlan,
    snapshot_id: int,
    prefix: str,
    spark: Any,
) -> list[ManifestFile]:
    meta = table.metadata
    written: list[ManifestFile] = []
    try:
        for group in plan.groups:
            if spark is None:
                written += _on_driver(table, group, plan, snapshot_id, prefix)
                continue
            from tablekeeper.spark.manifest_rewrite import rewrite_on_executors

            written += rewrite_on_executors(
                spark,
                group.manifests,
                target_count=group.target_count,
                content=group.content,
                table_location=meta.location,
                format_version=meta.format_version,
                spec=meta.spec(plan.spec_id),
                schema=meta.schema(),
                positions=plan.sort_positions,
                snapshot_id=snapshot_id,
                name_prefix=prefix,
            )
    except BaseException:
        # Nothing references them yet. (An executor's manifests of a failed job are unknown
        # here; they carry the run's prefix, and remove-orphans collects them.)
        table.io.delete_many([m.manifest_path for m in written])
        raise
    return written


def _check_counts(plan: ManifestRewritePlan, written: Sequence[ManifestFile]) -> None:
    """The new manifests hold exactly the live entries and rows of those they replace."""
    for group in plan.groups:
        mine = [m for m in written if m.content == group.content]
        want_files = group.live_entries
        want_rows = sum((m.added_rows_count or 0) + (m.existing_rows_count or 0) for m in group.manifests)
        got_files = sum(m.existing_files_count or 0 for m in mine)
        got_rows = sum(m.existing_rows_count or 0 for m in mine)
        if (got_files, got_rows) != (want_files, want_rows):
            raise CorruptMetadataError(
                f"the rewritten {CONTENT_NAMES[group.content]} manifests hold {got_files} files and "
                f"{got_rows} rows, but the manifest list counts {want_files} and {want_rows}: a "
                "manifest disagrees with its list entry; nothing was committed"
            )


def _plan_metrics(plan: ManifestRewritePlan, manifests: Sequence[ManifestFile]) -> dict[str, Any]:
    return {
        "spec_id": plan.spec_id,
        "target_manifest_size": plan.target_size,
        "manifests_before": len(manifests),
        "rewritten_manifests_count": len(plan.rewritten),
        "rewritten_bytes_count": sum(g.bytes for g in plan.groups),
        "entries_count": sum(g.live_entries for g in plan.groups),
        "groups": [
            {
                "content": CONTENT_NAMES[g.content],
                "manifests": len(g.manifests),
                "bytes": g.bytes,
                "entries": g.live_entries,
                "target_count": g.target_count,
            }
            for g in plan.groups
        ],
        "skipped": [{"content": c, "reason": r} for c, r in plan.skipped],
    }


def run_rewrite_manifests(
    options: RewriteManifestsOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSource = None,
) -> JobResult:
    clock = JobClock()
    return plan_again(
        lambda plans: _run_once(options, catalog, identifier, spark, clock, plans),
        MAX_PLANS,
        ManifestsChanged,
    )


def _run_once(
    options: RewriteManifestsOptions,
    catalog: Catalog,
    identifier: str,
    spark: SparkSource,
    clock: JobClock,
    plans: int,
) -> JobResult:
    table = catalog.require(identifier)
    require_home(table, identifier, JOB)  # a copied table would write into the original
    plan, manifests = plan_rewrite(options, table, identifier)
    metrics = _plan_metrics(plan, manifests)
    if plan.is_empty:
        metrics |= {"added_manifests_count": 0, "note": "nothing to do: no manifests would get fewer"}
        return clock.result(JOB, identifier, dry_run=options.dry_run, metrics=metrics)
    if options.dry_run:
        metrics["added_manifests_count"] = sum(g.target_count for g in plan.groups)
        return clock.result(JOB, identifier, dry_run=True, metrics=metrics)
    faults.kill_point("plan.done")
    use_spark = _use_spark(options, plan, spark)
    session = spark_session(spark, JOB) if use_spark else None
    location = table.metadata.location
    # The new manifests, list and metadata carry the run's token: a run killed before its commit
    # leaves them to the next run, which removes what the table does not reference.
    with staging(
        catalog,
        identifier,
        job=JOB,
        io=table.io,
        location=location,
        base_metadata=table.metadata_location,
        staged=lambda token: (Staged(f"{location.rstrip('/')}/metadata", token),),
    ) as run:
        snapshot_id = new_snapshot_id()
        written = _write(table, plan, snapshot_id, f"{JOB}-{run.token}-", session)
        _check_counts(plan, written)
        result = run.commit(
            lambda: Committer(catalog, identifier, file_prefix=run.token).replace_manifests(
                removed=frozenset(m.manifest_path for m in plan.rewritten),
                added=written,
                snapshot_id=snapshot_id,
                entries_processed=sum(g.live_entries for g in plan.groups),
                branch=options.branch,
                summary={"tablekeeper.job": JOB},
            ),
            [m.manifest_path for m in written],
        )
    snapshot = result.snapshot
    assert snapshot is not None
    metrics |= {
        "resumed_journal": run.resumed,
        "added_manifests_count": len(written),
        "added_bytes_count": sum(m.manifest_length for m in written),
        "manifests_after": len(load_manifests(result.table.io, snapshot)),
        "snapshot_id": snapshot.snapshot_id,
        "engine": "spark" if use_spark else "driver",
        "plans": plans,
    }
    return clock.result(JOB, identifier, dry_run=False, metrics=metrics)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument("--spec-id", type=int, help="rewrite the manifests of this spec (default: current)")
    parser.add_argument(
        "--sort-by", help="partition field names to order entries by first (default: the partition tuple)"
    )
    parser.add_argument(
        "--target-manifest-size",
        help=f"size of the new manifests (default: the table's {TARGET_SIZE_PROPERTY}, else 8MB)",
    )
    parser.add_argument(
        "--rewrite-all",
        action="store_true",
        help="rewrite even when the manifests would not get fewer (Iceberg's behaviour)",
    )
    parser.add_argument("--branch", default=MAIN_BRANCH, help="the branch to rewrite (default main)")
    add_engine_argument(parser)
    add_run_arguments(parser)


Options = RewriteManifestsOptions
# Iceberg tables only: a Delta table is refused whole, before it is read (jobs.common.formats).
DELTA_OPTIONS = None


def run(options: RewriteManifestsOptions, context: JobContext) -> JobResult:
    catalog, identifier = context.resolve(options.table, options.catalog)
    return run_rewrite_manifests(options, catalog, identifier, context.spark)
