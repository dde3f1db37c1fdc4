"""convert-delta over a Delta table's history, against delta-spark as the reference.

Tables are written here by delta-spark through scenarios a real table goes through (appends, DV
deletes, updates, schema evolution, OPTIMIZE, RESTORE, overwrite, column mapping renames and
drops, log cleanup). For every converted version, Iceberg Spark reading that snapshot returns
exactly the rows delta-spark returns for that version; PyIceberg reads the latest.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tablekeeper.catalog import catalog_for
from tablekeeper.errors import CommitStateUnknown, ConfigError, StorageError
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.tables.iceberg import live_files
from tests.conftest import SQL_CATALOG
from tests.support.pyiceberg_check import assert_pyiceberg_latest

pytestmark = pytest.mark.spark

NS = "hist"


def _json_rows(df: DataFrame) -> DataFrame:
    # Set operations refuse map columns: compare each row as its JSON text.
    return df.select(F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("row"))


def assert_same(iceberg: DataFrame, delta: DataFrame, what: str) -> None:
    assert iceberg.columns == delta.columns, f"{what}: columns {iceberg.columns} != {delta.columns}"
    delta = delta.select([F.col(f"`{c}`").cast(iceberg.schema[c].dataType).alias(c) for c in iceberg.columns])
    # One job: the multiset difference, as +1 per Iceberg row and -1 per delta-spark row.
    sides = (
        _json_rows(iceberg).withColumn("n", F.lit(1)).unionAll(_json_rows(delta).withColumn("n", F.lit(-1)))
    )
    differ = sides.groupBy("row").agg(F.sum("n").alias("n")).filter("n != 0").limit(6).collect()
    assert not differ, (
        f"{what}: rows differ (n > 0: only Iceberg has them, n < 0: only delta-spark): {differ}"
    )


def snapshots_by_version(spark: SparkSession, table: str) -> dict[int, int]:
    rows = spark.sql(f"SELECT snapshot_id, summary FROM {table}.snapshots").collect()
    return {int(r.summary["tablekeeper.delta-version"]): r.snapshot_id for r in rows}


def assert_every_version(spark: SparkSession, table: str, source: Path, versions: range) -> None:
    spark.sql(f"REFRESH TABLE {table}")
    by_version = snapshots_by_version(spark, table)
    assert sorted(by_version) == list(versions)
    for v in versions:
        iceberg = spark.sql(f"SELECT * FROM {table} VERSION AS OF {by_version[v]}")
        delta = spark.read.format("delta").option("versionAsOf", v).load(str(source))
        assert_same(iceberg, delta, f"{table} at Delta version {v}")


def convert(catalogs: Any, source: Path, target: str, spark: SparkSession | None = None, **kw: Any):  # type: ignore[no-untyped-def]
    catalog = kw.pop("catalog", None) or catalog_for(catalogs.get(SQL_CATALOG))
    return run_convert(ConvertDeltaOptions(source=str(source), target=target, **kw), catalog, spark)


# -----------------------------------------------------------------------------------------------
# Scenario tables


def plain_rows(spark: SparkSession, lo: int, hi: int) -> DataFrame:
    return spark.range(lo, hi).selectExpr(
        "id",
        "CASE WHEN id % 4 = 0 THEN NULL WHEN id % 4 = 1 THEN 'a b/c=d%e' "
        "ELSE CAST(id % 3 AS STRING) END AS p",
        "CAST(id * 1.5 AS DOUBLE) AS v",
        "CAST(TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS TIMESTAMP_NTZ) AS ntz",
    )


def write_plain(spark: SparkSession, path: Path) -> None:
    """v0 create (partitioned, DVs on) .. v2; the rest is added by `evolve_plain`."""
    plain_rows(spark, 0, 60).repartition(3).write.format("delta").partitionBy("p").option(
        "delta.enableDeletionVectors", "true"
    ).save(str(path))  # v0
    plain_rows(spark, 60, 80).repartition(2).write.format("delta").mode("append").save(str(path))  # v1
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")  # v2: deletion vectors


def evolve_plain(spark: SparkSession, path: Path) -> None:
    t = f"delta.`{path}`"
    spark.sql(f"UPDATE {t} SET v = v + 100 WHERE id % 5 = 0")  # v3: DVs + new files
    plain_rows(spark, 80, 90).withColumn("extra", F.col("id") * 2).write.format("delta").mode(
        "append"
    ).option("mergeSchema", "true").save(str(path))  # v4: a new column
    spark.sql(f"OPTIMIZE {t}")  # v5: rewrite, dataChange=false
    spark.sql(f"DELETE FROM {t} WHERE id % 11 = 0")  # v6


def finish_plain(spark: SparkSession, path: Path) -> None:
    t = f"delta.`{path}`"
    spark.sql(f"RESTORE TABLE {t} TO VERSION AS OF 3")  # v7: files and schema of v3 come back
    plain_rows(spark, 200, 230).write.format("delta").mode("overwrite").save(str(path))  # v8
    spark.sql(f"DELETE FROM {t} WHERE id % 3 = 0")  # v9


@pytest.fixture(scope="module")
def plain_history(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """The ten-version scenario table, written once: each format's conversion only reads it."""
    source = tmp_path_factory.mktemp("history") / "plain"
    write_plain(spark, source)
    evolve_plain(spark, source)
    finish_plain(spark, source)
    return source


