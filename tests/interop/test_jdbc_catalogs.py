"""The sql catalog on PostgreSQL and MariaDB shared with Iceberg Spark's JdbcCatalog on the same
database: the catalogs file of docs/reference/catalogs/jdbc.md, as written, drives a job through the
command line; Iceberg Spark reads what tablekeeper committed and tablekeeper what Iceberg Spark
committed, row for row; then both race appends and no commit is lost."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.cli import main
from tablekeeper.tables.iceberg import live_files
from tests.conftest import REPO_ROOT
from tests.interop.test_concurrent_commits import RETRY_PROPS
from tests.support.catalog_jobs import CatalogUnderTest, every_job, race
from tests.support.db_servers import DbServer

pytestmark = pytest.mark.spark

MARKER = "<!-- run as written by tests/interop/test_jdbc_catalogs.py -->"
NAME = {"postgresql": "pg", "mysql": "mysql"}  # the docs example's catalog per database


def docs_block() -> str:
    text = (REPO_ROOT / "docs" / "reference" / "catalogs" / "jdbc.md").read_text(encoding="utf-8")
    assert MARKER in text, "docs/reference/catalogs/jdbc.md lost its tested catalogs file"
    match = re.search(r"```yaml\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
    assert match is not None
    return match.group(1) + "\n"


def rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(f"SELECT id, writer FROM {table}").collect())


def tablekeeper_rows(catalog: Any, ident: str) -> list[tuple[Any, ...]]:
    """The rows tablekeeper's own reader finds from the catalog's current metadata (appends only)."""
    loaded = catalog.load_table(ident)
    live = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    assert not live.deletes
    found: list[tuple[Any, ...]] = []
    for entry in live.data:
        table = pq.read_table(entry.data_file.file_path.removeprefix("file:"), columns=["id", "writer"])
        found += [(r["id"], r["writer"]) for r in table.to_pylist()]
    return sorted(found)


def test_tablekeeper_and_iceberg_spark_share_the_database(  # type: ignore[no-untyped-def]
    spark, db_server: DbServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    for prefix, server in (("PG", db_server), ("MYSQL", db_server)):
        monkeypatch.setenv(f"{prefix}_PASSWORD", server.password)
        monkeypatch.setenv(f"{prefix}_HOST", f"127.0.0.1:{server.port}")
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(docs_block())
    name = NAME[db_server.kind]
    catalogs = parse_catalogs(conf.read_text(), tmp_path)
    for key, value in iceberg_catalog_conf(catalogs.get(name)).items():
        spark.conf.set(key, value)  # Iceberg Spark's JdbcCatalog on the same database
    table = f"{name}.db.events"
    retry = ", ".join(f"'{k}'='{v}'" for k, v in RETRY_PROPS.items())
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.db")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, writer STRING) USING iceberg "
        f"TBLPROPERTIES ('format-version'='2', {retry})"
    )
    for b in range(4):
        spark.sql(f"INSERT INTO {table} SELECT id, 'spark' FROM range({b * 10}, {b * 10 + 10})")
    before = rows(spark, table)
    catalog = catalog_for(catalogs.get(name))
    assert tablekeeper_rows(catalog, "db.events") == before  # tablekeeper reads Spark's commits
    spark_location = catalog.load_table("db.events").metadata_location

    code = main(
        [
            "compact",
            "--table",
            "db.events",
            "--min-input-files",
            "2",
            "--catalog",
            name,
            "--conf-file",
            str(conf),
        ]
    )
    out, _ = capfd.readouterr()
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert code == 0 and result["status"] == "ok", result
    assert server_row(db_server, name)[1] == spark_location  # our swap, over Spark's commit
    spark.sql(f"REFRESH TABLE {table}")
    assert rows(spark, table) == before  # Iceberg Spark reads tablekeeper's commit
    assert spark.sql(f"SELECT count(*) FROM {table}.files").collect()[0][0] == 1
    assert db_server.password not in out

    # Two tablekeeper processes and Iceberg Spark append at once: every commit lands once.
    tk_files = race(spark, table, conf, name, "db.events", 3)
    spark.sql(f"REFRESH TABLE {table}")
    expected = sorted(
        [
            *before,
            *((90_000 + i, "spark") for i in range(3)),
            *((w * 1000 + i, f"tk{w}") for w in range(2) for i in range(4)),
        ]
    )
    assert rows(spark, table) == expected
    assert tablekeeper_rows(catalog, "db.events") == expected
    assert len(tk_files) == 8


def test_every_job_through_the_database(  # type: ignore[no-untyped-def]
    spark, db_server: DbServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    for prefix in ("PG", "MYSQL"):
        monkeypatch.setenv(f"{prefix}_PASSWORD", db_server.password)
        monkeypatch.setenv(f"{prefix}_HOST", f"127.0.0.1:{db_server.port}")
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(docs_block())
    name = NAME[db_server.kind]
    catalogs = parse_catalogs(conf.read_text(), tmp_path)
    for key, value in iceberg_catalog_conf(catalogs.get(name)).items():
        spark.conf.set(key, value)

    def recorded(spark_location: str) -> None:
        location, previous = server_row(db_server, name, "every_events")
        assert previous == spark_location  # our swap, over Spark's commit, in Iceberg's own columns
        assert location == catalog.load_table("db.every_events").metadata_location

    catalog = catalog_for(catalogs.get(name))
    cat = CatalogUnderTest(
        name, conf, tmp_path, catalog, after_first_swap=recorded, secrets=(db_server.password,)
    )
    every_job(spark, cat, capfd, "every")


def server_row(server: DbServer, catalog_name: str, table: str = "events") -> tuple[Any, ...]:
    conn = server.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT metadata_location, previous_metadata_location FROM iceberg_tables "
            "WHERE catalog_name = %s AND table_namespace = 'db' AND table_name = %s",
            (catalog_name, table),
        )
        return tuple(cursor.fetchone())
    finally:
        conn.close()
