"""Every job killed at every phase boundary, on v2 and v3 tables and a converted Delta table.

Most kills happen in this process: the job's kill point (``faults.crash_at``) raises
``SimulatedCrash``, which no error handling of the job catches; the files and catalog pointers
are put back as they were at the kill point (so clean-ups the unwinding ran count for nothing, as
under SIGKILL) and the process forgets what it had loaded (``tests.support.kill.crash``). One
case per kind of boundary is a real SIGKILL of a ``python -m tablekeeper`` process group (its
Spark JVM too): the pointer swap on each catalog type, a driver's delete half done, and an
executor task killing its job mid-delete. Then, either way, through Iceberg Spark:

- the table reads the rows it held before (every job here keeps them) or, for a conversion, the
  source's rows or no table at all; every file its metadata references exists;
- the same job run again succeeds and ends where an uninterrupted run ends (the twin);
- after it, remove-orphans leaves nothing on disk that the metadata does not reference, and no
  journal remains.

Phases a job reaches in its own code (plan, stage, journal, delete) run for every table kind; the
commit phases go through one commit path, so each job meets each of them on one table kind, and
each table kind meets each of them through some job.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.jobs.backfill_row_lineage import BackfillRowLineageOptions, run_backfill
from tablekeeper.jobs.compact import CompactOptions, run_compact
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.jobs.rewrite_equality_deletes import (
    RewriteEqualityDeletesOptions,
    run_rewrite_equality_deletes,
)
from tests.conftest import FS_CATALOG, SQL_CATALOG
from tests.support.java_deletes import commit_equality_deletes
from tests.support.kill import (
    Storage,
    age,
    crash,
    files_under,
    journal_files,
    killed,
    missing,
    referenced_files,
    run_job,
)

pytestmark = pytest.mark.spark

DAY = 86_400


# -----------------------------------------------------------------------------------------------
# Saved tables, restored before every case


@dataclass(frozen=True)
class Saved:
    """A table (and its Delta source, for converted ones) saved to be restored before each case."""

    catalog: str
    ident: str  # db.<name>
    root: Path
    backup: Path
    pointer: str | None = None  # the sql catalog's metadata location at save time
    source: Path | None = None
    source_backup: Path | None = None

    @property
    def spark_name(self) -> str:
        return f"{self.catalog}.{self.ident}"


def _save(root: Path, to: Path) -> None:
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(root, to)


def _restore(spark: Any, saved: Saved, warehouse: Path) -> None:
    shutil.rmtree(saved.root, ignore_errors=True)
    shutil.copytree(saved.backup, saved.root)
    if saved.source is not None and saved.source_backup is not None:
        shutil.rmtree(saved.source, ignore_errors=True)
        shutil.copytree(saved.source_backup, saved.source)
    if saved.pointer is not None:
        ns, name = saved.ident.split(".")
        with sqlite3.connect(warehouse / "catalog.db") as conn:
            conn.execute(
                "UPDATE iceberg_tables SET metadata_location = ? WHERE catalog_name = ? "
                "AND table_namespace = ? AND table_name = ?",
                (saved.pointer, SQL_CATALOG, ns, name),
            )
    spark.sql(f"REFRESH TABLE {saved.spark_name}")


def _iceberg_table(
    spark: Any, warehouse: Path, catalogs: Any, catalog: str, name: str, version: int
) -> Saved:
    """Built by Iceberg Spark: small files in two partitions, merge-on-read deletes (position
    deletes on v2, DVs on v3), an update, an equality delete by Iceberg Java, history to expire,
    and two planted orphans."""
    table = f"{catalog}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read')"
    )
    for i in range(4):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'a', {i}.5), ({i + 10}, 'b', 1.0)")
    spark.sql(f"DELETE FROM {table} WHERE id = 1")
    spark.sql(f"UPDATE {table} SET v = 9.0 WHERE id = 12")
    for i in range(3):
        spark.sql(f"INSERT INTO {table} VALUES ({i + 20}, 'a', 2.0), ({i + 30}, 'b', 3.0)")
    commit_equality_deletes(spark, table, ["v"], [[2.5], [7.0]], partition=["a"])
    location = catalog_for(catalogs.get(catalog)).require(f"db.{name}").metadata.location
    root = Path(location.removeprefix("file:"))
    age(root, 5)
    for orphan in (
        root / "data" / "cat=a" / "lost-task-0001.parquet",
        root / "metadata" / "snap-crash-1.avro",
    ):
        orphan.write_bytes(b"left by a crashed writer")
    age(root, 5)
    pointer = None
    if catalog == SQL_CATALOG:
        with sqlite3.connect(warehouse / "catalog.db") as conn:
            pointer = conn.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_name = ?",
                (SQL_CATALOG, name),
            ).fetchone()[0]
    saved = Saved(catalog, f"db.{name}", root, warehouse / "kill-saved" / name, pointer)
    _save(root, saved.backup)
    return saved


def _delta_commits(spark: Any, source: Path, first: int, count: int, delete: str | None) -> None:
    rows = spark.range(first, first + count).selectExpr(
        "id", "CAST(id % 3 AS STRING) AS cat", "CAST(id * 1.5 AS DOUBLE) AS v"
    )
    rows.write.format("delta").mode("append").save(str(source))
    if delete:
        spark.sql(f"DELETE FROM delta.`{source}` WHERE {delete}")


def _converted(spark: Any, warehouse: Path, catalogs: Any, tmp: Path) -> Saved:
    """delta-spark writes (deletion vectors on); convert-delta makes it an Iceberg table; the
    source then moves on by two versions, so an incremental run has work."""
    source = tmp / "kill_delta_source"
    shutil.rmtree(source, ignore_errors=True)
    spark.sql(
        f"CREATE TABLE delta.`{source}` (id BIGINT, cat STRING, v DOUBLE) USING delta PARTITIONED BY (cat) "
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true')"
    )
    _delta_commits(spark, source, 0, 30, None)
    _delta_commits(spark, source, 30, 30, "id % 7 = 0")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    run_convert(ConvertDeltaOptions(source=str(source), target="db.kill_delta", history="all"), catalog)
    _delta_commits(spark, source, 60, 20, "id % 11 = 0")
    root = warehouse / "files" / "db" / "kill_delta"
    age(root, 5)
    (root / "metadata" / "snap-crash-2.avro").write_bytes(b"left by a crashed writer")
    age(root, 5)
    saved = Saved(
        FS_CATALOG,
        "db.kill_delta",
        root,
        warehouse / "kill-saved" / "kill_delta",
        source=source,
        source_backup=warehouse / "kill-saved" / "kill_delta_source",
    )
    _save(root, saved.backup)
    _save(source, saved.source_backup)  # type: ignore[arg-type]
    return saved


@pytest.fixture(scope="module")
def tables(spark, catalogs, warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Saved]:  # type: ignore[no-untyped-def]
    return {
        "v2": _iceberg_table(spark, warehouse, catalogs, FS_CATALOG, "kill_v2", 2),
        "v3": _iceberg_table(spark, warehouse, catalogs, FS_CATALOG, "kill_v3", 3),
        "sql-v2": _iceberg_table(spark, warehouse, catalogs, SQL_CATALOG, "kill_sql_v2", 2),
        "delta": _converted(spark, warehouse, catalogs, tmp_path_factory.mktemp("kill")),
    }


@pytest.fixture(scope="module")
def conf_file(warehouse: Path) -> Path:
    path = warehouse / "kill-catalogs.yaml"
    path.write_text(
        f"default: {SQL_CATALOG}\n"
        "catalogs:\n"
        f"  {SQL_CATALOG}:\n    type: sql\n    uri: sqlite:///{warehouse}/catalog.db\n"
        f"    warehouse: {warehouse}/sql\n"
        f"  {FS_CATALOG}:\n    type: filesystem\n    warehouse: {warehouse}/files\n"
    )
    return path


# -----------------------------------------------------------------------------------------------
# Jobs: the command line, the same run in-process, and what must converge


@dataclass(frozen=True)
class Job:
    name: str
    args: Callable[[Saved], list[str]]
    run: Callable[[Saved, Any, Any, str], Any]  # (saved, catalog, spark, engine) -> JobResult
    phases: tuple[str, ...]
    gc_on: bool = False  # cut the converted table over first (its files become its own)
    engine: str = "auto"  # what the killed run uses (its command line's --engine)

    def rerun(self, saved: Saved, catalog: Any, spark: Any) -> Any:
        return self.run(saved, catalog, spark, "auto")


def _expire_args(s: Saved, engine: str = "driver") -> list[str]:
    return ["expire-snapshots", "--older-than", "0s", "--retain-last", "2", "--engine", engine]


JOBS: dict[str, Job] = {
    "expire": Job(
        "expire-snapshots",
        _expire_args,
        lambda s, c, spark, engine: run_expire(
            ExpireSnapshotsOptions(table=s.ident, older_than="0s", retain_last=2, engine=engine),
            c,
            s.ident,
            spark,
        ),
        (
            "plan.done",
            "journal.written",
            "commit.manifests-written",
            "commit.metadata-written",
            "commit.swapped",
            "delete.mid",
        ),
        gc_on=True,
        engine="driver",
    ),
    "orphans": Job(
        "remove-orphans",
        lambda s: ["remove-orphans", "--engine", "driver"],
        lambda s, c, spark, engine: run_orphans(
            RemoveOrphansOptions(table=s.ident, engine=engine), c, s.ident, spark
        ),
        ("plan.done", "journal.written", "delete.mid"),
        engine="driver",
    ),
    "compact": Job(
        "compact",
        lambda s: ["compact", "--min-input-files", "2"],
        lambda s, c, spark, engine: run_compact(
            CompactOptions(table=s.ident, min_input_files=2), c, s.ident, spark
        ),
        (
            "plan.done",
            "stage.written",
            "commit.manifests-written",
            "commit.metadata-written",
            "commit.swapped",
        ),
    ),
    "eqdel": Job(
        "rewrite-equality-deletes",
        lambda s: ["rewrite-equality-deletes"],
        lambda s, c, spark, engine: run_rewrite_equality_deletes(
            RewriteEqualityDeletesOptions(table=s.ident), c, s.ident, spark
        ),
        (
            "plan.done",
            "stage.written",
            "commit.manifests-written",
            "commit.metadata-written",
            "commit.swapped",
        ),
    ),
    "backfill": Job(
        "backfill-row-lineage",
        lambda s: ["backfill-row-lineage"],
        lambda s, c, spark, engine: run_backfill(BackfillRowLineageOptions(table=s.ident), c, s.ident),
        ("plan.done", "commit.manifests-written", "commit.metadata-written", "commit.swapped"),
    ),
}

COMMIT_PHASES = ("commit.manifests-written", "commit.metadata-written", "commit.swapped")
# The commit phases: each job meets each on one table kind, each table kind meets each through
# some job (v3 tables need no backfill, so compact meets the swap on v3 as well).
COMMIT_KINDS: dict[str, dict[str, tuple[str, ...]]] = {
    "expire": {
        "commit.manifests-written": ("v2",),
        "commit.metadata-written": ("v3",),
        "commit.swapped": ("delta",),
    },
    "compact": {
        "commit.manifests-written": ("v3",),
        "commit.metadata-written": ("delta",),
        "commit.swapped": ("v2", "v3"),
    },
    "eqdel": {
        "commit.manifests-written": ("v2",),
        "commit.metadata-written": ("v3",),
        "commit.swapped": ("v2", "v3"),
    },
    "backfill": {
        "commit.manifests-written": ("delta",),
        "commit.metadata-written": ("v2",),
        "commit.swapped": ("v2",),
    },
}
# (job, table): the job's own phases on every table kind it applies to (v3 tables need no backfill;
# the converted Delta table has no equality deletes to resolve).
MATRIX = [
    (job, kind, phase)
    for job in ("expire", "orphans", "compact", "eqdel", "backfill")
    for kind in ("v2", "v3", "delta")
    if not (job == "backfill" and kind == "v3") and not (job == "eqdel" and kind == "delta")
    for phase in JOBS[job].phases
    if phase not in COMMIT_PHASES or kind in COMMIT_KINDS[job][phase]
]


def _rows(spark: Any, table: str, columns: str = "*") -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(tuple(r) for r in spark.sql(f"SELECT {columns} FROM {table}").collect())


def _state(spark: Any, saved: Saved, job: str) -> dict[str, Any]:
    """What an uninterrupted run and a killed run plus its rerun must agree on."""
    table = saved.spark_name
    spark.sql(f"REFRESH TABLE {table}")
    snapshots = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()
    state: dict[str, Any] = {"rows": _rows(spark, table), "snapshots": len(snapshots)}
    live = spark.sql(f"SELECT content, count(*) FROM {table}.files GROUP BY content").collect()
    state["live_files"] = sorted(tuple(r) for r in live)
    if job in ("expire", "orphans"):
        # Nothing these write but metadata files has a random name: the other files left must be
        # the very same (stray metadata files are what the clean-up check looks for).
        state["files"] = sorted(
            f.replace(str(saved.root), "")
            for f in files_under(saved.root)
            if not f.endswith(".metadata.json")
        )
        state["snapshot_ids"] = sorted(r[0] for r in snapshots)
    if job == "backfill":
        state["lineage"] = _rows(spark, table, "id, _row_id, _last_updated_sequence_number")
    return state


def _cut_over(catalog: Any, saved: Saved) -> None:
    from tablekeeper.commit import Committer
    from tablekeeper.iceberg.updates import set_properties

    Committer(catalog, saved.ident).update_metadata(
        lambda m, ts: set_properties(m, {"gc.enabled": "true"}, timestamp_ms=ts)
    )


def _prepare(spark: Any, saved: Saved, warehouse: Path, catalogs: Any, job: Job) -> Any:
    _restore(spark, saved, warehouse)
    catalog = catalog_for(catalogs.get(saved.catalog))
    if job.gc_on and saved.source is not None:
        _cut_over(catalog, saved)
        spark.sql(f"REFRESH TABLE {saved.spark_name}")
    return catalog


def _assert_clean(spark: Any, saved: Saved, catalog: Any) -> None:
    """After one more remove-orphans, everything on disk is referenced and no journal is left."""
    run_orphans(
        RemoveOrphansOptions(table=saved.ident, older_than="0s", force_short_retention=True),
        catalog,
        saved.ident,
        spark,
    )
    spark.sql(f"REFRESH TABLE {saved.spark_name}")
    referenced = referenced_files(spark, saved.spark_name)
    on_disk = files_under(saved.root)
    assert not journal_files(saved.root), "a journal was left"
    hint = str(saved.root / "metadata" / "version-hint.text")
    extra = sorted(on_disk - referenced - {hint})
    if saved.source is not None and not _gc_enabled(spark, saved):
        extra = [f for f in extra if "/metadata/" in f]  # data files are the source's to judge
    assert extra == [], f"files nothing references: {extra[:5]}"


def _gc_enabled(spark: Any, saved: Saved) -> bool:
    props = dict(spark.sql(f"SHOW TBLPROPERTIES {saved.spark_name}").collect())
    return props.get("gc.enabled", "true") == "true"


@pytest.fixture(scope="module")
def twins(spark, catalogs, warehouse: Path, tables: dict[str, Saved]) -> Callable[[str, str], Any]:  # type: ignore[no-untyped-def]
    """Each job's uninterrupted run on each table (its end state), computed once."""
    cache: dict[tuple[str, str], Any] = {}

    def get(job: str, kind: str) -> Any:
        if (job, kind) not in cache:
            saved = tables[kind]
            catalog = _prepare(spark, saved, warehouse, catalogs, JOBS[job])
            JOBS[job].rerun(saved, catalog, spark)
            cache[(job, kind)] = _state(spark, saved, job)
        return cache[(job, kind)]

    return get


