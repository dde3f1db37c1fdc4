"""remove-orphans from a store's inventory report instead of a listing, on tables in S3, Google
Cloud Storage and Azure (their emulators, through a sql catalog, on the driver engine): each
service's formats, written by tests/support/inventories.py in the layout the service documents,
find exactly the orphans a listing of the same tree finds; a report too old, unfinished, partial,
of another bucket or filtered short of the table is refused by name with the table untouched; an
object written again after the report, or first written after it, is never deleted. (The Spark
engine reading a report: test_s3_rest_catalog.py.)"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tablekeeper import clock
from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.cli import main
from tablekeeper.io import FileIO
from tablekeeper.io.storage import configure_storage
from tablekeeper.settings import WAREHOUSE_ENV
from tests.support.cloud_stores import AzureEndpoint, GcsEndpoint
from tests.support.iceberg_writer import appended_table
from tests.support.inventories import Listed, listing, write_azure, write_gcs, write_s3
from tests.support.object_store import S3Endpoint
from tests.unit.files.test_journal import SCHEMA

OLDER_THAN = "1s"


@dataclasses.dataclass
class Store:
    conf: Path
    io: FileIO
    root: str  # scheme://authority of the bucket or container
    bucket: str
    location: str  # the table's
    capsys: pytest.CaptureFixture[str]

    def run(self, *argv: str, code: int = 0) -> dict[str, Any]:
        full = ["remove-orphans", "--table", "db.t", "--older-than", OLDER_THAN, "--force-short-retention"]
        status = main([*full, *argv, "--engine", "driver", "--conf-file", str(self.conf)])
        out = self.capsys.readouterr().out
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        assert status == code, (result, out)
        return result

    def objects(self) -> set[str]:
        return {f.location for f in self.io.list(f"{self.root}/lake")}

    def put(self, key: str, data: bytes = b"left by a failed writer") -> str:
        self.io.write(f"{self.root}/{key}", data)
        return f"{self.root}/{key}"

    def listed(self) -> list[Listed]:
        return listing(self.io, self.root, self.bucket, "lake")


def _store(
    conf_text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], root: str, bucket: str
) -> Iterator[Store]:
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(conf_text)
    config = parse_catalogs(conf.read_text(), tmp_path).get("lake")
    configure_storage(config.storage)
    try:
        location = appended_table(catalog_for(config), "db.t", SCHEMA, 3).metadata.location
        yield Store(conf, FileIO.for_location(location), root, bucket, location, capsys)
    finally:
        configure_storage({})


@pytest.fixture
def s3(s3_server: S3Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Store]:
    bucket = f"inv{time.time_ns() % 10**9}"
    s3_server.create_bucket(bucket)
    s3_server.create_bucket(f"{bucket}-reports")
    props = "".join(f"    {k}: '{v}'\n" for k, v in s3_server.properties().items())
    text = (
        f"default: lake\ncatalogs:\n  lake:\n    type: sql\n    uri: sqlite:///{tmp_path}/catalog.db\n"
        f"    warehouse: s3://{bucket}/lake\n{props}"
    )
    yield from _store(text, tmp_path, capsys, f"s3://{bucket}", bucket)


@pytest.fixture
def gcs(
    gcs_server: GcsEndpoint,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Store]:
    bucket = f"inv{time.time_ns() % 10**9}"
    gcs_server.create_bucket(bucket)
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    text = (
        f"default: lake\ncatalogs:\n  lake:\n    type: sql\n    uri: sqlite:///{tmp_path}/catalog.db\n"
        f"    warehouse: gs://{bucket}/lake\n    gcs.project-id: analytics\n"
        f"    gcs.service.host: {gcs_server.url}\n    gcs.no-auth: 'true'\n"
    )
    yield from _store(text, tmp_path, capsys, f"gs://{bucket}", bucket)


@pytest.fixture
def azure(azure_server: AzureEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Store]:
    container = f"inv{time.time_ns() % 10**9}"
    azure_server.create_container(container)
    azure_server.create_container(f"{container}-reports")
    text = (
        f"default: lake\ncatalogs:\n  lake:\n    type: sql\n    uri: sqlite:///{tmp_path}/catalog.db\n"
        f"    warehouse: abfss://{container}@{azure_server.host}/lake\n"
        f"    adls.connection-string.{azure_server.account}: '{azure_server.connection_string()}'\n"
    )
    yield from _store(text, tmp_path, capsys, f"abfss://{container}@{azure_server.host}", container)


def _plant(store: Store) -> set[str]:
    """Two orphans of the table, and files no scan of it may take: a hidden one, another table's."""
    orphans = {
        store.put("lake/db/t/data/lost-task-00001.parquet"),
        store.put("lake/db/t/metadata/00099-crashed.metadata.json", b"{}"),
    }
    store.put("lake/db/t/data/.spark-staging/part-0.parquet")
    store.put("lake/db/other/data/not-this-tables.parquet")
    return orphans


