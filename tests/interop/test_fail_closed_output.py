"""Runs that fail closed on the executors say why in one line, with no traceback below DEBUG.

Spark logs a failed task's whole Python traceback (the executor in local mode, the task set
manager anywhere); the job reports the same failure as its one-line reason, so those logs stay
quiet unless ``--log-level DEBUG`` asks for everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FS_CATALOG
from tests.support.kill import result_json, run_job

pytestmark = pytest.mark.spark


def _table(spark: Any, warehouse: Path, name: str) -> Path:
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat)")
    for i in range(4):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'a'), ({i + 10}, 'b')")
    return warehouse / "files" / "db" / name


def _truncate_current_manifest(spark: Any, root: Path, name: str) -> None:
    path = Path(
        spark.sql(f"SELECT path FROM {FS_CATALOG}.db.{name}.manifests").collect()[0][0].removeprefix("file:")
    )
    path.write_bytes(path.read_bytes()[:100])


def _drop_current_list(spark: Any, root: Path, name: str) -> None:
    rows = spark.sql(f"SELECT manifest_list FROM {FS_CATALOG}.db.{name}.snapshots ORDER BY committed_at DESC")
    Path(rows.collect()[0][0].removeprefix("file:")).unlink()


def _drop_a_data_file(spark: Any, root: Path, name: str) -> None:
    Path(
        spark.sql(f"SELECT file_path FROM {FS_CATALOG}.db.{name}.files").collect()[0][0].removeprefix("file:")
    ).unlink()


CASES = [
    ("expire-snapshots", ["--older-than", "0s", "--engine", "spark"], _truncate_current_manifest, 3),
    ("expire-snapshots", ["--older-than", "0s", "--engine", "spark"], _drop_current_list, 3),
    ("remove-orphans", ["--engine", "spark"], _truncate_current_manifest, 3),
    # a referenced data file gone is metadata that lies: refused, as the other jobs refuse it
    ("compact", ["--min-input-files", "2"], _drop_a_data_file, 3),
]


@pytest.mark.parametrize(
    ("job", "args", "damage", "code"), CASES, ids=[f"{c[0]}-{c[2].__name__[1:]}" for c in CASES]
)
def test_one_line_and_no_traceback(
    spark, warehouse: Path, job: str, args: list[str], damage: Any, code: int
) -> None:  # type: ignore[no-untyped-def]
    name = f"quiet_{job.split('-', maxsplit=1)[0]}_{damage.__name__.strip('_')}"
    root = _table(spark, warehouse, name)
    damage(spark, root, name)
    conf = warehouse / "quiet-catalogs.yaml"
    conf.write_text(
        f"default: {FS_CATALOG}\ncatalogs:\n  {FS_CATALOG}:\n"
        f"    type: filesystem\n    warehouse: {warehouse}/files\n"
    )
    common = [job, "--table", f"db.{name}", "--conf-file", str(conf), *args]
    proc = run_job(common)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "PythonException" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tablekeeper: ") and result_json(proc)["error"] in last
    if job == "expire-snapshots" and damage is _truncate_current_manifest:
        # Asked for, the whole story is there (on the driver engine: the traceback is the CLI's
        # business, whichever engine raised; a second JVM would only cost time).
        driver = [a if a != "spark" else "driver" for a in common]
        debug = run_job(["--log-level", "DEBUG", *driver])
        assert debug.returncode == code and "Traceback" in debug.stderr


def test_a_truncated_delete_file_read_in_a_task_is_named_with_exit_3(spark, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    """A typed error raised in an executor task reaches the driver as itself: exit 3 and the file
    named in one line, where it was once exit 1 with Spark's cut-off task failure."""
    name = "quiet_rewrite_truncated_delete"
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) TBLPROPERTIES "
        "('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    spark.sql(f"INSERT INTO {table} SELECT id, 'a' FROM range(40)")
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 0")
    deletes = [r[0] for r in spark.sql(f"SELECT file_path FROM {table}.delete_files").collect()]
    assert deletes
    victim = Path(deletes[0].removeprefix("file:"))
    victim.write_bytes(victim.read_bytes()[:40])
    conf = warehouse / "quiet-catalogs.yaml"
    conf.write_text(
        f"default: {FS_CATALOG}\ncatalogs:\n  {FS_CATALOG}:\n"
        f"    type: filesystem\n    warehouse: {warehouse}/files\n"
    )
    proc = run_job(
        ["rewrite-position-deletes", "--table", f"db.{name}", "--conf-file", str(conf), "--rewrite-all"]
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Py4JJavaError" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tablekeeper: ") and victim.name in last, last
    assert result_json(proc)["error"] in last