def _newest_version(root: Path) -> int:
    return max(int(p.name[1:].split(".")[0]) for p in (root / "metadata").glob("v*.metadata.json"))


def _storage(saved: Saved, warehouse: Path) -> Storage:
    """What an in-process crash must leave as a kill would: the table's files, and the sql
    catalog's pointers when the table is in it."""
    return Storage([saved.root], warehouse / "catalog.db" if saved.catalog == SQL_CATALOG else None)


def _kill_and_recover(  # type: ignore[no-untyped-def]
    spark,
    catalogs,
    warehouse: Path,
    saved: Saved,
    conf_file: Path,
    twin: Any,
    job: str,
    phase: str,
    args: list[str] | None = None,
    engine: str | None = None,
) -> None:
    """Kill ``job`` at ``phase``: as a process run with ``args`` when given, else in this process
    (with ``engine``, by default the job's); then recover and compare with the twin."""
    spec = JOBS[job]
    catalog = _prepare(spark, saved, warehouse, catalogs, spec)
    rows_before = _rows(spark, saved.spark_name)
    if args is not None:
        args = [*args, "--table", saved.ident, "--catalog", saved.catalog, "--conf-file", str(conf_file)]
        proc = run_job(args, phase)
        assert killed(proc), (
            f"{phase} was never reached: {proc.returncode} {proc.stdout[-500:]} {proc.stderr[-1500:]}"
        )
    else:
        crash(
            spark,
            lambda: spec.run(saved, catalog, spark, engine or spec.engine),
            phase,
            _storage(saved, warehouse),
        )
        catalog = catalog_for(catalogs.get(saved.catalog))  # the next process's
    # The table reads what it held, and nothing its metadata names is gone.
    assert _rows(spark, saved.spark_name) == rows_before
    assert missing(referenced_files(spark, saved.spark_name)) == []
    hint = saved.root / "metadata" / "version-hint.text"
    if phase == "commit.swapped" and saved.catalog == FS_CATALOG:
        assert int(hint.read_text()) == _newest_version(saved.root) - 1, (
            "the hint was written before the kill"
        )
    # The same job again succeeds and ends where an uninterrupted run ends.
    result = spec.rerun(saved, catalog, spark)
    assert result.status == "ok"
    if saved.catalog == FS_CATALOG:  # loading the table repaired any hint the kill left behind
        assert int(hint.read_text()) == _newest_version(saved.root)
    if job == "expire" and phase in ("commit.swapped", "delete.mid"):
        resumed = result.metrics["resumed_journal"]
        assert resumed is not None and resumed["deleted_files_count"] > 0, result.metrics
    assert _state(spark, saved, job) == twin
    _assert_clean(spark, saved, catalog)