def _same_as_listing(store: Store, write: Callable[[list[Listed], int], str], orphans: set[str]) -> None:
    """Dry runs from the report and from a listing agree; the run from the report deletes them."""
    time.sleep(1.1)  # the planted files older than the cut-off
    listed = store.run("--dry-run")
    # GCS and Azure manifests say their time to the second: the report is taken at a whole second
    # and the runs see the clock one --older-than (1 s) after it, so the cut-off is the report's
    # time however long the runs take (a later cut-off would rightly refuse the report as stale).
    taken = int(time.time())
    manifest = write(store.listed(), taken * 1000)
    with clock.injected(lambda: taken + 1.0):
        dry = store.run("--dry-run", "--inventory", manifest)
        assert set(dry["files"]) == set(listed["files"]) == orphans, (dry, listed)
        assert (
            dry["metrics"]["orphan_file_count"] == 2 and dry["metrics"]["changed_since_inventory_count"] == 0
        )
        assert dry["metrics"]["inventory"]["manifest"] == manifest
        before = store.objects()
        done = store.run("--inventory", manifest)
    assert done["metrics"]["deleted_files_count"] == 2, done
    assert store.objects() == before - orphans


@pytest.mark.parametrize("fmt", ["CSV", "ORC", "Parquet"])
def test_s3_inventory_in_each_format_finds_what_a_listing_finds(s3: Store, fmt: str) -> None:
    orphans = _plant(s3)
    # A key URL-encoding changes (S3's CSV spells it encoded).
    orphans.add(s3.put("lake/db/t/data/id=7 copy+1.parquet"))
    destination = f"s3://{s3.bucket}-reports/inventories"

    def write(rows: list[Listed], now: int) -> str:
        return write_s3(s3.io, destination, s3.bucket, rows, fmt, now)

    time.sleep(1.1)
    listed = s3.run("--dry-run")
    manifest = write(s3.listed(), int(time.time() * 1000))
    dry = s3.run("--dry-run", "--inventory", manifest)
    assert set(dry["files"]) == set(listed["files"]) == orphans, (dry, listed)
    before = s3.objects()
    # The directory of the configuration's runs: the latest finished one.
    done = s3.run("--inventory", f"{destination}/{s3.bucket}/daily")
    assert (
        done["metrics"]["deleted_files_count"] == 3 and done["metrics"]["inventory"]["manifest"] == manifest
    )
    assert s3.objects() == before - orphans


