"""rewrite-equality-deletes on tables whose equality deletes Iceberg Java wrote and committed (its
equality delete writer and a RowDelta, in the test's Spark JVM), with merge-on-read DELETEs by
Iceberg Spark beside them: partition-scoped and global deletes, nulls in equality columns, several
equality column sets, deletes older and newer than data, an equality delete committed while the
job runs and a concurrent DELETE that makes its commit a conflict. Iceberg Spark reads the same
rows before and after every run, PyIceberg reads them too once no equality delete is left, and on
v3 every row keeps its ``_row_id`` and ``_last_updated_sequence_number``."""

from __future__ import annotations

from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs import rewrite_equality_deletes as job
from tablekeeper.jobs.rewrite_equality_deletes import (
    RewriteEqualityDeletesOptions,
    run_rewrite_equality_deletes,
)
from tests.conftest import FS_CATALOG
from tests.support.java_deletes import commit_equality_deletes
from tests.support.pyiceberg_check import assert_pyiceberg_same_rows

pytestmark = pytest.mark.spark


def _rows(spark: Any, table: str, columns: str = "*") -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted((tuple(r) for r in spark.sql(f"SELECT {columns} FROM {table}").collect()), key=repr)


def _content_counts(spark: Any, table: str) -> dict[int, int]:
    spark.sql(f"REFRESH TABLE {table}")
    return {
        int(r[0]): int(r[1])
        for r in spark.sql(f"SELECT content, count(*) FROM {table}.files GROUP BY content").collect()
    }


def _insert(spark: Any, table: str, ids: range) -> None:
    values = ", ".join(
        f"({i}, {'NULL' if i % 5 == 0 else repr(f'n{i}')}, '{'a' if i % 2 == 0 else 'b'}')" for i in ids
    )
    spark.sql(f"INSERT INTO {table} VALUES {values}")


def _create(spark: Any, name: str, version: int, partitioned: bool = True) -> str:
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, name STRING, cat STRING) USING iceberg "
        f"{'PARTITIONED BY (cat)' if partitioned else ''} "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')"
    )
    for k in range(3):
        _insert(spark, table, range(k * 10, (k + 1) * 10))
    return table


def _run(spark: Any, catalogs: Any, name: str, **options: Any) -> dict[str, Any]:
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    ident = f"db.{name}"
    result = run_rewrite_equality_deletes(
        RewriteEqualityDeletesOptions(table=ident, **options), catalog, ident, spark
    )
    assert result.status == ("dry_run" if options.get("dry_run") else "ok"), result
    return dict(result.metrics)


@pytest.mark.parametrize("version", [2, 3])
def test_partition_scoped_deletes_with_nulls_and_several_column_sets_resolve_to_positions(
    spark, catalogs, version: int
) -> None:  # type: ignore[no-untyped-def]
    name = f"eqdel_scoped_v{version}"
    table = _create(spark, name, version)
    spark.sql(f"DELETE FROM {table} WHERE id = 4")  # deleted by position first: matched, not new
    commit_equality_deletes(spark, table, ["id"], [[2], [12], [4]], partition=["a"])
    commit_equality_deletes(spark, table, ["name"], [[None]], partition=["b"])  # nulls are equal
    commit_equality_deletes(spark, table, ["id", "name"], [[13, "n13"], [17, "n0"]], partition=["b"])
    _insert(spark, table, range(2, 3))  # newer than the delete of id 2: it stays
    commit_equality_deletes(spark, table, ["id"], [[999]], partition=["a"])  # applies to nothing
    before = _rows(spark, table)
    lineage = _rows(spark, table, "id, _row_id, _last_updated_sequence_number") if version == 3 else None
    assert (2, "n2", "a") in before and (13, "n13", "b") not in before and (5, None, "b") not in before
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    location = catalog.require(f"db.{name}").metadata_location

    planned = _run(spark, catalogs, name, dry_run=True)
    assert catalog.require(f"db.{name}").metadata_location == location  # a dry run changes nothing
    assert planned["live_equality_delete_files"] == 4 and planned["equality_delete_files_to_remove"] == 4
    assert planned["kept_equality_delete_files"] == []

    m = _run(spark, catalogs, name)
    assert _rows(spark, table) == before
    # ids 2, 12 (4 was deleted already), 5, 15, 25 (null names in b), 13.
    assert (m["matched_rows"], m["resolved_rows"]) == (7, 6), m
    assert m["removed_equality_delete_files_count"] == 4, m
    counts = _content_counts(spark, table)
    assert 2 not in counts, counts  # no equality delete file is left
    if version == 3:
        assert m["added_dvs_count"] >= 1 and m["added_position_delete_files_count"] == 0, m
        assert _rows(spark, table, "id, _row_id, _last_updated_sequence_number") == lineage
        dvs = spark.sql(f"SELECT referenced_data_file FROM {table}.delete_files").collect()
        assert len(dvs) == len({r[0] for r in dvs}), "one DV per data file"
    else:
        # One position delete file per data file (write.delete.granularity=file, Iceberg's default).
        added = spark.sql(
            f"SELECT count(*), count(DISTINCT referenced_data_file) FROM {table}.delete_files "
            "WHERE file_path LIKE '%/rewrite-equality-deletes-%'"
        )
        assert tuple(added.collect()[0]) == (m["added_position_delete_files_count"],) * 2, m
        assert m["added_position_delete_files_count"] >= 2 and m["added_dvs_count"] == 0, m
    assert_pyiceberg_same_rows(spark, table, catalog.require(f"db.{name}").metadata_location)
    again = _run(spark, catalogs, name)
    assert again["note"] == "no equality delete files: nothing to resolve" and again["snapshot_ids"] == []