@pytest.mark.parametrize(("job", "kind", "phase"), MATRIX, ids=["-".join(m) for m in MATRIX])
def test_crash_matrix(
    spark, catalogs, warehouse: Path, tables, conf_file: Path, twins, job: str, kind: str, phase: str
) -> None:  # type: ignore[no-untyped-def]
    saved = tables[kind]
    _kill_and_recover(spark, catalogs, warehouse, saved, conf_file, twins(job, kind), job, phase)


# The same crashes with the executors doing the work (reads, journal parts), and on the sql
# catalog, where writing the metadata file and swapping the pointer are two steps.
EXTRA = [
    ("expire", "v2", "journal.written", "spark"),
    ("expire", "sql-v2", "commit.metadata-written", "auto"),
    ("expire", "sql-v2", "delete.mid", "auto"),
    ("compact", "sql-v2", "commit.metadata-written", "auto"),
]


@pytest.mark.parametrize(("job", "kind", "phase", "engine"), EXTRA, ids=["-".join(e) for e in EXTRA])
def test_crash_on_spark_and_sql(
    spark,
    catalogs,
    warehouse: Path,
    tables,
    conf_file: Path,
    twins,
    job: str,
    kind: str,
    phase: str,
    engine: str,
) -> None:  # type: ignore[no-untyped-def]
    saved = tables[kind]
    twin = twins(job, kind)
    _kill_and_recover(spark, catalogs, warehouse, saved, conf_file, twin, job, phase, engine=engine)


