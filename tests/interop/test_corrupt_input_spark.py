"""A corrupt input file under a job that reads it on Spark ends the job as the driver engine does:
exit 3, the one-line error naming the file, the table unchanged (issue 39). Before, Spark's task
failure surfaced as ``unexpected Py4JJavaError ... Lost task 0.0`` cut at 300 characters, exit 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.cli import main
from tests.conftest import FS_CATALOG

pytestmark = pytest.mark.spark


def _local(path: str) -> Path:
    return Path(path.removeprefix("file://").removeprefix("file:"))


def _cut(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])
    # Without the local file system's checksum sidecar, the reader meets the damage itself, as on
    # an object store (the sidecar would fail it first, with a ChecksumException).
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def _build(spark: Any, name: str, version: int) -> str:
    """Three inserts (three manifests, three data files) and two merge-on-read DELETEs: Parquet
    position delete files on v2, deletion vectors in Puffin files on v3."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg TBLPROPERTIES "
        f"('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
        "'write.delete.granularity'='file', 'write.delete.format.default'='parquet')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range({i * 20}, {(i + 1) * 20})"
        )
    for k in range(2):
        spark.sql(f"DELETE FROM {table} WHERE id % 7 = {k}")
    return table


def _corrupt(spark: Any, table: str, victim: str) -> Path:
    """Damage one input file of ``table`` as ``victim`` says; its local path."""
    if victim == "manifest":  # its header whole, its entries cut short
        path = _local(spark.sql(f"SELECT path FROM {table}.manifests LIMIT 1").first()[0])
        _cut(path, path.stat().st_size - 16)
        return path
    if victim == "data":
        path = _local(spark.sql(f"SELECT file_path FROM {table}.data_files LIMIT 1").first()[0])
        _cut(path, path.stat().st_size // 2)
        return path
    row = spark.sql(
        f"SELECT file_path, content_offset, content_size_in_bytes FROM {table}.delete_files LIMIT 1"
    ).first()
    path = _local(row[0])
    if victim == "delete":  # a Parquet position delete file
        _cut(path, path.stat().st_size // 2)
    elif victim == "dv-cut":  # the Puffin file ends inside the deletion vector's blob
        _cut(path, row[1] + row[2] // 2)
    else:  # "dv-crc": the blob's last four bytes are the CRC-32 of its vector
        raw = bytearray(path.read_bytes())
        raw[row[1] + row[2] - 1] ^= 0xFF
        path.write_bytes(bytes(raw))
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    return path


CASES = {
    "rewrite-manifests-spark": (2, "manifest", ["rewrite-manifests", "--engine", "spark", "--rewrite-all"]),
    "rewrite-manifests-driver": (2, "manifest", ["rewrite-manifests", "--engine", "driver", "--rewrite-all"]),
    "rewrite-position-deletes-parquet": (2, "delete", ["rewrite-position-deletes", "--rewrite-all"]),
    "compute-stats-data": (2, "data", ["compute-stats"]),
    "compact-data": (2, "data", ["compact", "--rewrite-all"]),
    "compact-delete": (2, "delete", ["compact", "--rewrite-all"]),
    "compact-dv-crc": (3, "dv-crc", ["compact", "--rewrite-all"]),
    "compact-dv-cut": (3, "dv-cut", ["compact", "--rewrite-all"]),
    "compact-delta-data": (0, "data", ["compact"]),  # format version 0: a Delta table (OPTIMIZE)
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_corrupt_input_file_exits_3_naming_it(
    spark: Any, catalogs: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    version, victim, job = CASES[case]
    name = "corrupt_" + case.replace("-", "_")
    if version == 0:
        where = tmp_path / "delta"
        for i in range(3):
            spark.range(i * 20, (i + 1) * 20).write.format("delta").mode("append").save(str(where))
        path = next(where.glob("*.parquet"))
        _cut(path, path.stat().st_size // 2)
        table_arg = str(where)

        def state() -> object:
            return sorted(p.name for p in (where / "_delta_log").iterdir())
    else:
        table = _build(spark, name, version)
        path = _corrupt(spark, table, victim)
        catalog = catalog_for(catalogs.get(FS_CATALOG))
        table_arg = f"db.{name}"

        def state() -> object:
            return catalog.require(table_arg).metadata_location

    before = state()
    conf = tmp_path / "catalogs.yaml"
    warehouse = catalogs.get(FS_CATALOG).warehouse
    conf.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {warehouse}\n")
    capsys.readouterr()
    code = main([job[0], "--table", table_arg, "--conf-file", str(conf), *job[1:]])
    out, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert code == 3, last
    assert str(path) in last, last
    assert json.loads(out.strip().splitlines()[-1])["status"] == "refused"
    assert state() == before
