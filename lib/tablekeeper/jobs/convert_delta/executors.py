"""convert-delta on the executors: the latest version of a large table as one snapshot, its data
files built and their manifests written by Spark tasks, the driver gathering manifest-list rows."""

from __future__ import annotations

import logging
from dataclasses import replace

from pyspark.sql import SparkSession

from tablekeeper import clock
from tablekeeper.catalog import Catalog
from tablekeeper.commit import Committer, SummaryDelta
from tablekeeper.commit.producer import new_commit_uuid
from tablekeeper.delta_row_ids import commit_operations, log_versions
from tablekeeper.iceberg.updates import (
    new_snapshot_id,
)
from tablekeeper.io import FileIO
from tablekeeper.jobs.convert_delta.delta_files import delete_files
from tablekeeper.jobs.convert_delta.lineage import Lineage, plan_lineage
from tablekeeper.jobs.convert_delta.verify import Verifier, verify_rows
from tablekeeper.jobs.convert_delta.versions import (
    ConvertDeltaOptions,
    ConvertPlan,
    Totals,
    create_target,
    deletes_removed_on_failure,
    evolve,
    version_change,
)
from tablekeeper.tables.delta import commit_time, read_checkpoint_tail

log = logging.getLogger(__name__)


def convert_on_executors(
    plan: ConvertPlan,
    options: ConvertDeltaOptions,
    catalog: Catalog,
    spark: SparkSession,
    totals: Totals,
    token: str,
    verifier: Verifier | None = None,
) -> int:
    """The latest version as one snapshot, data files built and their manifests written by the
    executors; returns the bytes the data files hold."""
    from tablekeeper.spark.checkpoint_files import TAIL_BYTES, checkpoint_manifests
    from tablekeeper.spark.convert_files import DataFileContext, Written, task_count, write_data_manifests
    from tablekeeper.spark.delta_replay import SparkDeltaState, snapshot_without_files, spark_state

    io = FileIO.for_location(plan.root)
    assert plan.latest_segment is not None
    segment = plan.latest_segment
    tail = read_checkpoint_tail(io, plan.root, segment, TAIL_BYTES)

    def in_spark_sql() -> SparkDeltaState:
        return spark_state(spark, plan.root, segment, partitions=task_count(spark))

    state: SparkDeltaState | None = None
    if tail is None:
        state = in_spark_sql()
        snap = snapshot_without_files(plan.root, segment, state.state)
    else:
        snap = snapshot_without_files(plan.root, segment, tail.state)
    snap = replace(snap, timestamp_ms=commit_time(io, snap, plan.log))
    if not catalog.table_exists(options.target):
        create_target(options, plan, catalog, snap)
    meta = catalog.require(options.target).metadata
    now = clock.now_ms()
    mapped, preview = evolve(meta, snap, now)
    snapshot_id, commit_uuid = new_snapshot_id(), new_commit_uuid(token)
    ctx = DataFileContext(
        struct=snap.schema,
        mapping=snap.column_mapping,
        mapped=mapped,
        partition_columns=snap.partition_columns,
        spec=preview.spec(preview.default_spec_id),
        schema=preview.schema(),
        format_version=meta.format_version,
        table_location=meta.location,
        snapshot_id=snapshot_id,
        commit_uuid=commit_uuid,
        verify=verifier is not None,
        zone=options.partition_zone,
    )
    lineage = plan_lineage(
        snap, meta.properties, bool(meta.snapshots), meta.format_version, files_known=False
    )
    if lineage is not None and lineage.carry:
        operations: dict[int, str | None] = {}
        if lineage.materialized:
            operations = commit_operations(io, plan.root, plan.log, log_versions(plan.log))
        ctx = replace(ctx, carry_row_ids=True, materialized=lineage.materialized, operations=operations)
    table_io = FileIO.for_location(meta.location)

    def staged() -> list[str]:
        # Every manifest the tasks wrote carries this commit's id.
        return [i.location for i in table_io.list(f"{meta.location}/metadata") if commit_uuid in i.location]

    def write(context: DataFileContext) -> Written:
        nonlocal state
        if state is None:
            assert tail is not None
            written = checkpoint_manifests(spark, plan.root, tail, context)
            if written is not None:
                return written
            state = in_spark_sql()
        live = state.live_files()
        return (
            write_data_manifests(live, context)
            if live is not None
            else Written([], SummaryDelta(), [], {}, {})
        )

    try:
        written = write(ctx)
        if written.unsound is not None:
            # A file holds row ids Iceberg cannot see: all files take fresh ids instead.
            log.info("row ids are assigned fresh: %s", written.unsound)
            lineage = Lineage(False, written.unsound)
            table_io.delete_many(staged())
            written = write(replace(ctx, carry_row_ids=False))
    except BaseException:
        table_io.delete_many(staged())
        raise
    totals.lineage = lineage
    totals.zoneless.update(written.zoneless)
    manifests, counts, with_dv = written.manifests, written.delta, written.with_dv
    deletes = delete_files(with_dv, plan.root, io, meta.location, meta.format_version, f"{token}-")
    change = version_change(
        snap,
        meta,
        now,
        "overwrite" if deletes.files else "append",
        lineage,
        added_files=deletes.files,
        added_manifests=tuple(manifests),
        added_manifests_delta=counts,
    )
    with deletes_removed_on_failure(deletes, meta.location):
        result = Committer(catalog, options.target, file_prefix=token).commit_snapshot(
            change, snapshot_id=snapshot_id
        )
    totals.snapshots += 1
    totals.data_files += counts.added_data_files
    totals.delete_files += len(deletes.files)
    totals.manifests += len(manifests) + (1 if deletes.files else 0)
    totals.executors_used = True
    totals.last_snapshot_id = result.snapshot.snapshot_id if result.snapshot else None
    if verifier is not None:
        # The Delta side was counted by the tasks, which also read their manifests back; the
        # driver reads what is left (the delete manifest) from the committed snapshot's list.
        verifier.manifests.update(written.manifest_counts or {})
        verifier.names.update(written.names or {})
        table = catalog.require(options.target)
        verifier.check(snap, table.metadata, expected=written.delta_counts or {})
        if options.verify == "rows":
            verify_rows(verifier, spark, snap, table.metadata, token)
    return counts.added_files_size
