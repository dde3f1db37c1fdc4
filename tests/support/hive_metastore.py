"""Apache Hive's standalone metastore on a loopback port, for the hive catalog's tests: Apache's
distribution (conf/jars.txt role test-hms) unpacked into the session's directory, its Derby
database created with the distribution's schema tool (which also makes the lock tables Iceberg's
commits need), then the Thrift server started on a free port.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from tablekeeper.settings import role_jar_paths
from tests.support.object_store import (
    JVM_FLAGS,
    LOOPBACK,
    free_loopback_port,
    log_tail,
    port_open,
    require_jars,
    start_java,
    stop_process,
)

ROLE = "test-hms"
SERVER_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
SCHEMA_TOOL_CLASS = "org.apache.hadoop.hive.metastore.tools.MetastoreSchemaTool"
START_TIMEOUT_S = 90.0
# Derby without fsync: the database is thrown away with the session.
_DERBY_FAST = "-Dderby.system.durability=test"
# What a classpath lacking a class the server reached for leaves in its log.
MISSING_CLASS = ("NoClassDefFoundError", "ClassNotFoundException")


@dataclass(frozen=True)
class MetastoreServer:
    uri: str  # thrift://127.0.0.1:PORT
    warehouse: Path  # the metastore's own warehouse directory (the default database's)
    log: Path

    def missing_classes(self) -> list[str]:
        """Lines of the server's log naming a class its classpath lacks (a jar conf/jars.txt
        should list)."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return [line for line in text.splitlines() if any(m in line for m in MISSING_CLASS)]


def _unpack(archive: Path, target: Path) -> Path:
    """The distribution's top directory, unpacked under ``target`` (once per session: 35 MB)."""
    with tarfile.open(archive) as tar:
        tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        if len(tops) != 1:
            raise RuntimeError(f"{archive.name} is not one distribution directory")
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+: refuse links and paths out of target
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)  # a pinned artifact from Maven Central
    return target / tops.pop()


def _site(conf: Path, workdir: Path) -> None:
    settings = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={workdir / 'metastore_db'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "metastore.warehouse.dir": (workdir / "warehouse").as_uri(),
        "metastore.thrift.bind.host": LOOPBACK,
        # The standalone server's defaults name classes of Hive's query engine, which it lacks.
        "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
        "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
    }
    body = "".join(
        f"<property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in settings.items()
    )
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "metastore-site.xml").write_text(f"<configuration>\n{body}</configuration>\n")


@contextmanager
def run_metastore(workdir: Path) -> Iterator[MetastoreServer]:
    files = require_jars(role_jar_paths(ROLE))
    archives = [p for p in files if p.name.endswith(".tar.gz")]
    if len(archives) != 1:
        raise RuntimeError(f"conf/jars.txt lists {len(archives)} metastore distributions under role {ROLE}")
    workdir.mkdir(parents=True, exist_ok=True)
    home = _unpack(archives[0], workdir / "dist")
    conf = workdir / "conf"
    _site(conf, workdir)
    # The distribution's own jars first (as Hive's scripts order them), then the Hadoop client's.
    classpath = ":".join(
        [
            str(conf),
            *sorted(str(p) for p in (home / "lib").glob("*.jar")),
            *(str(p) for p in files if p.suffix == ".jar"),
        ]
    )
    schema_log = workdir / "schema-tool.log"
    with schema_log.open("wb") as out:
        done = subprocess.run(
            [
                "java",
                *JVM_FLAGS,
                _DERBY_FAST,
                "-cp",
                classpath,
                SCHEMA_TOOL_CLASS,
                "-initSchema",
                "-dbType",
                "derby",
            ],
            cwd=home,  # it finds scripts/metastore/upgrade/derby from the metastore's home
            env={**os.environ, "METASTORE_HOME": str(home)},
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=START_TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the metastore's schema tool failed ({done.returncode}):\n{log_tail(schema_log)}")
    port = free_loopback_port()
    log = workdir / "metastore.log"
    proc = start_java([_DERBY_FAST, "-cp", classpath, SERVER_CLASS, "-p", str(port)], log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_open(port):
            if proc.poll() is not None:
                raise RuntimeError(f"the metastore exited with {proc.returncode}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the metastore is not serving after {START_TIMEOUT_S:.0f} s:\n{log_tail(log)}"
                )
            time.sleep(0.2)
        yield MetastoreServer(f"thrift://{LOOPBACK}:{port}", workdir / "warehouse", log)
    finally:
        stop_process(proc)
