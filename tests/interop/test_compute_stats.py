"""compute-stats against Iceberg Java: Java reads the NDV sketches tablekeeper commits, tablekeeper
reads the ones Java's ``compute_table_stats`` writes, and on twin tables (same rows) both hold the
same sketches; deleted rows are not counted, on v2 (position deletes) and v3 (deletion vectors)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.cli import main
from tablekeeper.iceberg.statistics import THETA_BLOB_TYPE, merge_sketches, read_theta_blobs
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.compute_stats import ComputeStatsOptions, run_compute_stats
from tests.conftest import FS_CATALOG

pytestmark = pytest.mark.spark

ROWS = 6000  # id: above the 4096 hashes a sketch keeps (estimated); the others below (exact)
COLUMNS = ("id", "cat", "m", "i", "d", "ts", "ntz", "amt", "f", "fl", "b", "bin", "s.x", "s.y")
SHADED = "org.apache.iceberg.shaded.org.apache.datasketches"


def _create(spark, name: str, version: int) -> str:  # type: ignore[no-untyped-def]
    """Partitioned, merge-on-read, two inserts across a partition evolution and a delete (every
    seventh id)."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, m INT, i INT, d DATE, ts TIMESTAMP, "
        "ntz TIMESTAMP_NTZ, amt DECIMAL(12,2), f DOUBLE, fl FLOAT, b BOOLEAN, bin BINARY, "
        "s STRUCT<x: INT, y: STRING>, arr ARRAY<INT>) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')"
    )
    for lo, hi in ((0, 4000), (4000, ROWS)):
        spark.sql(
            f"""INSERT INTO {table} SELECT id, concat('c', id % 3), CAST(id % 7 AS INT),
            CAST(id % 1500 - 700 AS INT), date_add(DATE'1969-12-01', CAST(id % 400 AS INT)),
            TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, CAST(id % 900 AS INT)),
            TIMESTAMP_NTZ'1960-06-01 12:00:00' + make_interval(0, 0, 0, 0, CAST(id % 50 AS INT)),
            CAST((id % 2000 - 1000) * 1.37 AS DECIMAL(12,2)), (id % 333) / 4.0,
            CAST((id % 111) / 8.0 AS FLOAT), id % 5 = 0, IF(id % 9 = 0, NULL, unhex(hex(id % 1000))),
            named_struct('x', CAST(id % 64 AS INT), 'y', IF(id % 4 = 0, NULL, concat('y', id % 2222))),
            array(CAST(id AS INT)) FROM range({lo}, {hi})"""
        )
        if lo == 0:
            # A partition evolution between the inserts: the rows span two specs.
            spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(4, id)")
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    return table


def _context(spark, catalogs) -> JobContext:  # type: ignore[no-untyped-def]
    return JobContext(catalogs, spark=lambda: spark, submitted=lambda: spark)


