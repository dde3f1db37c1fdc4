"""Fixtures shared by every test layer. One Spark JVM per test run (it costs ~7 s to start)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tiers
from tests.support.cloud_stores import (
    AZURE_CONTAINER,
    GCS_BUCKET,
    AzureEndpoint,
    GcsEndpoint,
    run_azurite,
    run_fake_gcs,
)
from tests.support.db_servers import DbServer, run_mariadb, run_postgres
from tests.support.glue_server import GlueEndpoint, run_glue_server
from tests.support.hive_metastore import MetastoreServer, run_metastore
from tests.support.object_store import S3_BUCKET, S3Endpoint, run_s3proxy
from tests.support.observe_receiver import Receiver, run_receiver
from tests.support.rest_catalog_server import (
    REST_WAREHOUSE,
    RestCatalogServer,
    run_hadoop_rest_catalog,
    run_rest_catalog,
)


# pytest attaches each test's log capture handler to every logger that does not propagate, and
# PySpark's query-context loggers (created, non-propagating, by the first Spark exception with a
# query context) are PySparkLoggers, whose addHandler gives the handler PySpark's JSON formatter:
# from then on every later test's caplog text was JSON, whose exception part bypasses redaction.
# Made here, with the standard addHandler, before any test can create them.
def _plain_query_context_loggers() -> None:
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # PySpark before 4.0 has no such loggers
        return

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logger = PySparkLogger.getLogger(name)
        logger.addHandler = logging.Logger.addHandler.__get__(logger)  # type: ignore[method-assign]


_plain_query_context_loggers()

# Every result a job prints in this run (in this process or a job process it starts, which inherit
# the environment) is checked against the published result schema (tablekeeper.jobs.common.result_schema).
os.environ["TABLEKEEPER_CHECK_RESULTS"] = "1"

# Engines turn timestamps into local datetimes; pin the zone so comparisons mean the same everywhere.
os.environ["TZ"] = "UTC"
time.tzset()

# Spark copies every jar of the session into <local dir>/spark-*/userFiles (131 MB here) and removes
# it only on a clean exit; the kill tests SIGKILL dozens of jobs, which filled the disk of a CI
# machine. Every JVM of this run (the shared session, and job subprocesses, which inherit the
# environment) keeps its scratch under one directory that the session removes at its end.
SPARK_SCRATCH = Path(tempfile.mkdtemp(prefix="tablekeeper-tests-spark-"))
os.environ["SPARK_LOCAL_DIRS"] = str(SPARK_SCRATCH)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(SPARK_SCRATCH, ignore_errors=True)


# Tiers (tests/tiers.py): each test gets its marker at collection; the run's end prints the time per tier.
_TIER_BY_NODEID: dict[str, str] = {}
_REPORTS: list[pytest.TestReport] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.assign(items, str(Path(__file__).resolve().parent))
    for item in items:
        _TIER_BY_NODEID[item.nodeid] = next(m.name for m in item.iter_markers() if m.name in tiers.TIERS)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _REPORTS.append(report)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    if not _REPORTS:
        return
    terminalreporter.write_sep("=", "time per tier (setup + call + teardown)")
    for line in tiers.summary(_REPORTS, _TIER_BY_NODEID):
        terminalreporter.write_line(line)


REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
DELTA_TABLES = SHARED / "delta-tables" / "delta-rs"

# Names of the Iceberg catalogs the shared session knows (see the `catalogs` fixture).
SQL_CATALOG = "tk"
FS_CATALOG = "fs"


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def catalogs(warehouse: Path):  # type: ignore[no-untyped-def]
    from tablekeeper.catalog.config import parse_catalogs

    text = f"""
default: {SQL_CATALOG}
catalogs:
  {SQL_CATALOG}:
    type: sql
    uri: sqlite:///${{warehouse}}/catalog.db
    warehouse: ${{warehouse}}/sql
  {FS_CATALOG}:
    type: filesystem
    warehouse: ${{warehouse}}/files
"""
    return parse_catalogs(text, warehouse)


@pytest.fixture(scope="session")
def spark(catalogs):  # type: ignore[no-untyped-def]
    from tablekeeper.spark import get_spark

    session = get_spark("tablekeeper-tests", catalogs=catalogs)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def delta_corpus(spark, catalogs, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The shared Delta tables as delta-spark and the converter see them, each read once per session
    (tests/support/delta_corpus.py); conversions land in the ``SQL_CATALOG`` catalog."""
    from tests.support.delta_corpus import DeltaCorpus

    return DeltaCorpus(spark, catalogs, SQL_CATALOG, tmp_path_factory.mktemp("delta-corpus"))


@pytest.fixture
def delta_table_copy(tmp_path: Path) -> Iterator[object]:
    """Copy a table from ../shared/delta-tables (read-only input) before a test writes to it."""

    def copy(name: str) -> Path:
        source = DELTA_TABLES / name
        if not source.is_dir():
            raise FileNotFoundError(f"{source} missing: ../shared must sit beside the repository")
        target = tmp_path / name
        shutil.copytree(source, target)
        return target

    yield copy


