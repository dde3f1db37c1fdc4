"""Delta replay and convert-delta's executor path reading the checkpoint in Spark tasks give the
driver's answer.

Every shared table with a Parquet checkpoint, and tables delta-spark writes here with commits that
supersede checkpointed files (deletes through deletion vectors, OPTIMIZE, re-adds), are replayed
and converted on the executors and on the driver: the replayed state (every column of the live
files, the tombstones) and the data files (paths, counts, bounds, partitions, row ids) must be
the same. A checkpoint that names a file twice is caught and replayed in Spark SQL. For the shared
tables the driver's conversion and the Spark replay are the session's (tests/support/delta_corpus.py).
"""

from __future__ import annotations

import logging
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.delta.segment import build_segment
from tablekeeper.errors import TablekeeperError
from tablekeeper.io import FileIO
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.spark import checkpoint_files
from tablekeeper.spark.convert_files import ADD_COLUMNS
from tablekeeper.spark.delta_replay import spark_replay
from tablekeeper.tables.delta import list_log, load_snapshot
from tablekeeper.tables.iceberg import live_files
from tests.conftest import SQL_CATALOG
from tests.interop.test_convert_delta import assert_same_rows
from tests.support.delta_corpus import conversion_target
from tests.support.delta_tables import SHARED_TABLES, shared_table_path

pytestmark = pytest.mark.spark

TASKS_LOGGER = "tablekeeper.spark.checkpoint_files"
CHECKPOINTED = [
    name
    for name in SHARED_TABLES
    if any((shared_table_path(name) / "_delta_log").glob("*checkpoint*.parquet"))
]


def _files(catalogs: Any, target: str) -> tuple[dict[str, Any], list[tuple[str | None, int]]]:
    """The live data files by path (row ids aside where Iceberg assigns them per manifest) and the
    delete files as (data file, rows deleted)."""
    table = catalog_for(catalogs.get(SQL_CATALOG)).require(target)
    live = live_files(table.io, table.metadata, table.metadata.current_snapshot())
    data = {e.data_file.file_path: e.data_file for e in live.data}
    deletes = sorted((e.data_file.referenced_data_file, e.data_file.record_count) for e in live.deletes)
    return data, deletes


def _convert(catalogs: Any, spark: Any, source: Path, target: str, engine: str, **options: Any) -> Any:
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    return run_convert(
        ConvertDeltaOptions(source=str(source), target=target, engine=engine, **options), catalog, spark
    )


def _outcome(catalogs: Any, spark: Any, source: Path, target: str, engine: str, **options: Any) -> Any:
    try:
        result = _convert(catalogs, spark, source, target, engine, **options)
    except TablekeeperError as err:
        return type(err).__name__, err.message
    assert result.status == "ok"
    return _files(catalogs, target)


def _segment(root: Path) -> Any:
    io = FileIO.for_location(str(root))
    return build_segment(list_log(io, str(root)), table=str(root))


# Every column a data file is built from, and the key.
STATE_COLUMNS = ["dv_id", *ADD_COLUMNS]


def _state(snapshot: Any, paths: set[str] | None = None) -> tuple[list[Any], list[Any]]:
    """The live files (every column the replay fills) and the tombstones' keys, sorted."""
    files = snapshot.files.select(STATE_COLUMNS).to_pylist()
    tombstones = snapshot.tombstones.select(["absolute_path", "dv_id", "deletion_timestamp"]).to_pylist()
    if paths is not None:
        files = [f for f in files if f["absolute_path"] in paths]
        tombstones = [t for t in tombstones if t["absolute_path"] in paths]
    return sorted(files, key=repr), sorted(tombstones, key=repr)


def _ident(name: str) -> str:
    return "ckt." + "".join(c if c.isalnum() else "_" for c in name).lower()


