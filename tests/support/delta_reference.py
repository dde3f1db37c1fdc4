"""What delta-spark itself says a Delta table holds: the oracle our own Delta log reader must agree with.

Everything here goes through delta-spark's JVM snapshot (``DeltaLog`` / ``Snapshot``) over py4j, so the
answer is delta-spark's log replay, path resolution and DV identity, not a re-implementation of them.
Only tests use this module.

JVM calls used (Delta 4.4.0, Scala 2.13; Scala default arguments do not exist over py4j, so every
argument is passed):

- ``DeltaLog.clearCache(): void`` and
  ``DeltaLog.forTable(SparkSession, hadoop.fs.Path, scala.collection.immutable.Map<String, String>)``
  (the map holds Hadoop options; ``scala.collection.immutable.Map.from(asScala(java.util.HashMap))``)
- ``DeltaLog.update(boolean stalenessAcceptable, Option<Object> checkIfUpdatedSinceTs,
  Option<CatalogTable>): Snapshot``, called as ``update(false, None, None)`` (the Scala defaults)
- ``DeltaLog.getSnapshotAt(long version, Option<CheckpointInstance> lastCheckpointHint,
  Option<CatalogTable> catalogTableOpt, boolean enforceTimeTravelWithinDeletedFileRetention): Snapshot``,
  called as ``getSnapshotAt(v, None, None, false)`` (the Scala defaults)
- ``Snapshot.version(): long``, ``protocol(): Protocol``, ``metadata(): Metadata``,
  ``allFiles(): Dataset<AddFile>``
- ``Protocol.minReaderVersion(): int``, ``minWriterVersion(): int``,
  ``getReaderFeatures()`` / ``getWriterFeatures(): java.util.Set<String>`` (null when the Scala
  ``Option[Set]`` is ``None``)
- ``Metadata.schemaString(): String``, ``partitionColumns(): Seq<String>``,
  ``configuration(): Map<String, String>`` (converted with ``scala.jdk.javaapi.CollectionConverters``)
- ``DeletionVectorDescriptor.uniqueIdExpression(Column): Column`` (delta-spark's own dvUniqueId)
- ``DeltaFileOperations.absolutePath(String basePath, String child): hadoop.fs.Path``, then
  ``Path.toUri()``: ``getScheme()`` / ``getRawAuthority()`` / ``getPath()`` (decoded once)
- ``DeltaLog.history(): DeltaHistoryManager``, ``getEarliestRecreatableCommit(): long``
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

FileKey = tuple[str, "str | None"]


class DeltaSparkRefused(Exception):
    """delta-spark would not give a snapshot (unsupported feature, broken log, missing version, ...).

    ``str()`` is one line: the Java exception's class name and the first line of its message, plus the
    innermost cause when that is a different exception.
    """

    def __init__(self, message: str, java_class: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.java_class = java_class


@dataclass(frozen=True)
class DeltaReference:
    """delta-spark's view of one version of a Delta table.

    ``files`` holds one ``(path, dv_unique_id)`` per live AddFile: ``path`` is the absolute path that
    delta-spark resolves (relative paths joined to the table root, percent-decoded once; a local file is
    a plain path such as ``/tmp/t/a=1/part-0.parquet``, other schemes keep ``scheme://authority``), and
    ``dv_unique_id`` is ``storageType + pathOrInlineDv [+ "@" + offset]`` or None.
    ``num_records`` maps each path to the ``numRecords`` of its stats (physical rows, before the DV), or
    None when the file has no such stat.
    """

    version: int
    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str]
    writer_features: frozenset[str]
    schema_json: dict[str, Any]
    partition_columns: tuple[str, ...]
    configuration: dict[str, str]
    files: frozenset[FileKey]
    num_records: dict[str, int | None] = field(default_factory=dict, compare=False)

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(path for path, _ in self.files)

    @property
    def dv_files(self) -> dict[str, str]:
        """Path → dv unique id, for the files that carry a deletion vector."""
        return {path: dv for path, dv in self.files if dv is not None}


# ---------------------------------------------------------------------------------------------- errors


def _java_throwable(exc: BaseException) -> Any | None:
    """The JVM Throwable behind a py4j error or a PySpark-converted exception, if there is one."""
    from py4j.protocol import Py4JJavaError

    if isinstance(exc, Py4JJavaError):
        return exc.java_exception
    origin = getattr(exc, "_origin", None)  # pyspark CapturedException (AnalysisException, ...)
    if origin is not None:
        return getattr(origin, "java_exception", origin)
    return None


def _describe_throwable(throwable: Any) -> str:
    name = str(throwable.getClass().getName())
    message = throwable.getMessage()
    first = str(message).strip().splitlines()[0] if message is not None and str(message).strip() else ""
    return f"{name}: {first}" if first else name


def _refusal(exc: BaseException) -> DeltaSparkRefused:
    throwable = _java_throwable(exc)
    if throwable is None:
        first = str(exc).strip().splitlines()
        return DeltaSparkRefused(f"{type(exc).__name__}: {first[0] if first else ''}")
    top = _describe_throwable(throwable)
    root = throwable
    for _ in range(20):  # the chain is short; the bound only guards against cycles
        cause = root.getCause()
        if cause is None or cause.equals(root):
            break
        root = cause
    message = top
    if not root.equals(throwable):
        inner = _describe_throwable(root)
        if inner.split(":", 1)[-1].strip() not in top:
            message = f"{top} (caused by {inner})"
    return DeltaSparkRefused(message, java_class=str(throwable.getClass().getName()))


@contextmanager
def _refusals() -> Iterator[None]:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    try:
        yield
    except (Py4JJavaError, CapturedException) as exc:
        raise _refusal(exc) from exc


# ------------------------------------------------------------------------------------------ snapshots


def _jvm(spark: SparkSession) -> Any:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm


# Hadoop options for the DeltaLog when ``hadoop_checksums`` is off: the raw local file system reads a
# file without comparing it to its Hadoop ``.<name>.crc`` sidecar (such sidecars exist only on local
# and HDFS storage; a stale one makes ChecksumFileSystem fail the read).
RAW_LOCAL_FS_OPTIONS = {
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}


def _delta_log(spark: SparkSession, path: str, hadoop_checksums: bool) -> Any:
    """A fresh DeltaLog: the cache is cleared first, because copies of tables reuse the same paths."""
    jvm = _jvm(spark)
    delta_log_class = jvm.org.apache.spark.sql.delta.DeltaLog
    delta_log_class.clearCache()
    options = jvm.java.util.HashMap()
    if not hadoop_checksums:
        for key, value in RAW_LOCAL_FS_OPTIONS.items():
            options.put(key, value)
    scala_options = getattr(jvm.scala.collection.immutable.Map, "from")(
        jvm.scala.jdk.javaapi.CollectionConverters.asScala(options)
    )
    return delta_log_class.forTable(spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(path), scala_options)


def _snapshot(spark: SparkSession, delta_log: Any, version: int | None) -> Any:
    none = _jvm(spark).scala.Option.empty()
    if version is None:
        # update(stalenessAcceptable = false, checkIfUpdatedSinceTs = None, catalogTableOpt = None)
        return delta_log.update(False, none, none)
    # getSnapshotAt(version, lastCheckpointHint = None, catalogTableOpt = None,
    #               enforceTimeTravelWithinDeletedFileRetention = false)
    return delta_log.getSnapshotAt(version, none, none, False)


def _features(java_set: Any) -> frozenset[str]:
    return frozenset() if java_set is None else frozenset(str(name) for name in java_set)


def _schema_json(metadata: Any) -> dict[str, Any]:
    """The schemaString parsed; a metaData without one (a DLT table's version 0) is delta-spark's empty
    struct, which is what ``Metadata.schema()`` makes of it."""
    raw = metadata.schemaString()
    text = str(raw) if raw is not None else str(metadata.schema().json())
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def _local_or_uri(hadoop_path: Any) -> str:
    uri = hadoop_path.toUri()
    scheme = uri.getScheme()
    decoded = str(uri.getPath())
    if scheme is None or str(scheme) == "file":
        return decoded
    authority = uri.getRawAuthority()
    return f"{scheme}://{authority or ''}{decoded}"


def _files(
    spark: SparkSession, delta_log: Any, snapshot: Any
) -> tuple[frozenset[FileKey], dict[str, int | None]]:
    jvm = _jvm(spark)
    adds = DataFrame(snapshot.allFiles().toDF(), spark)
    dv_unique_id = Column(
        jvm.org.apache.spark.sql.delta.actions.DeletionVectorDescriptor.uniqueIdExpression(
            sf.col("deletionVector")._jc
        )
    )
    rows = adds.select(
        "path",
        sf.when(sf.col("deletionVector").isNull(), sf.lit(None)).otherwise(dv_unique_id).alias("dv"),
        sf.get_json_object("stats", "$.numRecords").cast("long").alias("num_records"),
    ).collect()
    base = delta_log.dataPath().toString()
    absolute_path = jvm.org.apache.spark.sql.delta.util.DeltaFileOperations.absolutePath
    files: set[FileKey] = set()
    num_records: dict[str, int | None] = {}
    for row in rows:
        path = _local_or_uri(absolute_path(base, row["path"]))
        files.add((path, row["dv"]))
        num_records[path] = row["num_records"]
    return frozenset(files), num_records


def delta_spark_state(
    spark: SparkSession, path: str, version: int | None = None, *, hadoop_checksums: bool = False
) -> DeltaReference:
    """delta-spark's snapshot of the table at ``path`` (latest, or ``version``); it only reads.

    Raises DeltaSparkRefused when delta-spark cannot produce that snapshot. With ``hadoop_checksums``
    off (the default) local files are read without Hadoop's ``.<name>.crc`` sidecar check, which object
    stores never do and which fails on tables whose log was edited after Spark wrote it
    (``cdc_ict_table``); turn it on to see exactly what a default local Spark session does.
    """
    with _refusals():
        delta_log = _delta_log(spark, path, hadoop_checksums)
        snapshot = _snapshot(spark, delta_log, version)
        if int(snapshot.version()) < 0:
            raise DeltaSparkRefused(f"not a Delta table (no commits): {path}")
        converters = _jvm(spark).scala.jdk.javaapi.CollectionConverters
        protocol = snapshot.protocol()
        metadata = snapshot.metadata()
        files, num_records = _files(spark, delta_log, snapshot)
        return DeltaReference(
            version=int(snapshot.version()),
            min_reader_version=int(protocol.minReaderVersion()),
            min_writer_version=int(protocol.minWriterVersion()),
            reader_features=_features(protocol.getReaderFeatures()),
            writer_features=_features(protocol.getWriterFeatures()),
            schema_json=_schema_json(metadata),
            partition_columns=tuple(str(c) for c in converters.asJava(metadata.partitionColumns())),
            configuration={str(k): str(v) for k, v in converters.asJava(metadata.configuration()).items()},
            files=files,
            num_records=num_records,
        )


def delta_spark_versions(spark: SparkSession, path: str, *, hadoop_checksums: bool = False) -> list[int]:
    """The versions delta-spark can time-travel to: its earliest recreatable commit up to the latest.

    The range comes from delta-spark (``DeltaHistoryManager.getEarliestRecreatableCommit``), i.e. the
    oldest version with a complete checkpoint or a full chain of commits from 0 behind it.
    """
    with _refusals():
        delta_log = _delta_log(spark, path, hadoop_checksums)
        latest = int(_snapshot(spark, delta_log, None).version())
        if latest < 0:
            return []
        earliest = int(delta_log.history().getEarliestRecreatableCommit())
        return list(range(earliest, latest + 1))
