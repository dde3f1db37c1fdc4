"""Every job on Google Cloud Storage and on Azure storage behind Iceberg's REST catalog, through
the catalogs file each store's reference page shows (run as written), with Iceberg Spark reading
identical rows after each job through the same settings.

The emulators (fake-gcs-server, Azurite) and one REST catalog server per store run on loopback;
the REST server writes its metadata through the same Hadoop connector, configured with the same
Hadoop settings, that tablekeeper gives Spark (``io.gcs.hadoop_settings``,
``io.azure.hadoop_settings``). Iceberg Spark's REST catalog reads through HadoopFileIO (its GCS
and ADLS FileIOs' SDK bundles are not pinned), Spark's own reads and writes (the Delta table
convert-delta starts from, the Spark-side replays) through the same connectors, and tablekeeper's
own I/O through pyarrow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.cli import main
from tablekeeper.io.storage import configure_storage
from tablekeeper.settings import WAREHOUSE_ENV
from tests.conftest import REPO_ROOT
from tests.support.catalog_jobs import CatalogUnderTest, every_job, rows
from tests.support.cloud_stores import AZURE_CONTAINER, AzureEndpoint, GcsEndpoint, Proxy, throttling_proxy
from tests.support.rest_catalog_server import RestCatalogServer

pytestmark = pytest.mark.spark

MARKER = "<!-- run as written by tests/interop/test_cloud_rest_catalogs.py -->"


def docs_block(page: str) -> str:
    text = (REPO_ROOT / "docs" / "reference" / page).read_text(encoding="utf-8")
    assert MARKER in text, f"docs/reference/{page} lost its tested catalogs file"
    match = re.search(r"```yaml\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
    assert match is not None
    return match.group(1) + "\n"


def _under_test(spark: Any, page: str, tmp_path: Path, secrets: tuple[str, ...]) -> CatalogUnderTest:
    """The page's catalogs file, as a job's command line reads it, and Iceberg Spark's catalog of
    the same name set from the same entry (``iceberg_catalog_conf``: its properties as they are)."""
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(docs_block(page))
    catalogs = parse_catalogs(conf.read_text(), tmp_path)
    entry = catalogs.get(catalogs.default)
    configure_storage(entry.storage)  # Spark's Hadoop settings and executors, as a job sets them
    for key, value in iceberg_catalog_conf(entry).items():
        spark.conf.set(key, value)
    return CatalogUnderTest(entry.name, conf, tmp_path, catalog_for(entry), secrets=secrets)


def test_every_job_on_gcs_behind_a_rest_catalog(  # type: ignore[no-untyped-def]
    spark, gcs_server: GcsEndpoint, gcs_rest_server: RestCatalogServer, tmp_path: Path, monkeypatch, capfd
) -> None:
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    monkeypatch.setenv("REST_CATALOG_URI", gcs_rest_server.uri)
    monkeypatch.setenv("GCS_ENDPOINT", gcs_server.url)
    cat = _under_test(spark, "gcs.md", tmp_path, ())
    assert cat.catalog.default_table_location("db.t").startswith(gcs_rest_server.warehouse)
    try:
        every_job(spark, cat, capfd, "gcs")
    finally:
        configure_storage({})  # later tests work on local disks


def test_every_job_on_azure_behind_a_rest_catalog(  # type: ignore[no-untyped-def]
    spark,
    azure_server: AzureEndpoint,
    azure_rest_server: RestCatalogServer,
    tmp_path: Path,
    monkeypatch,
    capfd,
) -> None:
    assert azure_server.account == "analytics"  # the page's account
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    monkeypatch.setenv("REST_CATALOG_URI", azure_rest_server.uri)
    monkeypatch.setenv("AZURE_WAREHOUSE", azure_rest_server.warehouse)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server.connection_string())
    cat = _under_test(spark, "azure.md", tmp_path, (azure_server.key,))
    assert azure_rest_server.warehouse.startswith(f"abfs://{AZURE_CONTAINER}@")
    try:
        every_job(spark, cat, capfd, "adls")
    finally:
        configure_storage({})


def _job_through_throttling(spark: Any, cat: CatalogUnderTest, proxy: Proxy, capfd: Any, prefix: str) -> None:
    """A table Iceberg Spark wrote in three commits, compacted by a job whose every store request
    goes through ``proxy`` (the page's catalogs file, its endpoint pointed at the proxy): the job
    succeeds, Iceberg Spark reads the same rows from the one file it wrote, and the store really
    refused one request in ten (the clients' retries, pyarrow's own, carried the job through)."""
    table = f"{cat.name}.db.{prefix}_throttled"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    for b in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CAST(id % 3 AS STRING) FROM range({b * 25}, {b * 25 + 25})"
        )
    expected = rows(spark, table)
    conf = cat.conf.parent / "throttled.yaml"
    conf.write_text(docs_block(_PAGE[cat.name]))
    args = ["compact", "--table", f"db.{prefix}_throttled", "--min-input-files", "2"]
    code = main([*args, "--catalog", cat.name, "--conf-file", str(conf)])
    out, err = capfd.readouterr()
    result = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and result["status"] == "ok", (result, err[-2000:])
    assert rows(spark, table) == expected
    assert spark.sql(f"SELECT count(*) FROM {table}.data_files").collect()[0][0] == 1
    seen, refused = proxy.counts()
    assert refused == seen // 10 and refused >= 2, (seen, refused)


_PAGE = {"gcs_lake": "gcs.md", "adls_lake": "azure.md"}


def test_a_job_on_gcs_answering_503_to_one_request_in_ten_loses_nothing(  # type: ignore[no-untyped-def]
    spark, gcs_server: GcsEndpoint, gcs_rest_server: RestCatalogServer, tmp_path: Path, monkeypatch, capfd
) -> None:
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    monkeypatch.setenv("REST_CATALOG_URI", gcs_rest_server.uri)
    monkeypatch.setenv("GCS_ENDPOINT", gcs_server.url)
    cat = _under_test(spark, "gcs.md", tmp_path, ())
    try:
        with throttling_proxy(gcs_server.url) as proxy:
            monkeypatch.setenv("GCS_ENDPOINT", proxy.url)
            _job_through_throttling(spark, cat, proxy, capfd, "gcs")
    finally:
        configure_storage({})


def test_a_job_on_azure_answering_503_to_one_request_in_ten_loses_nothing(  # type: ignore[no-untyped-def]
    spark,
    azure_server: AzureEndpoint,
    azure_rest_server: RestCatalogServer,
    tmp_path: Path,
    monkeypatch,
    capfd,
) -> None:
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    monkeypatch.setenv("REST_CATALOG_URI", azure_rest_server.uri)
    monkeypatch.setenv("AZURE_WAREHOUSE", azure_rest_server.warehouse)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server.connection_string())
    cat = _under_test(spark, "azure.md", tmp_path, (azure_server.key,))
    try:
        with throttling_proxy(azure_server.url) as proxy:
            monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_server.connection_string(proxy.url))
            _job_through_throttling(spark, cat, proxy, capfd, "adls")
    finally:
        configure_storage({})
