"""A class-data-sharing archive of the classes a local Spark session loads, kept beside the jars.

A local session spends most of its start-up loading and verifying tens of thousands of classes
(Spark, Delta, Iceberg, Parquet); a JVM started with a dynamic CDS archive of them maps them in
instead: a small job on two cores goes from about 9.5 s to 5.5 s. ``make setup`` builds the archive
once per Spark line and Java (``make classes``); local sessions use it
when it is there. An archive the JVM cannot use (another Java, a reinstalled Spark) is skipped by
the JVM itself, silently, and the session starts as it would without one. Sessions on a cluster
(spark-submit) are never touched: their JVMs are the cluster's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tablekeeper.settings import jars_dir

JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
ARCHIVE_DIR = "classes"
# Without these, a JVM that cannot use the archive says so on stdout (a job's output).
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.is_file():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def archive_path(directory: Path | None = None) -> Path | None:
    """Where this Spark line's archive for this Java lives (None: no Java found). Its name changes
    with the Java binary and the pyspark version, so a stale archive is never picked."""
    import pyspark

    java = _java()
    if java is None:
        return None
    stat = java.stat()
    key = f"{pyspark.__version__}|{java}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (directory or jars_dir()) / ARCHIVE_DIR / f"spark-{pyspark.__version__}-{digest}.jsa"


def java_options(existing: str = "") -> str:
    """``existing`` JVM options plus the archive's, when one was built and the options name no
    archive of their own."""
    if "SharedArchiveFile" in existing or "ArchiveClassesAtExit" in existing or "Xshare" in existing:
        return existing
    path = archive_path()
    if path is None or not path.is_file():
        return existing
    return f"{existing} -XX:SharedArchiveFile={path} {QUIET}".strip()


# What the archive is trained on: a session doing what the jobs do (Iceberg v2 and v3 tables with
# deletes, their metadata tables and procedures, Delta tables with deletion vectors, Arrow batches
# through Python), so the classes they load are in it.
_TRAINING = """
import sys
from pathlib import Path
from tablekeeper.spark.session import get_spark

out, root = sys.argv[1], Path(sys.argv[2])
spark = get_spark(conf={"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={out}"})
for version in (2, 3):
    t = f"local.train.t{version}"
    spark.sql(f"CREATE TABLE {t} (id BIGINT, s STRING, d DATE) USING iceberg PARTITIONED BY (d) "
              f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read')")
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a', DATE '2026-01-01'), (2, 'b', DATE '2026-01-02')")
    spark.sql(f"INSERT INTO {t} VALUES (3, 'c', DATE '2026-01-01')")
    spark.sql(f"DELETE FROM {t} WHERE id = 1")
    spark.sql(f"SELECT * FROM {t} ORDER BY id").collect()
    for meta in ("files", "snapshots", "manifests", "all_files", "entries", "partitions"):
        spark.sql(f"SELECT * FROM {t}.{meta}").collect()
    spark.sql(f"CALL local.system.rewrite_data_files(table => '{t[6:]}')").collect()
    spark.sql(f"CALL local.system.expire_snapshots(table => '{t[6:]}', retain_last => 1)").collect()
delta = root / "delta"
spark.sql(f"CREATE TABLE delta.`{delta}` (id BIGINT, s STRING) USING delta "
          "TBLPROPERTIES ('delta.enableDeletionVectors'='true')")
spark.sql(f"INSERT INTO delta.`{delta}` VALUES (1, 'a'), (2, 'b'), (3, 'c')")
spark.sql(f"DELETE FROM delta.`{delta}` WHERE id = 2")
spark.sql(f"SELECT * FROM delta.`{delta}`").collect()
spark.sql(f"DESCRIBE HISTORY delta.`{delta}`").collect()
spark.sql(f"OPTIMIZE delta.`{delta}`").collect()
frame = spark.read.format("delta").load(str(delta))
frame.mapInArrow(lambda batches: batches, frame.schema).collect()
spark.read.parquet(str(next(delta.glob("*.parquet")))).collect()
# The JVM writes the archive as it exits, after this interpreter would: stop it and wait for it.
from pyspark import SparkContext
gateway = SparkContext._gateway
spark.stop()
gateway.shutdown()
gateway.proc.stdin.close()
gateway.proc.wait(timeout=300)
"""


def build(directory: Path | None = None) -> Path | None:
    """Build the archive unless it exists; drop the directory's other (stale) archives. Returns
    its path, or None where no Java was found."""
    path = archive_path(directory)
    if path is None:
        return None
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob("*.jsa"):
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="tablekeeper-classes-") as scratch:
        partial = Path(scratch) / path.name
        env = {**os.environ, "TABLEKEEPER_WAREHOUSE": str(Path(scratch) / "warehouse")}
        subprocess.run(
            [sys.executable, "-c", _TRAINING, str(partial), scratch],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=600,
        )
        if not partial.is_file():
            raise RuntimeError(f"the JVM wrote no class archive to {partial}")
        # Renamed into place whole: a session starting meanwhile sees no archive, never half of one.
        staged = path.with_suffix(".partial")
        shutil.move(partial, staged)
        staged.replace(path)
    return path


def main() -> None:
    """``make classes``: build this line's archive."""
    built = build()
    print(f"class archive: {built}" if built else "class archive: no Java found, none built")
