"""The compatibility tier: what a Spark line's environment must prove, fast enough to run once per
supported line (3.5, 4.0, 4.1) in CI.

It runs under whichever line the interpreter and the jars are: the interpreter's pyspark and
delta-spark, and the jars of conf/jars.txt in ``.jars/`` (or ``$TABLEKEEPER_HOME/conf/jars.txt`` and
``$TABLEKEEPER_JARS_DIR``). One Spark session (tests/conftest.py's) serves the whole tier: jobs run
in it through the CLI's ``main()``, and its Iceberg catalog is the reference reader; one standalone
cluster of the same line (its master and one worker) takes the submits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FS_CATALOG, SQL_CATALOG
from tests.support.spark_cluster import StandaloneCluster
from tests.support.spark_submit import build_package


@dataclass(frozen=True)
class Line:
    """The versions the running session reports (not what the jar names claim)."""

    spark: str
    delta: str
    iceberg: str

    @property
    def spark_minor(self) -> str:
        return ".".join(self.spark.split(".")[:2])


@pytest.fixture(scope="session")
def line(spark: Any) -> Line:
    jvm = spark.sparkContext._jvm
    iceberg = str(jvm.org.apache.iceberg.IcebergBuild.version())
    delta = str(getattr(getattr(jvm.io.delta, "package$"), "MODULE$").VERSION())
    return Line(spark.version, delta, iceberg)


@pytest.fixture(scope="session")
def conf_file(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared session's catalogs (tests/conftest.py) as a job's --conf-file: what a job run in
    the session and a job submitted to the cluster both open."""
    path = tmp_path_factory.mktemp("compat-conf") / "catalogs.yaml"
    path.write_text(
        f"default: {SQL_CATALOG}\ncatalogs:\n"
        f"  {SQL_CATALOG}:\n    type: sql\n    uri: sqlite:///{warehouse}/catalog.db\n"
        f"    warehouse: {warehouse}/sql\n"
        f"  {FS_CATALOG}:\n    type: filesystem\n    warehouse: {warehouse}/files\n"
    )
    return path


@pytest.fixture(scope="session")
def compat_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone cluster of the line: its master and one one-core worker (the cluster tier's
    machinery, tests/support/spark_cluster.py, with the line's SPARK_HOME: the interpreter's
    pyspark). One per session: every submit of the tier goes to it."""
    build_package()  # dist/tablekeeper.zip, which every submit ships, is this checkout's code
    standalone = StandaloneCluster(tmp_path_factory.mktemp("compat-standalone"), workers_wanted=1)
    try:
        yield standalone.start()
    finally:
        standalone.stop()
