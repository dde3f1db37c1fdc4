"""Jobs on tables in Google Cloud Storage and Azure through a sql catalog (no Spark): expire-snapshots
deletes what it expires from the store, and remove-orphans finds an orphan listed under one
spelling of the store while the metadata uses another. (Every job behind a REST catalog, with the
reference pages' catalogs files: test_cloud_rest_catalogs.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.base import LoadedTable
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.cli import main
from tablekeeper.iceberg.content import ManifestEntry
from tablekeeper.io import FileIO
from tablekeeper.io.storage import configure_storage
from tablekeeper.settings import WAREHOUSE_ENV
from tablekeeper.tables.iceberg import live_files
from tests.support.cloud_stores import AzureEndpoint, GcsEndpoint
from tests.support.iceberg_writer import appended_table
from tests.unit.files.test_journal import SCHEMA

# A sql catalog on sqlite beside each store's settings (the emulator's endpoint, no credentials
# for GCS; the account's connection string for Azure).
GCS_CATALOGS = """\
default: lake
catalogs:
  lake:
    type: sql
    uri: sqlite:///${warehouse}/gcs-catalog.db
    warehouse: gs://warehouse/lake
    gcs.project-id: analytics
    gcs.service.host: ${GCS_ENDPOINT}
    gcs.no-auth: "true"
"""
AZURE_CATALOGS = """\
default: lake
catalogs:
  lake:
    type: sql
    uri: sqlite:///${warehouse}/azure-catalog.db
    warehouse: abfss://warehouse@analytics.dfs.core.windows.net/lake
    adls.connection-string.analytics: ${AZURE_STORAGE_CONNECTION_STRING}
"""


def _run(argv: list[str], conf: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main([*argv, "--engine", "driver", "--conf-file", str(conf)])
    out = capsys.readouterr().out
    assert code == 0, out
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "ok", result
    return result


def _jobs_on_the_store(
    conf: Path,
    tmp_path: Path,
    respell: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    secret: str | None,
) -> None:
    """Three appends, expire two snapshots, then remove one orphan. The last append's data files
    are referenced under the store's other spelling (``respell``), as another engine may write
    them: remove-orphans lists them in the table location's spelling and must take both for one
    file, neither an orphan nor a prefix mismatch."""
    config = parse_catalogs(conf.read_text(), tmp_path).get("lake")
    configure_storage(config.storage)  # as a job does with its catalog's
    try:
        catalog = catalog_for(config)
        before = appended_table(catalog, "db.t", SCHEMA, 3, respell)
        io = FileIO.for_location(before.metadata_location)
        lists = [s.manifest_list for s in before.metadata.snapshots]
        assert all(io.exists(m) for m in lists)

        argv = ["expire-snapshots", "--table", "db.t", "--retain-last", "1", "--older-than", "0s"]
        result = _run(argv, conf, capsys)
        metrics = result["metrics"]
        assert isinstance(metrics, dict) and metrics["expired_snapshots_count"] == 2
        after = catalog.require("db.t")
        kept = after.metadata.snapshots[0].manifest_list
        assert [io.exists(m) for m in lists] == [m == kept for m in lists]

        location = after.metadata.location
        respelled = [f.data_file.file_path for f in _entries(after)]
        assert sum(p.startswith(respell(location)) for p in respelled) == 1
        orphan = f"{location}/data/orphan.parquet"
        io.write(orphan, b"not referenced")
        argv = ["remove-orphans", "--table", "db.t", "--older-than", "0s", "--force-short-retention"]
        result = _run(argv, conf, capsys)
        metrics = result["metrics"]
        assert isinstance(metrics, dict), result
        assert (metrics["orphan_file_count"], metrics["prefix_mismatch_count"]) == (1, 0), result
        assert not io.exists(orphan)
        live = [f.location for f in io.list(location) if "/data/" in f.location]
        assert len(live) == 3  # every data file is still referenced (the snapshots only expired)
        assert secret is None or secret not in json.dumps(result)
    finally:
        configure_storage({})


def _entries(table: LoadedTable) -> list[ManifestEntry]:
    snapshot = table.metadata.current_snapshot()
    return list(live_files(table.io, table.metadata, snapshot).data)


def test_jobs_on_a_gcs_table_through_a_sql_catalog(
    gcs_server: GcsEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))  # the ${warehouse} the command line reads
    monkeypatch.setenv("GCS_ENDPOINT", gcs_server.url)
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(GCS_CATALOGS)
    _jobs_on_the_store(conf, tmp_path, lambda loc: "gcs://" + loc.removeprefix("gs://"), capsys, None)


def test_jobs_on_an_azure_table_through_a_sql_catalog(
    azure_server: AzureEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert azure_server.account == "analytics"  # the catalogs file's account
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server.connection_string())
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(AZURE_CATALOGS)

    def blob(location: str) -> str:  # abfss://c@acct.dfs.<suffix>/p -> wasbs://c@acct.blob.<suffix>/p
        return "wasbs://" + location.removeprefix("abfss://").replace(".dfs.", ".blob.", 1)

    _jobs_on_the_store(conf, tmp_path, blob, capsys, azure_server.key)
