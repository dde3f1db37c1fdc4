"""Which engine a job runs on: this process for small tables, Spark for large ones.

A Delta log is replayed by ``delta_replay``'s choice: in this process, on Spark, or (``auto``) on
Spark once the checkpoint and commits to read exceed ``DELTA_SPARK_REPLAY_BYTES``.

``--engine auto`` (the default) reads the manifest lists on the driver first; a table whose
snapshots reach at most ``DRIVER_MAX_FILES`` files through at most ``DRIVER_MAX_MANIFESTS``
manifests is handled by the driver engine and no Spark session starts. Anything larger starts (or
takes) the session and reuses the lists already read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Union

from tablekeeper.delta.segment import LogSegment
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.errors import ConfigError
from tablekeeper.files.engine import (
    DRIVER_MAX_FILES,
    DRIVER_MAX_MANIFESTS,
    DRIVER_MAX_SNAPSHOTS,
    Engine,
)
from tablekeeper.files.local import IndexCache, LocalEngine
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.tables.delta import Replay, segment_bytes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

EngineName = Literal["auto", "driver", "spark"]
ENGINES = ("auto", "driver", "spark")
# Concurrent deletes on the driver engine (expire-snapshots, remove-orphans, finishing journals).
DRIVER_DELETE_THREADS = 8
# Iceberg's table property: false means no maintenance job may delete the table's files.
GC_ENABLED = "gc.enabled"
# A session, a way to get one (started only if needed), or none (the driver engine only).
SparkSource = Union["SparkSession", Callable[[], "SparkSession"], None]
DELTA_REPLAY_ENGINES = ("pure", "spark", "auto")
# Above this much log to read, a driver-only replay costs more than starting Spark work.
DELTA_SPARK_REPLAY_BYTES = 512 * 1024 * 1024
# Manifests whose lists give no entry counts (v1) make the estimate blind beyond this many.
DRIVER_MAX_UNCOUNTED = 200


def check_engine(name: str) -> None:
    if name not in ENGINES:
        raise ConfigError(f"--engine {name!r} is not auto, driver or spark")


def spark_session(source: SparkSource, job: str) -> SparkSession:
    if source is None:
        raise ConfigError(f"{job} needs a Spark session here: run it with spark-submit or --engine driver")
    if callable(source):
        return source()
    return source


def spark_engine(source: SparkSource, job: str, cache: IndexCache) -> Engine:
    from tablekeeper.spark.maintenance import SparkEngine

    return SparkEngine(spark_session(source, job), job, cache)


def choose_engine(
    name: str, meta: TableMetadata, source: SparkSource, job: str, rules: PathRules, cache: IndexCache
) -> Engine:
    """The engine for a job on ``meta``; ``auto`` reads the manifest lists into ``cache``."""
    check_engine(name)
    if name == "driver":
        return LocalEngine(cache)
    if name == "spark" or len(meta.snapshots) > DRIVER_MAX_SNAPSHOTS:
        return spark_engine(source, job, cache)
    index = cache.index(meta, [s.snapshot_id for s in meta.snapshots], rules)
    small = (
        index.estimate <= DRIVER_MAX_FILES
        and len(index.manifests) <= DRIVER_MAX_MANIFESTS
        and index.uncounted <= DRIVER_MAX_UNCOUNTED
    )
    if small or source is None:
        log.info("engine: driver (about %d files in %d manifests)", index.estimate, len(index.manifests))
        return LocalEngine(cache)
    log.info("engine: spark (about %d files in %d manifests)", index.estimate, len(index.manifests))
    return spark_engine(source, job, cache)


def replays_on_spark(engine: str, segment: LogSegment) -> bool:
    """Whether ``delta_replay(engine)`` hands this segment to Spark."""
    return engine == "spark" or (engine == "auto" and segment_bytes(segment) > DELTA_SPARK_REPLAY_BYTES)


def delta_replay(
    engine: str, source: SparkSource = None, paths: Sequence[str] | None = None
) -> Replay | None:
    """The replay ``tables.delta.load_snapshot`` takes: None (``pure``: this process), Spark
    (``spark``), or Spark for logs above ``DELTA_SPARK_REPLAY_BYTES`` (``auto``; without a
    session one is started only then). With ``paths``, Spark brings back only those files'
    actions (the pure path replays all: the caller keeps what it asked for)."""
    if engine not in DELTA_REPLAY_ENGINES:
        raise ConfigError(f"replay engine {engine!r} is not one of {', '.join(DELTA_REPLAY_ENGINES)}")
    if engine == "pure":
        return None

    def replay(root: str, segment: LogSegment) -> DeltaSnapshot | None:
        if not replays_on_spark(engine, segment):
            return None
        from tablekeeper.spark import get_spark
        from tablekeeper.spark.delta_replay import spark_replay

        session = spark_session(source, "delta replay") if source is not None else None
        return spark_replay(session or get_spark("tablekeeper-delta-replay"), root, segment, paths)

    return replay
