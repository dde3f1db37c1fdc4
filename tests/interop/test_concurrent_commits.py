"""Concurrent writers never lose or duplicate a commit.

sql catalog: 4 tablekeeper processes x 10 appends while Iceberg Spark (JDBC catalog on the same
sqlite file) appends too. file-system catalog: 4 tablekeeper processes x 10 appends (Iceberg Java's
own file-system commit is not safe across processes, so Spark does not join there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.iceberg.types import LONG, STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.tables.iceberg import live_files, load_manifests
from tests.conftest import FS_CATALOG, REPO_ROOT, SQL_CATALOG

pytestmark = pytest.mark.spark

WORKERS = 4
APPENDS = 10
SCHEMA = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "writer", STRING)))
# Many writers on one table: give each commit room to retry.
RETRY_PROPS = {
    "commit.retry.num-retries": "50",
    "commit.retry.min-wait-ms": "20",
    "commit.retry.max-wait-ms": "500",
}


def catalog_file(tmp_path: Path, catalogs) -> Path:  # type: ignore[no-untyped-def]
    lines = ["catalogs:"]
    for conf in catalogs.catalogs.values():
        lines.append(f"  {conf.name}:")
        lines.append(f"    type: {conf.type}")
        lines.append(f"    warehouse: {conf.warehouse}")
        if conf.uri:
            lines.append(f"    uri: {conf.uri}")
    path = tmp_path / "catalogs.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start_workers(
    conf: Path, catalog_name: str, table: str, workers: int = WORKERS, appends: int = APPENDS
) -> list[subprocess.Popen[str]]:
    # The repository first; what the runner's path holds after it (a checkout's lib) stays.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))),
    }
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.append_worker",
                str(conf),
                catalog_name,
                table,
                str(w),
                str(appends),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]


def collect(procs: list[subprocess.Popen[str]]) -> list[str]:
    files: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        files.extend(json.loads(out.strip().splitlines()[-1])["files"])
    return files


@pytest.mark.parametrize("catalog_name", [SQL_CATALOG, FS_CATALOG])
def test_concurrent_appends_all_land_once(spark, catalogs, tmp_path: Path, catalog_name: str) -> None:  # type: ignore[no-untyped-def]
    catalog = catalog_for(catalogs.get(catalog_name))
    ident = "concurrency.appends"
    meta = new_table_metadata(
        schema=SCHEMA,
        location=catalog.default_table_location(ident),
        timestamp_ms=int(time.time() * 1000),
        properties=RETRY_PROPS,
        format_version=2,
    )
    catalog.create_table(ident, meta)
    procs = start_workers(catalog_file(tmp_path, catalogs), catalog_name, ident)

    spark_ids: list[int] = []
    errors: list[BaseException] = []

    def spark_appends() -> None:
        try:
            for i in range(5):
                spark.sql(f"INSERT INTO {catalog_name}.{ident} VALUES ({90_000 + i}, 'spark')")
                spark_ids.append(90_000 + i)
        except BaseException as err:  # surfaced below with the test's assertion
            errors.append(err)

    thread = threading.Thread(target=spark_appends) if catalog_name == SQL_CATALOG else None
    if thread:
        thread.start()
    tk_files = collect(procs)
    if thread:
        thread.join(timeout=600)
    assert not errors, errors

    loaded = catalog.load_table(ident)
    final = loaded.metadata
    main_history = final.ancestors(final.current_snapshot_id)
    appends = [s for s in main_history if s.operation == "append"]
    assert len(appends) == WORKERS * APPENDS + len(spark_ids)
    live = live_files(loaded.io, final, final.current_snapshot())
    paths = [e.data_file.file_path for e in live.data]
    assert len(paths) == len(set(paths)), "a data file is listed twice"
    assert set(tk_files) <= set(paths)
    assert len(paths) == len(tk_files) + len(spark_ids)
    manifests = [m.manifest_path for m in load_manifests(loaded.io, final.current_snapshot())]
    assert len(manifests) == len(set(manifests)), "a manifest is listed twice"
    # Iceberg Spark agrees on the rows.
    spark.sql(f"REFRESH TABLE {catalog_name}.{ident}")
    ids = sorted(r.id for r in spark.sql(f"SELECT id FROM {catalog_name}.{ident}").collect())
    expected = sorted([w * 1000 + i for w in range(WORKERS) for i in range(APPENDS)] + spark_ids)
    assert ids == expected