# Real SIGKILLs of the job's process group, one per kind of boundary: the pointer swap on each
# catalog type (filesystem: the version hint is not yet rewritten; sql: the row is), a delete half
# done on the driver, and an executor task killing its job mid-delete (the in-process hook cannot
# reach a task: it runs in another process).
KILLS = [
    ("expire", "v2", "commit.swapped", ["--engine", "driver"]),
    ("expire", "sql-v2", "commit.swapped", []),
    ("expire", "v2", "delete.mid", ["--engine", "driver"]),
    ("expire", "v2", "delete.mid", ["--engine", "spark"]),
]


@pytest.mark.parametrize(
    ("job", "kind", "phase", "engine"),
    KILLS,
    ids=[f"{j}-{k}-{p}-{''.join(e)[2:] or 'auto'}" for j, k, p, e in KILLS],
)
def test_kill_process(
    spark,
    catalogs,
    warehouse: Path,
    tables,
    conf_file: Path,
    twins,
    job: str,
    kind: str,
    phase: str,
    engine: list[str],
) -> None:  # type: ignore[no-untyped-def]
    saved = tables[kind]
    twin = twins(job, kind)
    args = [a for a in JOBS[job].args(saved) if a not in ("--engine", "driver")] + engine
    _kill_and_recover(spark, catalogs, warehouse, saved, conf_file, twin, job, phase, args)


