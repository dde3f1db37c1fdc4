"""convert-delta: a Delta table's current version as an Iceberg snapshot, by log replay.

Data files stay where they are: the Iceberg table references the Delta table's Parquet files, so
its ``gc.enabled`` is false (no Iceberg maintenance may delete Delta's files). Deletion vectors
become v3 DVs (the Delta bytes are Iceberg's blob format: copied into a Puffin file) or v2
position delete files; none is ever dropped.

This first version converts the latest Delta version in full (``--history latest``) into a new
Iceberg table, with manifests written on the driver.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from tablekeeper.catalog import Catalog
from tablekeeper.commit import Committer, SnapshotChange, SummaryDelta
from tablekeeper.delta.models import AddFile
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.to_iceberg import MappedSchema, data_file, map_schema, partition_spec
from tablekeeper.delta_table import load_snapshot, read_deletion_vector
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.manifest import POSITION_DELETES, DataFile
from tablekeeper.iceberg.name_mapping import name_mapping_to_json
from tablekeeper.iceberg.partitioning import PartitionSpec
from tablekeeper.iceberg.puffin import PuffinWriter
from tablekeeper.iceberg.updates import new_snapshot_id, new_table_metadata
from tablekeeper.io import FileIO
from tablekeeper.jobs.result import JobResult, utc_now_iso

log = logging.getLogger(__name__)

JOB = "convert-delta"
SOURCE_PROPERTY = "tablekeeper.delta.source"
VERSION_PROPERTY = "tablekeeper.delta.version"
FILE_PATH_ID, POS_ID = 2147483546, 2147483545
DISTRIBUTE_ABOVE = 50_000


@dataclass(frozen=True)
class ConvertOptions:
    source: str
    target: str
    mode: str = "full"
    history: str = "latest"
    format_version: int = 2
    dry_run: bool = False
    # driver: manifests written by this process; spark: by the executors; auto: spark above
    # DISTRIBUTE_ABOVE files when a session is at hand.
    engine: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in ("full", "incremental"):
            raise ConfigError(f"--mode {self.mode!r} is not full or incremental")
        if self.history not in ("latest", "all"):
            raise ConfigError(f"--history {self.history!r} is not latest or all")
        if self.engine not in ("auto", "driver", "spark"):
            raise ConfigError(f"--engine {self.engine!r} is not auto, driver or spark")
        if self.format_version not in (2, 3):
            raise ConfigError(f"--format-version {self.format_version} is not 2 or 3")
        if self.mode != "full" or self.history != "latest":
            raise ConfigError(
                "this version converts --mode full --history latest only; incremental and full history "
                "are not available yet"
            )


@dataclass(frozen=True)
class ConvertPlan:
    snapshot: DeltaSnapshot
    mapped: MappedSchema
    spec: PartitionSpec
    adds: tuple[AddFile, ...]
    dv_files: int
    bytes_referenced: int


def plan_convert(options: ConvertOptions) -> ConvertPlan:
    snapshot = load_snapshot(options.source, engine="auto")
    mapping = snapshot.column_mapping
    mapped = map_schema(snapshot.schema, mapping, snapshot.metadata.configuration)
    spec = partition_spec(mapped, snapshot.partition_columns)
    adds = tuple(snapshot.add_files())
    return ConvertPlan(
        snapshot=snapshot,
        mapped=mapped,
        spec=spec,
        adds=adds,
        dv_files=sum(1 for a in adds if a.deletion_vector is not None),
        bytes_referenced=sum(a.size for a in adds),
    )


def _record_count(io: FileIO, add: AddFile) -> int | None:
    from tablekeeper.delta.values import parse_stats

    stats = parse_stats(add.stats)
    if stats is not None and stats.num_records is not None:
        return None  # the log has it
    with io.open_input(add.absolute_path) as stream:
        return int(pq.ParquetFile(stream).metadata.num_rows)


def _data_files(plan: ConvertPlan, io: FileIO) -> list[DataFile]:
    snap = plan.snapshot
    return [
        data_file(
            add,
            struct=snap.schema,
            mapping=snap.column_mapping,
            mapped=plan.mapped,
            partition_columns=snap.partition_columns,
            record_count=_record_count(io, add),
        )
        for add in plan.adds
    ]


def _delete_files(
    plan: ConvertPlan, files: Sequence[DataFile], io: FileIO, location: str, format_version: int
) -> list[DataFile]:
    with_dv = [(add, f) for add, f in zip(plan.adds, files, strict=True) if add.deletion_vector is not None]
    if not with_dv:
        return []
    root = plan.snapshot.root
    out: list[DataFile] = []
    if format_version >= 3:
        writer = PuffinWriter(created_by="tablekeeper convert-delta")
        blobs = []
        for add, f in with_dv:
            assert add.deletion_vector is not None
            _, blob = read_deletion_vector(io, root, add.deletion_vector)
            blobs.append((f, writer.add_dv(f.file_path, blob)))
        puffin = writer.finish()
        path = f"{location}/data/{uuid.uuid4()}-deletes.puffin"
        FileIO.for_location(path).create_if_absent(path, puffin.data)
        for f, blob_location in blobs:
            out.append(
                DataFile(
                    content=POSITION_DELETES,
                    file_path=path,
                    file_format="PUFFIN",
                    partition=f.partition,
                    record_count=blob_location.cardinality,
                    file_size_in_bytes=puffin.file_size,
                    referenced_data_file=f.file_path,
                    content_offset=blob_location.offset,
                    content_size_in_bytes=blob_location.length,
                )
            )
        return out
    schema = pa.schema(
        [
            pa.field(
                "file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID)}
            ),
            pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID)}),
        ]
    )
    for add, f in with_dv:
        assert add.deletion_vector is not None
        bitmap, _ = read_deletion_vector(io, root, add.deletion_vector)
        positions = bitmap.to_array()
        table = pa.table(
            {"file_path": pa.array([f.file_path] * len(positions)), "pos": pa.array(positions, pa.int64())},
            schema=schema,
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
        path = f"{location}/data/{uuid.uuid4()}-pos-deletes.parquet"
        FileIO.for_location(path).create_if_absent(path, data)
        out.append(
            DataFile(
                content=POSITION_DELETES,
                file_path=path,
                file_format="PARQUET",
                partition=f.partition,
                record_count=len(positions),
                file_size_in_bytes=len(data),
                referenced_data_file=f.file_path,
            )
        )
    return out


def _uses_spark(options: ConvertOptions, files: int, spark: object) -> bool:
    if options.engine == "spark":
        if spark is None:
            raise ConfigError("--engine spark needs a Spark session")
        return True
    return options.engine == "auto" and spark is not None and files > DISTRIBUTE_ABOVE


def execute_convert(
    plan: ConvertPlan, options: ConvertOptions, catalog: Catalog, spark: SparkSession | None = None
) -> dict[str, object]:
    snap = plan.snapshot
    if catalog.table_exists(options.target):
        raise ConfigError(
            f"target {options.target} already exists: this version only creates new tables; "
            "drop it or pick another name"
        )
    location = catalog.default_table_location(options.target)
    properties = {
        "gc.enabled": "false",
        "schema.name-mapping.default": name_mapping_to_json(plan.mapped.name_mapping),
        SOURCE_PROPERTY: snap.root,
        VERSION_PROPERTY: str(snap.version),
    }
    meta = new_table_metadata(
        schema=plan.mapped.schema,
        location=location,
        timestamp_ms=int(time.time() * 1000),
        spec=plan.spec,
        properties=properties,
        format_version=options.format_version,
    )
    catalog.create_table(options.target, meta)
    io = FileIO.for_location(snap.root)
    files = _data_files(plan, io)
    deletes = _delete_files(plan, files, io, location, options.format_version)
    summary = {
        "tablekeeper.delta-version": str(snap.version),
        "tablekeeper.delta-timestamp-ms": str(snap.timestamp_ms),
    }
    operation = "overwrite" if deletes else "append"
    committer = Committer(catalog, options.target)
    distributed = _uses_spark(options, len(files), spark)
    if distributed:
        from tablekeeper.spark.manifests import write_manifests_distributed

        assert spark is not None
        snapshot_id = new_snapshot_id()
        written = write_manifests_distributed(
            spark,
            [*files, *deletes],
            table_location=location,
            format_version=options.format_version,
            specs=meta.specs_by_id(),
            schema=meta.schema(),
            snapshot_id=snapshot_id,
        )
        change = SnapshotChange(
            operation,
            added_manifests=tuple(written),
            added_manifests_delta=SummaryDelta.of([*files, *deletes]),
            summary=summary,
        )
        result = committer.commit_snapshot(change, snapshot_id=snapshot_id)
        manifests = len(written)
    else:
        change = SnapshotChange(operation, added_files=(*files, *deletes), summary=summary)
        result = committer.commit_snapshot(change)
        manifests = (1 + (1 if deletes else 0)) if files else 0
    return {
        "delta_version": snap.version,
        "versions_converted": 1,
        "snapshots_committed": 1,
        "snapshot_id": result.snapshot.snapshot_id if result.snapshot else None,
        "data_files": len(files),
        "delete_files": len(deletes),
        "manifests": manifests,
        "bytes_referenced": plan.bytes_referenced,
        "mode": options.mode,
        "manifest_writer": "executors" if distributed else "driver",
    }


def run_convert(options: ConvertOptions, catalog: Catalog, spark: SparkSession | None = None) -> JobResult:
    started, t0 = utc_now_iso(), time.perf_counter()
    plan = plan_convert(options)
    if options.dry_run:
        metrics: dict[str, object] = {
            "delta_version": plan.snapshot.version,
            "data_files": len(plan.adds),
            "files_with_deletion_vectors": plan.dv_files,
            "bytes_referenced": plan.bytes_referenced,
            "partition_columns": list(plan.snapshot.partition_columns),
            "mode": options.mode,
        }
    else:
        metrics = execute_convert(plan, options, catalog, spark)
    return JobResult(
        job=JOB,
        table=options.target,
        status="dry_run" if options.dry_run else "ok",
        dry_run=options.dry_run,
        started_at=started,
        duration_ms=int((time.perf_counter() - t0) * 1000),
        metrics=metrics,
    )