def _run(spark, catalogs, name: str, **options: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    result = run_compute_stats(
        ComputeStatsOptions(f"db.{name}", **options), catalog, f"db.{name}", _context(spark, catalogs)
    )
    return dict(result.metrics)


def _true_counts(spark, table: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    exprs = ", ".join(f"COUNT(DISTINCT {c})" for c in COLUMNS)
    row = spark.sql(f"SELECT {exprs} FROM {table}").collect()[0]
    return dict(zip(COLUMNS, (int(v) for v in row), strict=True))


def _java_stats(spark, table: str) -> dict[int, dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Iceberg Java's view: the table's statistics entry for its current snapshot, each blob read
    with Java's Puffin reader and wrapped as a DataSketches-java compact sketch."""
    jvm = spark._jvm
    t = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    t.refresh()
    current = t.currentSnapshot()
    entries = [s for s in t.statisticsFiles() if s.snapshotId() == current.snapshotId()]
    assert len(entries) == 1
    entry = entries[0]
    assert re.fullmatch(rf".*/metadata/{current.snapshotId()}-[0-9a-f-]{{36}}\.stats", entry.path())
    assert t.io().newInputFile(entry.path()).getLength() == entry.fileSizeInBytes()
    reader = jvm.org.apache.iceberg.puffin.Puffin.read(t.io().newInputFile(entry.path())).build()
    out: dict[int, dict[str, Any]] = {}
    try:
        blobs = reader.fileMetadata().blobs()
        it = reader.readAll(blobs).iterator()
        while it.hasNext():
            pair = it.next()
            meta, data = (
                pair.first(),
                bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(pair.second())),
            )
            sketch = getattr(jvm, f"{SHADED}.theta.CompactSketch").wrap(
                getattr(jvm, f"{SHADED}.memory.Memory").wrap(data)
            )
            assert meta.type() == THETA_BLOB_TYPE
            assert meta.snapshotId() == current.snapshotId()
            assert meta.sequenceNumber() == current.sequenceNumber()
            out[int(meta.inputFields()[0])] = {
                "bytes": data,
                "estimate": sketch.getEstimate(),
                "bounds": (sketch.getLowerBound(2), sketch.getUpperBound(2)),
                "ndv": int(meta.properties()["ndv"]),
                "codec": meta.compressionCodec(),
            }
    finally:
        reader.close()
    # The table metadata's blob list is the file's.
    assert sorted(int(b.fields()[0]) for b in entry.blobMetadata()) == sorted(out)
    return out


def _field_ids(spark, table: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    t = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    schema = t.schema()
    return {c: int(schema.findField(c).fieldId()) for c in COLUMNS}


@pytest.mark.parametrize("version", [2, 3])
def test_sketches_agree_with_iceberg_java_both_ways(spark, catalogs, version: int) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = f"stats_ours_v{version}", f"stats_java_v{version}"
    ours_table, java_table = _create(spark, ours, version), _create(spark, theirs, version)
    truth = _true_counts(spark, ours_table)
    assert truth == _true_counts(spark, java_table)
    assert truth["m"] == 6  # the delete removed every row with m = 0: those must not count

    metrics = _run(spark, catalogs, ours, columns=COLUMNS)
    assert metrics["columns"] == list(COLUMNS)
    ids = _field_ids(spark, ours_table)

    # (1) Iceberg Java reads our sketches: same bytes as we computed, estimates within bounds.
    java_view = _java_stats(spark, ours_table)
    assert set(java_view) == set(ids.values())
    for col, fid in ids.items():
        blob = java_view[fid]
        assert blob["codec"] == "zstd"
        assert blob["ndv"] == metrics["ndv"][col] == int(blob["estimate"])
        low, high = blob["bounds"]
        assert low <= truth[col] <= high, (col, truth[col], blob)
        if truth[col] < 4096:
            assert blob["ndv"] == truth[col], col

    # (2) Java's own procedure on the twin; tablekeeper reads what it wrote.
    cols = ", ".join(f"'{c}'" for c in COLUMNS)
    spark.sql(
        f"CALL {FS_CATALOG}.system.compute_table_stats(table => 'db.{theirs}', columns => array({cols}))"
    )
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    loaded = catalog.require(f"db.{theirs}")
    (entry,) = loaded.metadata.statistics
    assert entry.snapshot_id == loaded.metadata.current_snapshot_id
    java_blobs = {b.field_id: b for b in read_theta_blobs(loaded.io.read(entry.statistics_path))}
    our_entry = catalog.require(f"db.{ours}").metadata.statistics[0]
    our_blobs = {
        b.field_id: b
        for b in read_theta_blobs(catalog.require(f"db.{ours}").io.read(our_entry.statistics_path))
    }
    assert set(java_blobs) == set(our_blobs) == set(ids.values())
    for col, fid in ids.items():
        mine, java = our_blobs[fid], java_blobs[fid]
        if truth[col] < 4096:
            # Exact mode: the same hashes, so the very same sketch bytes and ndv.
            assert mine.sketch == java.sketch, col
            assert mine.ndv == java.ndv == truth[col], col
        else:
            # Estimation mode: Java's per-task sketches (Alpha) and ours (unions) keep different
            # 4096-hash samples, so estimates agree within the sketches' error, not exactly.
            assert abs(mine.ndv - java.ndv) <= 0.05 * truth[col], (col, mine.ndv, java.ndv)
        # The two merge as sketches of one set: the union is no larger than either side's error.
        _, union = merge_sketches([mine.sketch, java.sketch])
        assert abs(union - truth[col]) <= 0.05 * truth[col], (col, union, truth[col])


def test_default_columns_dry_run_rerun_snapshot_and_errors(spark, catalogs, capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    name = "stats_runs"
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, tag STRING, s STRUCT<x: INT>, tags ARRAY<STRING>) "
        "USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    empty = _run(spark, catalogs, name)
    assert empty["snapshot_id"] is None and "nothing to do" in empty["note"]

    spark.sql(f"INSERT INTO {table} VALUES (1, 'a', named_struct('x', 1), array('p')), (2, 'b', NULL, NULL)")
    first_snapshot = catalog.require(f"db.{name}").metadata.current_snapshot_id
    spark.sql(f"INSERT INTO {table} VALUES (3, 'a', named_struct('x', 2), array('q'))")
    before = catalog.require(f"db.{name}")

    # --dry-run: the plan (Java's default columns: top-level primitives only), nothing written.
    planned = _run(spark, catalogs, name, dry_run=True)
    assert planned["columns"] == ["id", "tag"] and planned["statistics_file"] is None
    assert planned["snapshot_id"] == before.metadata.current_snapshot_id
    assert catalog.require(f"db.{name}").metadata_location == before.metadata_location

    first = _run(spark, catalogs, name)
    assert first["ndv"] == {"id": 3, "tag": 2} and first["replaced_statistics_file"] is None
    # The same run again finds every sketch there: nothing to do, nothing written.
    done = catalog.require(f"db.{name}").metadata_location
    again = _run(spark, catalogs, name)
    assert "nothing to do" in again["note"] and again["statistics_file"] == first["statistics_file"]
    assert catalog.require(f"db.{name}").metadata_location == done
    # A column the entry lacks computes again and replaces the entry; the old file is left.
    second = _run(spark, catalogs, name, columns=("s.x", "id"))
    assert second["ndv"] == {"s.x": 2, "id": 3}
    assert second["replaced_statistics_file"] == first["statistics_file"]
    after = catalog.require(f"db.{name}")
    assert [s.statistics_path for s in after.metadata.statistics] == [second["statistics_file"]]
    assert after.io.exists(first["statistics_file"])
    # An older snapshot gets its own entry; the current one's stays.
    old = _run(spark, catalogs, name, snapshot_id=first_snapshot)
    assert old["ndv"] == {"id": 2, "tag": 2}
    stats = {s.snapshot_id: s.statistics_path for s in catalog.require(f"db.{name}").metadata.statistics}
    assert stats == {
        first_snapshot: old["statistics_file"],
        after.metadata.current_snapshot_id: second["statistics_file"],
    }

    # Through the command line: a bad column is a usage error naming the columns there are.
    conf = tmp_path / "catalogs.yaml"
    c = catalogs.get(FS_CATALOG)
    conf.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {c.warehouse}\n")
    base = ["compute-stats", "--table", f"db.{name}", "--conf-file", str(conf)]
    unchanged = catalog.require(f"db.{name}").metadata_location
    assert main([*base, "--columns", "id,nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "'nope'" in err and "'id', 'tag', 's.x'" in err
    assert main([*base, "--columns", "tags"]) == 2
    assert "not primitive" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main([*base, "--snapshot", "42"]) == 2
    assert main([*base, "--dry-run", "--columns", "s.x"]) == 0
    assert '"status":"dry_run"' in capsys.readouterr().out.strip().splitlines()[-1]
    assert catalog.require(f"db.{name}").metadata_location == unchanged
