"""The loopback servers behave as a real S3 store and a real Iceberg REST catalog, seen through
reference clients only (pyarrow's S3 filesystem, PyIceberg, plain HTTP against the REST spec)."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from tests.support.object_store import S3_BUCKET, S3Endpoint
from tests.support.rest_catalog_server import REST_WAREHOUSE, RestCatalogServer

# Over S3's 1,000-key page, so listing and bulk delete must follow continuation.
OBJECTS = 1_200


def test_s3_lists_past_one_page_and_deletes_a_prefix(s3_server: S3Endpoint) -> None:
    fs = s3_server.filesystem(allow_delayed_open=True)
    prefix = f"{S3_BUCKET}/paging"

    def put(i: int) -> None:
        with fs.open_output_stream(f"{prefix}/part-{i:05d}.txt") as out:
            out.write(b"x%d" % i)

    # The store's CPU, not latency, bounds this; two threads just keep it busy while pyarrow signs.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(put, range(OBJECTS)))

    listed = fs.get_file_info(pafs.FileSelector(prefix, recursive=True))
    assert len(listed) == OBJECTS
    assert {f.base_name: f.size for f in listed} == {
        f"part-{i:05d}.txt": len(b"x%d" % i) for i in range(OBJECTS)
    }

    fs.delete_dir_contents(prefix)
    assert fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True)) == []


def test_s3_refuses_a_wrong_secret(s3_server: S3Endpoint) -> None:
    intruder = dataclasses.replace(s3_server, secret_key=s3_server.secret_key[::-1])
    with pytest.raises(OSError):
        intruder.filesystem().get_file_info(pafs.FileSelector(S3_BUCKET, recursive=True))
    with pytest.raises(OSError), intruder.filesystem().open_output_stream(f"{S3_BUCKET}/refused") as out:
        out.write(b"nope")
    assert s3_server.filesystem().get_file_info(f"{S3_BUCKET}/refused").type == pafs.FileType.NotFound


def pyiceberg_catalog(rest: RestCatalogServer, s3: S3Endpoint) -> Any:
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(
        "r",
        uri=rest.uri,
        **{
            "s3.endpoint": s3.endpoint,
            "s3.access-key-id": s3.access_key,
            "s3.secret-access-key": s3.secret_key,
            "s3.region": s3.region,
            # PyIceberg's pyarrow FileIO would otherwise put the bucket in the host name.
            "s3.force-virtual-addressing": "false",
        },
    )


def create_table(rest: RestCatalogServer, s3: S3Endpoint, namespace: str, rows: pa.Table) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = pyiceberg_catalog(rest, s3)
    catalog.create_namespace(namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType(), required=False)
    )
    table = catalog.create_table(f"{namespace}.t", schema=schema)
    table.append(rows)
    return catalog


ROWS = pa.table(
    {"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", None]},
    schema=pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())]),
)


def test_pyiceberg_round_trip_through_rest_catalog(
    s3_server: S3Endpoint, rest_server: RestCatalogServer
) -> None:
    catalog = create_table(rest_server, s3_server, "roundtrip", ROWS)

    table = catalog.load_table("roundtrip.t")
    assert table.metadata_location.startswith(f"{REST_WAREHOUSE}/")
    assert table.scan().to_arrow().sort_by("id").to_pylist() == ROWS.to_pylist()
    # The server (Java S3FileIO) wrote the metadata, PyIceberg (pyarrow) the data: both in one store.
    stored = s3_server.filesystem().get_file_info(
        pafs.FileSelector(REST_WAREHOUSE.removeprefix("s3://"), recursive=True)
    )
    names = [f.path for f in stored if f.type == pafs.FileType.File]
    assert any(n.endswith(".metadata.json") for n in names)
    assert any(n.endswith(".parquet") for n in names)


def _call(url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_rest_commit_with_stale_requirement_is_a_409(
    s3_server: S3Endpoint, rest_server: RestCatalogServer
) -> None:
    create_table(rest_server, s3_server, "conflict", ROWS)
    table_url = f"{rest_server.uri}/v1/namespaces/conflict/tables/t"
    status, loaded = _call(table_url)
    assert status == 200
    current = loaded["metadata"]["current-snapshot-id"]
    stale = current + 1

    def commit(snapshot_id: int) -> tuple[int, dict[str, Any]]:
        # The spec's CommitTableRequest; the branch check is assert-ref-snapshot-id.
        return _call(
            table_url,
            {
                "requirements": [
                    {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot_id}
                ],
                "updates": [{"action": "set-properties", "updates": {"a": "b"}}],
            },
        )

    status, answer = commit(stale)
    assert status == 409, answer
    assert answer["error"]["type"] == "CommitFailedException"
    assert "a" not in _call(table_url)[1]["metadata"]["properties"]

    # The same body with the true snapshot id commits: the 409 was the requirement, not the request.
    status, answer = commit(current)
    assert status == 200, answer
    assert answer["metadata"]["properties"]["a"] == "b"
