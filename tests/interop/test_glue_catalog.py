"""The glue catalog shared with Iceberg Spark's GlueCatalog on one Glue endpoint (moto's server,
tests/support/glue_server.py): the catalogs file of docs/reference/catalogs.md, as written, drives
every maintenance job through the command line on a table Iceberg Spark created and wrote, and
Iceberg Spark reads the same rows after each; a Delta table registered in Glue by name is converted
into it; Iceberg Spark and tablekeeper processes race appends and no commit is lost; a writer killed
at the swap leaves the old or the new state and the next one lands on top."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import CatalogsConfig, parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.cli import main
from tablekeeper.faults import KILL_ENV
from tests.conftest import REPO_ROOT
from tests.interop.test_concurrent_commits import RETRY_PROPS, collect, start_workers
from tests.support.glue_server import GlueEndpoint

pytestmark = pytest.mark.spark

MARKER = "<!-- run as written by tests/interop/test_glue_catalog.py -->"
CATALOG = "lake_local"  # the docs example's catalog on a Glue-compatible endpoint


def docs_block() -> str:
    text = (REPO_ROOT / "docs" / "reference" / "catalogs.md").read_text(encoding="utf-8")
    assert MARKER in text, "docs/reference/catalogs.md lost its tested Glue catalogs file"
    match = re.search(r"```yaml\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
    assert match is not None
    return match.group(1) + "\n"


@dataclass
class Lake:
    conf: Path
    warehouse: Path
    catalogs: CatalogsConfig
    glue: GlueEndpoint
    outputs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def lake(spark: Any, glue_server: GlueEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("glue-lake")
    conf = root / "catalogs.yaml"
    conf.write_text(docs_block())
    # The JVM started long before this module: the AWS SDK's chain reads these system properties
    # first, so Iceberg Spark's Glue client signs as the test identity.
    system = spark.sparkContext._jvm.java.lang.System
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**glue_server.env(), "GLUE_ENDPOINT": glue_server.endpoint}.items():
            mp.setenv(key, value)  # tablekeeper (and its worker processes) walk boto3's chain
        system.setProperty("aws.accessKeyId", glue_server.access_key)
        system.setProperty("aws.secretAccessKey", glue_server.secret_key)
        catalogs = parse_catalogs(conf.read_text(), root)
        for key, value in iceberg_catalog_conf(catalogs.get(CATALOG)).items():
            spark.conf.set(key, value)  # Iceberg Spark's GlueCatalog on the same endpoint
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
        try:
            yield Lake(conf, root, catalogs, glue_server)
        finally:
            system.clearProperty("aws.accessKeyId")
            system.clearProperty("aws.secretAccessKey")


def tk(lake: Lake, capfd: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(
        [*args, "--catalog", CATALOG, "--conf-file", str(lake.conf), "--warehouse", str(lake.warehouse)]
    )
    out, err = capfd.readouterr()
    lake.outputs += [out, err]
    lines = [line for line in out.strip().splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    assert code == 0 and result.get("status") == "ok", (args, result, err[-3000:])
    return result


def rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(tuple(r) for r in spark.sql(f"SELECT id, cat FROM {table}").collect())


def glue_parameters(lake: Lake, name: str) -> dict[str, str]:
    return dict(lake.glue.client().get_table(DatabaseName="db", Name=name)["Table"]["Parameters"])


def test_the_docs_aws_entry_maps_to_iceberg_javas_glue_catalog(lake: Lake) -> None:
    conf = iceberg_catalog_conf(lake.catalogs.get("lake"))
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf["spark.sql.catalog.lake.client.region"] == "eu-west-1"
    assert "spark.sql.catalog.lake.io-impl" not in conf  # S3FileIO, Iceberg Java's default there
    local = iceberg_catalog_conf(lake.catalogs.get(CATALOG))
    assert local[f"spark.sql.catalog.{CATALOG}.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"


def test_every_job_on_a_table_iceberg_spark_writes_through_glue(spark: Any, lake: Lake, capfd: Any) -> None:
    table = f"{CATALOG}.db.events"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    for b in range(2):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CAST(id % 3 AS STRING) FROM range({b * 50}, {b * 50 + 50})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 10 = 0")  # position delete files
    expected = rows(spark, table)
    assert len(expected) == 90
    spark_location = glue_parameters(lake, "events")["metadata_location"]
    catalog = catalog_for(lake.catalogs.get(CATALOG))
    assert catalog.load_table("db.events").metadata_location == spark_location  # Java's record, read by us
    assert catalog.list_tables("db") == ["db.events"]

    base = ("--table", "db.events")
    tk(lake, capfd, "rewrite-position-deletes", *base, "--rewrite-all")
    params = glue_parameters(lake, "events")
    assert params["previous_metadata_location"] == spark_location  # our swap, over Spark's commit
    assert params["table_type"] == "ICEBERG"
    assert rows(spark, table) == expected
    tk(lake, capfd, "compact", *base, "--min-input-files", "2")
    assert rows(spark, table) == expected
    assert spark.sql(f"SELECT count(*) FROM {table}.data_files").collect()[0][0] == 1
    tk(lake, capfd, "rewrite-manifests", *base, "--rewrite-all")
    assert rows(spark, table) == expected
    tk(lake, capfd, "compute-stats", *base)
    assert rows(spark, table) == expected
    assert spark.sql(f"SELECT count(*) FROM {table}.metadata_log_entries").collect()[0][0] >= 7
    now = datetime.now(timezone.utc).isoformat()
    tk(lake, capfd, "expire-snapshots", *base, "--older-than", now)
    assert rows(spark, table) == expected
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0] == 1
    location = Path(catalog.load_table("db.events").metadata.location)
    assert location == lake.warehouse / "glue" / "db.db" / "events"  # where Iceberg Java put it
    orphan = location / "data" / "lost-task-00001.parquet"
    orphan.write_bytes(b"orphan")
    os.utime(orphan, (time.time() - 10 * 86_400,) * 2)
    result = tk(lake, capfd, "remove-orphans", *base)
    assert result["metrics"]["deleted_files_count"] == 1 and not orphan.exists()
    assert rows(spark, table) == expected

    # A second table, upgraded to format version 3 with row ids for every row.
    lineage = f"{CATALOG}.db.lineage"
    spark.sql(
        f"CREATE TABLE {lineage} (id BIGINT, cat STRING) USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"INSERT INTO {lineage} SELECT id, 'x' FROM range(0, 40)")
    before = rows(spark, lineage)
    tk(lake, capfd, "backfill-row-lineage", "--table", "db.lineage")
    assert rows(spark, lineage) == before
    assert dict(spark.sql(f"SHOW TBLPROPERTIES {lineage}").collect()).get("format-version") == "3"
    ids = spark.sql(f"SELECT count(DISTINCT _row_id), count(*) FROM {lineage}").collect()[0]
    assert ids[0] == ids[1] == 40

    # A Delta table registered in Glue by name: converted from where Glue says it lives.
    delta = lake.warehouse / "delta" / "orders"
    spark.sql(f"CREATE TABLE delta.`{delta}` (id BIGINT, cat STRING) USING delta")
    spark.sql(f"INSERT INTO delta.`{delta}` SELECT id, CAST(id % 2 AS STRING) FROM range(0, 30)")
    lake.glue.client().create_table(
        DatabaseName="db",
        TableInput={
            "Name": "orders",
            "Parameters": {"table_type": "DELTA"},
            "StorageDescriptor": {"Location": str(delta)},
        },
    )
    tk(lake, capfd, "convert-delta", "--source", f"{CATALOG}.db.orders", "--target", "db.orders_iceberg")
    assert rows(spark, f"{CATALOG}.db.orders_iceberg") == rows(spark, f"delta.`{delta}`")

    # Health over the catalog's database (the session's Glue server holds other tests' databases
    # too): its Iceberg tables and the Delta one Glue registers.
    report = tk(lake, capfd, "health", "--namespace", "db")
    found = {t["table"]: t["format"] for t in report["tables"]}
    assert found == {
        "db.events": "iceberg",
        "db.lineage": "iceberg",
        "db.orders_iceberg": "iceberg",
        str(delta): "delta",
    }, report
    assert all(not t.get("error") for t in report["tables"]), report
    assert lake.glue.secret_key not in "\n".join(lake.outputs)


def test_iceberg_spark_and_tablekeeper_processes_race_and_no_commit_is_lost(spark: Any, lake: Lake) -> None:
    table = f"{CATALOG}.db.race"
    retry = ", ".join(f"'{k}'='{v}'" for k, v in RETRY_PROPS.items())  # both engines read these
    spark.sql(f"CREATE TABLE {table} (id BIGINT, writer STRING) USING iceberg TBLPROPERTIES ({retry})")
    procs = start_workers(lake.conf, CATALOG, "db.race", workers=2, appends=4)
    errors: list[BaseException] = []

    def spark_appends() -> None:
        try:
            for i in range(4):
                spark.sql(f"INSERT INTO {table} VALUES ({90_000 + i}, 'spark')")
        except BaseException as err:  # surfaced by the assertion below
            errors.append(err)

    thread = threading.Thread(target=spark_appends)
    thread.start()
    tk_files = collect(procs)
    thread.join(timeout=600)
    assert not errors, errors
    spark.sql(f"REFRESH TABLE {table}")
    got = sorted(tuple(r) for r in spark.sql(f"SELECT id, writer FROM {table}").collect())
    assert got == sorted(
        [
            *((90_000 + i, "spark") for i in range(4)),
            *((w * 1000 + i, f"tk{w}") for w in range(2) for i in range(4)),
        ]
    )
    assert len(tk_files) == 8
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0] == 12  # one per commit


def _append(lake: Lake, worker: int, count: int, kill_at: str | None = None) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))),
    }
    env.pop(KILL_ENV, None)
    if kill_at:
        env[KILL_ENV] = kill_at
    args = [str(lake.conf), CATALOG, "db.killed", str(worker), str(count)]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.append_worker", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,  # it leads its group: the SIGKILL takes nothing else
        check=False,
    )
    assert (proc.returncode == -signal.SIGKILL) == bool(kill_at), proc.stderr[-2000:]


def test_a_writer_killed_at_the_swap_leaves_a_state_iceberg_spark_reads(spark: Any, lake: Lake) -> None:
    table = f"{CATALOG}.db.killed"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, writer STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'spark')")

    def seen() -> list[tuple[Any, ...]]:
        spark.sql(f"REFRESH TABLE {table}")
        return sorted(tuple(r) for r in spark.sql(f"SELECT id, writer FROM {table}").collect())

    _append(lake, 1, 3, kill_at="commit.swapped@2")  # SIGKILL right after the second swap
    assert seen() == [(1, "spark"), (1000, "tk1"), (1001, "tk1")]  # the new state
    _append(lake, 2, 1, kill_at="commit.metadata-written")  # SIGKILL before the swap
    assert seen() == [(1, "spark"), (1000, "tk1"), (1001, "tk1")]  # the old state
    _append(lake, 3, 1)  # the next writer goes on from there, and so does Iceberg Spark
    spark.sql(f"INSERT INTO {table} VALUES (2, 'spark')")
    assert seen() == [(1, "spark"), (2, "spark"), (1000, "tk1"), (1001, "tk1"), (3000, "tk3")]