def test_a_global_delete_applies_across_specs_and_stays_while_where_leaves_files_out(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    name = "eqdel_global"
    table = _create(spark, name, 3, partitioned=False)
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD cat")
    _insert(spark, table, range(30, 40))
    commit_equality_deletes(spark, table, ["id"], [[3], [6], [33], [36]], spec_id=0)  # global
    commit_equality_deletes(spark, table, ["name"], [[None]], partition=["a"])  # spec 1, scoped
    before = _rows(spark, table)
    lineage = _rows(spark, table, "id, _row_id, _last_updated_sequence_number")
    ids = {r[0] for r in before}
    assert not ids & {3, 6, 33, 36, 30} and {0, 10, 20} <= ids  # the scoped delete is spec 1's only

    advice = _health(catalogs, name)
    # The global delete is newer than every data file: each scan joins all of them against it.
    every = advice.metrics["data_files"]
    assert (
        advice.metrics["equality_delete_files"] == 2 and advice.metrics["equality_delete_data_files"] == every
    )
    [rec] = [r for r in advice.recommendations if r.job == "rewrite-equality-deletes"]
    assert rec.effect["data_files_joined_before"] == every and rec.effect["equality_delete_files_after"] == 0
    assert rec.effect["data_bytes_joined_before"] == advice.metrics["data_bytes"]

    first = _run(spark, catalogs, name, where="cat = 'a'")
    assert _rows(spark, table) == before
    [kept] = first["kept_equality_delete_files"]
    assert "left out (--where)" in kept["reason"], kept
    assert first["removed_equality_delete_files_count"] == 1, first  # the scoped one is done
    assert _content_counts(spark, table).get(2) == 1

    second = _run(spark, catalogs, name)
    assert _rows(spark, table) == before
    assert second["removed_equality_delete_files_count"] == 1 and 2 not in _content_counts(spark, table)
    assert _rows(spark, table, "id, _row_id, _last_updated_sequence_number") == lineage
    assert "rewrite-equality-deletes" not in {r.job for r in _health(catalogs, name).recommendations}


def _health(catalogs: Any, name: str) -> Any:
    import time

    from tablekeeper.jobs.health.iceberg import iceberg_health
    from tablekeeper.jobs.health.model import Thresholds

    catalog = catalog_for(catalogs.get(FS_CATALOG))
    return iceberg_health(catalog, f"db.{name}", Thresholds(), {}, now_ms=int(time.time() * 1000))


def test_an_equality_delete_committed_while_the_job_runs_still_applies(spark, catalogs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name = "eqdel_meanwhile"
    table = _create(spark, name, 2)
    commit_equality_deletes(spark, table, ["id"], [[2], [8]], partition=["a"])
    real = job.resolve_groups

    def resolve_then_delete(session: Any, work: Any) -> Any:
        out = real(session, work)
        commit_equality_deletes(spark, table, ["id"], [[6], [14]], partition=["a"])
        return out

    monkeypatch.setattr(job, "resolve_groups", resolve_then_delete)
    m = _run(spark, catalogs, name, partial_progress=True)
    monkeypatch.undo()
    after = _rows(spark, table)
    assert {r[0] for r in after} == set(range(30)) - {2, 8, 6, 14}, after
    assert m["removed_equality_delete_files_count"] == 1 and m["plans"] == 1, m
    assert _content_counts(spark, table).get(2) == 1  # the newer delete stays, and still applies


def test_a_concurrent_delete_of_a_planned_file_makes_the_job_plan_again(spark, catalogs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name = "eqdel_conflict"
    table = _create(spark, name, 3)
    commit_equality_deletes(spark, table, ["id"], [[2], [12], [22]], partition=["a"])
    real = job.resolve_groups
    calls = []

    def resolve_then_race(session: Any, work: Any) -> Any:
        out = real(session, work)
        if not calls:
            spark.sql(f"DELETE FROM {table} WHERE id = 4")  # a new DV for a file the job resolves
        calls.append(1)
        return out

    monkeypatch.setattr(job, "resolve_groups", resolve_then_race)
    m = _run(spark, catalogs, name)
    monkeypatch.undo()
    assert m["plans"] == 2, m
    assert {r[0] for r in _rows(spark, table)} == set(range(30)) - {2, 12, 22, 4}
    assert 2 not in _content_counts(spark, table)


def test_a_delete_under_a_spec_of_void_fields_is_global(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """A v1 table's dropped partition field stays in its spec as a void one; Iceberg Java calls
    that spec unpartitioned, so an equality delete written under it applies to every partition's
    older files: all are resolved before the delete goes."""
    name = "eqdel_void"
    table = _create(spark, name, 1)
    spark.sql(f"ALTER TABLE {table} DROP PARTITION FIELD cat")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('format-version'='2')")
    _insert(spark, table, range(30, 34))
    meta = catalog_for(catalogs.get(FS_CATALOG)).require(f"db.{name}").metadata
    spec = meta.default_spec_id
    assert [f.transform for f in meta.spec().fields] == ["void"]
    commit_equality_deletes(spark, table, ["id"], [[2], [13], [31]], partition=[None], spec_id=spec)
    before = _rows(spark, table)
    assert not {2, 13, 31} & {r[0] for r in before}, "Iceberg Java applies the void spec's delete everywhere"
    m = _run(spark, catalogs, name)
    assert _rows(spark, table) == before
    assert m["removed_equality_delete_files_count"] == 1 and m["kept_equality_delete_files"] == [], m
    assert 2 not in _content_counts(spark, table)


def test_imported_files_resolve_as_iceberg_java_reads_them(spark, catalogs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Files imported with ``add_files`` under ``cat=eu`` whose ``cat`` column says otherwise.
    Iceberg Java reads every row's ``cat`` from the partition tuple, so an equality delete on
    ``cat = 'eu'`` removes a row the file holds as ``us``; but its planning first skips a delete
    file whose value ranges rule out the data file's (statistics from the file: only ``us``), so
    there the same delete removes nothing. The job resolves exactly what Java reads, and so does a
    compaction, which writes the values Java reads: PyIceberg (which reads a file's own column)
    then agrees."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = "eqdel_imported"
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, name STRING, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    source = tmp_path / "imported"
    (source / "cat=eu").mkdir(parents=True)
    types = pa.schema([("id", pa.int32()), ("name", pa.string()), ("cat", pa.string())])
    for part, ids, cats in (("0", [1, 2, 3], ["us", None, "eu"]), ("1", [4, 5], ["us", "us"])):
        rows = {"id": ids, "name": [f"n{i}" for i in ids], "cat": cats}
        pq.write_table(pa.table(rows, schema=types), source / "cat=eu" / f"part-{part}.parquet")
    imported = f"`parquet`.`{source}`"
    spark.sql(f"CALL {FS_CATALOG}.system.add_files(table => 'db.{name}', source_table => '{imported}')")
    assert _rows(spark, table) == [(i, f"n{i}", "eu") for i in range(1, 6)]
    commit_equality_deletes(spark, table, ["id", "cat"], [[1, "eu"], [2, "eu"], [4, "eu"]], partition=["eu"])
    before = _rows(spark, table)
    assert before == [(3, "n3", "eu"), (4, "n4", "eu"), (5, "n5", "eu")]

    m = _run(spark, catalogs, name)
    assert _rows(spark, table) == before
    assert (m["matched_rows"], m["removed_equality_delete_files_count"]) == (2, 1), m

    from tablekeeper.jobs.compact import CompactOptions, run_compact

    # Another delete, which Java applies to the first file only (the second's statistics rule
    # it out): compaction through Spark's join must skip that pair too.
    commit_equality_deletes(spark, table, ["id", "cat"], [[3, "eu"], [5, "eu"]], partition=["eu"])
    before = _rows(spark, table)
    assert before == [(4, "n4", "eu"), (5, "n5", "eu")]
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = CompactOptions(f"db.{name}", where="cat = 'eu'", rewrite_all=True, writer="spark")
    compacted = run_compact(options, catalog, f"db.{name}", spark).metrics
    assert compacted["rewritten_data_files_count"] == 2, compacted
    assert _rows(spark, table) == before
    # The delete now applies to no data file (the new ones are newer): the job removes it, and
    # PyIceberg, which reads no table with equality deletes, can check the rows.
    dangling = _run(spark, catalogs, name)
    assert (dangling["matched_rows"], dangling["removed_equality_delete_files_count"]) == (0, 1), dangling
    assert _rows(spark, table) == before
    assert_pyiceberg_same_rows(spark, table, catalog.require(f"db.{name}").metadata_location)
