"""Iceberg's own REST catalog test server on a loopback port: a JDBC catalog on a sqlite file,
tables stored through S3FileIO in a test S3 store (see object_store.run_s3proxy), or through
HadoopFileIO in any store a Hadoop connector on its classpath reaches (``run_hadoop_rest_catalog``:
the GCS and Azure emulators, configured by a core-site.xml of the settings tablekeeper gives Spark)."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from tablekeeper.settings import role_jar_paths
from tests.support.object_store import (
    LOOPBACK,
    S3_BUCKET,
    S3Endpoint,
    free_loopback_port,
    log_tail,
    require_jars,
    start_java,
    stop_process,
)

MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
REST_START_TIMEOUT_S = 90.0
# Where the session's REST catalog server keeps its tables (tests/conftest.py).
REST_WAREHOUSE = f"s3://{S3_BUCKET}/rest"


@dataclass(frozen=True)
class RestCatalogServer:
    uri: str  # "http://127.0.0.1:PORT"
    warehouse: str  # "s3://bucket/prefix"
    vended: Mapping[str, str] = field(default_factory=dict)  # storage settings it vends with tables


def rest_server_classpath() -> list[Path]:
    """The server's closure, sqlite-jdbc, the AWS SDK bundle S3FileIO needs, and the Hadoop
    client jars pyspark ships (the server hands its backend catalog a Hadoop Configuration even
    when no Hadoop FileIO is configured, and exits at start without one)."""
    import pyspark

    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    hadoop = [
        *sorted(pyspark_jars.glob("hadoop-client-api-*.jar")),
        *sorted(pyspark_jars.glob("hadoop-client-runtime-*.jar")),
    ]
    if len(hadoop) != 2:
        raise RuntimeError("pyspark's hadoop-client-api/-runtime jars are missing: run make setup")
    aws = [p for p in role_jar_paths("s3") if p.name.startswith("iceberg-aws-bundle-")]
    if len(aws) != 1:
        raise RuntimeError("conf/jars.txt lists no iceberg-aws-bundle jar under role s3")
    return require_jars([*role_jar_paths("test-rest-server"), *role_jar_paths("jdbc"), *aws, *hadoop])


def _server_env(workdir: Path, s3: S3Endpoint, warehouse: str, port: int) -> dict[str, str]:
    # The server takes its whole configuration from CATALOG_* variables (prefix dropped, "__" ->
    # "-", "_" -> ".", lower-cased). Inherited CATALOG_* or AWS_* variables would leak a
    # developer's setup into the catalog, so none are passed on.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "AWS_"))}
    env.update(
        CATALOG_REST_PORT=str(port),
        # A file, not jdbc:sqlite::memory: — each pooled connection would get its own empty database.
        CATALOG_URI=f"jdbc:sqlite:{workdir / 'rest-catalog.db'}",
        CATALOG_JDBC_SCHEMA__VERSION="V1",
        CATALOG_WAREHOUSE=warehouse,
        CATALOG_IO__IMPL="org.apache.iceberg.aws.s3.S3FileIO",
        CATALOG_S3_ENDPOINT=s3.endpoint,
        CATALOG_S3_PATH__STYLE__ACCESS="true",
        CATALOG_S3_ACCESS__KEY__ID=s3.access_key,
        CATALOG_S3_SECRET__ACCESS__KEY=s3.secret_key,
        CATALOG_CLIENT_REGION=s3.region,
        # Vend the store's keys with every loaded table, as production catalogs do.
        CATALOG_INCLUDE__CREDENTIALS="true",
        # Any SDK client built without client.region falls back to the SDK's region chain, which
        # would otherwise read a developer's ~/.aws config or ask instance metadata.
        AWS_REGION=s3.region,
    )
    return env


def _hadoop_env(workdir: Path, warehouse: str, port: int, vended: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "AWS_"))}
    env.update(
        CATALOG_REST_PORT=str(port),
        CATALOG_URI=f"jdbc:sqlite:{workdir / 'rest-catalog.db'}",
        CATALOG_JDBC_SCHEMA__VERSION="V1",
        CATALOG_WAREHOUSE=warehouse,
        CATALOG_IO__IMPL="org.apache.iceberg.hadoop.HadoopFileIO",
    )
    if vended:  # gcs.oauth2.token, adls.sas-token.<host>: handed out with every loaded table
        env["CATALOG_INCLUDE__CREDENTIALS"] = "true"
        for key, value in vended.items():
            env["CATALOG_" + key.replace("-", "__").replace(".", "_").upper()] = value
    return env


def _core_site(directory: Path, hadoop: Mapping[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    body = "".join(
        f"<property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
        for k, v in sorted(hadoop.items())
    )
    (directory / "core-site.xml").write_text(f"<configuration>{body}</configuration>\n", encoding="utf-8")


def _config_answers(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@contextmanager
def run_rest_catalog(workdir: Path, s3: S3Endpoint, warehouse: str) -> Iterator[RestCatalogServer]:
    """Iceberg's RESTCatalogServer with ``warehouse`` (an s3:// location in ``s3``'s store).

    Its log (rest-catalog.log in ``workdir``) holds the S3 secret: the server prints its catalog
    properties at start.
    """
    port = free_loopback_port()
    workdir.mkdir(parents=True, exist_ok=True)
    with _serving(
        rest_server_classpath(), workdir, port, warehouse, _server_env(workdir, s3, warehouse, port)
    ) as server:
        yield server


@contextmanager
def run_hadoop_rest_catalog(
    workdir: Path,
    warehouse: str,
    hadoop: Mapping[str, str],
    connector_roles: tuple[str, ...],
    vended: Mapping[str, str] | None = None,
    pyspark_jars: tuple[str, ...] = (),
) -> Iterator[RestCatalogServer]:
    """The same server writing ``warehouse`` through HadoopFileIO: the jars of ``connector_roles``
    (conf/jars.txt), those of pyspark's jars named by ``pyspark_jars`` prefixes (what a connector
    takes from Spark's classpath) and a core-site.xml holding ``hadoop`` on its classpath.
    ``vended``: storage settings it hands out with every loaded table, as a catalog vends
    credentials."""
    import pyspark

    port = free_loopback_port()
    workdir.mkdir(parents=True, exist_ok=True)
    _core_site(workdir / "conf", hadoop)
    connectors = require_jars([p for role in connector_roles for p in role_jar_paths(role)])
    spark_jars = Path(pyspark.__file__).parent / "jars"
    borrowed = [p for prefix in pyspark_jars for p in sorted(spark_jars.glob(f"{prefix}*.jar"))]
    classpath = [workdir / "conf", *rest_server_classpath(), *connectors, *borrowed]
    env = _hadoop_env(workdir, warehouse, port, vended or {})
    with _serving(classpath, workdir, port, warehouse, env, vended or {}) as server:
        yield server


@contextmanager
def _serving(
    classpath: Sequence[Path],
    workdir: Path,
    port: int,
    warehouse: str,
    env: dict[str, str],
    vended: Mapping[str, str] | None = None,
) -> Iterator[RestCatalogServer]:
    server = RestCatalogServer(
        uri=f"http://{LOOPBACK}:{port}", warehouse=warehouse, vended=dict(vended or {})
    )
    log = workdir / "rest-catalog.log"
    proc = start_java(["-cp", ":".join(str(p) for p in classpath), MAIN_CLASS], log, env=env)
    try:
        deadline = time.monotonic() + REST_START_TIMEOUT_S
        while not _config_answers(server.uri):
            if proc.poll() is not None:
                raise RuntimeError(f"REST catalog server exited with {proc.returncode}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"REST catalog server not serving after {REST_START_TIMEOUT_S:.0f} s:\n{log_tail(log)}"
                )
            time.sleep(0.2)
        yield server
    finally:
        stop_process(proc)