@pytest.mark.parametrize("format_version", [3, 2])
def test_full_history_matches_delta_at_every_version(
    spark, catalogs, plain_history: Path, format_version: int
) -> None:  # type: ignore[no-untyped-def]
    source = plain_history
    ident = f"{NS}.plain_v{format_version}"
    result = convert(catalogs, source, ident, history="all", format_version=format_version, verify="metadata")
    m = result.metrics
    assert (m["snapshots_committed"], m["versions_converted"], m["delta_version"]) == (10, 10, 9)
    assert m["verified"]["versions_verified"] == 10
    assert m["delete_files"] > 0 and m["data_files_removed"] > 0
    table = f"{SQL_CATALOG}.{ident}"
    assert_every_version(spark, table, source, range(10))
    ops = {
        int(r.summary["tablekeeper.delta-version"]): r.operation
        for r in spark.sql(f"SELECT operation, summary FROM {table}.snapshots").collect()
    }
    assert ops[0] == "append" and ops[1] == "append" and ops[2] == "delete" and ops[5] == "replace"
    # Snapshot times are the Delta commit times, in order.
    times = [r.committed_at for r in spark.sql(f"SELECT committed_at FROM {table}.snapshots").collect()]
    assert times == sorted(times) and times[-1] <= dt.datetime.now()
    assert_pyiceberg_latest(spark, catalogs, ident, source)


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_renames_drops_and_nested_types(spark, catalogs, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / f"cm_{mode}"
    t = f"delta.`{source}`"
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, s STRUCT<a: INT, b: STRING>, arr ARRAY<STRUCT<x: INT, y: STRING>>, "
        "ts TIMESTAMP, part STRING) USING delta PARTITIONED BY (part) "
        f"TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}', 'delta.enableDeletionVectors' = 'true')"
    )  # v0: empty
    spark.sql(
        f"INSERT INTO {t} SELECT id, named_struct('a', CAST(id AS INT), 'b', CAST(id AS STRING)), "
        "array(named_struct('x', CAST(id AS INT), 'y', 'e'), named_struct('x', 1, 'y', NULL)), "
        "TIMESTAMP'2024-03-01 10:00:00' + make_interval(0,0,0,id), "
        "IF(id % 2 = 0, 'even', 'odd') FROM range(0, 40)"
    )  # v1
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN s TO s_renamed")  # v2
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN arr TO items")  # v3
    spark.sql(f"ALTER TABLE {t} DROP COLUMN ts")  # v4
    spark.sql(f"ALTER TABLE {t} ADD COLUMNS (ts BIGINT)")  # v5: same name, new column and type
    spark.sql(
        f"INSERT INTO {t} SELECT id, named_struct('a', 1, 'b', 'z'), array(), 'new', id * 10 "
        "FROM range(40, 50)"
    )  # v6
    spark.sql(f"DELETE FROM {t} WHERE id % 3 = 0")  # v7
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN part TO side")  # v8: the target's spec moves on
    spark.sql(f"DELETE FROM {t} WHERE id % 5 = 0")  # v9: new DVs for files of the older spec
    ident = f"{NS}.cm_{mode}"
    result = convert(catalogs, source, ident, history="all", format_version=3)
    assert result.metrics["snapshots_committed"] == 10
    assert_every_version(spark, f"{SQL_CATALOG}.{ident}", source, range(10))
    assert_pyiceberg_latest(spark, catalogs, ident, source)
    # Each DV is in its data file's spec and partition (Iceberg Java fails a scan otherwise).
    table = catalog_for(catalogs.get(SQL_CATALOG)).require(ident)
    files = live_files(table.io, table.metadata, table.metadata.current_snapshot())
    home = {e.data_file.file_path: (e.data_file.spec_id, e.data_file.partition) for e in files.data}
    dvs = [e.data_file for e in files.deletes if e.data_file.referenced_data_file]
    assert len(table.metadata.partition_specs) == 2 and dvs
    assert all(home[str(d.referenced_data_file)] == (d.spec_id, d.partition) for d in dvs)


