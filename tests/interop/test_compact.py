"""compact against Iceberg Spark: the same rows before and after (read by Iceberg Java), fewer
files, deletes applied, row lineage unchanged on v3, conflicts detected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs.compact import CompactOptions, run_compact
from tests.conftest import FS_CATALOG
from tests.support.delete_files import iceberg_table_with_every_delete_format
from tests.support.frames import assert_same_frames
from tests.support.pyiceberg_check import assert_pyiceberg_same_rows

pytestmark = pytest.mark.spark


def _rows(spark, sql: str) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    return sorted((tuple(r) for r in spark.sql(sql).collect()), key=repr)


def _data_files(spark, table: str) -> int:  # type: ignore[no-untyped-def]
    return int(spark.sql(f"SELECT count(*) FROM {table}.files WHERE content = 0").collect()[0][0])


def _delete_files(spark, table: str) -> int:  # type: ignore[no-untyped-def]
    return int(spark.sql(f"SELECT count(*) FROM {table}.files WHERE content > 0").collect()[0][0])


def _small_files_table(spark, name: str, version: int) -> str:  # type: ignore[no-untyped-def]
    """Many small files per partition, merge-on-read deletes (position files on v2, DVs on v3),
    a renamed and an added column."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read')"
    )
    for i in range(8):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b'), id * 1.5 "
            f"FROM range({i * 100}, {(i + 1) * 100})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN v TO value")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN note STRING")
    spark.sql(f"INSERT INTO {table} SELECT id, 'a', 0.5, CAST(id AS STRING) FROM range(1000, 1050)")
    spark.sql(f"UPDATE {table} SET value = -1 WHERE id % 11 = 0")
    return table


def _writers(m: dict[str, Any]) -> set[str]:
    return {str(g["writer"]) for g in m["groups"]}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("version", "writer"), [(2, "auto"), (3, "auto"), (2, "spark"), (3, "spark")])
def test_binpack_keeps_rows_and_lineage_and_drops_files(spark, catalogs, version: int, writer: str) -> None:  # type: ignore[no-untyped-def]
    """Both writers: Arrow on the executors (auto, as no group needs a shuffle) and Spark SQL."""
    table = _small_files_table(spark, f"compact_v{version}", version)
    lineage = ", _row_id, _last_updated_sequence_number" if version == 3 else ""
    before = _rows(spark, f"SELECT *{lineage} FROM {table}")
    files_before = _data_files(spark, table)
    deletes_before = _delete_files(spark, table)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    identifier = f"db.compact_v{version}"
    options = CompactOptions(table=identifier, min_input_files=2, writer=writer)  # type: ignore[arg-type]
    m = run_compact(options, catalog, identifier, spark).metrics
    assert _writers(m) == {"arrow" if writer == "auto" else "spark"}, m
    assert m["rewritten_data_files_count"] == files_before, m
    assert m["added_data_files_count"] == 2, m  # one per partition
    spark.sql(f"REFRESH TABLE {table}")
    after = _rows(spark, f"SELECT *{lineage} FROM {table}")
    assert after == before
    assert _data_files(spark, table) == 2
    deletes = _delete_files(spark, table)
    assert deletes_before > 0 and m["removed_delete_files_count"] == deletes_before - deletes, m
    if version == 3:
        assert deletes == 0  # DVs go with their data files
        assert all(r[-2] is not None for r in after)
    ops = [
        r[0] for r in spark.sql(f"SELECT operation FROM {table}.snapshots ORDER BY committed_at").collect()
    ]
    assert ops[-1] == "replace"


