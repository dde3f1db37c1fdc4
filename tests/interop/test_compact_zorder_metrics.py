"""compact against Iceberg's rewrite_data_files on twin tables: the metrics each writes per field
id under the table's metrics modes, Z-order clustering, and rewriting into a new spec."""

from __future__ import annotations

from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs.compact import CompactOptions, run_compact
from tests.conftest import FS_CATALOG

_METRICS_PROPS = (
    "'format-version'='2', 'write.metadata.metrics.default'='truncate(8)', "
    "'write.metadata.metrics.column.name'='full', 'write.metadata.metrics.column.s.b'='counts', "
    "'write.metadata.metrics.column.dec'='none'"
)


def _twin(spark: Any, name: str, nested: bool) -> str:
    """A table of every metrics case; ``nested`` adds a list and a map (Spark's writer cannot
    write their ids, so its twin goes without)."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, name STRING, bin BINARY, flt FLOAT, dbl DOUBLE, "
        "dec DECIMAL(12, 3), ts TIMESTAMP_NTZ, dt DATE, ok BOOLEAN, s STRUCT<a: INT, b: STRING>, "
        f"l ARRAY<INT>, m MAP<STRING, DOUBLE>) USING iceberg TBLPROPERTIES ({_METRICS_PROPS})"
    )
    if not nested:
        spark.sql(f"ALTER TABLE {table} DROP COLUMNS l, m")
    lists = "IF(id % 3 = 0, NULL, array(CAST(id AS INT), NULL)), map(concat('k', id), id * 0.5D) "
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 7 = 0, NULL, repeat(concat('name-', id), 4)), "
            "IF(id % 5 = 0, NULL, unhex(repeat(hex(id), 12))), "
            "CASE WHEN id % 6 = 0 THEN CAST('NaN' AS FLOAT) WHEN id % 6 = 1 THEN NULL "
            "ELSE CAST(id AS FLOAT) END, "
            "CASE WHEN id % 4 = 0 THEN CAST('NaN' AS DOUBLE) WHEN id = 1 THEN -0.0D WHEN id = 2 THEN 0.0D "
            "ELSE -id * 1.5D END, CAST(id / 7 AS DECIMAL(12, 3)), "
            "timestamp_ntz'2026-01-01 00:00:00' + make_interval(0, 0, 0, CAST(id AS INT), 0, 0, 0), "
            "date_add(date'1969-12-01', CAST(id AS INT)), id % 2 = 0, "
            "IF(id % 9 = 0, NULL, named_struct('a', CAST(id AS INT), 'b', concat('b', id)))"
            + (", " if nested else " ")
            + (lists if nested else "")
            + f"FROM range({i * 30 + 1}, {(i + 1) * 30 + 1})"
        )
    return table


def _metrics(spark: Any, table: str) -> dict[str, Any]:
    rows = spark.sql(
        f"SELECT value_counts, null_value_counts, nan_value_counts, lower_bounds, upper_bounds, record_count "
        f"FROM {table}.files WHERE content = 0"
    ).collect()
    assert len(rows) == 1, rows
    r = rows[0]
    return {k: dict(r[k] or {}) for k in ("value_counts", "null_value_counts", "nan_value_counts")} | {
        "lower": {k: bytes(v) for k, v in (r["lower_bounds"] or {}).items()},
        "upper": {k: bytes(v) for k, v in (r["upper_bounds"] or {}).items()},
        "records": r["record_count"],
    }


@pytest.mark.parametrize("writer", ["auto", "spark"])
def test_metrics_equal_icebergs_rewrite_per_field_id(spark, catalogs, writer: str) -> None:  # type: ignore[no-untyped-def]
    nested = writer == "auto"
    ours, theirs = _twin(spark, "metrics_tk", nested), _twin(spark, "metrics_ice", nested)
    spark.sql(
        f"CALL {FS_CATALOG}.system.rewrite_data_files(table => 'db.metrics_ice', "
        "options => map('min-input-files', '2'))"
    )
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = CompactOptions(table="db.metrics_tk", min_input_files=2, writer=writer)  # type: ignore[arg-type]
    run_compact(options, catalog, "db.metrics_tk", spark)
    spark.sql(f"REFRESH TABLE {ours}")
    spark.sql(f"REFRESH TABLE {theirs}")
    mine, java = _metrics(spark, ours), _metrics(spark, theirs)
    assert mine["records"] == java["records"] == 90
    for key in ("value_counts", "null_value_counts", "nan_value_counts"):
        assert mine[key] == java[key], (key, mine[key], java[key])
    # Bounds: the same columns bounded, and ours never looser than Java's (here: identical).
    assert mine["lower"] == java["lower"], (mine["lower"], java["lower"])
    assert mine["upper"] == java["upper"], (mine["upper"], java["upper"])


def _random_points(spark: Any, name: str) -> str:
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (x DOUBLE, y DOUBLE, id BIGINT) USING iceberg "
        "TBLPROPERTIES ('format-version'='2')"
    )
    for i in range(8):
        spark.sql(
            f"INSERT INTO {table} SELECT rand({i}), rand({i + 100}), id "
            f"FROM range({i * 5000}, {(i + 1) * 5000})"
        )
    return table


def _box_overlap(spark: Any, table: str) -> float:
    """Average share of files whose bounds overlap a 5% x 5% box, over a grid of boxes."""
    files = spark.sql(f"SELECT readable_metrics.x, readable_metrics.y FROM {table}.files").collect()
    total = 0.0
    boxes = 0
    for bx in range(0, 95, 10):
        for by in range(0, 95, 10):
            x0, y0 = bx / 100, by / 100
            hit = sum(
                1
                for f in files
                if f[0].lower_bound <= x0 + 0.05
                and f[0].upper_bound >= x0
                and f[1].lower_bound <= y0 + 0.05
                and f[1].upper_bound >= y0
            )
            total += hit / len(files)
            boxes += 1
    return total / boxes


def test_zorder_clusters_a_box_query_into_few_files(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    ours, packed = _random_points(spark, "zorder_tk"), _random_points(spark, "zorder_binpack")
    before = sorted(r for r in spark.table(ours).collect())
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    target = "24KB"  # dozens of files from 40,000 rows
    run_compact(
        CompactOptions(table="db.zorder_binpack", rewrite_all=True, target_file_size=target),
        catalog,
        "db.zorder_binpack",
        spark,
    )
    m = run_compact(
        CompactOptions(
            table="db.zorder_tk",
            strategy="sort",
            sort_order="zorder(x, y)",
            rewrite_all=True,
            target_file_size=target,
        ),
        catalog,
        "db.zorder_tk",
        spark,
    ).metrics
    spark.sql(f"REFRESH TABLE {ours}")
    spark.sql(f"REFRESH TABLE {packed}")
    assert sorted(r for r in spark.table(ours).collect()) == before
    files = spark.sql(f"SELECT count(*) FROM {ours}.files").collect()[0][0]
    assert files >= 6, m
    zorder, binpack = _box_overlap(spark, ours), _box_overlap(spark, packed)
    assert zorder <= 1 / 3, (zorder, binpack, files)
    assert binpack >= 0.9, (zorder, binpack)
    clustering = m["clustering"]
    for column in ("x", "y"):
        assert clustering["after"][column] < clustering["before"][column], clustering


@pytest.mark.parametrize("writer", ["auto"])
def test_rewrite_into_a_new_spec_after_add_partition_field(spark, catalogs, writer: str) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.new_spec"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, ts TIMESTAMP) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b'), "
            f"timestamp'2026-01-01 00:00:00' + make_interval(0, 0, 0, CAST(id % 3 AS INT), 0, 0, 0) "
            f"FROM range({i * 20}, {(i + 1) * 20})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD days(ts)")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(4, id)")
    before = sorted(spark.table(table).collect())
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    m = run_compact(
        CompactOptions(table="db.new_spec", min_input_files=2, writer=writer), catalog, "db.new_spec", spark
    ).metrics  # type: ignore[arg-type]
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(spark.table(table).collect()) == before, m
    specs = {r[0] for r in spark.sql(f"SELECT DISTINCT spec_id FROM {table}.files").collect()}
    assert specs == {2}, m
    # Every file holds one partition of the new spec, and Iceberg prunes by it.
    parts = spark.sql(
        f"SELECT partition.cat, partition.ts_day, partition.id_bucket_4 FROM {table}.files"
    ).collect()
    assert len(parts) == len(set(parts)) > 12, parts
    # And back into the first spec, which the table no longer writes by default.
    m = run_compact(
        CompactOptions(table="db.new_spec", rewrite_all=True, output_spec_id=0), catalog, "db.new_spec", spark
    ).metrics
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(spark.table(table).collect()) == before, m
    assert {r[0] for r in spark.sql(f"SELECT DISTINCT spec_id FROM {table}.files").collect()} == {0}
    assert spark.sql(f"SELECT count(*) FROM {table}.files").collect()[0][0] == 2  # cat a and b


def test_the_tables_sort_order_with_transforms(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    from tablekeeper.iceberg.transforms import parse_transform
    from tablekeeper.iceberg.types import LONG

    table = f"{FS_CATALOG}.db.sorted_by_transforms"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP) USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY days(ts) DESC, bucket(8, id), id")
    for i in range(4):
        spark.sql(
            f"INSERT INTO {table} SELECT id, timestamp'2026-01-01 00:00:00' + "
            "make_interval(0, 0, 0, CAST((id * 7) % 5 AS INT), CAST(id % 24 AS INT), 0, 0) "
            f"FROM range({i * 50}, {(i + 1) * 50})"
        )
    before = sorted(spark.table(table).collect())
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    ident = "db.sorted_by_transforms"
    run_compact(CompactOptions(table=ident, strategy="sort", rewrite_all=True), catalog, ident, spark)
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(spark.table(table).collect()) == before
    files = spark.sql(f"SELECT file_path, sort_order_id FROM {table}.files").collect()
    assert len(files) == 1 and files[0][1] == 1  # the table's order, which the file follows
    rows = pq.read_table(files[0][0].removeprefix("file:")).to_pylist()
    bucket = parse_transform("bucket[8]")
    keys = [(-int(r["ts"].timestamp() // 86400), bucket.apply(LONG, r["id"]), r["id"]) for r in rows]
    assert keys == sorted(keys)


@pytest.mark.parametrize("writer", ["auto", "spark"])
def test_dropping_the_last_partition_field(spark, catalogs, writer: str) -> None:  # type: ignore[no-untyped-def]
    """Arrow rewrites old files into the now unpartitioned spec; Spark's writer, which cannot
    repartition rows, rewrites them within their own spec."""
    name = f"unpartitioned_{writer}"
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range({i * 10}, {i * 10 + 10})"
        )
    spark.sql(f"ALTER TABLE {table} DROP PARTITION FIELD cat")
    before = sorted(spark.table(table).collect())
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    options = CompactOptions(table=f"db.{name}", min_input_files=2, writer=writer)  # type: ignore[arg-type]
    m = run_compact(options, catalog, f"db.{name}", spark).metrics
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(spark.table(table).collect()) == before, m
    files = spark.sql(f"SELECT spec_id FROM {table}.files").collect()
    if writer == "auto":
        assert [r[0] for r in files] == [1], m
    else:
        assert sorted(r[0] for r in files) == [0, 0], m


@pytest.mark.parametrize("order", ["zorder(a, b)", ""])  # the shuffled and the streamed writer
def test_files_reach_the_target_when_the_order_compresses_better(spark, catalogs, order: str) -> None:  # type: ignore[no-untyped-def]
    """Rows that compress several times better rewritten (uncompressed input in hash order,
    zstd output sorted): sized by their input bytes, the output files landed far below the
    target. Bin-pack: every file but the last reaches the target (by at most a small row group
    more) or takes the rest of the rows up to the maximum size; a sort or Z-order writes its
    ranges again sized by what it wrote. Health calls none of them small."""
    import time

    from tablekeeper.jobs.health.iceberg import iceberg_health
    from tablekeeper.jobs.health.model import Thresholds

    name = "sized_" + ("z" if order.startswith("z") else "sort" if order else "binpack")
    table = f"{FS_CATALOG}.db.{name}"
    target = 128 * 1024
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (a INT, b INT, s STRING, id BIGINT) USING iceberg "
        f"TBLPROPERTIES ('format-version'='2', 'write.target-file-size-bytes'='{target}', "
        "'write.parquet.compression-codec'='uncompressed')"
    )
    for i in range(6):
        spark.sql(
            # (a, b) nearly decide id: sorted by them, id and s are close to sequential.
            f"INSERT INTO {table} SELECT CAST(id DIV 3750 AS INT), CAST(id % 3750 DIV 94 AS INT), "
            f"concat('row-', CAST(id AS STRING)), id "
            f"FROM range({i * 25000}, {(i + 1) * 25000}) ORDER BY hash(id, 3)"
        )
    # Written uncompressed, rewritten with zstd and sorted: the output is several times smaller.
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.parquet.compression-codec'='zstd')")
    before = spark.sql(f"SELECT count(*), sum(a), sum(b), sum(id) FROM {table}").collect()
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    ident = f"db.{name}"
    if order:
        options = CompactOptions(table=ident, strategy="sort", sort_order=order, rewrite_all=True)
    else:
        options = CompactOptions(table=ident, rewrite_all=True)
    m = run_compact(options, catalog, ident, spark).metrics
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*), sum(a), sum(b), sum(id) FROM {table}").collect() == before
    sizes = sorted(r[0] for r in spark.sql(f"SELECT file_size_in_bytes FROM {table}.files").collect())
    assert len(sizes) >= 3, (sizes, m)
    if not order:
        # At most one file (the last rows written) is off the target: under it but not small, or
        # above it by the rest of the rows that would have made a small file, up to the maximum.
        assert sum(1 for s in sizes if not target <= s <= target * 1.1) <= 1, sizes
    # A sort's files are its key's ranges, sized by the bytes the first pass really wrote: each
    # about a target, none small, none above the maximum (test_health_layout: none overlaps).
    assert target * 0.75 <= sizes[0] and sizes[-1] <= target * 1.8, sizes
    health = iceberg_health(catalog, ident, Thresholds(), {}, now_ms=int(time.time() * 1000))
    assert health.metrics["small_files"] == 0, health.metrics
    assert not [r for r in health.recommendations if r.job == "compact"], health.recommendations
