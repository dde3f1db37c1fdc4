"""compute-stats --partition-stats against Iceberg Java 1.11's ``PartitionStatsHandler``: on tables
Iceberg Spark wrote (two partition specs, position deletes or deletion vectors, an equality delete
committed by Java, a partition emptied by a metadata delete), Java's reader finds in tablekeeper's
file exactly the rows Java's own ``computeAndWriteStatsFile`` writes for the snapshot, every field
included; Java and PyIceberg load the registered entry; tablekeeper reads Java's file identically;
and an unpartitioned table is refused as Java refuses it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.partition_stats import (
    PartitionStats,
    read_partition_stats_bytes,
    unified_partition_type,
)
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.compute_stats import ComputeStatsOptions, run_compute_stats
from tablekeeper.tables.partition_stats import read_partition_stats
from tests.conftest import FS_CATALOG
from tests.support.java_deletes import commit_equality_deletes

pytestmark = pytest.mark.spark

Row = tuple[Any, ...]


def _create(spark, name: str, version: int) -> str:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, d DATE) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')"
    )
    rows = "SELECT id, concat('c', id % 3), date_add(DATE'2024-01-01', CAST(id % 2 AS INT)) FROM range"
    spark.sql(f"INSERT INTO {table} {rows}(0, 30)")
    # Specs 1 and 2 add a field each: spec 0's rows have nulls there and stay rows of their own.
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(2, id)")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD days(d)")
    spark.sql(f"INSERT INTO {table} {rows}(30, 60)")
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")  # position deletes (v2) or DVs (v3)
    commit_equality_deletes(spark, table, ["cat"], [["c1"]], partition=["c1"], spec_id=0)
    # Whole partitions: a metadata delete, whose DELETED entries only update last_updated_*.
    spark.sql(f"DELETE FROM {table} WHERE cat = 'c2'")
    return table


def _jtable(spark, table: str):  # type: ignore[no-untyped-def]
    t = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    t.refresh()
    return t


def _java_rows(spark, t, path: str) -> list[Row]:  # type: ignore[no-untyped-def]
    """The rows of the file at ``path`` as Java's ``readPartitionStatsFile`` reads them, with the
    schema Java builds for the table (its unified partition type and format version)."""
    jvm = spark._jvm
    handler = jvm.org.apache.iceberg.PartitionStatsHandler
    ptype = jvm.org.apache.iceberg.Partitioning.partitionType(t)
    schema = handler.schema(ptype, jvm.org.apache.iceberg.TableUtil.formatVersion(t))
    width = ptype.fields().size()
    any_class = jvm.java.lang.Class.forName("java.lang.Object")
    rows: list[Row] = []
    records = handler.readPartitionStatsFile(schema, t.io().newInputFile(path))
    try:
        it = records.iterator()
        while it.hasNext():
            s = it.next()
            p = s.partition()
            values = tuple(_py(p.get(i, any_class)) for i in range(width))
            rows.append(
                (
                    values,
                    s.specId(),
                    s.dataRecordCount(),
                    s.dataFileCount(),
                    s.totalDataFileSizeInBytes(),
                    s.positionDeleteRecordCount(),
                    s.positionDeleteFileCount(),
                    s.equalityDeleteRecordCount(),
                    s.equalityDeleteFileCount(),
                    s.totalRecords(),
                    s.lastUpdatedAt(),
                    s.lastUpdatedSnapshotId(),
                    s.dvCount(),
                )
            )
    finally:
        records.close()
    return rows


def _py(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, str, float)) else str(value.toString())


def _ours(rows: tuple[PartitionStats, ...]) -> list[Row]:
    return [
        (
            tuple(r.partition.values()),
            r.spec_id,
            r.data_record_count,
            r.data_file_count,
            r.total_data_file_size_in_bytes,
            r.position_delete_record_count,
            r.position_delete_file_count,
            r.equality_delete_record_count,
            r.equality_delete_file_count,
            r.total_record_count,
            r.last_updated_at,
            r.last_updated_snapshot_id,
            r.dv_count,
        )
        for r in rows
    ]


def _key(row: Row) -> Any:
    return (tuple((v is not None, v) for v in row[0]), row[1])


@pytest.mark.parametrize("version", [2, 3])
def test_partition_stats_match_iceberg_java(spark, catalogs, version: int) -> None:  # type: ignore[no-untyped-def]
    name = f"pstats_v{version}"
    table = _create(spark, name, version)
    t = _jtable(spark, table)
    snapshot_id = t.currentSnapshot().snapshotId()
    # Java's own file first: once the table registers ours for the snapshot, Java returns that.
    java_file = spark._jvm.org.apache.iceberg.PartitionStatsHandler.computeAndWriteStatsFile(t)
    java_rows = _java_rows(spark, t, java_file.path())

    catalog = catalog_for(catalogs.get(FS_CATALOG))
    context = JobContext(catalogs, spark=lambda: spark, submitted=lambda: spark)
    options = ComputeStatsOptions(f"db.{name}", partition_stats_only=True)
    dry = run_compute_stats(
        ComputeStatsOptions(f"db.{name}", partition_stats_only=True, dry_run=True),
        catalog,
        f"db.{name}",
        context,
    )
    assert dry.metrics["partitions"] == len(java_rows) and dry.metrics["partition_statistics_file"] is None
    metrics = dict(run_compute_stats(options, catalog, f"db.{name}", context).metrics)
    path = metrics["partition_statistics_file"]
    assert isinstance(path, str)
    assert re.fullmatch(rf".*/metadata/partition-stats-{snapshot_id}-[0-9a-f-]{{36}}\.parquet", path)
    assert metrics["partitions"] == len(java_rows)
    assert "columns" not in metrics  # no sketches asked for

    # (1) Java reads our file: the very rows it computed, in its order (ties between specs aside).
    ours_in_java = _java_rows(spark, t, path)
    assert sorted(ours_in_java, key=_key) == sorted(java_rows, key=_key)
    assert [r[0] for r in ours_in_java] == [r[0] for r in java_rows]
    # The table is one that exercises every count.
    spec0 = [r for r in java_rows if r[1] == 0]
    spec2 = [r for r in java_rows if r[1] == 2]  # the second ADD PARTITION FIELD's spec
    assert spec0 and spec2 and all(r[0][1:] == (None, None) for r in spec0)
    assert all(None not in r[0] for r in spec2)
    assert any(r[5] > 0 for r in java_rows)  # position delete records
    assert any(r[6 if version == 2 else 12] > 0 for r in java_rows)  # delete files or DVs
    assert version == 2 or all(r[6] == 0 for r in java_rows)
    assert any(r[7] > 0 and r[8] == 1 for r in java_rows)  # the equality delete
    emptied = [r for r in java_rows if r[0][0] == "c2"]
    assert emptied and all(r[2] == r[3] == r[4] == 0 for r in emptied)
    assert all(r[11] == snapshot_id for r in emptied)  # the delete is their last update
    assert {r[9] for r in java_rows} == {None}  # total_record_count: left null

    # (2) Java and PyIceberg load the registered entry.
    t.refresh()
    entries = [f for f in t.partitionStatisticsFiles() if f.snapshotId() == snapshot_id]
    assert len(entries) == 1 and entries[0].path() == path
    assert entries[0].fileSizeInBytes() == t.io().newInputFile(path).getLength()
    assert entries[0].fileSizeInBytes() == metrics["partition_statistics_file_size_in_bytes"]
    from pyiceberg.table import StaticTable

    loaded = catalog.require(f"db.{name}")
    pyiceberg = StaticTable.from_metadata(loaded.metadata_location).metadata.partition_statistics
    assert [(p.snapshot_id, p.statistics_path, p.file_size_in_bytes) for p in pyiceberg] == [
        (snapshot_id, path, entries[0].fileSizeInBytes())
    ]

    # (3) tablekeeper reads Java's file, and its own, as Java reads them.
    ptype = unified_partition_type(loaded.metadata)
    java_read = read_partition_stats_bytes(loaded.io.read(java_file.path()), ptype)
    assert sorted(_ours(java_read), key=_key) == sorted(java_rows, key=_key)
    mine = read_partition_stats(loaded.io, loaded.metadata)
    assert mine is not None and _ours(mine) == ours_in_java
    assert list(mine[0].partition) == ["cat", "id_bucket_2", "d_day"]

    # A second run finds the file there: nothing to do, nothing committed.
    again = run_compute_stats(options, catalog, f"db.{name}", context).metrics
    assert again["partition_statistics_file"] == path and "nothing to do" in str(again["note"])
    assert catalog.require(f"db.{name}").metadata_location == loaded.metadata_location
    if version == 2:
        return
    # Sketches and partition statistics together: one commit registers both; Java loads both.
    live = spark.sql(f"SELECT COUNT(*) FROM {table}").collect()[0][0]  # ids are unique
    both = ComputeStatsOptions(f"db.{name}", columns=("id",), partition_stats=True, recompute=True)
    combined = run_compute_stats(both, catalog, f"db.{name}", context).metrics
    assert combined["replaced_partition_statistics_file"] == path and combined["ndv"] == {"id": live}
    after = catalog.require(f"db.{name}").metadata
    assert len(after.metadata_log) == len(loaded.metadata.metadata_log) + 1
    t.refresh()
    assert [f.path() for f in t.statisticsFiles()] == [combined["statistics_file"]]
    assert [f.path() for f in t.partitionStatisticsFiles()] == [combined["partition_statistics_file"]]
    assert sorted(_java_rows(spark, t, str(combined["partition_statistics_file"])), key=_key) == sorted(
        java_rows, key=_key
    )


def test_unpartitioned_table_is_refused_as_java_refuses_it(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.db.pstats_flat"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    with pytest.raises(Exception, match="Table must be partitioned"):
        spark._jvm.org.apache.iceberg.PartitionStatsHandler.computeAndWriteStatsFile(_jtable(spark, table))
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    context = JobContext(catalogs, spark=lambda: spark, submitted=lambda: spark)
    with pytest.raises(ConfigError, match=r"unpartitioned.*'Table must be partitioned'"):
        run_compute_stats(
            ComputeStatsOptions("db.pstats_flat", partition_stats=True), catalog, "db.pstats_flat", context
        )