@pytest.mark.parametrize("name", CHECKPOINTED)
def test_shared_checkpointed_tables_convert_alike_on_the_executors(
    spark, catalogs, delta_corpus, caplog: pytest.LogCaptureFixture, name: str
) -> None:  # type: ignore[no-untyped-def]
    source = delta_corpus.path(name)
    with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
        on_executors = _outcome(catalogs, spark, source, _ident(name) + "_exec", "spark", format_version=3)
    # The driver's conversion of the same copy, made once per session (test_convert_delta checks
    # its rows against delta-spark's).
    try:
        delta_corpus.converted(name, 3)
        on_driver: Any = _files(catalogs, conversion_target(name, 3))
    except TablekeeperError as err:
        on_driver = type(err).__name__, err.message
    assert on_executors == on_driver
    if isinstance(on_executors[0], dict):
        assert on_executors[0], "no data files: the comparison would be empty"
        assert "checkpoint read by" in caplog.text
    try:
        pure = load_snapshot(str(source))
    except TablekeeperError:
        return
    # The Spark replay of the latest version (test_delta_shared_tables checks the same snapshot's
    # file keys, protocol and metadata): every column of the live files and the tombstones.
    assert _state(delta_corpus.spark_replay(name)) == _state(pure)


@pytest.fixture(scope="module")
def superseding_table(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """A Delta table whose checkpoint is followed by commits that remove, DV-update and re-add
    checkpointed files, with partition values that need escaping, and row tracking on."""
    source = tmp_path_factory.mktemp("superseding") / "t"
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT, p STRING, v DOUBLE) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.checkpointInterval'='4', 'delta.enableDeletionVectors'='true', "
        "'delta.enableRowTracking'='true')"
    )
    for i in range(4):
        spark.range(i * 50, i * 50 + 50).selectExpr(
            "id",
            "CASE WHEN id % 3 = 0 THEN 'a b%c' WHEN id % 3 = 1 THEN 'x/y' ELSE 'plain' END AS p",
            "CAST(id AS DOUBLE) / 7 AS v",
        ).repartition(3).write.format("delta").mode("append").save(str(source))
    assert list((source / "_delta_log").glob("*.checkpoint.parquet")), "no checkpoint was written"
    # Versions 5-7, after the checkpoint of version 4 (the next one would be at 8).
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 11 = 0")  # DVs on checkpointed files
    spark.sql(f"UPDATE delta.`{source}` SET v = -v WHERE id % 13 = 0")  # DVs replaced, files added
    spark.sql(f"OPTIMIZE delta.`{source}` WHERE p = 'plain'")  # checkpointed files removed
    log_dir = source / "_delta_log"
    assert [p.name[:20] for p in log_dir.glob("*.checkpoint.parquet")] == [f"{4:020d}"]
    assert (log_dir / f"{7:020d}.json").exists() and not (log_dir / f"{8:020d}.json").exists()
    return source


