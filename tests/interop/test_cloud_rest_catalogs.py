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
from urllib.parse import parse_qsl, quote

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.cli import main
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.io.storage import configure_storage
from tablekeeper.settings import WAREHOUSE_ENV
from tests.conftest import REPO_ROOT
from tests.support.catalog_jobs import CatalogUnderTest, every_job, rows
from tests.support.cloud_stores import AZURE_CONTAINER, AzureEndpoint, GcsEndpoint, Proxy, throttling_proxy
from tests.support.iceberg_writer import write_rows
from tests.support.rest_catalog_server import RestCatalogServer
from tests.unit.files.test_journal import SCHEMA

pytestmark = pytest.mark.spark

MARKER = "<!-- run as written by tests/interop/test_cloud_rest_catalogs.py -->"
HADOOP_IO = "org.apache.iceberg.hadoop.HadoopFileIO"


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


def _sas_secrets(server: RestCatalogServer) -> tuple[str, ...]:
    """Each SAS token the server vends, and its signature as written and as decoded."""
    tokens = list(server.vended.values())
    sigs = [v for t in tokens for k, v in parse_qsl(t) if k == "sig"]
    return (*tokens, *sigs, *(quote(s, safe="") for s in sigs))


def test_every_job_on_gcs_behind_a_rest_catalog(  # type: ignore[no-untyped-def]
    spark, gcs_server: GcsEndpoint, gcs_rest_server: RestCatalogServer, tmp_path: Path, monkeypatch, capfd
) -> None:
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    monkeypatch.setenv("REST_CATALOG_URI", gcs_rest_server.uri)
    monkeypatch.setenv("GCS_ENDPOINT", gcs_server.url)
    cat = _under_test(spark, "gcs.md", tmp_path, tuple(gcs_rest_server.vended.values()))
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
    cat = _under_test(spark, "azure.md", tmp_path, (azure_server.key, *_sas_secrets(azure_rest_server)))
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


def _vended_reach_both(
    spark: Any,
    rest: RestCatalogServer,
    direct: dict[str, str],
    entry: str,
    location: str,
    capfd: Any,
    tmp_path: Path,
) -> None:
    """A table tablekeeper wrote (two appends, with the store's own settings ``direct``), then
    compacted with Spark's writer through a catalogs entry (``entry``, YAML) whose own credentials
    the vended ones must replace, in tablekeeper's I/O (pyarrow, driver and executors) and in
    Spark's (the Hadoop connector). (An entry with none at all would send the clients down their
    default credential chains, to a cloud's metadata endpoint, before the table is loaded.)"""
    ident = f"db.{location.rstrip('/').rsplit('/', 1)[-1]}"
    head = f"catalogs:\n  own:\n    type: rest\n    uri: {rest.uri}\n    warehouse: {rest.warehouse}\n"
    own = parse_catalogs(head + "".join(f"    {k}: '{v}'\n" for k, v in direct.items()), tmp_path).get("own")
    configure_storage(own.storage)
    catalog = catalog_for(own)
    catalog.create_table(
        ident, new_table_metadata(schema=SCHEMA, location=location, timestamp_ms=1, format_version=2)
    )
    for i in range(2):
        files = write_rows(catalog.require(ident).metadata, [{"id": i, "s": f"r{i}"}])
        Committer(catalog, ident).commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
    conf = tmp_path / "vending.yaml"
    conf.write_text(
        f"catalogs:\n  vend:\n    type: rest\n    uri: {rest.uri}\n    warehouse: {rest.warehouse}\n{entry}"
    )
    args = ["compact", "--table", ident, "--min-input-files", "2", "--writer", "spark"]
    code = main([*args, "--catalog", "vend", "--conf-file", str(conf)])
    out, err = capfd.readouterr()
    result = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and result["metrics"]["added_data_files_count"] == 1, (result, err[-2000:])
    loaded = catalog.require(ident)
    found = spark.read.format("iceberg").load(loaded.metadata_location).orderBy("id").collect()
    assert [(r["id"], r["s"]) for r in found] == [(0, "r0"), (1, "r1")]
    said = out + err
    assert not [v for v in rest.vended.values() if v in said]


def test_credentials_the_catalog_vends_reach_tablekeeper_and_spark_on_gcs(  # type: ignore[no-untyped-def]
    spark, gcs_server: GcsEndpoint, gcs_rest_server: RestCatalogServer, tmp_path: Path, capfd
) -> None:
    """Every request of the job, pyarrow's (gl-cpp) and the Hadoop connector's (Java), carries
    the vended token in place of the entry's ``gcs.no-auth``: the recording proxy in front of the
    emulator sees no other credentials, and no request without them."""
    gcs_server.create_bucket("vended")
    token = gcs_rest_server.vended["gcs.oauth2.token"]
    try:
        with throttling_proxy(gcs_server.url, every=0) as proxy:
            entry = f"    gcs.service.host: {proxy.url}\n    gcs.no-auth: 'true'\n    io-impl: {HADOOP_IO}\n"
            _vended_reach_both(
                spark, gcs_rest_server, gcs_server.properties(), entry, "gs://vended/t", capfd, tmp_path
            )
            seen = proxy.stats()["seen"]
    finally:
        configure_storage({})
    pyarrow = [r for r in seen if r["agent"].startswith("gl-cpp")]
    hadoop = [r for r in seen if not r["agent"].startswith("gl-cpp")]
    assert pyarrow and hadoop and any("Java" in r["agent"] for r in hadoop), {r["agent"] for r in seen}
    assert {r["authorization"] for r in seen} == {f"Bearer {token}"}


def test_credentials_the_catalog_vends_reach_tablekeeper_and_spark_on_azure(  # type: ignore[no-untyped-def]
    spark, azure_server: AzureEndpoint, azure_rest_server: RestCatalogServer, tmp_path: Path, capfd
) -> None:
    """Every request of the job, pyarrow's (Azure's C++ SDK) and ABFS's (Java), is signed by the
    vended SAS token, never by the account key of the entry's connection string (Azurite refuses
    a bad signature; the recording proxy sees no SharedKey)."""
    azure_server.create_container("vended")
    try:
        with throttling_proxy(azure_server.url, every=0) as proxy:
            conn = azure_server.connection_string(proxy.url)
            entry = f"    adls.connection-string.{azure_server.account}: '{conn}'\n"
            location = f"abfs://vended@{azure_server.host}/t"
            _vended_reach_both(
                spark,
                azure_rest_server,
                azure_server.properties(),
                entry + f"    io-impl: {HADOOP_IO}\n",
                location,
                capfd,
                tmp_path,
            )
            seen = proxy.stats()["seen"]
    finally:
        configure_storage({})
    java = [r for r in seen if "Azure Blob FS" in r["agent"]]
    assert java and len(java) < len(seen), {r["agent"] for r in seen}
    assert not [r for r in seen if r["authorization"]]  # no SharedKey, nothing but the SAS
    assert all("sig=" in r["path"] for r in seen)
