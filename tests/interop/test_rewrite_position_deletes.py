"""rewrite-position-deletes against Iceberg's own rewrite_position_delete_files, on twin tables
written by Iceberg Spark (partitioned, many small merge-on-read DELETEs, partition evolution):
Iceberg Spark and PyIceberg read the same rows as before, the same data files stay live, our
delete files end no more numerous than Iceberg's, dangling deletes go; on v3 (upgraded from v2)
every data file ends with at most one DV and no position delete file, row lineage unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.cli import main
from tablekeeper.jobs.backfill_row_lineage import BackfillRowLineageOptions, run_backfill
from tablekeeper.jobs.rewrite_position_deletes import (
    RewritePositionDeletesOptions,
    run_rewrite_position_deletes,
)
from tests.conftest import FS_CATALOG
from tests.support.delete_files import iceberg_table_with_every_delete_format
from tests.support.pyiceberg_check import assert_pyiceberg_same_rows

pytestmark = pytest.mark.spark


def _rows(spark, sql: str) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    return sorted((tuple(r) for r in spark.sql(sql).collect()), key=repr)


def _build(spark, name: str, *, upgrade: bool, catalog: Any) -> str:  # type: ignore[no-untyped-def]
    """Partition-scoped position deletes (one file per partition per DELETE, naming several data
    files), a partition field added midway, and a rewrite of partition b's data files that
    leaves its delete entries dangling. ``upgrade``: then to v3, and DELETEs that add DVs."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.delete.granularity'='partition')"
    )
    for i in range(2):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 3 = 0, 'c', IF(id % 2 = 0, 'a', 'b')) "
            f"FROM range({i * 60}, {(i + 1) * 60})"
        )
    for k in range(4):
        spark.sql(f"DELETE FROM {table} WHERE id % 11 = {k}")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(2, id)")
    spark.sql(f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range(120, 160)")
    for k in range(4, 5):
        spark.sql(f"DELETE FROM {table} WHERE id % 11 = {k}")
    spark.sql(
        f"CALL {FS_CATALOG}.system.rewrite_data_files(table => 'db.{name}', where => \"cat = 'b'\", "
        "options => map('rewrite-all', 'true'))"
    )
    if upgrade:
        run_backfill(BackfillRowLineageOptions(f"db.{name}"), catalog, f"db.{name}")
        spark.sql(f"REFRESH TABLE {table}")
        for k in range(5, 7):
            spark.sql(f"DELETE FROM {table} WHERE id % 11 = {k}")
    return table


def _deletes(spark, table: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    got = spark.sql(f"SELECT file_format, count(*) FROM {table}.delete_files GROUP BY file_format").collect()
    return {str(r[0]): int(r[1]) for r in got}


def _data_files(spark, table: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.data_files").collect()}


def _state(spark, table: str, lineage: bool) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    columns = "id, cat, _row_id, _last_updated_sequence_number" if lineage else "id, cat"
    return _rows(spark, f"SELECT {columns} FROM {table}")


def _java(spark, name: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    r = spark.sql(
        f"CALL {FS_CATALOG}.system.rewrite_position_delete_files(table => 'db.{name}', "
        "options => map('rewrite-all', 'true'))"
    ).collect()[0]
    return r.asDict()  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", [2, 3])
def test_twins_end_like_iceberg_with_rows_files_and_lineage_kept(spark, catalogs, version: int) -> None:  # type: ignore[no-untyped-def]
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    ours_name, theirs_name = f"rpd_v{version}_ours", f"rpd_v{version}_java"
    ours = _build(spark, ours_name, upgrade=version == 3, catalog=catalog)
    theirs = _build(spark, theirs_name, upgrade=version == 3, catalog=catalog)
    ident = f"db.{ours_name}"
    lineage = version == 3
    before, files_before, deletes_before = (
        _state(spark, ours, lineage),
        _data_files(spark, ours),
        _deletes(spark, ours),
    )
    twin_before = _state(spark, theirs, lineage)
    assert _state(spark, theirs, False) == _state(spark, ours, False)  # the twins hold the same rows
    assert deletes_before.get("PARQUET", 0) >= 10, deletes_before  # the scenario must have work
    if version == 3:
        assert deletes_before.get("PUFFIN", 0) > 0, deletes_before

    # Dry run: the plan, and not one byte changes.
    location = catalog.require(ident).metadata_location
    dry = run_rewrite_position_deletes(
        RewritePositionDeletesOptions(ident, rewrite_all=True, dry_run=True), catalog, ident, spark
    )
    assert dry.status == "dry_run" and dry.metrics["planned_groups"] > 0 and dry.metrics["groups"]
    assert catalog.require(ident).metadata_location == location

    result = run_rewrite_position_deletes(
        RewritePositionDeletesOptions(ident, rewrite_all=True), catalog, ident, spark
    )
    m = result.metrics
    java = _java(spark, theirs_name)
    spark.sql(f"REFRESH TABLE {ours}")
    spark.sql(f"REFRESH TABLE {theirs}")
    ours_after, theirs_after = _deletes(spark, ours), _deletes(spark, theirs)
    print(f"v{version} delete files before {deletes_before}, ours {ours_after}, iceberg {theirs_after}")
    print(f"v{version} ours {json.dumps(m, default=str)[:600]}; iceberg {java}")

    assert _state(spark, ours, lineage) == before  # rows, and on v3 every row's lineage
    assert _state(spark, theirs, lineage) == twin_before  # Iceberg's keeps them too
    assert _data_files(spark, ours) == files_before
    assert_pyiceberg_same_rows(spark, ours, catalog.require(ident).metadata_location)
    assert sum(ours_after.values()) <= sum(theirs_after.values())
    assert m["rewritten_delete_files_count"] >= deletes_before["PARQUET"]
    assert m["dangling_deletes_removed"] > 0  # partition b's entries name rewritten files
    snap = spark.sql(f"SELECT operation, summary FROM {ours}.snapshots ORDER BY committed_at DESC").first()
    assert snap is not None and snap[0] == "replace"
    if version == 3:
        assert "PARQUET" not in ours_after  # no position delete file beside DVs
        per_file = spark.sql(
            f"SELECT referenced_data_file, count(*) c FROM {ours}.delete_files GROUP BY 1 HAVING c > 1"
        ).collect()
        assert per_file == []
    else:
        assert "PUFFIN" not in ours_after

    # Nothing left to do by default (one delete file per partition is below min-input-files).
    location = catalog.require(ident).metadata_location
    again = run_rewrite_position_deletes(RewritePositionDeletesOptions(ident), catalog, ident, spark)
    assert again.metrics["planned_groups"] == 0 and again.metrics["snapshot_ids"] == []
    assert catalog.require(ident).metadata_location == location


def test_cli_exit_codes(spark, catalogs, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.rpd_cli"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.delete.granularity'='partition')"
    )
    spark.sql(f"INSERT INTO {table} SELECT id FROM range(0, 20)")
    for k in range(2):
        spark.sql(f"DELETE FROM {table} WHERE id = {k}")
    conf = tmp_path / "catalogs.yaml"
    c = catalogs.get(FS_CATALOG)
    conf.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {c.warehouse}\n")
    base = ["rewrite-position-deletes", "--table", "db.rpd_cli", "--conf-file", str(conf)]
    assert main([*base, "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert dry["status"] == "dry_run" and dry["metrics"]["planned_groups"] == 0  # 2 files < 5
    assert main([*base, "--min-input-files", "2"]) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        done["metrics"]["rewritten_delete_files_count"] == 2
        and done["metrics"]["added_delete_files_count"] == 1
    )
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect()) == list(range(2, 20))
    with pytest.raises(SystemExit) as usage:
        main([*base, "--min-input-files", "0"])
    assert usage.value.code == 2
    assert main(["rewrite-position-deletes", "--table", "db.missing", "--conf-file", str(conf)]) == 2


def test_a_concurrent_rewrite_of_planned_delete_files_makes_the_job_plan_again(
    spark, catalogs, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Iceberg's own procedure replaces the delete files this run planned, between the run's
    writes and its commit: the commit cannot apply, its files go, the job plans again on the table
    as it is, and no deleted row comes back."""
    from tablekeeper.jobs import rewrite_position_deletes as job

    table = f"{FS_CATALOG}.db.rpd_race"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
        "'write.delete.granularity'='partition')"
    )
    spark.sql(f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range(0, 40)")
    for k in range(3):
        spark.sql(f"DELETE FROM {table} WHERE id % 7 = {k}")
    before = _rows(spark, f"SELECT id, cat FROM {table}")
    real = job.rewrite_groups
    outputs: list[Any] = []

    def racing(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        if not outputs:
            spark.sql(
                f"CALL {FS_CATALOG}.system.rewrite_position_delete_files(table => 'db.rpd_race', "
                "options => map('rewrite-all', 'true'))"
            )
        outputs.append(out)
        return out

    monkeypatch.setattr(job, "rewrite_groups", racing)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    result = run_rewrite_position_deletes(
        RewritePositionDeletesOptions("db.rpd_race", rewrite_all=True), catalog, "db.rpd_race", spark
    )
    assert result.status == "ok" and result.metrics["plans"] == 2, result.metrics
    # The first plan's files were removed when its commit could not apply.
    first = [f.file_path for o in outputs[0] for f in o.added]
    assert first and not any(Path(p.removeprefix("file:")).exists() for p in first)
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT id, cat FROM {table}") == before


def test_v3_orc_and_avro_position_deletes_written_by_iceberg_are_read_and_kept(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """Iceberg Java writes position deletes in Parquet, then ORC, then Avro (a v2 table's
    ``write.delete.format.default``; partition-scoped files name several data files), and the table
    is upgraded to v3. The job turns every one of them into DVs: Iceberg Spark reads the same rows
    before and after, and no position delete file is left beside the DVs (an unread one would
    have been shadowed, or removed, and its rows come back)."""
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    name = "rpd_formats"
    table = f"{FS_CATALOG}.db.{name}"
    iceberg_table_with_every_delete_format(spark, table, batches=2)
    formats = _deletes(spark, table)
    assert {"PARQUET", "ORC", "AVRO"} <= set(formats), formats
    run_backfill(BackfillRowLineageOptions(f"db.{name}"), catalog, f"db.{name}")
    spark.sql(f"REFRESH TABLE {table}")
    before = _rows(spark, f"SELECT id, cat FROM {table}")
    assert len(before) == 60 - len([i for i in range(60) if i % 7 in (0, 1, 2)])

    result = run_rewrite_position_deletes(
        RewritePositionDeletesOptions(f"db.{name}"), catalog, f"db.{name}", spark
    )
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT id, cat FROM {table}") == before, result.metrics
    assert set(_deletes(spark, table)) == {"PUFFIN"}, _deletes(spark, table)
    assert result.metrics["rewritten_position_delete_files_count"] == sum(formats.values())
