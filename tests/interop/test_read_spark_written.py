"""Tables Iceberg Java (in Spark) writes are read by tablekeeper exactly as Iceberg reads them.

Each table goes through schema and partition evolution, row-level deletes (position delete files
on v2, deletion vectors on v3, copy-on-write on v1), an update, a branch and a tag. Then for every
snapshot the live data and delete files tablekeeper reads equal Iceberg's ``files`` metadata table
at that snapshot, and on v3 the ``_row_id`` tablekeeper derives for each row equals Spark's.
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.iceberg.content import DATA
from tablekeeper.tables.iceberg import live_files
from tests.conftest import FS_CATALOG, SQL_CATALOG
from tests.support.iceberg_writer import local_path

pytestmark = pytest.mark.spark


def build_table(spark, table: str, version: int) -> None:  # type: ignore[no-untyped-def]
    mode = "copy-on-write" if version == 1 else "merge-on-read"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, amount DOUBLE) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='{mode}', "
        f"'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')"
    )
    spark.sql(f"INSERT INTO {table} SELECT id, concat('c', id % 3), id * 1.5 FROM range(0, 30)")
    spark.sql(f"INSERT INTO {table} SELECT id, concat('c', id % 3), id * 1.5 FROM range(30, 45)")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN note STRING")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(4, id)")
    spark.sql(
        f"INSERT INTO {table} SELECT id, concat('c', id % 3), id * 1.5, concat('n', id) FROM range(45, 60)"
    )
    spark.sql(f"DELETE FROM {table} WHERE id % 10 = 3")
    spark.sql(f"UPDATE {table} SET amount = -1 WHERE id IN (5, 50)")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN amount TO value")
    spark.sql(f"ALTER TABLE {table} CREATE TAG before_branch")
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    spark.sql(f"INSERT INTO {table}.branch_audit VALUES (900, 'c9', 9.0, 'branch only')")
    spark.sql(f"DELETE FROM {table}.branch_audit WHERE id = 1")
    spark.sql(f"INSERT INTO {table} VALUES (1000, 'c0', 1.0, 'main again')")


def iceberg_files(spark, table: str, snapshot_id: int) -> set[tuple[str, int]]:  # type: ignore[no-untyped-def]
    rows = spark.sql(f"SELECT file_path, content FROM {table}.files VERSION AS OF {snapshot_id}").collect()
    return {(r.file_path, r.content) for r in rows}


def expected_row_ids(entries: Any) -> dict[tuple[str, int], int]:
    """_row_id per (file, position): the materialized value, else first_row_id + position."""
    out: dict[tuple[str, int], int] = {}
    for e in entries:
        f = e.data_file
        if f.content != DATA or f.first_row_id is None:
            continue
        table = pq.read_table(local_path(f.file_path))
        materialized = table.column("_row_id").to_pylist() if "_row_id" in table.column_names else None
        for pos in range(table.num_rows):
            value = materialized[pos] if materialized is not None else None
            out[(f.file_path, pos)] = value if value is not None else f.first_row_id + pos
    return out


@pytest.mark.parametrize("catalog_name", [SQL_CATALOG, FS_CATALOG])
@pytest.mark.parametrize("version", [1, 2, 3])
def test_tablekeeper_reads_what_iceberg_spark_wrote(spark, catalogs, catalog_name: str, version: int) -> None:  # type: ignore[no-untyped-def]
    table = f"{catalog_name}.spark_written.t{version}"
    build_table(spark, table, version)

    catalog = catalog_for(catalogs.get(catalog_name))
    loaded = catalog.load_table(f"spark_written.t{version}")
    meta = loaded.metadata
    assert meta.format_version == version
    assert len(meta.partition_specs) == 2
    assert {"before_branch", "audit", "main"} <= set(meta.refs)
    assert meta.refs["before_branch"].type == "tag"

    kinds: set[int] = set()
    for snapshot in meta.snapshots:
        live = live_files(loaded.io, meta, snapshot)
        mine = {(e.data_file.file_path, e.data_file.content) for e in live.data + live.deletes}
        kinds |= {c for _, c in mine}
        assert mine == iceberg_files(spark, table, snapshot.snapshot_id), f"snapshot {snapshot.snapshot_id}"
    # The table really exercised deletes: position deletes (v2) or DVs (v3) are among the files.
    assert (1 in kinds) == (version >= 2)

    if version == 3:
        assert meta.next_row_id is not None and meta.next_row_id > 0
        for ref in ("main", "audit"):
            snap = meta.ref_snapshot(ref)
            live = live_files(loaded.io, meta, snap)
            if any(e.data_file.is_dv for e in live.deletes):
                assert all(e.data_file.referenced_data_file for e in live.deletes)
            ids = expected_row_ids(live.data)
            suffix = "" if ref == "main" else f".branch_{ref}"
            rows = spark.sql(f"SELECT _file, _pos, _row_id FROM {table}{suffix}").collect()
            assert rows
            for r in rows:
                assert ids[(r._file, r._pos)] == r._row_id
            assert len({r._row_id for r in rows}) == len(rows)
