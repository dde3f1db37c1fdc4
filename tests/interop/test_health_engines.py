"""health reads the same table the same way wherever it runs: in this process, one process per
core (a table of many manifests, no Spark), on the executors (a session is there), and a fleet on
driver threads or one table per Spark task."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import CatalogsConfig, parse_catalogs
from tablekeeper.commit.producer import SnapshotChange
from tablekeeper.commit.transaction import Committer
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.rewrite_plan import expected_files_after
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.compact import plan as compact_plan
from tablekeeper.jobs.compact.options import CompactOptions
from tablekeeper.jobs.health import HealthOptions, run
from tablekeeper.jobs.health.iceberg import (
    SPARK_MIN_MANIFESTS,
    iceberg_health,
    tally_in_processes,
    tally_on_driver,
)
from tablekeeper.jobs.health.model import Thresholds
from tablekeeper.spark.health import spark_tally

MANIFESTS = SPARK_MIN_MANIFESTS + 6
FILES_PER_MANIFEST = 12
PARTITIONS = 7


def _files(location: str, first: int, count: int) -> tuple[DataFile, ...]:
    # Metadata only: health never opens a data file. Sizes vary so packing order matters.
    return tuple(
        DataFile(
            DATA,
            f"{location}/data/f-{i:06d}.parquet",
            "PARQUET",
            (i % PARTITIONS,),
            10,
            1000 + (i * 7919) % 5000,
        )
        for i in range(first, first + count)
    )


def _table(catalogs: CatalogsConfig, name: str, manifests: int, per: int, target: int) -> str:
    catalog = catalog_for(catalogs.get("h"))
    identifier = f"engines.{name}"
    location = str(Path(catalogs.get("h").warehouse) / "engines" / name)
    meta = new_table_metadata(
        schema=Schema(0, (NestedField(1, "p", LONG), NestedField(2, "v", LONG))),
        location=location,
        timestamp_ms=int(time.time() * 1000),
        spec=PartitionSpec(0, (PartitionField(1, 1000, "p", "identity"),)),
        # A small target and a low group size make several groups per partition.
        properties={
            "commit.manifest-merge.enabled": "false",
            "write.target-file-size-bytes": str(target),
        },
    )
    catalog.create_table(identifier, meta)
    committer = Committer(catalog, identifier)
    for m in range(manifests):
        committer.commit_snapshot(SnapshotChange("append", added_files=_files(location, m * per, per)))
    return identifier


@pytest.fixture(scope="module")
def engines_catalogs(tmp_path_factory: pytest.TempPathFactory) -> CatalogsConfig:
    work = tmp_path_factory.mktemp("health-engines")
    text = (
        "default: h\ncatalogs:\n"
        "  h: {type: sql, uri: 'sqlite:///${warehouse}/catalog.db', warehouse: '${warehouse}/wh'}\n"
    )
    return parse_catalogs(text, work)


def _comparable(health: Any) -> dict[str, Any]:
    metrics = dict(health.metrics)
    metrics.pop("metadata_json_bytes", None)
    return {"metrics": metrics, "recommendations": [r.to_json() for r in health.recommendations]}


def test_a_big_table_reads_alike_in_this_process_in_processes_and_on_executors(
    engines_catalogs: CatalogsConfig, spark: Any
) -> None:
    identifier = _table(engines_catalogs, "big", MANIFESTS, FILES_PER_MANIFEST, target=20_000)
    catalog = catalog_for(engines_catalogs.get("h"))
    now = int(time.time() * 1000)

    def health(**kw: Any) -> Any:
        return iceberg_health(catalog, identifier, Thresholds(), {}, now_ms=now, **kw)

    here = health(reader=tally_on_driver)
    processes = health(reader=tally_in_processes)
    executors = health(reader=spark_tally(spark))
    chosen = health(spark=spark)  # a session and >= SPARK_MIN_MANIFESTS manifests: the executors

    assert here.metrics["data_files"] == MANIFESTS * FILES_PER_MANIFEST
    assert here.metrics["data_manifests"] == MANIFESTS
    compact = next(r for r in here.recommendations if r.job == "compact")
    planned, _ = compact_plan(spark, catalog.require(identifier), CompactOptions(table=identifier))
    assert compact.effect["groups"] == len(planned.groups) == PARTITIONS
    assert compact.effect["files_rewritten"] == planned.files
    assert compact.effect["data_files_after"] == expected_files_after(planned, MANIFESTS * FILES_PER_MANIFEST)
    assert compact.effect["data_files_after"] > PARTITIONS  # the target splits each partition
    assert _comparable(processes) == _comparable(here)
    assert _comparable(executors) == _comparable(here)
    assert _comparable(chosen) == _comparable(here)


def test_a_fleet_reads_alike_on_driver_threads_and_spark_tasks(
    engines_catalogs: CatalogsConfig, spark: Any
) -> None:
    for i in range(3):
        _table(engines_catalogs, f"small{i}", 2 + i * 3, 4, target=1_000_000)
    on_driver = JobContext(engines_catalogs, spark=lambda: pytest.fail("no Spark"), submitted=lambda: None)
    on_spark = JobContext(engines_catalogs, spark=lambda: spark, submitted=lambda: spark)
    options = HealthOptions(catalog="h", namespace="engines", tables="small*", output="json", sort="name")

    threads = run(options, on_driver)
    tasks = run(HealthOptions(**{**options.__dict__, "engine": "spark"}), on_spark)

    def tables(result: Any) -> list[dict[str, Any]]:
        out = []
        for t in result.tables:
            body = t.to_json()
            body["metrics"].pop("metadata_json_bytes", None)
            out.append(body)
        return out

    assert [t["table"] for t in tables(threads)] == ["engines.small0", "engines.small1", "engines.small2"]
    assert tables(tasks) == tables(threads)
    # Over 7 partitions, only small2's 32 files put at least 5 (min-input-files) in a partition.
    jobs = [[r["job"] for r in t["recommendations"]] for t in tables(threads)]
    assert jobs == [[], [], ["compact"]]
    assert threads.metrics["tables_needing_work"] == 1
