"""backfill-row-lineage against Iceberg Spark: after the job every live row has a unique
``_row_id`` and a ``_last_updated_sequence_number`` equal to its file's data sequence number,
rows and data files are unchanged, ids survive later rewrites, reruns change nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs.backfill_row_lineage import BackfillRowLineageOptions, run_backfill
from tests.conftest import FS_CATALOG
from tests.support.pyiceberg_check import assert_pyiceberg_same_rows

pytestmark = pytest.mark.spark


def _rows(spark, sql: str) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    return sorted((tuple(r) for r in spark.sql(sql).collect()), key=repr)


def _table(spark, name: str, version: int) -> str:  # type: ignore[no-untyped-def]
    """Partitioned, several snapshots, position deletes on v2, a branch with its own commit."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    mode = "merge-on-read" if version >= 2 else "copy-on-write"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='{mode}')"
    )
    for i in range(4):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range({i * 25}, {(i + 1) * 25})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH side")
    spark.sql(f"INSERT INTO {table}.branch_side VALUES (500, 'z')")
    return table


def _data_paths(spark, table: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.all_data_files").collect()}


def _check_lineage(spark, table: str, ref: str = "", files_seq: bool = True) -> dict[int, tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Every live row's (row id, last-updated sequence number): non-null, ids unique and, with
    ``files_seq``, the sequence number equal to its file's data sequence number (true until a
    rewrite moves rows into newer files)."""
    source = f"{table}.branch_{ref}" if ref else table
    rows = spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number, _file FROM {source}").collect()
    entries = f"{table}.entries" if not ref else f"{table}.entries VERSION AS OF '{ref}'"
    seq = {
        r[0]: int(r[1])
        for r in spark.sql(
            f"SELECT data_file.file_path, sequence_number FROM {entries} WHERE status != 2"
        ).collect()
    }
    assert rows and all(r[1] is not None for r in rows)
    assert len({r[1] for r in rows}) == len(rows)
    assert all(r[2] is not None for r in rows)
    if files_seq:
        assert all(int(r[2]) == seq[r[3]] for r in rows)
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


@pytest.mark.parametrize("version", [1, 2])
def test_backfill_gives_every_row_an_id_without_writing_data(spark, catalogs, version: int) -> None:  # type: ignore[no-untyped-def]
    name = f"backfill_v{version}"
    table = _table(spark, name, version)
    before = _rows(spark, f"SELECT * FROM {table}")
    side = _rows(spark, f"SELECT * FROM {table}.branch_side")
    files = _data_paths(spark, table)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    planned = run_backfill(
        BackfillRowLineageOptions(f"db.{name}", ("side",), dry_run=True), catalog, f"db.{name}"
    ).metrics
    assert planned["format_version_before"] == version and planned["snapshot_ids"] == []
    result = run_backfill(BackfillRowLineageOptions(f"db.{name}", ("side",)), catalog, f"db.{name}")
    m = result.metrics
    assert m["rows_assigned"] == planned["rows_assigned"] > 0 and len(m["snapshot_ids"]) == 2, m
    assert json.loads(result.to_json())["status"] == "ok"
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT * FROM {table}.snapshots").where("operation = 'replace'").count() == 2
    assert _rows(spark, f"SELECT * FROM {table}") == before
    assert _rows(spark, f"SELECT * FROM {table}.branch_side") == side
    assert _data_paths(spark, table) == files  # metadata only
    main_ids = _check_lineage(spark, table)
    assert_pyiceberg_same_rows(spark, table, catalog.require(f"db.{name}").metadata_location)
    _check_lineage(spark, table, "side")
    # Twice: nothing to do.
    again = run_backfill(BackfillRowLineageOptions(f"db.{name}", ("side",)), catalog, f"db.{name}").metrics
    assert again["snapshot_ids"] == [] and "nothing to do" in str(again["note"])
    # Stable: an append, Iceberg's own rewrite and tablekeeper's compact keep every row's id.
    spark.sql(f"INSERT INTO {table} VALUES (900, 'a')")
    spark.sql(
        f"CALL {FS_CATALOG}.system.rewrite_data_files(table => 'db.{name}', "
        "options => map('min-input-files', '2'))"
    )
    spark.sql(f"REFRESH TABLE {table}")
    after = _check_lineage(spark, table, files_seq=False)
    assert all(after[k] == v for k, v in main_ids.items())
    from tablekeeper.jobs.compact import CompactOptions, run_compact

    spark.sql(f"INSERT INTO {table} VALUES (901, 'b')")
    spark.sql(f"INSERT INTO {table} VALUES (902, 'b')")
    run_compact(CompactOptions(f"db.{name}", min_input_files=2), catalog, f"db.{name}", spark)
    spark.sql(f"REFRESH TABLE {table}")
    final = _check_lineage(spark, table, files_seq=False)
    assert all(final[k] == v for k, v in after.items())


def test_concurrent_append_is_kept_and_ids_stay_unique(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.commit import transaction

    table = _table(spark, "backfill_race", 2)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    real = transaction.apply_change
    raced: list[int] = []

    def racing(*args: Any, **kw: Any) -> Any:
        attempt = real(*args, **kw)
        if not raced:  # another writer commits between our attempt and its swap
            spark.sql(f"INSERT INTO {table} VALUES (700, 'a')")
            raced.append(1)
        return attempt

    transaction.apply_change = racing  # type: ignore[assignment]
    try:
        run_backfill(BackfillRowLineageOptions("db.backfill_race"), catalog, "db.backfill_race")
    finally:
        transaction.apply_change = real  # type: ignore[assignment]
    spark.sql(f"REFRESH TABLE {table}")
    ids = _check_lineage(spark, table)
    assert 700 in ids


def test_draft_row_lineage_table_is_normalised(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    """A table whose metadata follows the October-2024 draft (``row-lineage: true``)."""
    table = _table(spark, "backfill_draft", 2)
    before = _rows(spark, f"SELECT * FROM {table}")
    meta_dir = warehouse / "files" / "db" / "backfill_draft" / "metadata"
    latest = max(meta_dir.glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0]))
    doc = json.loads(latest.read_text())
    doc["format-version"] = 3
    doc["row-lineage"] = True
    doc.pop("next-row-id", None)
    version = int(latest.name[1:].split(".")[0]) + 1
    (meta_dir / f"v{version}.metadata.json").write_text(json.dumps(doc))
    (meta_dir / "version-hint.text").write_text(str(version))
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    m = run_backfill(BackfillRowLineageOptions("db.backfill_draft"), catalog, "db.backfill_draft").metrics
    assert m["format_version_before"] == 3 and m["rows_assigned"] > 0, m
    newest = max(meta_dir.glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0]))
    written = json.loads(newest.read_text())
    assert "row-lineage" not in written and written["next-row-id"] == m["rows_assigned"]
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT * FROM {table}") == before
    _check_lineage(spark, table)