def test_superseding_commits_convert_alike_on_either_replay_and_the_driver(
    spark,
    catalogs,
    superseding_table: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # type: ignore[no-untyped-def]
    source = superseding_table
    with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
        result = _convert(catalogs, spark, source, "ckt.sup_tasks", "spark", format_version=3, verify="rows")
    assert "checkpoint read by" in caplog.text
    assert result.metrics["manifest_writer"] == "executors"
    assert result.metrics["verified"]["mode"] == "rows"
    tasks = _files(catalogs, "ckt.sup_tasks")
    assert tasks[1], "the DVs became no delete files"
    assert_same_rows(spark, f"{SQL_CATALOG}.ckt.sup_tasks", source)
    # UPDATE and OPTIMIZE copied row ids into data files where Iceberg cannot see them, so every
    # path gives fresh ids, in its own manifest order: compared without them.
    assert result.metrics["row_lineage"]["row_ids"] == "fresh"
    tasks = _without_row_ids(tasks)
    caplog.clear()
    monkeypatch.setattr(checkpoint_files, "TAIL_BYTES", 0)  # the commits are too many: Spark SQL
    with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
        _convert(catalogs, spark, source, "ckt.sup_sql", "spark", format_version=3)
    assert "checkpoint read by" not in caplog.text
    _convert(catalogs, spark, source, "ckt.sup_driver", "driver", format_version=3)
    # The Spark replay too: the whole state, then only some files', as an incremental run asks.
    pure = load_snapshot(str(source))
    assert _state(spark_replay(spark, str(source), _segment(source))) == _state(pure)
    some = {
        *pure.files.column("absolute_path").to_pylist()[::5],
        *pure.tombstones.column("absolute_path").to_pylist()[::3],
    }
    assert _state(spark_replay(spark, str(source), _segment(source), sorted(some)), some) == _state(
        pure, some
    )
    for other in ("ckt.sup_sql", "ckt.sup_driver"):
        assert _differences(tasks, _without_row_ids(_files(catalogs, other))) == [], other


def _without_row_ids(files: Any) -> Any:
    return {p: replace(f, first_row_id=None) for p, f in files[0].items()}, files[1]


def _differences(a: Any, b: Any) -> list[Any]:
    """What differs between two ``_files`` answers: missing paths, then fields, a few at most."""
    out: list[Any] = [("only in one", sorted(set(a[0]) ^ set(b[0]))[:3])] if set(a[0]) != set(b[0]) else []
    for path in sorted(set(a[0]) & set(b[0])):
        x, y = a[0][path], b[0][path]
        out.extend(
            (path, f.name, getattr(x, f.name), getattr(y, f.name))
            for f in fields(x)
            if getattr(x, f.name) != getattr(y, f.name)
        )
    if a[1] != b[1]:
        out.append(("deletes", a[1], b[1]))
    return out[:5]


def test_a_checkpoint_naming_a_file_twice_is_replayed_in_spark_sql(
    spark, catalogs, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "dup"
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval'='3')"
    )
    for i in range(3):
        spark.range(i * 10, i * 10 + 10).repartition(2).write.format("delta").mode("append").save(str(source))
    checkpoint = next((source / "_delta_log").glob("*.checkpoint.parquet"))
    table = pq.read_table(checkpoint)
    first_add = next(i for i, v in enumerate(table.column("add").to_pylist()) if v is not None)
    pq.write_table(pa.concat_tables([table, table.slice(first_add, 1)]), checkpoint)
    for side in source.rglob(".*.crc"):
        side.unlink()
    with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
        result = _convert(catalogs, spark, source, "ckt.dup_exec", "spark")
    assert "names a file more than once" in caplog.text
    assert result.metrics["data_files"] == 6
    _convert(catalogs, spark, source, "ckt.dup_driver", "driver")
    on_executors, on_driver = _files(catalogs, "ckt.dup_exec"), _files(catalogs, "ckt.dup_driver")
    assert on_executors == on_driver and len(on_executors[0]) == 6
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
        replayed = spark_replay(spark, str(source), _segment(source))
    assert "names a file more than once" in caplog.text
    assert replayed.file_keys() == load_snapshot(str(source)).file_keys()
    # The tasks' manifests were removed before the replay wrote its own: none is left unreferenced.
    table_meta = catalog_for(catalogs.get(SQL_CATALOG)).require("ckt.dup_exec").metadata
    referenced = {m.manifest_path.rsplit("/", 1)[-1] for m in _manifests(catalogs, "ckt.dup_exec")}
    metadata_dir = Path(table_meta.location.removeprefix("file:"), "metadata")
    written = {p.name for p in metadata_dir.glob("*.avro") if not p.name.startswith("snap-")}
    assert written == referenced


def _manifests(catalogs: Any, target: str) -> list[Any]:
    from tablekeeper.tables.iceberg import load_manifests

    table = catalog_for(catalogs.get(SQL_CATALOG)).require(target)
    return list(load_manifests(table.io, table.metadata.current_snapshot()))
