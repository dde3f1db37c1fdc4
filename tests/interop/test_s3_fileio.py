"""FileIO on a real S3-compatible server, and a REST commit whose answer is lost on the way back."""

from __future__ import annotations

import gzip
import http.client
import http.server
import logging
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tablekeeper.catalog.rest import RestCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import AlreadyExists, CommitStateUnknown
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import LONG, STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.io import FileIO
from tablekeeper.io.storage import configure_storage
from tests.support.iceberg_writer import write_rows
from tests.support.object_store import S3_BUCKET, S3Endpoint
from tests.support.rest_catalog_server import REST_WAREHOUSE, RestCatalogServer

SCHEMA = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "name", STRING)))


def test_s3_s3a_and_s3n_name_one_object_and_deletes_go_in_batches(
    s3_server: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    io = FileIO.for_location(f"s3://{S3_BUCKET}/", s3_server.properties())
    io.write(f"s3://{S3_BUCKET}/fileio/a.txt", b"hello")
    assert (
        FileIO.for_location("s3a://x", s3_server.properties()).read(f"s3a://{S3_BUCKET}/fileio/a.txt")
        == b"hello"
    )
    assert io.read(f"s3n://{S3_BUCKET}/fileio/a.txt") == b"hello"
    with pytest.raises(AlreadyExists):
        io.create_if_absent(f"s3a://{S3_BUCKET}/fileio/a.txt", b"other")
    # Bytes are stored as given, whatever the name says: pyarrow would gzip a ".gz" name again.
    gzipped = gzip.compress(b"journal part")
    io.write(f"s3://{S3_BUCKET}/fileio/part.jsonl.gz", gzipped)
    io.create_if_absent(f"s3://{S3_BUCKET}/fileio/v1.metadata.json.gz", gzipped)
    assert io.read(f"s3://{S3_BUCKET}/fileio/part.jsonl.gz") == gzipped
    assert io.read(f"s3://{S3_BUCKET}/fileio/v1.metadata.json.gz") == gzipped

    fs = s3_server.filesystem(allow_delayed_open=True)
    for i in range(1_500):  # more than one listing page and one delete request
        with fs.open_output_stream(f"{S3_BUCKET}/fileio/many/{i:05d}.bin") as out:
            out.write(b"x")
    listed = list(io.list(f"s3a://{S3_BUCKET}/fileio/many"))
    assert len(listed) == 1_500 and all(
        f.location.startswith(f"s3a://{S3_BUCKET}/fileio/many/") for f in listed
    )
    assert all(f.size == 1 and f.mtime_ms > 0 for f in listed)

    # One object named two ways is deleted once; a bucket that does not exist is a failure, named.
    targets = [f.location for f in listed] + [
        f"s3://{S3_BUCKET}/fileio/many/00000.bin",
        "s3://no-such-bucket/k",
    ]
    with caplog.at_level(logging.INFO, logger="tablekeeper.io.fileio"):
        report = io.delete_many(targets)
    assert report.deleted == 1_500
    assert [loc for loc, _ in report.failures] == ["s3://no-such-bucket/k"]
    assert "in 3 requests" in caplog.text  # 1,000 + 500 keys in the bucket, 1 in the missing one
    assert list(io.list(f"s3://{S3_BUCKET}/fileio/many")) == []


class _LosesCommitAnswers(http.server.BaseHTTPRequestHandler):
    """Forwards to the REST server; a commit reaches it, but the client gets ``answer`` instead:
    a 502, a redirect (urllib would re-send it as a GET, a load answering 200) or a 200 whose body
    is not JSON."""

    upstream = ""
    answer = "502"

    def _forward(self) -> tuple[int, bytes]:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        request = urllib.request.Request(
            self.upstream + self.path, data=body, method=self.command, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def _handle(self) -> None:
        status, data = self._forward()
        extra = {}
        if self.command == "POST" and "/tables/" in self.path:
            status, data = {"502": (502, b""), "redirect": (302, b""), "garbage": (200, b"<html>ok</html>")}[
                self.answer
            ]
            if self.answer == "redirect":
                extra["Location"] = self.path
        self.send_response(status)
        for key, value in extra.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_HEAD = do_DELETE = _handle  # noqa: N815 (http.server's method names)

    def log_message(self, *args: object) -> None:  # keep the test output to failures
        pass


@pytest.fixture(params=["502", "redirect", "garbage"])
def lossy_uri(request: pytest.FixtureRequest, rest_server: RestCatalogServer) -> Iterator[str]:
    handler = type("Handler", (_LosesCommitAnswers,), {"upstream": rest_server.uri, "answer": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_commit_without_an_answer_is_unknown_and_deletes_nothing(
    s3_server: S3Endpoint, rest_server: RestCatalogServer, lossy_uri: str, tmp_path: Path
) -> None:
    props = {**s3_server.properties(), "client.region": s3_server.region}
    ident = f"answers_{uuid.uuid4().hex[:8]}"
    configure_storage(props)
    try:
        real = RestCatalog("real", rest_server.uri, REST_WAREHOUSE, props)
        meta = new_table_metadata(
            schema=SCHEMA,
            location=f"{REST_WAREHOUSE}/lost/{ident}",
            timestamp_ms=int(time.time() * 1000),
            format_version=2,
        )
        real.create_table(f"lost.{ident}", meta)
        lossy = RestCatalog("lossy", lossy_uri, REST_WAREHOUSE, props)
        files = write_rows(real.load_table(f"lost.{ident}").metadata, [{"id": 1, "name": "a"}])
        with pytest.raises(CommitStateUnknown, match=r"outcome of the commit to lost\..* is unknown"):
            Committer(lossy, f"lost.{ident}").commit_snapshot(
                SnapshotChange("append", added_files=tuple(files))
            )
        # The commit did land: what it references (manifest list, manifests, data) must all still exist.
        after = real.load_table(f"lost.{ident}")
        snapshot = after.metadata.current_snapshot()
        assert snapshot is not None and snapshot.manifest_list is not None
        assert after.io.exists(snapshot.manifest_list)
        assert all(after.io.exists(f.file_path) for f in files)
    finally:
        configure_storage({})


def test_a_created_table_keeps_our_column_ids(s3_server: S3Endpoint, rest_server: RestCatalogServer) -> None:
    """Iceberg's server renumbers columns on create (5, 9 -> 1, 2); converted Delta files carry the
    source's ids, so the catalog gives the table ours back: schema, spec and all."""
    props = {**s3_server.properties(), "client.region": s3_server.region}
    catalog = RestCatalog("real", rest_server.uri, REST_WAREHOUSE, props)
    schema = Schema(0, (NestedField(5, "id", LONG, True), NestedField(9, "day", STRING)))
    spec = PartitionSpec(0, (PartitionField(9, 1000, "day", "identity"),))
    meta = new_table_metadata(
        schema=schema,
        location=catalog.default_table_location("ids.kept"),
        timestamp_ms=int(time.time() * 1000),
        spec=spec,
        format_version=2,
    )
    assert meta.location == f"{REST_WAREHOUSE}/ids/kept"
    created = catalog.create_table("ids.kept", meta)
    loaded = catalog.load_table("ids.kept").metadata
    for table in (created.metadata, loaded):
        assert [(f.id, f.name) for f in table.schema().fields] == [(5, "id"), (9, "day")]
        assert [(f.source_id, f.name, f.transform) for f in table.spec().fields] == [(9, "day", "identity")]
        assert table.last_column_id >= 9
    assert len(loaded.schemas) == 2  # the server's renumbered schema is there, never current


class _Throttles(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server untouched (signatures stay valid), but throttles
    like S3 under load: the first listing and the first DeleteObjects get 503 SlowDown without
    being forwarded, and the answer to the second reports its first 100 keys as SlowDown."""

    upstream = ""
    seen: ClassVar[dict[str, list[int]]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = "list" if "list-type=2" in self.path else "delete" if "?delete" in self.path else "other"
        with self.lock:  # requests arrive concurrently: each learns its own place in line
            calls = self.seen.setdefault(kind, [])
            calls.append(body.count(b"<Key>"))
            place = len(calls)
        if kind in ("list", "delete") and place == 1:
            self._answer(
                503, b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
            )
            return
        host, _, port = self.upstream.removeprefix("http://").partition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "content-length"}
        conn.request(self.command, self.path, body or None, headers)
        reply = conn.getresponse()
        data = reply.read()
        conn.close()
        if kind == "delete" and place == 2:
            deleted = re.findall(rb"<Deleted><Key>([^<]*)</Key></Deleted>", data)[:100]
            for key in deleted:
                data = data.replace(b"<Deleted><Key>" + key + b"</Key></Deleted>", b"", 1)
            errors = b"".join(
                b"<Error><Key>" + k + b"</Key><Code>SlowDown</Code><Message>Slow down</Message></Error>"
                for k in deleted
            )
            data = data.replace(b"</DeleteResult>", errors + b"</DeleteResult>")
        self._answer(reply.status, data, reply.getheader("Content-Type") or "application/xml")

    def _answer(self, status: int, data: bytes, content_type: str = "application/xml") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _handle  # noqa: N815 (http.server's method names)

    def log_message(self, *args: object) -> None:
        pass


def test_throttled_listing_and_deletes_are_retried(s3_server: S3Endpoint) -> None:
    fs = s3_server.filesystem(allow_delayed_open=True)
    for i in range(1_200):
        with fs.open_output_stream(f"{S3_BUCKET}/throttled/{i:05d}.bin") as out:
            out.write(b"x")
    seen: dict[str, list[int]] = {}
    handler = type(
        "Handler", (_Throttles,), {"upstream": s3_server.endpoint, "seen": seen, "lock": threading.Lock()}
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        props = {**s3_server.properties(), "s3.endpoint": f"http://127.0.0.1:{server.server_address[1]}"}
        io = FileIO.for_location(f"s3://{S3_BUCKET}/", props)
        listed = [f.location for f in io.list(f"s3://{S3_BUCKET}/throttled")]
        assert len(listed) == 1_200
        report = io.delete_many(listed)
    finally:
        server.shutdown()
    assert (report.deleted, report.failures) == (1_200, ())
    # Refused listing page retried; refused batch re-sent whole; the 100 throttled keys alone again.
    # (Two batches go out at once, so which one the server refused varies.)
    refused, *sent = seen["delete"]
    assert len(seen["list"]) >= 3 and len(sent) == 3 and refused in (1_000, 200)
    assert sorted(sent) == sorted([1_000, 200, 100])
    assert (
        list(
            FileIO.for_location(f"s3://{S3_BUCKET}/", s3_server.properties()).list(
                f"s3://{S3_BUCKET}/throttled"
            )
        )
        == []
    )
