"""The shared Delta tables as the reference engines see them, each answer computed once per session.

Several test files make claims about the same tables (tests/support/delta_tables.py): delta-spark's
snapshot at a few versions, its rows, the Spark replay of the log, the driver's conversion. Each is
expensive (a JVM snapshot, a scan, a conversion), so the session keeps one read-only copy of each
table and computes each answer at most once, on first use; every test asks ``DeltaCorpus`` instead
of reading again. A refusal is an answer too: it is kept and raised again to every later caller.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from tablekeeper.catalog import catalog_for
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.errors import TablekeeperError
from tablekeeper.jobs.common.engines import delta_replay
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.tables.delta import load_snapshot
from tests.support.delta_reference import DeltaReference, delta_spark_state, delta_spark_versions
from tests.support.delta_tables import copy_table

T = TypeVar("T")


def conversion_target(name: str, version: int) -> str:
    """The Iceberg identifier a shared table is converted to (format ``version``)."""
    return "conv." + "".join(c if c.isalnum() else "_" for c in name).lower() + f"_v{version}"


class DeltaCorpus:
    """Session-wide answers about the shared Delta tables; only tests use this class.

    The copies live under ``root``; nothing may write to them (a test that writes copies the table
    itself, ``delta_table_copy``). Hadoop's local checksum side files (``.<name>.crc``) are left out
    of the copies: one table's are stale, and delta-spark's data read (and convert-delta's Spark
    path) would fail on them, while they are no part of a Delta table.
    """

    def __init__(self, spark: SparkSession, catalogs: Any, catalog_name: str, root: Path) -> None:
        self.spark = spark
        self.catalogs = catalogs
        self.catalog_name = catalog_name
        self.root = root
        self._answers: dict[tuple[Any, ...], tuple[bool, Any]] = {}

    def _once(self, key: tuple[Any, ...], compute: Callable[[], T], refusals: type[BaseException]) -> T:
        if key not in self._answers:
            try:
                self._answers[key] = (True, compute())
            except refusals as err:
                self._answers[key] = (False, err)
        ok, answer = self._answers[key]
        if not ok:
            raise answer
        return answer  # type: ignore[no-any-return]

    def path(self, name: str) -> Path:
        """The session's read-only copy of the shared table ``name``."""

        def copy() -> Path:
            target = copy_table(name, self.root)
            for side in target.rglob(".*.crc"):
                side.unlink()
            return target

        return self._once(("path", name), copy, FileNotFoundError)

    def versions(self, name: str) -> list[int]:
        """The versions delta-spark can time-travel to (``delta_spark_versions``)."""
        return self._once(
            ("versions", name), lambda: delta_spark_versions(self.spark, str(self.path(name))), Exception
        )

    def state(self, name: str, version: int | None = None) -> DeltaReference:
        """delta-spark's snapshot (``delta_spark_state``); raises its DeltaSparkRefused again."""
        return self._once(
            ("state", name, version),
            lambda: delta_spark_state(self.spark, str(self.path(name)), version),
            Exception,
        )

    def rows(self, name: str) -> DataFrame:
        """delta-spark's rows of the latest version, scanned once (a local checkpoint) and kept."""
        return self._once(
            ("rows", name),
            lambda: self.spark.read.format("delta").load(str(self.path(name))).localCheckpoint(eager=True),
            Exception,
        )

    def spark_replay(self, name: str) -> DeltaSnapshot:
        """tablekeeper's snapshot of the latest version, its log replayed in Spark."""
        return self._once(
            ("spark_replay", name),
            lambda: load_snapshot(str(self.path(name)), replay=delta_replay("spark", self.spark)),
            TablekeeperError,
        )

    def converted(self, name: str, version: int) -> Any:
        """convert-delta's result for the table as Iceberg format ``version`` (driver-built, the
        log's live rows per partition verified against the manifests), or its refusal raised
        again. The Iceberg table is ``conversion_target(name, version)`` in ``catalog_name``."""
        options = ConvertDeltaOptions(
            source=str(self.path(name)),
            target=conversion_target(name, version),
            format_version=version,
            verify="metadata",
        )
        catalog = catalog_for(self.catalogs.get(self.catalog_name))
        key = ("converted", name, version)
        return self._once(key, lambda: run_convert(options, catalog), TablekeeperError)