def test_s3_versioned_inventory_keeps_only_current_objects(s3: Store) -> None:
    """Older versions and delete markers of a versioned bucket are not objects to judge."""
    orphans = _plant(s3)
    time.sleep(1.1)
    rows = s3.listed()
    gone = Listed(s3.bucket, "lake/db/t/data/deleted-since.parquet", 10, rows[0].mtime_ms, True, True)
    older = Listed(s3.bucket, "lake/db/t/data/older-version.parquet", 10, rows[0].mtime_ms, False)
    manifest = write_s3(
        s3.io,
        f"s3://{s3.bucket}-reports/v",
        s3.bucket,
        [*rows, gone, older],
        "Parquet",
        int(time.time() * 1000),
        versioned=True,
    )
    dry = s3.run("--dry-run", "--inventory", manifest)
    assert set(dry["files"]) == orphans, dry


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_gcs_inventory_finds_what_a_listing_finds(gcs: Store, fmt: str) -> None:
    orphans = _plant(gcs)
    destination = f"gs://{gcs.bucket}/inventory_reports"
    _same_as_listing(
        gcs, lambda rows, now: write_gcs(gcs.io, destination, gcs.bucket, rows, fmt, now), orphans
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_azure_inventory_finds_what_a_listing_finds(
    azure: Store, azure_server: AzureEndpoint, fmt: str
) -> None:
    orphans = _plant(azure)
    reports = f"abfss://{azure.bucket}-reports@{azure_server.host}"
    endpoint = f"https://{azure_server.account}.blob.core.windows.net"
    _same_as_listing(
        azure,
        lambda rows, now: write_azure(
            azure.io, reports, endpoint, rows, fmt, now, prefixes=[f"{azure.bucket}/lake"]
        ),
        orphans,
    )


def test_objects_written_after_the_report_are_never_deleted(s3: Store) -> None:
    """One orphan written again after the report (its new bytes may be a live writer's), one
    first written after it: the report cannot speak for either."""
    orphans = _plant(s3)
    time.sleep(1.1)
    manifest = write_s3(
        s3.io, f"s3://{s3.bucket}-reports/i", s3.bucket, s3.listed(), "CSV", int(time.time() * 1000)
    )
    rewritten = sorted(orphans)[0]
    s3.io.write(rewritten, b"written again after the report")
    later = s3.put("lake/db/t/data/written-after-the-report.parquet")
    before = s3.objects()
    done = s3.run("--inventory", manifest)
    assert (
        done["metrics"]["deleted_files_count"] == 1 and done["metrics"]["changed_since_inventory_count"] == 1
    )
    assert s3.objects() == before - (orphans - {rewritten})
    assert s3.io.exists(rewritten) and s3.io.exists(later)


def test_unusable_s3_reports_are_refused_by_name(s3: Store) -> None:
    """Too old, another bucket's, unfinished (no checksum), changed (its checksum differs), a data
    file missing or changed (its MD5 differs): exit 3, the reason named, nothing deleted."""
    _plant(s3)
    time.sleep(1.1)
    rows = s3.listed()
    now = int(time.time() * 1000)
    reports = f"s3://{s3.bucket}-reports"
    cases: list[tuple[str, str]] = []

    stale = write_s3(s3.io, f"{reports}/stale", s3.bucket, rows, "CSV", now - 3_600_000)
    cases.append((stale, "before the --older-than cut-off"))
    other = write_s3(
        s3.io,
        f"{reports}/other",
        "another-bucket",
        [dataclasses.replace(r, bucket="another-bucket") for r in rows],
        "CSV",
        now,
    )
    cases.append((other, "lists bucket 'another-bucket'"))
    unfinished = write_s3(s3.io, f"{reports}/unfinished", s3.bucket, rows, "CSV", now)
    s3.io.delete(unfinished.replace("manifest.json", "manifest.checksum"))
    cases.append((unfinished, "the report is not finished"))
    changed = write_s3(s3.io, f"{reports}/changed", s3.bucket, rows, "CSV", now)
    s3.io.write(changed, s3.io.read(changed).replace(b'"CSV"', b'"csv"'))
    cases.append((changed, "does not match its checksum"))
    torn = write_s3(s3.io, f"{reports}/torn", s3.bucket, rows, "Parquet", now, files=1)
    entry = json.loads(s3.io.read(torn))["files"][0]["key"]
    s3.io.delete(f"s3://{s3.bucket}-reports/{entry}")
    cases.append((torn, "which is not there"))
    flipped = write_s3(s3.io, f"{reports}/flipped", s3.bucket, rows, "ORC", now, files=1)
    entry = json.loads(s3.io.read(flipped))["files"][0]["key"]
    data = bytearray(s3.io.read(f"s3://{s3.bucket}-reports/{entry}"))
    data[-20] ^= 0xFF
    s3.io.write(f"s3://{s3.bucket}-reports/{entry}", bytes(data))
    cases.append((flipped, "does not match its MD5"))
    before = s3.objects()
    for manifest, reason in cases:
        result = s3.run("--inventory", manifest, code=3)
        assert result["status"] == "refused" and reason in result["error"], result
    assert s3.objects() == before


def test_unusable_azure_reports_are_refused_by_name(azure: Store, azure_server: AzureEndpoint) -> None:
    """A run still pending, a rule filtered short of the table, another account's report."""
    _plant(azure)
    time.sleep(1.1)
    rows = azure.listed()
    now = int(time.time() * 1000)
    reports = f"abfss://{azure.bucket}-reports@{azure_server.host}"
    endpoint = f"https://{azure_server.account}.blob.core.windows.net"
    pending = write_azure(azure.io, reports, endpoint, rows, "csv", now, rule="pending", status="Pending")
    narrow = write_azure(
        azure.io,
        reports,
        endpoint,
        rows,
        "csv",
        now,
        rule="narrow",
        prefixes=[f"{azure.bucket}/lake/db/t/data"],
    )
    account = write_azure(
        azure.io, reports, "https://elsewhere.blob.core.windows.net", rows, "csv", now, rule="acct"
    )
    before = azure.objects()
    for manifest, reason in (
        (pending, "has status 'Pending'"),
        (narrow, "lists only"),
        (account, "lists account 'elsewhere'"),
    ):
        result = azure.run("--inventory", manifest, code=3)
        assert result["status"] == "refused" and reason in result["error"], result
    assert azure.objects() == before


def _quarantine_then_restore(store: Store) -> None:
    """The orphans moved into the table's quarantine (the store's own move: a copy then a
    delete on S3 and GCS, a copy then a delete on Azurite's flat namespace), then put back by
    restore byte for byte; purge of nothing past its time keeps the run."""
    orphans = _plant(store)
    time.sleep(1.1)
    before = {p: store.io.read(p) for p in store.objects()}
    moved = store.run("--quarantine")
    assert moved["metrics"]["quarantined_files_count"] == len(orphans), moved
    run = moved["metrics"]["quarantine"]["run"]
    assert not any(store.io.exists(p) for p in orphans)
    aside = f"{store.location}/metadata/_tablekeeper/quarantine/{run}/files"
    assert {store.io.read(f"{aside}/{p[len(store.location) + 1 :]}") for p in orphans} == {
        before[p] for p in orphans
    }
    argv = ["--table", "db.t", "--conf-file", str(store.conf)]
    assert main(["restore", *argv, "--run", run]) == 0
    restored = json.loads(store.capsys.readouterr().out.strip().splitlines()[-1])
    assert restored["metrics"]["restored_files_count"] == len(orphans), restored
    assert {p: store.io.read(p) for p in store.objects()} == before


def test_quarantine_and_restore_on_s3(s3: Store) -> None:
    _quarantine_then_restore(s3)


def test_quarantine_and_restore_on_gcs(gcs: Store) -> None:
    _quarantine_then_restore(gcs)


def test_quarantine_and_restore_on_azure(azure: Store) -> None:
    _quarantine_then_restore(azure)
