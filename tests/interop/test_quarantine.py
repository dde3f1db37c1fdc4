"""--quarantine, restore and purge on a table Iceberg Spark wrote (the driver engine, the
filesystem catalog): what expire-snapshots and remove-orphans would delete is moved into the
table's quarantine, restore puts every file back byte for byte, purge deletes what is past its
time; Iceberg Spark reads the same rows throughout. Killed mid-move, mid-restore and mid-purge
(in this process, storage put back as the kill left it), the next run converges."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.base import Catalog
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.files.quarantine import QUARANTINE
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tablekeeper.jobs.purge import PurgeOptions, run_purge
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.jobs.restore import RestoreOptions, run_restore
from tests.conftest import FS_CATALOG
from tests.interop.test_remove_orphans import _table
from tests.support.kill import Storage, crash

pytestmark = pytest.mark.spark

DAY_MS = 86_400_000


def _digests(root: Path) -> dict[str, str]:
    """Every file of the table outside its quarantine and journals, by path: its SHA-256 (not
    the version hint, which each commit rewrites)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
        and "_tablekeeper" not in p.parts
        and not p.name.startswith(".")
        and p.name != "version-hint.text"
    }


def _rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(tuple(r) for r in spark.table(table).collect())


def _quarantined(root: Path, run: str) -> dict[str, str]:
    files = root / "metadata" / QUARANTINE / run / "files"
    return {
        str(p.relative_to(files)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files.rglob("*")
        if p.is_file()
    }


def _setup(
    spark: Any, catalogs: Any, warehouse: Path, name: str
) -> tuple[str, Path, set[Path], Catalog, str]:
    table, root, planted = _table(spark, warehouse, name)
    return table, root, planted, catalog_for(catalogs.get(FS_CATALOG)), f"db.{name}"


def _expire(catalog: Catalog, ident: str) -> dict[str, Any]:
    options = ExpireSnapshotsOptions(
        table=ident, retain_last=1, older_than=str(int(time.time() * 1000)), quarantine=True
    )
    return run_expire(options, catalog, ident, None).metrics


def _orphans(catalog: Catalog, ident: str) -> dict[str, Any]:
    cutoff = str(int(time.time() * 1000) - 2 * DAY_MS)
    return run_orphans(
        RemoveOrphansOptions(table=ident, older_than=cutoff, quarantine=True), catalog, ident
    ).metrics


def test_quarantined_files_come_back_byte_identical_and_purge_deletes_runs_past_their_time(
    spark, catalogs, warehouse: Path
) -> None:  # type: ignore[no-untyped-def]
    table, root, planted, catalog, ident = _setup(spark, catalogs, warehouse, "quarantined")
    rows = _rows(spark, table)
    before = _digests(root)

    expired = _expire(catalog, ident)
    assert expired["quarantined_files_count"] > 0 and expired["bytes_freed"] == 0, expired
    orphaned = _orphans(catalog, ident)
    assert orphaned["quarantined_files_count"] == len(planted) == orphaned["orphan_file_count"], orphaned
    assert orphaned["deleted_files_count"] == 0 and not any(p.exists() for p in planted)
    # Everything that left its path is in one of the two quarantines, bytes unchanged.
    gone = {p: d for p, d in before.items() if not (root / p).exists()}
    aside = _quarantined(root, expired["quarantine"]["run"]) | _quarantined(
        root, orphaned["quarantine"]["run"]
    )
    assert gone and gone == {p: aside[p] for p in gone}, set(gone) ^ set(aside)
    assert _rows(spark, table) == rows

    for run in (orphaned["quarantine"]["run"], expired["quarantine"]["run"]):
        dry = run_restore(RestoreOptions(ident, run, dry_run=True), catalog, ident)
        assert dry.metrics["files_to_restore"] > 0 and all(not Path(f).exists() for f in dry.files or ())
        done = run_restore(RestoreOptions(ident, run.rsplit("-", 1)[-1]), catalog, ident).metrics  # by run id
        assert done["restored_files_count"] == dry.metrics["files_to_restore"], done
    after = _digests(root)
    assert {p: after.get(p) for p in before} == before  # every file back at its path, byte for byte
    assert not (root / "metadata" / QUARANTINE).exists() or not any(
        (root / "metadata" / QUARANTINE).iterdir()
    )
    assert _rows(spark, table) == rows


def test_the_spark_engine_quarantines_in_its_tasks(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    """Executor tasks move the orphans, and restore puts them back byte for byte."""
    _, root, planted, catalog, ident = _setup(spark, catalogs, warehouse, "quarantine_spark")
    before = _digests(root)
    cutoff = str(int(time.time() * 1000) - 2 * DAY_MS)
    options = RemoveOrphansOptions(table=ident, older_than=cutoff, quarantine=True, engine="spark")
    metrics = run_orphans(options, catalog, ident, spark).metrics
    assert metrics["engine"] == "spark" and metrics["quarantined_files_count"] == len(planted), metrics
    assert not any(p.exists() for p in planted)
    run_restore(RestoreOptions(ident, metrics["quarantine"]["run"]), catalog, ident)
    assert _digests(root) == before


def test_a_catalogs_quarantine_setting_is_the_default(tmp_path: Path) -> None:
    conf = "catalogs:\n  lake:\n    type: filesystem\n    warehouse: /wh\n    quarantine: true\n  plain:\n"
    conf += "    type: filesystem\n    warehouse: /wh2\n"
    context = JobContext(parse_catalogs(conf, tmp_path), lambda: None, lambda: None)  # type: ignore[arg-type,return-value]
    assert context.quarantine(None, "db.t", "lake") and not context.quarantine(None, "db.t", "plain")
    assert not context.quarantine(False, "db.t", "lake") and context.quarantine(True, "db.t", "plain")
    assert not context.quarantine(None, str(tmp_path / "t"), "lake")  # a path has no catalog


def test_killed_while_moving_restoring_or_purging_the_next_run_converges(
    spark, catalogs, warehouse: Path
) -> None:  # type: ignore[no-untyped-def]
    table, root, planted, catalog, ident = _setup(spark, catalogs, warehouse, "quarantine_killed")
    rows = _rows(spark, table)
    before = _digests(root)
    storage = Storage([root])

    # Killed with one orphan moved: the next destructive run finishes the journal by moving.
    crash(spark, lambda: _orphans(catalog, ident), "delete.mid", storage)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    assert sum(p.exists() for p in planted) == len(planted) - 1
    again = _orphans(catalog, ident)
    (finished,) = again["resumed_journal"]["journals"]
    run = finished["quarantine"]
    assert not any(p.exists() for p in planted) and again["orphan_file_count"] == 0, again
    assert set(_quarantined(root, run)) == {str(p.relative_to(root)) for p in planted}

    # Killed with one file back: restore again puts back the rest.
    crash(
        spark, lambda: run_restore(RestoreOptions(ident, run), catalog, ident), "restore.mid", Storage([root])
    )
    assert sum(p.exists() for p in planted) == 1
    run_restore(RestoreOptions(ident, run), catalog, ident)
    assert _digests(root) == before and _rows(spark, table) == rows

    # Killed with one file purged: purge again deletes the rest, and the run.
    run = _orphans(catalog, ident)["quarantine"]["run"]
    crash(
        spark,
        lambda: run_purge(PurgeOptions(ident, older_than="0s"), catalog, ident),
        "purge.mid",
        Storage([root]),
    )
    assert (root / "metadata" / QUARANTINE / run / "run.json").exists()
    done = run_purge(PurgeOptions(ident, older_than="0s"), catalog, ident).metrics
    assert done["purged_runs_count"] == 1, done
    assert not (root / "metadata" / QUARANTINE / run).exists()
    assert not any(p.exists() for p in planted) and _rows(spark, table) == rows
