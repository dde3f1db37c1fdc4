"""One way to get a SparkSession with the Delta and Iceberg runtimes.

Locally (tests, the demo, a laptop) tablekeeper starts Spark itself with the jars from ``.jars/``.
Under spark-submit a session already exists; it is used as it is and only checked, because on a
cluster the jars arrive through ``--packages`` and the confs through the submit command.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from tablekeeper.catalog.config import CatalogsConfig, load_catalogs
from tablekeeper.catalog.spark_conf import ICEBERG_CATALOG, iceberg_catalog_conf, s3a_conf
from tablekeeper.errors import ConfigError
from tablekeeper.io.storage import STORAGE_ENV, on_storage_change
from tablekeeper.io.stores import hadoop_settings
from tablekeeper.redact import SECRET_IN_URI_PATTERN
from tablekeeper.settings import PACKAGE_ROLES, JarSpec, jar_specs, jars_dir, spark_defaults
from tablekeeper.spark.class_archive import JAVA_OPTIONS_KEY, java_options
from tablekeeper.spark.compat import check_session_line

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
_S3A_STORE_KEYS = frozenset(
    {
        "fs.s3a.endpoint",
        "fs.s3a.endpoint.region",
        "fs.s3a.access.key",
        "fs.s3a.secret.key",
        "fs.s3a.session.token",
        "fs.s3a.aws.credentials.provider",
    }
)
# Spark's own list plus "credential" (an OAuth2 client secret in a REST catalog's properties),
# Azure's account keys (adls.connection-string.<account>, adls.auth.shared-key.account.key) and
# the GCS connector's Authorization header (fs.gs.storage.http.headers.Authorization: a token).
SPARK_REDACTION = (
    r"(?i)secret|password|token|access[.]?key|credential|connection-string|account[.]key|authorization|"
    + SECRET_IN_URI_PATTERN
)
# Classes whose absence means a runtime jar is missing from the session's classpath.
REQUIRED_CLASSES: Mapping[str, str] = {
    "delta": "io.delta.tables.DeltaTable",
    "iceberg": ICEBERG_CATALOG,
}


def packages_arg(specs: Iterable[JarSpec] | None = None) -> str:
    """The ``--packages`` value a cluster submit needs."""
    chosen = [s for s in jar_specs() if s.role in PACKAGE_ROLES] if specs is None else specs
    return ",".join(s.coordinate for s in chosen)


def local_jar_paths() -> list[Path]:
    directory = jars_dir()
    specs = jar_specs()
    paths = [directory / s.file_name for s in specs]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ConfigError(f"jars missing from {directory} ({', '.join(missing)}): run make setup")
    return paths


def share_storage(spark: SparkSession, properties: Mapping[str, str]) -> None:
    """Hand the process's storage settings to Spark: S3A's Hadoop settings for Spark's own I/O,
    and the environment of Python workers for tablekeeper's FileIO in executor tasks.

    Both are set on the live session rather than through SparkConf, which the Spark UI shows.
    """
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    hadoop = jsc.hadoopConfiguration()
    if properties:  # with nothing configured, the cluster's own settings stand untouched
        stores = hadoop_settings(properties)  # registered stores' own (io.stores)
        conf = {**s3a_conf(properties), **stores}
        for key, value in conf.items():
            # A cluster's own s3:// filesystem (EMRFS, say) stays; S3A only fills the gap.
            if key.endswith(".impl") and hadoop.get(key) is not None:
                continue
            hadoop.set(key, value)
        # Nothing of a store set earlier lingers (keys set elsewhere are not ours to drop).
        for key in _SET_BY_US.get(id(spark), set()) - conf.keys():
            hadoop.unset(key)
        _SET_BY_US[id(spark)] = set(conf) & (_S3A_STORE_KEYS | stores.keys())
    # Python workers are keyed by their environment, so tasks after this see the new settings.
    spark.sparkContext.environment[STORAGE_ENV] = json.dumps(dict(properties), sort_keys=True)


_FOLLOWED: dict[int, SparkSession] = {}
_SET_BY_US: dict[int, set[str]] = {}


def _follow_storage(spark: SparkSession) -> None:
    if id(spark) not in _FOLLOWED:
        _FOLLOWED[id(spark)] = spark
        on_storage_change(lambda properties: share_storage(spark, properties))


def session_conf(
    catalogs: CatalogsConfig,
    jars: Iterable[Path],
    extra: Mapping[str, str] | None = None,
    used: str | None = None,
) -> dict[str, str]:
    """The local session's settings, every catalog of the file registered in Spark. Only the
    catalog the job uses (``used``, else the file's default) must map to Spark: another that
    cannot (a database with no JDBC form) is left out, and a job naming it is refused then."""
    conf = dict(spark_defaults())
    conf.setdefault("spark.master", "local[*]")
    conf["spark.jars"] = ",".join(str(p) for p in jars)
    conf["spark.sql.extensions"] = f"{DELTA_EXTENSION},{ICEBERG_EXTENSION}"
    conf["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    conf.setdefault("spark.redaction.regex", SPARK_REDACTION)
    needed = used or catalogs.default
    for catalog in catalogs.catalogs.values():
        try:
            conf.update(iceberg_catalog_conf(catalog))
        except ConfigError:
            if catalog.name == needed:
                raise
            log.debug("catalog %s left out of the Spark session: it does not map to Spark", catalog.name)
    conf.update(extra or {})
    return conf


def _prepare_local_dirs(catalogs: CatalogsConfig) -> None:
    # The sqlite JDBC driver creates the database file but not its directory.
    for catalog in catalogs.catalogs.values():
        if "://" not in catalog.warehouse or catalog.warehouse.startswith("file:"):
            Path(catalog.warehouse.removeprefix("file:")).mkdir(parents=True, exist_ok=True)
        if catalog.sqlite_path is not None:
            catalog.sqlite_path.parent.mkdir(parents=True, exist_ok=True)


# spark-submit (and the pyspark shell) start the JVM first and hand the Python driver its gateway in
# this variable; the submit's master, jars (--packages) and --conf are then already in that JVM.
SUBMIT_GATEWAY_ENV = "PYSPARK_GATEWAY_PORT"


def submitted_session() -> SparkSession | None:
    """The active session, or the one spark-submit prepared for this driver; None otherwise.

    Under spark-submit no session exists until the driver builds one, and building it with the
    local defaults (master, ``.jars/``) would override what the submit command set, so it is built
    bare: master, jars and confs all come from the submit.
    """
    active = SparkSession.getActiveSession()
    if active is None and SUBMIT_GATEWAY_ENV in os.environ:
        active = SparkSession.builder.getOrCreate()
    return active


def submitted_file(name: str) -> Path | None:
    """The local file spark-submit's ``--files`` named ``name``, under spark-submit only.

    A driver in the cluster (``--deploy-mode cluster``) finds ``--files`` in its working directory;
    a client-mode driver does not, so the same command and ``--conf-file <name>`` would fail there.
    The submit's ``spark.files`` is in its JVM before any SparkContext exists: reading it costs no
    session. Remote entries (hdfs://, s3a://) are left to the cluster-mode case.
    """
    if SUBMIT_GATEWAY_ENV not in os.environ:
        return None
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    assert jvm is not None
    listed = jvm.java.lang.System.getProperty("spark.files") or ""
    for entry in str(listed).split(","):
        local = entry.strip().removeprefix("file:")
        if "://" in local or not local:
            continue
        candidate = Path(local)
        if candidate.name == name and candidate.is_file():
            return candidate
    return None


def get_spark(
    app_name: str = "tablekeeper",
    catalogs: CatalogsConfig | None = None,
    conf: Mapping[str, str] | None = None,
    catalog: str | None = None,
) -> SparkSession:
    """Return the active session (checked) or start a local one with every runtime loaded;
    ``catalog`` is the one the job uses (see session_conf)."""
    active = submitted_session()
    if active is not None:
        check_session(active)
        check_line_once(active)
        _follow_storage(active)
        _quiet_task_failures(active)
        quiet_query_context_logs()
        return active
    catalogs = catalogs or load_catalogs()
    settings = session_conf(catalogs, local_jar_paths(), conf, used=catalog)
    settings.setdefault(DAEMON_MODULE, "tablekeeper.spark.daemon")
    # The line's class archive (make setup), where built, halves the JVM's start.
    options = java_options(settings.get(JAVA_OPTIONS_KEY, ""))
    if options:
        settings[JAVA_OPTIONS_KEY] = options
    if logging.getLogger("tablekeeper").getEffectiveLevel() <= logging.DEBUG:
        settings.setdefault(f"spark.executorEnv.{WORKER_TRACEBACKS}", "1")
    _prepare_local_dirs(catalogs)
    # Executors in local mode must run the same interpreter as the driver (the project's venv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if settings.get("spark.master", "").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    log.info("starting local Spark with %d jars", len(settings["spark.jars"].split(",")))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TABLEKEEPER_SPARK_LOG_LEVEL", "ERROR"))
    check_line_once(spark)
    _follow_storage(spark)
    _quiet_task_failures(spark)
    quiet_query_context_logs()
    return spark


DAEMON_MODULE = "spark.python.daemon.module"
# Named here, not imported from the daemon module: importing it with the package would make Python
# warn when Spark runs it as a script.
WORKER_TRACEBACKS = "TABLEKEEPER_WORKER_TRACEBACKS"
# Spark logs a failed task's whole Python traceback (the executor in local mode, the task set
# manager on any driver); the job reports the same failure as one line, so below DEBUG they stay quiet.
_TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")


def _quiet_task_failures(spark: SparkSession) -> None:
    if logging.getLogger("tablekeeper").getEffectiveLevel() <= logging.DEBUG:
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _TASK_FAILURE_LOGGERS:
            configurator.setLevel(name, off)
    except Exception as err:  # a cluster logging through something else than log4j 2
        log.debug("could not quiet Spark's task failure logs: %s", err)


@contextmanager
def scoped_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Session settings for one command, put back as they were after it (the session is shared)."""
    previous: dict[str, str | None] = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in previous.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


# PySpark logs every exception that carries a query context (an AnalysisException on a bad column,
# say) as a JSON document with its stack, on stderr, through loggers of its own that do not propagate:
# a traceback below DEBUG, printed unscrubbed (the exception's text bypasses log redaction). The job
# reports the same failure as one line; at DEBUG, tablekeeper's own trace carries it, scrubbed.
QUERY_CONTEXT_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")


def quiet_query_context_logs() -> None:
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # PySpark before 4.0 has no such loggers
        return
    for name in QUERY_CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def _class_loadable(spark: SparkSession, name: str) -> bool:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass(name)
    except Exception:  # py4j wraps ClassNotFoundException in a Py4JJavaError
        return False
    return True


_LINE_CHECKED: set[int] = set()


def check_line_once(spark: SparkSession) -> None:
    """The session's Spark, Delta and Iceberg against the supported lines, before any work; once
    per session (three JVM calls, then never again)."""
    if id(spark) in _LINE_CHECKED:
        return
    line = check_session_line(spark)
    log.debug("Spark %s line: Delta %s, Iceberg %s", line.name, line.delta, line.iceberg)
    _LINE_CHECKED.add(id(spark))


def check_session(spark: SparkSession) -> None:
    """Fail with the fix when a pre-existing session lacks a runtime or an extension."""
    missing = [role for role, cls in REQUIRED_CLASSES.items() if not _class_loadable(spark, cls)]
    if missing:
        raise ConfigError(
            f"Spark session lacks the {' and '.join(missing)} runtime: "
            f"submit with --packages {packages_arg()}"
        )
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    absent = [ext for ext in (DELTA_EXTENSION, ICEBERG_EXTENSION) if ext not in extensions]
    if absent:
        raise ConfigError(
            f"Spark session lacks spark.sql.extensions {','.join(absent)}: "
            f"submit with --conf spark.sql.extensions={DELTA_EXTENSION},{ICEBERG_EXTENSION}"
        )
