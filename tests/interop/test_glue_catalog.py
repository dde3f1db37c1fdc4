"""The glue catalog shared with Iceberg Spark's GlueCatalog on one Glue endpoint (moto's server,
tests/support/glue_server.py): the catalogs file of docs/reference/catalogs/glue.md, as written, drives
every maintenance job through the command line on a table Iceberg Spark created and wrote, and
Iceberg Spark reads the same rows after each; a Delta table registered in Glue by name is converted
into it; Iceberg Spark and tablekeeper processes race appends and no commit is lost; a writer killed
at the swap leaves the old or the new state and the next one lands on top."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import CatalogsConfig, parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tests.conftest import REPO_ROOT
from tests.interop.test_concurrent_commits import RETRY_PROPS
from tests.support.append_worker import run_worker
from tests.support.catalog_jobs import CatalogUnderTest, every_job, race
from tests.support.glue_server import GlueEndpoint

pytestmark = pytest.mark.spark

MARKER = "<!-- run as written by tests/interop/test_glue_catalog.py -->"
CATALOG = "lake_local"  # the docs example's catalog on a Glue-compatible endpoint


def docs_block() -> str:
    text = (REPO_ROOT / "docs" / "reference" / "catalogs" / "glue.md").read_text(encoding="utf-8")
    assert MARKER in text, "docs/reference/catalogs/glue.md lost its tested Glue catalogs file"
    match = re.search(r"```yaml\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
    assert match is not None
    return match.group(1) + "\n"


@dataclass
class Lake:
    conf: Path
    warehouse: Path
    catalogs: CatalogsConfig
    glue: GlueEndpoint


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
    catalog = catalog_for(lake.catalogs.get(CATALOG))

    def recorded(spark_location: str) -> None:
        params = glue_parameters(lake, "every_events")
        assert params["previous_metadata_location"] == spark_location  # our swap, over Spark's commit
        assert params["table_type"] == "ICEBERG"
        location = Path(catalog.load_table("db.every_events").metadata.location)
        assert location == lake.warehouse / "glue" / "db.db" / "every_events"  # where Iceberg Java put it

    def registered(delta: Path) -> str:
        """A Delta table registered in Glue by name: converted from where Glue says it lives."""
        lake.glue.client().create_table(
            DatabaseName="db",
            TableInput={
                "Name": delta.name,
                "Parameters": {"table_type": "DELTA"},
                "StorageDescriptor": {"Location": str(delta)},
            },
        )
        return f"{CATALOG}.db.{delta.name}"

    cat = CatalogUnderTest(
        CATALOG,
        lake.conf,
        lake.warehouse,
        catalog,
        after_first_swap=recorded,
        delta_source=registered,
        secrets=(lake.glue.secret_key,),
    )
    every_job(spark, cat, capfd, "every")


def test_iceberg_spark_and_tablekeeper_processes_race_and_no_commit_is_lost(spark: Any, lake: Lake) -> None:
    table = f"{CATALOG}.db.race"
    retry = ", ".join(f"'{k}'='{v}'" for k, v in RETRY_PROPS.items())  # both engines read these
    spark.sql(f"CREATE TABLE {table} (id BIGINT, writer STRING) USING iceberg TBLPROPERTIES ({retry})")
    tk_files = race(spark, table, lake.conf, CATALOG, "db.race", 4)
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


def test_a_writer_killed_at_the_swap_leaves_a_state_iceberg_spark_reads(spark: Any, lake: Lake) -> None:
    table = f"{CATALOG}.db.killed"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, writer STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'spark')")

    def seen() -> list[tuple[Any, ...]]:
        spark.sql(f"REFRESH TABLE {table}")
        return sorted(tuple(r) for r in spark.sql(f"SELECT id, writer FROM {table}").collect())

    # SIGKILL right after the second swap
    run_worker(lake.conf, CATALOG, "db.killed", 1, 3, kill_at="commit.swapped@2")
    assert seen() == [(1, "spark"), (1000, "tk1"), (1001, "tk1")]  # the new state
    # SIGKILL before the swap
    run_worker(lake.conf, CATALOG, "db.killed", 2, 1, kill_at="commit.metadata-written")
    assert seen() == [(1, "spark"), (1000, "tk1"), (1001, "tk1")]  # the old state
    # the next writer goes on from there, and so does Iceberg Spark
    run_worker(lake.conf, CATALOG, "db.killed", 3, 1)
    spark.sql(f"INSERT INTO {table} VALUES (2, 'spark')")
    assert seen() == [(1, "spark"), (2, "spark"), (1000, "tk1"), (1001, "tk1"), (3000, "tk3")]