def test_maps_and_arrays_of_primitives_need_nested_ids(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Column-mapped files carry ids for columns; map keys/values and array elements get ids only
    with IcebergCompatV2 (nested ids). Without them Iceberg readers cannot resolve those children,
    so the converter refuses and names the column (--rewrite-unreadable-files rewrites them:
    test_convert_rewrite_unreadable)."""
    columns = "id BIGINT, m MAP<STRING, ARRAY<INT>>, tags ARRAY<STRING>, s STRUCT<a: MAP<INT, STRING>>"
    rows = "SELECT id, map('k', array(CAST(id AS INT), 2)), array('t', NULL), named_struct('a', map(1, 'x'))"
    plain = tmp_path / "cm_no_nested_ids"
    spark.sql(
        f"CREATE TABLE delta.`{plain}` ({columns}) USING delta "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    )
    spark.sql(f"INSERT INTO delta.`{plain}` {rows} FROM range(0, 5)")
    with pytest.raises(ConfigError, match="Delta column 'm': its keys have no column-mapping id"):
        convert(catalogs, plain, f"{NS}.cm_refused")
    compat = tmp_path / "cm_nested_ids"
    spark.sql(
        f"CREATE TABLE delta.`{compat}` ({columns}) USING delta TBLPROPERTIES "
        "('delta.columnMapping.mode' = 'name', 'delta.enableIcebergCompatV2' = 'true')"
    )
    spark.sql(f"INSERT INTO delta.`{compat}` {rows} FROM range(0, 20)")
    spark.sql(f"ALTER TABLE delta.`{compat}` RENAME COLUMN m TO m2")
    spark.sql(f"INSERT INTO delta.`{compat}` {rows} FROM range(20, 25)")
    ident = f"{NS}.cm_compat"
    assert convert(catalogs, compat, ident, history="all").metrics["snapshots_committed"] == 4
    assert_every_version(spark, f"{SQL_CATALOG}.{ident}", compat, range(4))
    assert_pyiceberg_latest(spark, catalogs, ident, compat)


def test_incremental_equals_full_and_twice_adds_nothing(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "inc"
    write_plain(spark, source)
    latest_inc, all_inc = f"{NS}.inc_latest", f"{NS}.inc_all"
    for ident in (latest_inc, all_inc):
        first = convert(catalogs, source, ident, mode="incremental", format_version=3)
        assert first.metrics["mode"] == "full" and first.metrics["delta_version"] == 2
    evolve_plain(spark, source)  # v3..v6: update, schema change, OPTIMIZE, DV delete
    spark.sql(f"ALTER TABLE delta.`{source}` ADD COLUMNS (note STRING)")  # v7
    later = convert(catalogs, source, latest_inc, mode="incremental")
    assert later.metrics["mode"] == "incremental"
    assert (later.metrics["from_delta_version"], later.metrics["delta_version"]) == (2, 7)
    assert (later.metrics["versions_converted"], later.metrics["snapshots_committed"]) == (5, 1)
    stepwise = convert(catalogs, source, all_inc, mode="incremental", history="all")
    assert stepwise.metrics["snapshots_committed"] == 5
    fresh = convert(catalogs, source, f"{NS}.inc_fresh", format_version=3)
    for ident in (latest_inc, all_inc, f"{NS}.inc_fresh"):
        spark.sql(f"REFRESH TABLE {SQL_CATALOG}.{ident}")
        assert_same(
            spark.table(f"{SQL_CATALOG}.{ident}"), spark.read.format("delta").load(str(source)), ident
        )
    assert_every_version(spark, f"{SQL_CATALOG}.{all_inc}", source, range(2, 8))
    assert (
        fresh.metrics["data_files"]
        == later.metrics["data_files"] + first.metrics["data_files"] - later.metrics["data_files_removed"]
    )
    again = convert(catalogs, source, latest_inc, mode="incremental")
    assert again.metrics["snapshots_committed"] == 0 and again.metrics["note"] == "already up to date"
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    before = catalog.load_table(latest_inc).metadata_location
    convert(catalogs, source, latest_inc, mode="incremental", history="all")
    assert catalog.load_table(latest_inc).metadata_location == before


def _clean_log(source: Path, below: int) -> None:
    """What Delta's log cleanup leaves: commits and checkpoints before ``below`` are gone."""
    for f in (source / "_delta_log").iterdir():
        head = f.name.lstrip(".").split(".", 1)[0]
        if head.isdigit() and int(head) < below:
            f.unlink()


def test_log_cleanup_history_starts_at_checkpoint_and_incremental_resyncs(
    spark, catalogs, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "cleaned"
    plain_rows(spark, 0, 30).write.format("delta").option("delta.checkpointInterval", "2").option(
        "delta.enableDeletionVectors", "true"
    ).save(str(source))  # v0
    plain_rows(spark, 30, 40).write.format("delta").mode("append").save(str(source))  # v1
    ident = f"{NS}.cleaned_inc"
    convert(catalogs, source, ident, format_version=3)  # at v1
    t = f"delta.`{source}`"
    spark.sql(f"DELETE FROM {t} WHERE id % 4 = 0")  # v2 (+ checkpoint)
    plain_rows(spark, 40, 50).write.format("delta").mode("append").save(str(source))  # v3
    spark.sql(f"UPDATE {t} SET v = -v WHERE id % 5 = 1")  # v4 (+ checkpoint)
    spark.sql(f"DELETE FROM {t} WHERE id = 41")  # v5
    assert (source / "_delta_log" / f"{4:020d}.checkpoint.parquet").exists()
    _clean_log(source, 4)
    resynced = convert(catalogs, source, ident, mode="incremental", history="all")
    m = resynced.metrics
    assert m["resynced"] is True and "cleaned up" in str(m["note"]) and m["snapshots_committed"] == 2
    spark.sql(f"REFRESH TABLE {SQL_CATALOG}.{ident}")
    assert_same(spark.table(f"{SQL_CATALOG}.{ident}"), spark.read.format("delta").load(str(source)), ident)
    full = f"{NS}.cleaned_full"
    assert (
        convert(catalogs, source, full, history="all", format_version=2).metrics["snapshots_committed"] == 2
    )
    assert_every_version(spark, f"{SQL_CATALOG}.{full}", source, range(4, 6))


class _FailingCommits:
    """A catalog whose pointer swap (or create) fails: every file of the attempt has been
    written by then."""

    def __init__(self, inner: Any, error: Exception) -> None:
        self.inner, self.error = inner, error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, base: Any, new: Any) -> Any:
        raise self.error

    def create_table(self, identifier: str, metadata: Any) -> Any:
        raise self.error


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_failed_commit_leaves_target_unchanged_and_rerun_converges(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "faulty"
    write_plain(spark, source)
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    ident = f"{NS}.faulty"
    failing = _FailingCommits(catalog, StorageError("injected: the catalog is down"))
    with pytest.raises(StorageError):
        convert(catalogs, source, ident, catalog=failing, format_version=3)
    # A full conversion is created with all it converted, or not at all: no table, no file left.
    assert not catalog.table_exists(ident)
    location = Path(catalog.default_table_location(ident))
    assert _files_under(location) == set()
    convert(catalogs, source, ident, format_version=3)  # the same command, again
    evolve_plain(spark, source)
    before, files = catalog.load_table(ident).metadata_location, _files_under(location)
    for options in ({}, {"history": "all"}, {"engine": "spark"}):
        with pytest.raises(StorageError):
            convert(catalogs, source, ident, spark, catalog=failing, mode="incremental", **options)
        assert catalog.load_table(ident).metadata_location == before
        assert _files_under(location) == files, "staged manifests, lists or deletes left behind"
    # On an unknown commit state nothing is removed: the new metadata may be live.
    unknown = _FailingCommits(catalog, CommitStateUnknown("injected: timeout after the request"))
    with pytest.raises(CommitStateUnknown):
        convert(catalogs, source, ident, catalog=unknown, mode="incremental")
    assert len(_files_under(location)) > len(files)
    convert(catalogs, source, ident, mode="incremental", history="all")
    assert_every_version(spark, f"{SQL_CATALOG}.{ident}", source, range(2, 7))


def test_executor_path_cleans_up_on_failure_and_auto_picks_it_for_large_logs(  # type: ignore[no-untyped-def]
    spark, catalogs, tmp_path: Path, monkeypatch
) -> None:
    import tablekeeper.jobs.convert_delta as job

    source = tmp_path / "exec"
    write_plain(spark, source)
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    ident = f"{NS}.exec"
    failing = _FailingCommits(catalog, StorageError("injected: the catalog is down"))
    with pytest.raises(StorageError):
        convert(catalogs, source, ident, spark, catalog=failing, engine="spark", format_version=3)
    assert not catalog.table_exists(ident)
    location = Path(catalog.default_table_location(ident))
    # Manifests the executors wrote, the driver's Puffin file and the manifest list are all gone.
    assert _files_under(location) == set()
    # auto: a log above the threshold goes to the executors without being asked.
    monkeypatch.setattr(job, "DISTRIBUTE_LOG_BYTES", 0)
    result = convert(catalogs, source, ident, spark, format_version=3)
    assert result.metrics["manifest_writer"] == "executors" and result.metrics["delete_files"] > 0
    spark.sql(f"REFRESH TABLE {SQL_CATALOG}.{ident}")
    assert_same(spark.table(f"{SQL_CATALOG}.{ident}"), spark.read.format("delta").load(str(source)), ident)
    assert_pyiceberg_latest(spark, catalogs, ident, source)


def test_incremental_on_spark_brings_only_touched_files_to_the_driver(  # type: ignore[no-untyped-def]
    spark, catalogs, tmp_path: Path, monkeypatch
) -> None:
    """An incremental run whose replay goes to Spark asks it for the files the new commits name,
    not for two whole states, and commits what a run that read both states commits."""
    import tablekeeper.spark.delta_replay as replay_module
    from tablekeeper.io import FileIO
    from tablekeeper.tables.delta import touched_paths

    source = tmp_path / "inc_spark"
    write_plain(spark, source)
    ident, reference = f"{NS}.inc_spark", f"{NS}.inc_spark_ref"
    for target in (ident, reference):
        convert(catalogs, source, target, format_version=3)
    t = f"delta.`{source}`"
    spark.sql(f"UPDATE {t} SET v = -v WHERE id = 61")  # v3: a DV on one file, a new file
    plain_rows(spark, 80, 90).withColumn("extra", F.col("id") * 2).write.format("delta").mode(
        "append"
    ).option("mergeSchema", "true").save(str(source))  # v4: a new column
    spark.sql(f"DELETE FROM {t} WHERE id = 62")  # v5: that file's DV replaced
    spark.sql(f"DELETE FROM {t} WHERE p IS NULL")  # v6: whole files removed
    touched = touched_paths(FileIO.for_location(str(source)), str(source), 3, 6)
    live_before = spark.read.format("delta").option("versionAsOf", 2).load(str(source)).inputFiles()
    assert len(touched) > 0 and set(live_before) - {f"file:{p}" for p in touched}, "untouched files remain"

    real = replay_module.spark_replay
    returned: list[tuple[set[str], int]] = []

    def spy(session, root, segment, paths=None):  # type: ignore[no-untyped-def]
        snap = real(session, root, segment, paths)
        got = {
            *snap.files.column("absolute_path").to_pylist(),
            *snap.tombstones.column("absolute_path").to_pylist(),
        }
        returned.append((got, -1 if paths is None else len(paths)))
        return snap

    monkeypatch.setattr(replay_module, "spark_replay", spy)
    result = convert(catalogs, source, ident, spark, mode="incremental", engine="spark")
    monkeypatch.undo()
    assert result.metrics["mode"] == "incremental" and result.metrics["snapshots_committed"] == 1
    # Base and latest state, each of the touched paths only (then the check against VACUUM,
    # of the files older snapshots reference).
    assert all(asked >= 0 for _, asked in returned)
    assert len(returned) >= 2 and all(asked == len(touched) for _, asked in returned[:2])
    assert all(got <= set(touched) for got, _ in returned[:2]) and returned[0][0]

    convert(catalogs, source, reference, mode="incremental")  # pure replay of both whole states
    contents: list[tuple[set[str], int]] = []
    for target in (ident, reference):
        spark.sql(f"REFRESH TABLE {SQL_CATALOG}.{target}")
        assert_same(
            spark.table(f"{SQL_CATALOG}.{target}"), spark.read.format("delta").load(str(source)), target
        )
        rows = spark.sql(f"SELECT file_path, content FROM {SQL_CATALOG}.{target}.files").collect()
        contents.append(({r.file_path for r in rows if r.content == 0}, sum(1 for r in rows if r.content)))
    assert contents[0] == contents[1]


def test_vacuumed_files_without_stats_on_spark(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The Spark paths agree with the driver's (unit tests): history replayed through Spark skips
    the versions reaching a file gone without a record count; the executors refuse a newest
    version missing one by name."""
    from tablekeeper.errors import DataFileGone
    from tests.unit.jobs.convert_delta.test_gone_files import _table

    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    source = _table(tmp_path / "vacuumed")
    options = ConvertDeltaOptions(source=str(source), target=f"{NS}.vacuumed", history="all", engine="spark")
    metrics = run_convert(options, catalog, spark).metrics
    assert metrics["not_converted_for_vacuum"]["delta_versions"] == [1, 2]
    table = f"{SQL_CATALOG}.{NS}.vacuumed"
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(snapshots_by_version(spark, table)) == [0, 3]
    assert_same(spark.table(table), spark.read.format("delta").load(str(source)), "after VACUUM")
    broken = _table(tmp_path / "broken", newest_gone=True)
    latest = ConvertDeltaOptions(source=str(broken), target=f"{NS}.broken", engine="spark")
    with pytest.raises(DataFileGone, match=r"c\.parquet"):
        run_convert(latest, catalog, spark)
