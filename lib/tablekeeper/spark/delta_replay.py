"""Delta log replay on Spark, for logs too large for one driver: same answer as the pure path.

Checkpoint parts, sidecars and commits are read as DataFrames; file actions are reconciled with a
window over (absolute decoded path, DV id) and only the live files come back to the driver, as
Arrow. Non-file actions are few and are applied with the pure code.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from tablekeeper.delta.reconcile import Reconciled
from tablekeeper.delta.replay import FILE_ACTIONS, NonFileState
from tablekeeper.delta.segment import LogSegment, sidecar_location
from tablekeeper.delta.snapshot import DeltaSnapshot, snapshot_from_replay
from tablekeeper.errors import CorruptMetadataError
from tablekeeper.io import FileIO
from tablekeeper.spark.compat import to_arrow, try_url_decode
from tablekeeper.tables.delta import read_checkpoint_non_file_actions, read_checkpoint_tail

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
_DV = "struct<storageType:string,pathOrInlineDv:string,offset:int,sizeInBytes:int,cardinality:bigint>"
_FILE_ACTION_DDL = (
    "path string, partitionValues map<string,string>, size bigint, modificationTime bigint, "
    f"dataChange boolean, stats string, tags map<string,string>, deletionVector {_DV}, baseRowId bigint, "
    "defaultRowCommitVersion bigint, deletionTimestamp bigint, clusteringProvider string"
)


def _struct_ddl() -> str:
    fields = [f.strip().split(" ", 1) for f in _FILE_ACTION_DDL.split(", ")]
    return ",".join(f"{name}:{kind}" for name, kind in fields)


def _normalise(actions: DataFrame, column: str, is_add: bool, order: Column) -> DataFrame:
    c = F.col(column)
    fields = set(actions.schema[column].dataType.fieldNames())  # type: ignore[attr-defined]

    def get(name: str, kind: str) -> Column:
        return c[name].cast(kind) if name in fields else F.lit(None).cast(kind)

    return actions.where(c.isNotNull()).select(
        c["path"].alias("path"),
        F.lit(is_add).alias("is_add"),
        order.alias("order"),
        get("partitionValues", "map<string,string>").alias("partition_values"),
        get("size", "bigint").alias("size"),
        get("modificationTime", "bigint").alias("modification_time"),
        get("dataChange", "boolean").alias("data_change"),
        (_stats(c, fields) if is_add else F.lit(None).cast("string")).alias("stats"),
        (get("tags", "map<string,string>") if is_add else F.lit(None).cast("map<string,string>")).alias(
            "tags"
        ),
        F.when(
            c["deletionVector"].isNotNull() if "deletionVector" in fields else F.lit(False),
            F.struct(
                *[
                    (c["deletionVector"][n] if "deletionVector" in fields else F.lit(None)).cast(t).alias(n)
                    for n, t in (
                        ("storageType", "string"),
                        ("pathOrInlineDv", "string"),
                        ("offset", "int"),
                        ("sizeInBytes", "int"),
                        ("cardinality", "bigint"),
                    )
                ]
            ),
        ).alias("dv"),
        get("baseRowId", "bigint").alias("base_row_id"),
        get("defaultRowCommitVersion", "bigint").alias("default_row_commit_version"),
        (F.lit(None).cast("bigint") if is_add else get("deletionTimestamp", "bigint")).alias(
            "deletion_timestamp"
        ),
        (get("clusteringProvider", "string") if is_add else F.lit(None).cast("string")).alias(
            "clustering_provider"
        ),
    )


def _stats(c: Column, fields: set[str]) -> Column:
    """``stats`` as JSON; a checkpoint written with typed stats only (``stats_parsed``) has them
    there instead, turned back into the JSON form (the driver's replay does the same)."""
    stats = c["stats"].cast("string") if "stats" in fields else F.lit(None).cast("string")
    if "stats_parsed" in fields:
        parsed = F.to_json(c["stats_parsed"], {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"})
        stats = F.coalesce(stats, parsed)
    return stats


def _absolute(root: str) -> Column:
    # try_url_decode follows java.net.URLDecoder, which turns '+' into a space: protect it first.
    decoded = F.coalesce(try_url_decode(F.replace(F.col("path"), F.lit("+"), F.lit("%2B"))), F.col("path"))
    path = F.when(F.col("path").contains("%"), decoded).otherwise(F.col("path"))
    is_abs = F.col("path").rlike(r"^(/|[A-Za-z][A-Za-z0-9+.\-]*:)")  # as written, before decoding
    return F.when(is_abs, path).otherwise(F.concat(F.lit(root.rstrip("/") + "/"), path))


def _dv_id() -> Column:
    dv = F.col("dv")
    base = F.concat(dv["storageType"], dv["pathOrInlineDv"])
    return F.when(dv.isNull(), F.lit(None)).otherwise(
        F.when(dv["offset"].isNull(), base).otherwise(F.concat(base, F.lit("@"), dv["offset"].cast("string")))
    )


def _non_file_from_json(
    spark: SparkSession, paths: list[str], state: NonFileState, versions: dict[str, int]
) -> None:
    if not paths:
        return
    lines = (
        spark.read.text(paths)
        .withColumn("_file", F.input_file_name())
        .where(~F.col("value").startswith('{"add"') & ~F.col("value").startswith('{"remove"'))
        .where(F.length(F.trim(F.col("value"))) > 0)
        .collect()
    )
    # Apply in version order so the newest protocol and metadata win.
    for row in sorted(lines, key=lambda r: versions.get(_name(r["_file"]), -1)):
        obj = orjson.loads(row["value"])
        for name, body in obj.items():
            if name not in ("add", "remove") and isinstance(body, dict):
                state.apply(name, body, versions.get(_name(row["_file"])))


def _name(uri: str) -> str:
    return unquote(uri.rsplit("/", 1)[-1])


def _skip_local_crc(spark: SparkSession, root: str) -> None:
    """Hadoop's local filesystem checks ``.x.crc`` side files; copied or edited logs carry stale
    ones. The log's own content is what counts (the pure path never looks at them either)."""
    if "://" in root and not root.startswith("file:"):
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf).setVerifyChecksum(False)


@dataclass(frozen=True, eq=False)
class SparkDeltaState:
    """The replayed state kept in Spark: winners per file key, plus the small non-file actions."""

    root: str
    segment: LogSegment
    state: NonFileState
    winners: DataFrame | None  # FILE_ACTIONS columns + absolute_path, dv_id; adds and tombstones

    def live_files(self) -> DataFrame | None:
        return None if self.winners is None else self.winners.where(F.col("is_add"))


def snapshot_without_files(root: str, segment: LogSegment, state: NonFileState) -> DeltaSnapshot:
    """Protocol, metadata and the rest, with empty file tables: the files stay on the executors."""
    empty = _no_files()
    return snapshot_from_replay(root, segment, state, Reconciled(empty, empty), "spark")


def spark_state(
    spark: SparkSession, root: str, segment: LogSegment, partitions: int | None = None
) -> SparkDeltaState:
    """Replay in Spark without collecting files: jobs that write manifests on executors use this.

    ``partitions``: the number of partitions the winners come in (hashed by path, which also
    serves the reconciliation, so there is one shuffle); otherwise Spark's choice."""
    log_dir = f"{root}/{LOG_DIR}"
    _skip_local_crc(spark, root)
    state = NonFileState()
    frames: list[DataFrame] = []
    checkpoint = segment.checkpoint
    if checkpoint is not None:
        parts = [f"{log_dir}/{p.name}" for p in checkpoint.files]
        if parts[0].endswith(".json"):
            _non_file_from_json(spark, parts, state, {})
            ck = spark.read.schema(f"add struct<{_struct_ddl()}>, remove struct<{_struct_ddl()}>").json(parts)
        else:
            ck = spark.read.parquet(*parts)
            # Read here, not as a Spark scan: only these columns, and no job over every file row.
            io = FileIO.for_location(root)
            for part in parts:
                read_checkpoint_non_file_actions(io, part, state)
        for column, is_add in (("add", True), ("remove", False)):
            if column in ck.columns:
                frames.append(_normalise(ck, column, is_add, F.lit(-1).cast("bigint")))
        if state.sidecars:
            sidecars = [sidecar_location(log_dir, s) for s in state.sidecars]
            side = spark.read.parquet(*sidecars)
            for column, is_add in (("add", True), ("remove", False)):
                if column in side.columns:
                    frames.append(_normalise(side, column, is_add, F.lit(-1).cast("bigint")))
        if checkpoint.version == segment.version:
            # Checkpoints drop commitInfo; the version's own commit still has it (and its ICT).
            own = f"{log_dir}/{checkpoint.version:020d}.json"
            for row in spark.read.text(own).where(F.col("value").startswith('{"commitInfo"')).collect():
                state.apply("commitInfo", orjson.loads(row["value"])["commitInfo"], checkpoint.version)
    commit_paths = [f"{log_dir}/{c.name}" for c in segment.commits]
    versions = {c.name: int(c.name.split(".", 1)[0]) for c in segment.commits}
    if commit_paths:
        _non_file_from_json(spark, commit_paths, state, versions)
        commits = (
            spark.read.schema(f"add struct<{_struct_ddl()}>, remove struct<{_struct_ddl()}>")
            .json(commit_paths)
            .withColumn(
                "_version", F.regexp_extract(F.input_file_name(), r"(\d{20})\.json$", 1).cast("bigint")
            )
        )
        # Within one commit a key appears at most once (protocol), so the version orders actions.
        for column, is_add in (("add", True), ("remove", False)):
            frames.append(_normalise(commits, column, is_add, F.col("_version")))
    if state.protocol is None or state.metadata is None:
        raise CorruptMetadataError(
            f"{root}: the log up to version {segment.version} has no protocol or metaData"
        )
    state.protocol.check_readable()
    if not frames:
        return SparkDeltaState(root, segment, state, None)
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    keyed = union.withColumn("absolute_path", _absolute(root)).withColumn("dv_id", _dv_id())
    if partitions is not None:
        keyed = keyed.repartition(partitions, "absolute_path")
    w = Window.partitionBy("absolute_path", F.coalesce(F.col("dv_id"), F.lit(""))).orderBy(
        F.col("order").desc()
    )
    winners = keyed.withColumn("_rank", F.row_number().over(w)).where(F.col("_rank") == 1).drop("_rank")
    return SparkDeltaState(root, segment, state, winners)


def spark_replay(
    spark: SparkSession, root: str, segment: LogSegment, paths: Sequence[str] | None = None
) -> DeltaSnapshot:
    """Replay in Spark and bring the live files and tombstones to the driver as Arrow: all of
    them, or only those of the given absolute ``paths`` (an incremental run needs no more than
    what its commits touched, and a million-file state would not fit a small driver).

    A log with a Parquet checkpoint is read by tasks that each take a slice of its row groups
    (``checkpoint_files``); the rest (no checkpoint, a JSON one, a long tail of commits, or a
    checkpoint naming a file twice) is replayed in Spark SQL."""
    from tablekeeper.spark.checkpoint_files import TAIL_BYTES, checkpoint_state

    tail = read_checkpoint_tail(FileIO.for_location(root), root, segment, TAIL_BYTES)
    if tail is not None:
        files = checkpoint_state(spark, root, tail, paths)
        if files is not None:
            return snapshot_from_replay(root, segment, tail.state, files, "spark")
    replayed = spark_state(spark, root, segment)
    state = replayed.state
    assert state.protocol is not None and state.metadata is not None
    if replayed.winners is not None:
        winners = replayed.winners
        if paths is not None:
            wanted = spark.createDataFrame([(p,) for p in paths], "absolute_path string")
            winners = winners.join(wanted.distinct(), "absolute_path", "left_semi")
        reconciled = _split(to_arrow(winners))
    else:
        reconciled = Reconciled(_no_files(), _no_files())
    return snapshot_from_replay(root, segment, state, reconciled, "spark")


_KEY_TYPES = {"absolute_path": pa.string(), "dv_id": pa.string()}


def _no_files() -> pa.Table:
    """An empty live-files table in the pure path's layout."""
    return pa.schema([*FILE_ACTIONS, *(pa.field(k, t) for k, t in _KEY_TYPES.items())]).empty_table()


def _split(table: pa.Table) -> Reconciled:
    """Spark's winners as the pure path lays them out: live files and tombstones, each ordered by
    path, Spark's Arrow types (large strings, nullable flags) cast to the pure path's: one sort of
    indices, then each column taken for both sides. Dropping each source column once taken does
    not lower the peak (Spark's batches keep all their columns in one buffer each), but it saves
    the whole-table cast, sort and filters the split used to copy."""
    order = pc.sort_indices(table, sort_keys=[("absolute_path", "ascending"), ("order", "ascending")])
    is_add = table.column("is_add").take(order)
    picks = (order.filter(is_add), order.filter(pc.invert(is_add)))
    del order, is_add
    types = {f.name: f.type for f in FILE_ACTIONS} | _KEY_TYPES
    sides: tuple[dict[str, pa.ChunkedArray], dict[str, pa.ChunkedArray]] = ({}, {})
    for name, kind in types.items():
        column = table.column(name)
        table = table.drop_columns([name])
        for side, rows in zip(sides, picks, strict=True):
            side[name] = column.take(rows).cast(kind)
        del column
    return Reconciled(pa.table(sides[0]), pa.table(sides[1]))