# Servers the interop and cluster tests talk to over loopback. Each starts on first request and
# lives for the session, so a run that never asks for one pays nothing.


@pytest.fixture(scope="session")
def observe_server() -> Iterator[Receiver]:
    """One loopback HTTP endpoint per session for OTLP metrics and OpenLineage events."""
    with run_receiver() as receiver:
        yield receiver


@pytest.fixture
def receiver(observe_server: Receiver) -> Receiver:
    """The session's endpoint, with nothing received and nothing queued."""
    observe_server.reset()
    return observe_server


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """An in-memory S3 store with the bucket ``warehouse`` created."""
    with run_s3proxy(tmp_path_factory.mktemp("s3proxy")) as s3:
        s3.create_bucket(S3_BUCKET)
        yield s3


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEndpoint]:
    """An in-memory GCS emulator (fake-gcs-server) with the bucket ``warehouse`` created."""
    with run_fake_gcs(tmp_path_factory.mktemp("fake-gcs")) as gcs:
        gcs.create_bucket(GCS_BUCKET)
        yield gcs


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureEndpoint]:
    """Azurite's Blob service in memory, one fresh account, the container ``warehouse`` created."""
    with run_azurite(tmp_path_factory.mktemp("azurite")) as azure:
        azure.create_container(AZURE_CONTAINER)
        yield azure


@pytest.fixture(scope="session")
def rest_server(
    tmp_path_factory: pytest.TempPathFactory, s3_server: S3Endpoint
) -> Iterator[RestCatalogServer]:
    """Iceberg's REST catalog server, its warehouse at s3://warehouse/rest in ``s3_server``."""
    with run_rest_catalog(tmp_path_factory.mktemp("rest-catalog"), s3_server, REST_WAREHOUSE) as server:
        yield server


@pytest.fixture(scope="session")
def gcs_rest_server(
    tmp_path_factory: pytest.TempPathFactory, gcs_server: GcsEndpoint
) -> Iterator[RestCatalogServer]:
    """Iceberg's REST catalog server, its tables at gs://warehouse/rest in ``gcs_server``, written
    through Google's Hadoop connector with the settings tablekeeper derives for Spark. It vends an
    OAuth2 token with every table (the emulator takes any), as a production catalog does."""
    from tablekeeper.io.gcs import hadoop_settings

    hadoop = hadoop_settings(gcs_server.properties())
    workdir = tmp_path_factory.mktemp("gcs-rest-catalog")
    vended = {"gcs.oauth2.token": "ya29.tk-vended-" + os.urandom(12).hex()}
    with run_hadoop_rest_catalog(workdir, f"gs://{GCS_BUCKET}/rest", hadoop, ("gcs",), vended) as server:
        yield server


@pytest.fixture(scope="session")
def azure_rest_server(
    tmp_path_factory: pytest.TempPathFactory, azure_server: AzureEndpoint
) -> Iterator[RestCatalogServer]:
    """Iceberg's REST catalog server, its tables in Azurite's container ``warehouse`` (abfs://:
    the emulator speaks plain HTTP), written through Hadoop's ABFS driver with the settings
    tablekeeper derives for Spark. It vends an account SAS token with every table."""
    from tablekeeper.io.azure import hadoop_settings

    hadoop = hadoop_settings(azure_server.properties())
    warehouse = f"abfs://{AZURE_CONTAINER}@{azure_server.host}/rest"
    workdir = tmp_path_factory.mktemp("azure-rest-catalog")
    # ABFS builds its requests with Apache's HTTP client, which Spark ships and the server lacks.
    borrowed = ("httpclient-", "httpcore-")
    vended = {f"adls.sas-token.{azure_server.host}": azure_server.account_sas()}
    with run_hadoop_rest_catalog(workdir, warehouse, hadoop, ("azure",), vended, borrowed) as server:
        yield server


@pytest.fixture(scope="session")
def hive_metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetastoreServer]:
    """Apache Hive's standalone metastore (Derby) on loopback, lock tables included."""
    with run_metastore(tmp_path_factory.mktemp("hive-metastore")) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[DbServer]:
    """PostgreSQL on loopback, a database for Iceberg's JDBC catalog tables, a user with a password."""
    with run_postgres("tk-pg-" + os.urandom(8).hex()) as server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[DbServer]:
    """MariaDB (MySQL's protocol) on loopback, set up as ``postgres_server``."""
    with run_mariadb("tk-my-" + os.urandom(8).hex()) as server:
        yield server


@pytest.fixture(scope="session")
def glue_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GlueEndpoint]:
    """A Glue Data Catalog (moto's server, made to check UpdateTable's VersionId) on loopback."""
    with run_glue_server(tmp_path_factory.mktemp("glue")) as server:
        yield server


@pytest.fixture(params=["postgresql", "mysql"])
def db_server(request: pytest.FixtureRequest) -> DbServer:
    """Each database server in turn (started on first use, once per session)."""
    name = "postgres_server" if request.param == "postgresql" else "mariadb_server"
    server: DbServer = request.getfixturevalue(name)
    return server
