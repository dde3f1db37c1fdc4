"""The reference engines are real and agree with each other, in the one shared Spark session.

delta-spark writes Delta (deletion vectors on) and delta-rs reads it back; Iceberg Spark writes v2
and v3 tables through a Hadoop and a JDBC (sqlite) catalog; PyIceberg reads the JDBC table through
its SqlCatalog on the same sqlite file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import FS_CATALOG, REPO_ROOT, SQL_CATALOG

pytestmark = pytest.mark.spark


def _rows(df) -> list[tuple]:  # type: ignore[no-untyped-def, type-arg]
    return sorted(tuple(r) for r in df.collect())


def test_delta_spark_with_deletion_vectors_and_delta_rs_agree(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from delta.tables import DeltaTable
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    path = str(tmp_path / "events")
    first = spark.range(0, 60).selectExpr("id", "cast(id % 3 as int) as part", "concat('v', id) as s")
    (first.write.format("delta").partitionBy("part").option("delta.enableDeletionVectors", "true").save(path))
    spark.range(60, 90).selectExpr("id", "cast(id % 3 as int) as part", "concat('v', id) as s").write.format(
        "delta"
    ).mode("append").save(path)
    DeltaTable.forPath(spark, path).delete("id % 10 = 0")

    expected = [(i, i % 3, f"v{i}") for i in range(90) if i % 10 != 0]
    assert _rows(spark.read.format("delta").load(path)) == expected

    # The delete must have produced deletion vectors, not rewritten files.
    log_entries = [
        json.loads(line)
        for f in sorted((Path(path) / "_delta_log").glob("*.json"))
        for line in f.read_text().splitlines()
    ]
    dv_adds = [e["add"] for e in log_entries if "add" in e and e["add"].get("deletionVector")]
    assert dv_adds, "DELETE wrote no deletion vector"
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version", "operation").collect()
    assert [r.operation for r in sorted(history)] == ["WRITE", "WRITE", "DELETE"]

    # delta-rs's DataFusion scan applies deletion vectors (its plain pyarrow export refuses them).
    rs = QueryBuilder().register("t", RsTable(path)).execute("SELECT id, part, s FROM t").read_all()
    rs_rows = pa.table(rs).to_pylist()  # arro3 table -> pyarrow through the Arrow C interface
    assert sorted((r["id"], r["part"], r["s"]) for r in rs_rows) == expected


@pytest.mark.parametrize("catalog", [FS_CATALOG, SQL_CATALOG])
@pytest.mark.parametrize("version", [2, 3])
def test_iceberg_spark_writes_and_reads_back(spark, catalog: str, version: int) -> None:  # type: ignore[no-untyped-def]
    table = f"{catalog}.toolchain.t_v{version}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.toolchain")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, ts TIMESTAMP) USING iceberg "
        f"PARTITIONED BY (cat, days(ts)) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')"
    )
    spark.sql(
        f"INSERT INTO {table} SELECT id, concat('c', id % 4), "
        "timestamp'2026-01-01 00:00:00' + make_interval(0, 0, 0, cast(id % 5 as int)) FROM range(40)"
    )
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"INSERT INTO {table} VALUES (100, 'c9', timestamp'2026-02-01 00:00:00')")

    ids = [r.id for r in spark.sql(f"SELECT id FROM {table} ORDER BY id").collect()]
    assert ids == [i for i in range(40) if i % 7 != 0] + [100]
    fmt = spark.sql(f"SELECT * FROM {table}.metadata_log_entries").count()
    assert fmt >= 3
    delete_files = spark.sql(f"SELECT content FROM {table}.delete_files").collect()
    # merge-on-read deletes: v2 writes position delete files, v3 writes deletion vectors (Puffin).
    assert delete_files
    formats = {r.file_format for r in spark.sql(f"SELECT file_format FROM {table}.delete_files").collect()}
    assert formats == ({"PUFFIN"} if version == 3 else {"PARQUET"})
    if version == 3:
        lineage = spark.sql(f"SELECT _row_id FROM {table}").collect()
        row_ids = [r._row_id for r in lineage]
        assert None not in row_ids
        assert len(set(row_ids)) == len(row_ids)


def test_pyiceberg_reads_the_jdbc_catalog_table_with_the_same_rows(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.catalog.sql import SqlCatalog

    table = f"{SQL_CATALOG}.toolchain.shared_rows"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SQL_CATALOG}.toolchain")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, name STRING, amount DECIMAL(10,2), d DATE) USING iceberg "
        "PARTITIONED BY (bucket(4, id)) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    spark.sql(
        f"INSERT INTO {table} SELECT id, concat('n', id), cast(id * 1.25 as decimal(10,2)), "
        "date_add(date'2026-01-01', cast(id as int)) FROM range(25)"
    )
    spark.sql(f"DELETE FROM {table} WHERE id IN (3, 11)")
    spark_rows = _rows(spark.table(table))
    assert len(spark_rows) == 23

    conf = catalogs.get(SQL_CATALOG)
    py_catalog = SqlCatalog(SQL_CATALOG, uri=conf.uri, warehouse=conf.warehouse)
    py_table = py_catalog.load_table("toolchain.shared_rows")
    arrow = py_table.scan().to_arrow()
    py_rows = sorted(tuple(r.values()) for r in arrow.to_pylist())
    assert py_rows == spark_rows
    assert py_table.metadata.format_version == 2
    assert py_table.current_snapshot() is not None
    assert (
        py_table.current_snapshot().snapshot_id
        == spark.sql(  # type: ignore[union-attr]
            f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()[0]
    )


# The jars and a JDK are this tier's: the unit tier's doctor tests check only the refusals.
def test_doctor_json_reports_versions_and_exits_zero() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tablekeeper", "doctor", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert report["spark"].startswith("4.1.")
    assert report["delta"] == report["delta_python"]
    assert report["iceberg"].startswith("1.1")
    assert int(report["java"].split(".")[0]) >= 17
    assert all(j["present"] and Path(j["path"]).is_file() for j in report["jars"])
    assert "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13" in report["packages"]


def test_the_local_session_maps_the_lines_class_archive_in(spark) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.spark.class_archive import archive_path

    # make setup built it, and the session's JVM mapped it in: a JVM that cannot use an archive
    # runs on without it (quietly), so the option alone would prove nothing.
    archive = archive_path()
    assert archive is not None and archive.is_file(), "make setup builds the class archive"
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()