def test_dry_run_plans_without_writing(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = _small_files_table(spark, "compact_dry", 2)
    snapshots = _rows(spark, f"SELECT snapshot_id FROM {table}.snapshots")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    result = run_compact(
        CompactOptions(table="db.compact_dry", min_input_files=2, dry_run=True),
        catalog,
        "db.compact_dry",
        spark,
    )
    groups = result.metrics["groups"]
    assert len(groups) == 2 and sum(g["files"] for g in groups) == _data_files(spark, table)
    assert _rows(spark, f"SELECT snapshot_id FROM {table}.snapshots") == snapshots


def test_sort_strategy_orders_files(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.compact_sort"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, k BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    for i in range(6):
        spark.sql(f"INSERT INTO {table} SELECT id, (id * 7919) % 1000 FROM range({i * 500}, {(i + 1) * 500})")
    before = _rows(spark, f"SELECT * FROM {table}")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = CompactOptions(
        table="db.compact_sort",
        strategy="sort",
        sort_order="k DESC",
        target_file_size="2KB",
        min_input_files=2,
    )
    m = run_compact(options, catalog, "db.compact_sort", spark).metrics
    assert m["added_data_files_count"] >= 2, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT * FROM {table}") == before
    bounds = spark.sql(
        f"SELECT readable_metrics.k.lower_bound, readable_metrics.k.upper_bound FROM {table}.files"
    ).collect()
    ranges = sorted((int(r[0]), int(r[1])) for r in bounds)
    # Each task writes a range of k; the files its tasks left under the target are sorted and
    # merged, so a merged file spans the ends of several ranges. The other files stay disjoint:
    # most files are pairwise disjoint (greedy interval scheduling finds the largest such set).
    disjoint, end = 0, -1
    for lo, hi in sorted(ranges, key=lambda r: r[1]):
        if lo > end:
            disjoint, end = disjoint + 1, hi
    assert disjoint >= len(ranges) // 2 + 1, ranges


def test_concurrent_append_survives(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = _small_files_table(spark, "compact_append", 2)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    identifier = "db.compact_append"
    from tablekeeper.jobs import compact as job

    real = job._rewrite_group
    calls = []

    def slow(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        if not calls:  # one append, committed while the job runs
            spark.sql(f"INSERT INTO {table} VALUES (5000, 'a', 1.0, 'late')")
        calls.append(1)
        return out

    job._rewrite_group = slow  # type: ignore[assignment]
    try:
        run_compact(
            CompactOptions(table=identifier, min_input_files=2, max_concurrent_groups=1),
            catalog,
            identifier,
            spark,
        )
    finally:
        job._rewrite_group = real  # type: ignore[assignment]
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE id = 5000").collect()[0][0] == 1


def _equality_delete(catalogs, identifier: str, table_dir: str, ids: list[int], part: str) -> None:  # type: ignore[no-untyped-def]
    """Commit an equality delete file on ``id`` for partition ``cat=part`` (a row delta)."""
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tablekeeper.commit.producer import SnapshotChange
    from tablekeeper.commit.transaction import Committer
    from tablekeeper.iceberg.content import EQUALITY_DELETES, DataFile

    field = pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"})
    path = f"{table_dir}/data/eq-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}, schema=pa.schema([field])), path)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    spec_id = catalog.require(identifier).metadata.default_spec_id
    f = DataFile(
        EQUALITY_DELETES,
        path,
        "PARQUET",
        (part,),
        len(ids),
        Path(path).stat().st_size,
        spec_id=spec_id,
        equality_ids=(1,),
    )
    Committer(catalog, identifier).commit_snapshot(SnapshotChange(operation="delete", added_files=(f,)))


@pytest.mark.parametrize("writer", ["auto", "spark"])
def test_equality_deletes_apply_by_sequence_number(spark, catalogs, warehouse, writer: str) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.compact_eq"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    for i in range(4):
        spark.sql(f"INSERT INTO {table} SELECT id, 'a', id * 1.0 FROM range({i * 10}, {(i + 1) * 10})")
    table_dir = str(warehouse / "files" / "db" / "compact_eq")
    _equality_delete(catalogs, "db.compact_eq", table_dir, [3, 15, 27], "a")
    # Re-inserted after the delete: a newer file, which the older equality delete must not touch.
    spark.sql(f"INSERT INTO {table} VALUES (15, 'a', 99.0)")
    spark.sql(f"REFRESH TABLE {table}")
    before = _rows(spark, f"SELECT * FROM {table}")
    assert (15, "a", 99.0) in before and (3, "a", 3.0) not in before
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    m = run_compact(
        CompactOptions(table="db.compact_eq", min_input_files=2, writer=writer),  # type: ignore[arg-type]
        catalog,
        "db.compact_eq",
        spark,
    ).metrics
    assert m["rewritten_data_files_count"] == 5, m
    assert _writers(m) == {"arrow" if writer == "auto" else "spark"}, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT * FROM {table}") == before


def test_delta_table_compacted_through_optimize(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.jobs.common.delta_maintenance import run_optimize

    path = str(tmp_path / "delta_small")
    spark.range(0, 2000).selectExpr("id", "id % 3 AS p").repartition(12).write.format("delta").partitionBy(
        "p"
    ).save(path)
    before = _rows(spark, f"SELECT * FROM delta.`{path}`")
    planned = run_optimize(path, spark, CompactOptions(path, dry_run=True)).metrics
    assert planned["files_to_rewrite"] == planned["live_data_files"] == 36, planned
    m = run_optimize(path, spark, CompactOptions(path, where="p = 1")).metrics
    assert m["rewritten_data_files_count"] == 12 and m["added_data_files_count"] == 1, m
    # --target-file-size is OPTIMIZE's maxFileSize (and minFileSize): bins of a third of the bytes.
    part = sum(f.stat().st_size for f in Path(path).glob("p=2/*.parquet"))  # all 12 still live
    m = run_optimize(
        path, spark, CompactOptions(path, where="p = 2", target_file_size=str(part // 3))
    ).metrics
    assert m["rewritten_data_files_count"] == 12 and 3 <= m["added_data_files_count"] <= 4, m
    assert spark.conf.get("spark.databricks.delta.optimize.maxFileSize", None) is None  # put back
    zorder = CompactOptions(path, strategy="sort", sort_order="zorder(id)")
    m = run_optimize(path, spark, zorder).metrics
    assert m["added_data_files_count"] == 3, m
    assert _rows(spark, f"SELECT * FROM delta.`{path}`") == before


@pytest.mark.parametrize("partial", [False, True])
def test_a_concurrent_delete_fails_its_group_cleanly_and_partial_progress_plans_it_again(
    spark, catalogs, warehouse, partial: bool
) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.errors import CommitConflict
    from tablekeeper.jobs import compact as job

    name = f"compact_conflict_{int(partial)}"
    table = _small_files_table(spark, name, 2)
    identifier = f"db.{name}"
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    real = job._rewrite_group
    hit: list[object] = []

    def racing(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        if not hit:  # a delete on a file this group rewrites, committed before the group commits
            cat = out.group.partition[0]
            row = spark.sql(f"SELECT id FROM {table} WHERE cat = '{cat}' ORDER BY id LIMIT 1").collect()[0][0]
            spark.sql(f"DELETE FROM {table} WHERE id = {row}")
            hit.append(row)
        return out

    files_before = _data_files(spark, table)
    before = _rows(spark, f"SELECT * FROM {table}")
    job._rewrite_group = racing  # type: ignore[assignment]
    options = CompactOptions(
        table=identifier, min_input_files=2, max_concurrent_groups=1, partial_progress=partial, max_commits=2
    )
    try:
        if partial:
            m = run_compact(options, catalog, identifier, spark).metrics
        else:
            with pytest.raises(CommitConflict, match="applies to files it replaces"):
                run_compact(options, catalog, identifier, spark)
    finally:
        job._rewrite_group = real  # type: ignore[assignment]
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT * FROM {table}") == [r for r in before if r[0] != hit[0]]
    written = [p for p in (warehouse / "files" / "db" / name / "data").glob("compact-*/*") if p.is_file()]
    if partial:
        # The group that met the delete was planned again on the table as it then was (its
        # partition only), rewritten with the delete applied and committed: nothing failed.
        assert m["conflicted_groups_count"] == 1 and m["failed_groups_count"] == 0, m
        assert m["added_data_files_count"] == 2, m
        [met] = [g for g in m["groups"] if "conflict" in g]
        assert "applies to files it replaces" in met["conflict"] and not met["committed"], met
        [again] = [g for g in m["groups"] if g["group"] in met["replanned_as"]]
        assert again["committed"] and again["partition"] == met["partition"], again
        assert len(written) == 2  # the conflicted group's first files were removed
        assert _data_files(spark, table) == 2
    else:
        assert written == []
        assert _data_files(spark, table) == files_before


def test_where_limits_the_rewrite_to_matching_files(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.errors import ConfigError

    table = _small_files_table(spark, "compact_where", 2)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    identifier = "db.compact_where"
    a_files = int(
        spark.sql(f"SELECT count(*) FROM {table}.files WHERE content = 0 AND partition.cat = 'a'").collect()[
            0
        ][0]
    )
    before = _rows(spark, f"SELECT * FROM {table}")
    # "value" is the renamed column: the predicate sees the current names.
    options = CompactOptions(table=identifier, min_input_files=2, where="cat = 'a' AND value IS NOT NULL")
    m = run_compact(options, catalog, identifier, spark).metrics
    assert m["rewritten_data_files_count"] == a_files and m["added_data_files_count"] == 1, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT * FROM {table}") == before
    with pytest.raises(ConfigError, match="--where"):
        run_compact(CompactOptions(table=identifier, where="no_such_column = 1"), catalog, identifier, spark)


def _evolving_table(spark, name: str, version: int) -> str:  # type: ignore[no-untyped-def]
    """Small files under two partition specs (cat, then cat plus bucket(2, id))."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')"
    )
    for i in range(4):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b'), id "
            f"FROM range({i * 50}, {(i + 1) * 50})"
        )
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(2, id)")
    for i in range(4, 8):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b'), id "
            f"FROM range({i * 50}, {(i + 1) * 50})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 9 = 0")
    return table


def test_partition_evolution_and_the_oracle(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """Two identical tables: Iceberg's rewrite_data_files on one, tablekeeper on the other."""
    ours, theirs = _evolving_table(spark, "compact_evo_tk", 2), _evolving_table(spark, "compact_evo_ice", 2)
    before = _rows(spark, f"SELECT * FROM {ours}")
    assert before == _rows(spark, f"SELECT * FROM {theirs}")
    spark.sql(
        f"CALL {FS_CATALOG}.system.rewrite_data_files(table => 'db.compact_evo_ice', "
        "options => map('min-input-files', '2'))"
    )
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    m = run_compact(
        CompactOptions(table="db.compact_evo_tk", min_input_files=2), catalog, "db.compact_evo_tk", spark
    ).metrics
    spark.sql(f"REFRESH TABLE {ours}")
    assert _rows(spark, f"SELECT * FROM {ours}") == before
    assert_same_frames(spark.table(ours), spark.table(theirs))
    # Like Iceberg, old-spec files are rewritten into the current spec (--output-spec-id's default).
    ice, tk = _data_files(spark, theirs), _data_files(spark, ours)
    specs = {
        r[0] for r in spark.sql(f"SELECT DISTINCT spec_id FROM {ours}.files WHERE content = 0").collect()
    }
    current = spark.sql(f"SELECT max(spec_id) FROM {theirs}.files").collect()[0][0]
    assert specs == {current} and abs(ice - tk) <= 4, (ice, tk, specs, m)


@pytest.mark.parametrize("version", [2, 3])
def test_converted_delta_table_compacts(spark, catalogs, tmp_path, version: int) -> None:  # type: ignore[no-untyped-def]
    """Files written by delta-spark hold no field ids and no partition columns, and carry DVs:
    read through the name mapping, partition values filled in, deletes applied."""
    from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
    from tests.conftest import SQL_CATALOG

    source = str(tmp_path / f"delta_{version}")
    spark.range(0, 600).selectExpr("id", "CAST(id % 3 AS STRING) AS p", "id * 0.5 AS x").repartition(
        6
    ).write.format("delta").partitionBy("p").option("delta.enableDeletionVectors", "true").save(source)
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 10 = 0")
    target = f"db.conv_compact_v{version}"
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    run_convert(ConvertDeltaOptions(source=source, target=target, format_version=version), catalog)
    table = f"{SQL_CATALOG}.{target}"
    before = _rows(spark, f"SELECT id, p, x FROM {table}")
    assert len(before) == 540
    # The partition column is not in the files: --where sees it filled from the partition.
    m = run_compact(
        CompactOptions(table=target, min_input_files=2, where="p = '1'"), catalog, target, spark
    ).metrics
    assert m["rewritten_data_files_count"] == 6 and m["added_data_files_count"] == 1, m
    m = run_compact(CompactOptions(table=target, min_input_files=2), catalog, target, spark).metrics
    assert m["rewritten_data_files_count"] == 12 and m["added_data_files_count"] == 2, m
    assert _writers(m) == {"arrow"}, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT id, p, x FROM {table}") == before
    assert_pyiceberg_same_rows(spark, table, catalog.require(target).metadata_location)


def test_a_group_whose_rows_are_all_deleted_writes_nothing(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.compact_gone"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'a'), ({i + 10}, 'b'), ({i + 20}, 'b')")
    # Two row-level deletes (neither covers a whole file by its metrics) remove all of 'b'.
    spark.sql(f"DELETE FROM {table} WHERE cat = 'b' AND id >= 20")
    spark.sql(f"DELETE FROM {table} WHERE cat = 'b' AND id < 20")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    m = run_compact(
        CompactOptions(table="db.compact_gone", min_input_files=2), catalog, "db.compact_gone", spark
    ).metrics
    assert m["rewritten_data_files_count"] == 6 and m["added_data_files_count"] == 1, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT * FROM {table}") == [(0, "a"), (1, "a"), (2, "a")]
    assert _data_files(spark, table) == 1 and _delete_files(spark, table) == 0


def test_odd_characters_in_the_table_location(spark, catalogs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Spark names files by encoded URI; deletes and lineage still find their files."""
    from tests.conftest import SQL_CATALOG

    location = tmp_path / "we ird%20+é[1]" / "t"
    table = f"{SQL_CATALOG}.db.compact_odd"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        f"LOCATION '{location}' TBLPROPERTIES ('format-version'='3', 'write.delete.mode'='merge-on-read')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO {table} SELECT id, 'a' FROM range({i * 10}, {(i + 1) * 10})")
    spark.sql(f"DELETE FROM {table} WHERE id % 4 = 0")
    before = _rows(spark, f"SELECT *, _row_id, _last_updated_sequence_number FROM {table}")
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    m = run_compact(
        CompactOptions(table="db.compact_odd", min_input_files=2), catalog, "db.compact_odd", spark
    ).metrics
    assert m["rewritten_data_files_count"] == 3 and m["added_data_files_count"] == 1, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT *, _row_id, _last_updated_sequence_number FROM {table}") == before


def test_files_come_out_near_the_target_size(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.compact_sizes"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, s STRING) USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    for i in range(12):
        spark.sql(
            f"INSERT INTO {table} SELECT id, sha2(CAST(id AS STRING), 256) "
            f"FROM range({i * 2000}, {(i + 1) * 2000})"
        )
    total = int(spark.sql(f"SELECT sum(file_size_in_bytes) FROM {table}.files").collect()[0][0])
    target = total // 4
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = CompactOptions(table="db.compact_sizes", target_file_size=str(target), min_input_files=2)
    m = run_compact(options, catalog, "db.compact_sizes", spark).metrics
    assert m["groups"][0]["expected_output_files"] == 4, m
    spark.sql(f"REFRESH TABLE {table}")
    sizes = sorted(int(r[0]) for r in spark.sql(f"SELECT file_size_in_bytes FROM {table}.files").collect())
    assert 3 <= len(sizes) <= 5, sizes
    # Files roll at the written target; at most one (the last rows) is under it but not small,
    # or above it by the rest of the rows, up to the maximum size.
    assert sum(1 for s in sizes if not target <= s <= 1.1 * target) <= 1, (target, sizes)
    assert 0.75 * target <= sizes[0] and sizes[-1] <= 1.8 * target, (target, sizes)


def _typed_table(spark, name: str) -> str:  # type: ignore[no-untyped-def]
    """Every type both writers handle, evolved between writes: promoted int, float and decimal,
    a renamed and an added struct field, a dropped column, a date identity partition."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, f FLOAT, dec DECIMAL(5, 2), d DATE, ts TIMESTAMP, "
        "ntz TIMESTAMP_NTZ, b BINARY, flag BOOLEAN, gone STRING, s STRUCT<x: INT, y: STRING>) USING iceberg "
        "PARTITIONED BY (d) TBLPROPERTIES ('format-version'='3', 'write.delete.mode'='merge-on-read')"
    )
    row = (
        "SELECT CAST(id AS INT), CAST(id / 3 AS FLOAT), CAST(id / 7 AS DECIMAL(5, 2)), "
        "date_add(DATE'2026-01-01', CAST(id % 2 AS INT)), "
        "TIMESTAMP'2026-03-01 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, id), "
        "TIMESTAMP_NTZ'2026-03-01 10:00:00.123456', CAST(CAST(id AS STRING) AS BINARY), id % 3 = 0, 'x', "
        "IF(id % 5 = 0, NULL, named_struct('x', CAST(id AS INT), 'y', CAST(id AS STRING)))"
    )
    for i in range(4):
        spark.sql(f"INSERT INTO {table} {row} FROM range({i * 50}, {(i + 1) * 50})")
    spark.sql(f"DELETE FROM {table} WHERE id % 9 = 0")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN id TYPE BIGINT")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN f TYPE DOUBLE")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN dec TYPE DECIMAL(10, 2)")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN s.y TO yy")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN s.z DOUBLE")
    spark.sql(f"ALTER TABLE {table} DROP COLUMN gone")
    spark.sql(
        f"INSERT INTO {table} SELECT id, id * 0.25, CAST(id AS DECIMAL(10, 2)), DATE'2026-01-01', "
        "TIMESTAMP'2026-03-02 00:00:00', NULL, NULL, NULL, named_struct('x', 1, 'yy', 'new', 'z', 2.5) "
        "FROM range(1000, 1020)"
    )
    return table


def test_both_writers_agree_on_every_type(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    results = {}
    for writer in ("auto", "spark"):
        name = f"compact_types_{writer}"
        table = _typed_table(spark, name)
        query = f"SELECT *, _row_id, _last_updated_sequence_number FROM {table}"
        before = _rows(spark, query)
        options = CompactOptions(table=f"db.{name}", min_input_files=2, writer=writer)  # type: ignore[arg-type]
        m = run_compact(options, catalog, f"db.{name}", spark).metrics
        assert _writers(m) == {"arrow" if writer == "auto" else "spark"}, m
        assert m["added_data_files_count"] == 2, m  # one per date
        spark.sql(f"REFRESH TABLE {table}")
        after = _rows(spark, query)
        assert after == before
        assert len(after) == 197 and any(r[-3] is None for r in after)  # null structs kept
        assert_pyiceberg_same_rows(spark, table, catalog.require(f"db.{name}").metadata_location)
        results[writer] = [r[:-2] for r in after]
    assert results["auto"] == results["spark"]


@pytest.mark.parametrize(("version", "writer"), [(2, "auto"), (3, "spark")])
def test_nan_partitions_keep_their_deletes(spark, catalogs, version: int, writer: str) -> None:  # type: ignore[no-untyped-def]
    """Partition values compare by their bits, as the spec says: every NaN is one partition, so its
    position deletes and DVs apply (Python's NaN equals nothing: the rows came back)."""
    name = f"compact_nan_v{version}_{writer}"
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, p DOUBLE) USING iceberg PARTITIONED BY (p) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} VALUES ({i * 10}, CAST('NaN' AS DOUBLE)), "
            f"({i * 10 + 1}, CAST('NaN' AS DOUBLE)), ({i * 10 + 2}, 0.0), ({i * 10 + 3}, 1.0)"
        )
    spark.sql(f"DELETE FROM {table} WHERE id IN (0, 11, 21, 12)")
    before = _rows(spark, f"SELECT id, CAST(p AS STRING) FROM {table}")
    assert len(before) == 8
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    m = run_compact(
        CompactOptions(table=f"db.{name}", min_input_files=2, writer=writer), catalog, f"db.{name}", spark
    ).metrics
    assert m["rewritten_data_files_count"] == 9, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT id, CAST(p AS STRING) FROM {table}") == before
    assert _delete_files(spark, table) == 0


@pytest.mark.parametrize("writer", ["auto", "spark"])
def test_orc_and_avro_position_deletes_written_by_iceberg_are_applied(spark, catalogs, writer: str) -> None:  # type: ignore[no-untyped-def]
    """Iceberg Java writes position deletes in Parquet, ORC and Avro (``write.delete.format.default``):
    both engines read every one, so every data file is compacted and Iceberg Spark reads the same
    rows after."""
    name = f"compact_delete_formats_{writer}"
    table = f"{FS_CATALOG}.db.{name}"
    iceberg_table_with_every_delete_format(spark, table, batches=3)
    formats = {str(r[0]) for r in spark.sql(f"SELECT file_format FROM {table}.delete_files").collect()}
    assert formats == {"PARQUET", "ORC", "AVRO"}, formats
    before = _rows(spark, f"SELECT id, cat FROM {table}")
    files_before = _data_files(spark, table)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = CompactOptions(table=f"db.{name}", min_input_files=2, writer=writer)  # type: ignore[arg-type]
    m = run_compact(options, catalog, f"db.{name}", spark).metrics
    assert _writers(m) == {"arrow" if writer == "auto" else "spark"}, m
    assert m["rewritten_data_files_count"] == files_before, m
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT id, cat FROM {table}") == before
    assert _data_files(spark, table) == 2


def test_partial_progress_lives_with_a_writer_committing_every_second(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """A streaming-like writer deletes and appends in both partitions about once a second while
    compact runs with --partial-progress: every commit of the job either lands or meets the
    writer and is planned again; the job succeeds and the table holds exactly what the writer
    left (nothing the job rewrote brings a deleted row back)."""
    import threading
    import time

    table = _small_files_table(spark, "compact_live_writer", 2)
    identifier = "db.compact_live_writer"
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    done = threading.Event()
    wrote: list[str] = []
    errors: list[BaseException] = []

    def retried(sql: str) -> None:
        # The writer's own commit may meet the job's (Iceberg refuses a position delete for a file
        # a rewrite replaced): it plans again, as a streaming writer retries its checkpoint.
        for attempt in range(5):
            try:
                spark.sql(sql)
                return
            except Exception as err:
                if "ValidationException" not in str(err) or attempt == 4:
                    raise

    def writer() -> None:
        k = 0
        try:
            while not done.is_set() or k < 2:
                retried(f"DELETE FROM {table} WHERE id IN ({k * 2 + 1}, {k * 2 + 2})")
                retried(
                    f"INSERT INTO {table} VALUES ({5000 + k}, 'a', 1.0, 'w'), ({6000 + k}, 'b', 2.0, 'w')"
                )
                wrote.append(str(k))
                k += 1
                time.sleep(1.0)
        except BaseException as err:  # reported by the test, not lost in the thread
            errors.append(err)

    before = _rows(spark, f"SELECT * FROM {table}")
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        options = CompactOptions(
            table=identifier, min_input_files=2, max_concurrent_groups=1, partial_progress=True, max_commits=4
        )
        m = run_compact(options, catalog, identifier, spark).metrics
    finally:
        done.set()
        thread.join(timeout=120)
    assert not errors, errors
    n = len(wrote)
    deleted = {i for k in range(n) for i in (k * 2 + 1, k * 2 + 2)}
    expected = sorted(
        [r for r in before if r[0] not in deleted]
        + [(5000 + k, "a", 1.0, "w") for k in range(n)]
        + [(6000 + k, "b", 2.0, "w") for k in range(n)],
        key=repr,
    )
    spark.sql(f"REFRESH TABLE {table}")
    assert _rows(spark, f"SELECT * FROM {table}") == expected
    assert m["failed_groups_count"] == 0 and m["rewritten_data_files_count"] > 0, m