# -----------------------------------------------------------------------------------------------
# convert-delta: full conversions (with history) become visible only when complete


CONVERT_PHASES = (
    "plan.done",
    "commit.manifests-written",
    "stage.written",
    "commit.metadata-written",
    "commit.swapped",
)
# v3 differs from v2 in what the conversion writes (row lineage), not in how it commits: its
# commit phases are v2's.
CONVERSIONS = [
    *(("full", FS_CATALOG, 2, p) for p in CONVERT_PHASES),
    *(("full", FS_CATALOG, 3, p) for p in CONVERT_PHASES if p not in COMMIT_PHASES),
    *(("full", SQL_CATALOG, 2, p) for p in ("stage.written", "commit.metadata-written", "commit.swapped")),
    *(("incremental", FS_CATALOG, 2, p) for p in CONVERT_PHASES),
]


def _conversion_state(spark: Any, table: str) -> dict[str, Any]:
    spark.sql(f"REFRESH TABLE {table}")
    versions = spark.sql(
        f"SELECT summary['tablekeeper.delta-version'] FROM {table}.snapshots ORDER BY committed_at"
    ).collect()
    return {"rows": _rows(spark, table), "versions": [r[0] for r in versions]}


@pytest.fixture(scope="module")
def conversion_twins(spark, catalogs, warehouse: Path, tables) -> Callable[[str, str, int], Any]:  # type: ignore[no-untyped-def]
    cache: dict[tuple[str, str, int], Any] = {}

    def get(mode: str, catalog_name: str, fv: int) -> Any:
        key = (mode, catalog_name, fv)
        if key not in cache:
            saved = tables["delta"]
            _restore(spark, saved, warehouse)
            target = saved.ident if mode == "incremental" else f"db.kc_twin_{catalog_name}_{fv}"
            options = ConvertDeltaOptions(
                source=str(saved.source), target=target, mode=mode, history="all", format_version=fv
            )
            assert run_convert(options, catalog_for(catalogs.get(catalog_name))).status == "ok"
            cache[key] = _conversion_state(spark, f"{catalog_name}.{target}")
        return cache[key]

    return get


