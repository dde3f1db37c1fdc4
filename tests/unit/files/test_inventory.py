"""Reading an inventory report's data file into a listing's rows: which objects are the scanned
location's current files, whatever each service spells (the manifests, the checks and the stores:
tests/interop/test_inventory.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.errors import UnusableInventory
from tablekeeper.files.inventory import Fields, Inventory, Part, Scope, read_part
from tablekeeper.io.fileio import FileInfo

S3_CSV = Fields("Key", "LastModifiedDate", "Size", "Bucket", "IsLatest", "IsDeleteMarker")


def test_scope_of_each_store_spelling() -> None:
    assert Scope.of("s3a://lake/wh/db/t/") == Scope("s3a://lake", "lake", "wh/db/t/")
    assert Scope.of("gs://b/t") == Scope("gs://b", "b", "t/")
    azure = Scope.of("abfss://box@acct.dfs.core.windows.net/wh/t")
    assert azure == Scope("abfss://box@acct.dfs.core.windows.net", "box", "wh/t/")
    with pytest.raises(UnusableInventory, match="not in an object store"):
        Scope.of("/data/wh/t")


def _read(tmp_path: Path, inventory: Inventory, data: bytes, location: str) -> list[FileInfo]:
    part = tmp_path / "part"
    part.write_bytes(data)
    return list(read_part(inventory, Part(str(part)), Scope.of(location)))


def test_s3_csv_rows_decoded_current_and_under_the_location(tmp_path: Path) -> None:
    columns = ("Bucket", "Key", "VersionId", "IsLatest", "IsDeleteMarker", "Size", "LastModifiedDate")
    lines = [
        '"lake","wh/t/data/id%3D1/a+b.parquet","v1","true","false","10","2026-01-01T00:00:00.000Z"',
        '"lake","wh/t/data/old.parquet","v0","false","false","11","2026-01-01T00:00:00.000Z"',
        '"lake","wh/t/data/gone.parquet","v2","true","true","","2026-01-01T00:00:01.000Z"',
        '"lake","wh/t2/data/other-table.parquet","v1","true","false","12","2026-01-01T00:00:00.000Z"',
        '"lake","wh%2Ft%2Fmetadata%2Fv1.metadata.json","v1","true","false","13","2026-01-01T00:00:02Z"',
        '"other","wh/t/data/other-bucket.parquet","v1","true","false","14","2026-01-01T00:00:00.000Z"',
        '"lake","wh/t/data/no-time.parquet","v1","true","false","15",""',
    ]
    inventory = Inventory(
        "s3", "m", 0, "csv", S3_CSV, (), csv_columns=columns, gzipped=True, keys_encoded=True
    )
    rows = _read(tmp_path, inventory, gzip.compress("\n".join(lines).encode()), "s3://lake/wh/t")
    assert rows == [
        FileInfo("s3://lake/wh/t/data/id=1/a b.parquet", 10, 1767225600000),
        FileInfo("s3://lake/wh/t/metadata/v1.metadata.json", 13, 1767225602000),
    ]


def test_azure_parquet_names_carry_the_container_and_directories_are_not_files(tmp_path: Path) -> None:
    stamp = pa.array([1000, 2000, 3000, 4000], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    table = pa.table(
        {
            "Name": ["box/wh/t/data/a.parquet", "box/wh/t/data", "other/wh/t/data/b.parquet", "box/wh/t/x/"],
            "Last-Modified": stamp,
            "Content-Length": pa.array([5, 0, 6, 0], pa.int64()),
            "hdi_isfolder": [False, True, False, False],
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    fields = Fields("Name", "Last-Modified", "Content-Length", folder="hdi_isfolder", snapshot="Snapshot")
    inventory = Inventory("azure", "m", 0, "parquet", fields, (), container="box")
    rows = _read(
        tmp_path, inventory, sink.getvalue().to_pybytes(), "abfss://box@acct.dfs.core.windows.net/wh/t"
    )
    assert rows == [FileInfo("abfss://box@acct.dfs.core.windows.net/wh/t/data/a.parquet", 5, 1000)]


def test_gcs_csv_with_its_header_and_quoted_names(tmp_path: Path) -> None:
    text = (
        "bucket,name,size,updated\n"
        'b,"t/data/with, comma.parquet",7,2026-01-01T00:00:00Z\n'
        "b,t/data/plain.parquet,8,2026-01-01T00:00:01.500Z\n"
    )
    inventory = Inventory(
        "gcs", "m", 0, "csv", Fields("name", "updated", "size", "bucket"), (), csv_header=True
    )
    rows = _read(tmp_path, inventory, text.encode(), "gs://b/t")
    assert rows == [
        FileInfo("gs://b/t/data/with, comma.parquet", 7, 1767225600000),
        FileInfo("gs://b/t/data/plain.parquet", 8, 1767225601500),
    ]
    missing = Inventory("gcs", "m", 0, "csv", Fields("name", "timeCreated"), (), csv_header=True)
    with pytest.raises(UnusableInventory, match="has no timeCreated column"):
        _read(tmp_path, missing, text.encode(), "gs://b/t")


def test_a_data_file_that_is_not_its_md5_is_refused(tmp_path: Path) -> None:
    inventory = Inventory("s3", "m", 0, "csv", S3_CSV, (), csv_columns=("Bucket", "Key"), gzipped=True)
    part = tmp_path / "part"
    part.write_bytes(gzip.compress(b'"lake","wh/t/x"\n'))
    with pytest.raises(UnusableInventory, match="does not match its MD5"):
        list(read_part(inventory, Part(str(part), md5="0" * 32), Scope.of("s3://lake/wh/t")))