@pytest.mark.parametrize(
    ("mode", "catalog_name", "fv", "phase"),
    CONVERSIONS,
    ids=[f"{m}-{c}-v{f}-{p}" for m, c, f, p in CONVERSIONS],
)
def test_conversion_crash_matrix(
    spark,
    catalogs,
    warehouse: Path,
    tables,
    conf_file: Path,
    conversion_twins,
    mode: str,
    catalog_name: str,
    fv: int,
    phase: str,
) -> None:  # type: ignore[no-untyped-def]
    saved = tables["delta"]
    twin = conversion_twins(mode, catalog_name, fv)
    _restore(spark, saved, warehouse)
    catalog = catalog_for(catalogs.get(catalog_name))
    full = mode == "full"
    target = f"db.kc_{catalog_name}_{fv}_{phase.replace('.', '_').replace('-', '_')}" if full else saved.ident
    table = f"{catalog_name}.{target}"
    before = _conversion_state(spark, table) if not full else None
    options = ConvertDeltaOptions(
        source=str(saved.source), target=target, mode=mode, history="all", format_version=fv
    )
    root = saved.root if not full else Path(catalog.default_table_location(target).removeprefix("file:"))
    storage = Storage([root], warehouse / "catalog.db" if catalog_name == SQL_CATALOG else None)
    crash(spark, lambda: run_convert(options, catalog), phase, storage)
    catalog = catalog_for(catalogs.get(catalog_name))  # the next process's
    visible = catalog.table_exists(target)
    if full:
        # No partial target: nothing before the create, everything after it.
        assert visible == (phase == "commit.swapped"), phase
    if visible:
        assert _conversion_state(spark, table) in (before, twin)
        assert missing(referenced_files(spark, table)) == []
    # The same command again: it converts, or finds the conversion already complete.
    result = run_convert(options, catalog)
    assert result.status == "ok", result
    assert _conversion_state(spark, table) == twin
    root = Path(catalog.require(target).metadata.location.removeprefix("file:"))
    assert not journal_files(root), "the staging journal was left"
    _assert_clean(spark, Saved(catalog_name, target, root, root), catalog)
