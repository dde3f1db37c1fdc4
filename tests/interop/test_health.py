"""health against tables Iceberg Spark and delta-spark wrote into one catalog directory, and the
jobs it recommends run right after it on the same tables.

One namespace of the file-system catalog holds every scenario (built once for the module):

- ``small``: sixteen small files in two partitions and one file alone in a third, a 32 KiB
  target (compact, each group written into several files), and an orphan file (remove-orphans);
- ``old``: snapshots past the table's own ``history.expire.max-snapshot-age-ms`` (expire-snapshots);
- ``manifests``: over a hundred tiny manifests (one per file), written by Iceberg's own
  rewrite_manifests with a 1-byte target (rewrite-manifests);
- ``deletes``: many small merge-on-read position delete files (rewrite-position-deletes);
- ``fresh``: a v3 table just compacted by tablekeeper (nothing to do);
- ``evolved``: small files of a partition field the table has since dropped: too few per old
  partition, one group of the current (unpartitioned) spec, as compact packs them (compact);
- ``delta_events``: a Delta table with small files and tombstones past a 1-second
  ``delta.deletedFileRetentionDuration`` (compact = OPTIMIZE, remove-orphans = VACUUM, and a
  checkpoint through its own ``tablekeeper.health.*`` threshold);
- ``delta_dv``: a Delta table whose DELETE added deletion vectors.

health runs over the catalog (as ``--catalog fs --namespace hl``, with and without
``--v3-readiness`` and ``--list-files``) and per table; the table directories must be
byte-identical afterwards. Each recommended job then runs, and what it did (files after, bytes
freed) must be within 10% of what health said it would do.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.iceberg.content import MANIFEST_DATA
from tablekeeper.jobs import compact, expire_snapshots, health, remove_orphans
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.compact import CompactOptions, run_compact
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, run_rewrite_manifests
from tablekeeper.jobs.rewrite_position_deletes import (
    RewritePositionDeletesOptions,
    run_rewrite_position_deletes,
)
from tablekeeper.tables.delta import load_snapshot
from tablekeeper.tables.iceberg import live_files, load_manifests
from tests.conftest import FS_CATALOG

pytestmark = pytest.mark.spark

NS = "hl"
ICEBERG = ("small", "old", "manifests", "deletes", "fresh", "evolved")
DELTA = ("delta_events", "delta_dv")
V2 = {"small", "old", "manifests", "deletes", "evolved"}
SMALL_TARGET = 32 * 1024  # small's write.target-file-size-bytes: a group writes several files
MANIFEST_FILES = 120
ORPHAN_BYTES = 4321
FANOUT = "'write.distribution-mode'='none', 'write.spark.fanout.enabled'='true'"


def close(predicted: float, actual: float, what: str) -> None:
    """Within 10% of what the job did."""
    assert abs(predicted - actual) <= 0.1 * abs(actual), (
        f"{what}: health said {predicted}, the job did {actual}"
    )


def tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Every file and directory under ``root``: path, size, mtime and content hash."""
    out: dict[str, tuple[object, ...]] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = p.relative_to(root).as_posix()
        if p.is_dir():
            out[rel + "/"] = ("dir", st.st_mtime_ns, st.st_mode)
        else:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[rel] = (st.st_size, st.st_mtime_ns, st.st_mode, digest)
    return out


def short(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[-1]


def by_table(result: Any) -> dict[str, dict[str, Any]]:
    body = result.to_json()
    return {short(t["table"]): t for t in json.loads(body)["tables"]}


def recs(table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["job"]: r for r in table["recommendations"]}


# --------------------------------------------------------------------------------------------
# The tables


def _iceberg(spark, name: str, columns: str, version: int, props: str = "", part: str = "") -> str:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.{NS}.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    partitioned = f" PARTITIONED BY ({part})" if part else ""
    extra = f", {props}" if props else ""
    spark.sql(
        f"CREATE TABLE {table} ({columns}) USING iceberg{partitioned} "
        f"TBLPROPERTIES ('format-version'='{version}'{extra})"
    )
    return table


def _build_delta(spark, root: Path) -> None:  # type: ignore[no-untyped-def]
    events, dv = root / "delta_events", root / "delta_dv"

    def twelve_files(mode: str) -> None:  # six tasks, two partitions
        spark.range(0, 1200).selectExpr("id", "id % 2 AS g").repartition(6).write.format("delta").mode(
            mode
        ).partitionBy("g").save(str(events))

    twelve_files("append")
    spark.sql(
        f"ALTER TABLE delta.`{events}` SET TBLPROPERTIES ("
        "'delta.deletedFileRetentionDuration'='interval 1 seconds', "
        "'tablekeeper.health.delta.max-commits-since-checkpoint'='3')"
    )
    twelve_files("overwrite")  # the first twelve become tombstones
    spark.sql(
        f"CREATE TABLE delta.`{dv}` (id BIGINT) USING delta TBLPROPERTIES "
        "('delta.enableDeletionVectors'='true', 'delta.deletedFileRetentionDuration'='interval 1 seconds')"
    )
    spark.range(0, 400).repartition(1).write.format("delta").mode("append").save(str(dv))
    spark.sql(f"DELETE FROM delta.`{dv}` WHERE id % 10 = 0")  # a deletion vector: the file stays live


def _build_iceberg(spark, catalogs, root: Path) -> None:  # type: ignore[no-untyped-def]
    small = _iceberg(
        spark,
        "small",
        "id BIGINT, cat STRING, payload STRING",
        2,
        f"{FANOUT}, 'write.target-file-size-bytes'='{SMALL_TARGET}'",
        "cat",
    )
    spark.range(0, 4000).selectExpr(
        "id", "IF(id % 2 = 0, 'a', 'b') AS cat", "sha2(CAST(id AS STRING), 256) AS payload"
    ).repartition(8).writeTo(small).append()  # eight tasks, two partitions: sixteen files
    spark.sql(f"INSERT INTO {small} VALUES (-1, 'z', 'alone')")  # one file: nothing to pack it with
    planted = root / "small" / "data" / "planted-orphan.parquet"
    planted.write_bytes(os.urandom(ORPHAN_BYTES))
    week_ago = time.time() - 7 * 86_400
    os.utime(planted, (week_ago, week_ago))  # past remove-orphans' default 3 days

    old = _iceberg(spark, "old", "id BIGINT, v STRING", 2, "'history.expire.max-snapshot-age-ms'='1'")
    for i in range(3):
        spark.sql(f"INSERT INTO {old} SELECT id, CAST(id AS STRING) FROM range({i * 50}, {(i + 1) * 50})")
    spark.sql(f"INSERT OVERWRITE {old} SELECT * FROM {old} WHERE id % 2 = 0")

    manifests = _iceberg(
        spark, "manifests", "id BIGINT, k INT", 2, "'commit.manifest.target-size-bytes'='1'", "k"
    )
    spark.sql(f"INSERT INTO {manifests} SELECT id, CAST(id % {MANIFEST_FILES} AS INT) FROM range(1000)")
    spark.sql(f"CALL {FS_CATALOG}.system.rewrite_manifests('{NS}.manifests')")  # one per entry
    spark.sql(f"ALTER TABLE {manifests} UNSET TBLPROPERTIES ('commit.manifest.target-size-bytes')")

    deletes = _iceberg(
        spark,
        "deletes",
        "id BIGINT, cat STRING",
        2,
        f"{FANOUT}, 'write.delete.mode'='merge-on-read', 'write.delete.granularity'='partition'",
        "cat",
    )
    spark.range(0, 1000).selectExpr("id", "CONCAT('c', CAST((id DIV 10) % 2 AS STRING)) AS cat").repartition(
        2
    ).writeTo(deletes).append()  # two files in each of two partitions
    for k in range(5):  # one small delete file per partition per DELETE; 10% of the rows in all
        spark.sql(f"DELETE FROM {deletes} WHERE id % 50 = {k}")

    fresh = _iceberg(spark, "fresh", "id BIGINT, cat STRING", 3, FANOUT, "cat")
    spark.range(0, 600).selectExpr("id", "IF(id % 2 = 0, 'a', 'b') AS cat").repartition(6).writeTo(
        fresh
    ).append()
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    done = run_compact(CompactOptions(table=f"{NS}.fresh"), catalog, f"{NS}.fresh", spark)
    assert done.metrics["rewritten_data_files_count"] == 12, done.metrics

    evolved = _iceberg(spark, "evolved", "id BIGINT, cat STRING", 2, FANOUT, "cat")
    spark.range(0, 300).selectExpr("id", "CONCAT('p', CAST(id % 3 AS STRING)) AS cat").repartition(3).writeTo(
        evolved
    ).append()  # three files in each of three partitions: too few to compact
    spark.sql(f"ALTER TABLE {evolved} DROP PARTITION FIELD cat")


@dataclass
class Fleet:
    root: Path  # the namespace's directory: every table of the scenario is under it
    context: JobContext
    conf_file: str
    plain: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready_json: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    single: dict[str, dict[str, Any]] = field(default_factory=dict)
    executors: dict[str, dict[str, Any]] = field(default_factory=dict)  # one table per Spark task
    trees: list[dict[str, tuple[object, ...]]] = field(default_factory=list)

    def health(self, **kw: Any) -> Any:
        kw.setdefault("conf_file", self.conf_file)
        options = health.HealthOptions(output="json", **kw)
        return health.run(options, self.context)

    def catalog(self):  # type: ignore[no-untyped-def]
        return self.context.catalog(FS_CATALOG)

    def delta(self, name: str) -> str:
        return str(self.root / name)


@pytest.fixture(scope="module")
def fleet(spark, catalogs, warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Fleet:  # type: ignore[no-untyped-def]
    root = warehouse / "files" / NS
    conf = tmp_path_factory.mktemp("health-conf") / "catalogs.yaml"
    # The file's health section is the fleet default; these values change nothing here.
    conf.write_text("health:\n  expire-snapshots.min-bytes: 1\n  remove-orphans.min-files: 1\n")
    context = JobContext(catalogs, spark=lambda: spark, submitted=lambda: spark)
    root.mkdir(parents=True, exist_ok=True)
    _build_delta(spark, root)
    tombstoned = time.time()
    _build_iceberg(spark, catalogs, root)
    time.sleep(max(0.0, tombstoned + 2.0 - time.time()))  # the Delta tombstones pass their 1 s retention
    f = Fleet(root, context, str(conf))

    f.trees.append(tree(root))
    plain = f.health(catalog=FS_CATALOG, namespace=NS)
    f.plain, f.summary = by_table(plain), dict(plain.metrics)
    ready = f.health(catalog=FS_CATALOG, namespace=NS, v3_readiness=True, list_files=True, sort="name")
    f.ready, f.ready_json = by_table(ready), ready.to_json()
    f.executors = by_table(f.health(catalog=FS_CATALOG, namespace=NS, engine="spark"))
    for name in ICEBERG:
        f.single[name] = by_table(f.health(table=f"{NS}.{name}", catalog=FS_CATALOG, list_files=True))[name]
    for name in DELTA:
        f.single[name] = by_table(f.health(table=f.delta(name)))[name]
    f.trees.append(tree(root))
    return f


# --------------------------------------------------------------------------------------------
# What health says, and that saying it writes nothing


def test_health_writes_nothing(fleet: Fleet) -> None:
    before, after = fleet.trees
    assert len(before) > 100  # the scenario's files were really looked at
    assert before == after


def test_the_catalog_run_finds_every_table_of_both_formats(fleet: Fleet) -> None:
    assert sorted(fleet.plain) == sorted(ICEBERG + DELTA)
    assert sorted(fleet.ready) == sorted(ICEBERG + DELTA)
    formats = {name: t["format"] for name, t in fleet.plain.items()}
    assert formats == {**dict.fromkeys(ICEBERG, "iceberg"), **dict.fromkeys(DELTA, "delta")}
    assert not [t for t in fleet.plain.values() if "error" in t]
    s = fleet.summary
    assert s["tables_checked"] == len(ICEBERG) + len(DELTA) == s["tables_shown"]
    assert s["tables_unreadable"] == 0
    assert s["expected_bytes_freed"] == sum(t["expected_bytes_freed"] for t in fleet.plain.values())
    assert s["recommendations"]["compact"] == sum("compact" in recs(t) for t in fleet.plain.values())


@pytest.mark.parametrize(
    ("name", "jobs"),
    [
        ("small", {"compact"}),
        ("old", {"expire-snapshots"}),
        ("manifests", {"rewrite-manifests"}),
        ("deletes", {"rewrite-position-deletes"}),
        ("fresh", set()),
        ("evolved", {"compact"}),
        ("delta_events", {"compact", "remove-orphans", "expire-snapshots"}),
    ],
)
def test_each_table_gets_the_job_it_needs_and_no_other(fleet: Fleet, name: str, jobs: set[str]) -> None:
    table = fleet.plain[name]
    assert set(recs(table)) == jobs, table["recommendations"]
    # The single-table run (with --list-files) says the same, orphans aside.
    single = set(recs(fleet.single[name]))
    assert single - {"remove-orphans"} == jobs - {"remove-orphans"}


@pytest.mark.parametrize("name", ICEBERG)
def test_one_table_and_the_catalog_run_read_the_same_figures(fleet: Fleet, name: str) -> None:
    """The single-table run reads ``manifests`` (over 64 manifests) on the executors, the
    catalog run on the driver threads: the figures must not depend on where they were summed."""
    listing = {"orphan_files", "orphan_bytes", "notes"}
    single = {k: v for k, v in fleet.single[name]["metrics"].items() if k not in listing}
    plain = {k: v for k, v in fleet.plain[name]["metrics"].items() if k not in listing}
    assert single == plain
    assert [r["expected"] for r in fleet.single[name]["recommendations"] if r["job"] != "remove-orphans"] == [
        r["expected"] for r in fleet.plain[name]["recommendations"]
    ]


def test_tables_read_on_the_executors_give_the_same_health(fleet: Fleet) -> None:
    assert fleet.executors == fleet.plain


def test_the_figures_behind_the_advice(fleet: Fleet) -> None:
    small, m = recs(fleet.plain["small"])["compact"], fleet.plain["small"]["metrics"]
    assert m["data_files"] == 17 and m["small_files"] == 17 and m["target_file_size"] == SMALL_TARGET
    assert small["expected"]["files_rewritten"] == 16 and small["expected"]["data_files_before"] == 17
    assert small["threshold"] == "compact.min-files=5"
    top = m["top_small_file_partitions"]
    assert {tuple(r["partition"].items()) for r in top[:2]} == {(("cat", "a"),), (("cat", "b"),)}
    assert top[-1] == {**top[-1], "partition": {"cat": "z"}, "small_files": 1}

    manifests = recs(fleet.plain["manifests"])["rewrite-manifests"]["expected"]
    assert manifests["data_manifests_before"] >= 100, manifests  # a hundred and more tiny manifests
    assert fleet.plain["manifests"]["metrics"]["data_files"] == MANIFEST_FILES

    deletes = recs(fleet.plain["deletes"])["rewrite-position-deletes"]["expected"]
    assert deletes["delete_files_before"] == deletes["files_rewritten"] == 10, deletes

    old = recs(fleet.plain["old"])["expire-snapshots"]
    assert old["expected"]["snapshots_before"] == 4 and old["expected"]["snapshots_after"] == 1
    assert old["bytes_freed"] == old["expected"]["bytes_freed"] > 0

    evolved = recs(fleet.plain["evolved"])["compact"]["expected"]
    assert (evolved["files_rewritten"], evolved["data_files_after"]) == (9, 1)  # one group, spec dropped

    events = fleet.plain["delta_events"]
    assert events["metrics"]["commits_since_checkpoint"] == 3
    assert recs(events)["expire-snapshots"]["threshold"] == "delta.max-commits-since-checkpoint=3"
    vacuum = recs(events)["remove-orphans"]["expected"]
    assert vacuum["files_deleted"] == events["metrics"]["tombstones"] == 12
    assert recs(events)["compact"]["expected"]["data_files_after"] == 2


def test_v3_readiness_and_listing_add_only_their_own_advice(fleet: Fleet) -> None:
    for name in ICEBERG + DELTA:
        without, ready = recs(fleet.plain[name]), recs(fleet.ready[name])
        added = set(ready) - set(without)
        expected = {"backfill-row-lineage"} if name in V2 else set()
        if name == "small":
            expected.add("remove-orphans")  # the planted file, found by --list-files only
        assert added == expected, (name, list(ready))
        assert not set(without) - set(ready), name
    backfill = recs(fleet.ready["old"])["backfill-row-lineage"]
    assert backfill["expected"]["format_version_after"] == 3
    assert backfill["expected"]["rows_given_ids"] == fleet.ready["old"]["metrics"]["data_records"]
    assert fleet.plain["fresh"]["metrics"]["format_version"] == 3
    assert fleet.plain["fresh"]["metrics"]["row_lineage"] is True
    orphans = recs(fleet.ready["small"])["remove-orphans"]
    assert orphans["expected"] == {"orphan_files": 1, "bytes_freed": ORPHAN_BYTES}
    names = [t["table"] for t in json.loads(fleet.ready_json)["tables"]]
    assert names == sorted(names)  # --sort name: Delta tables go by their path


def test_thresholds_decide_on_the_real_table(fleet: Fleet, tmp_path: Path) -> None:
    """(Before the jobs below change the tables.) Each table reports the thresholds in effect."""

    def table(name: str, **kw: Any) -> dict[str, Any]:
        catalog = None if name.startswith("/") else FS_CATALOG
        return next(iter(by_table(fleet.health(table=name, catalog=catalog, **kw)).values()))

    def jobs(name: str, **kw: Any) -> set[str]:
        return set(recs(table(name, **kw)))

    small, events = f"{NS}.small", fleet.delta("delta_events")
    # sixteen files would be rewritten: the threshold is met at 16, not at 17
    assert "compact" in jobs(small, thresholds={"compact.min-files": "16"})
    assert "compact" not in jobs(small, thresholds={"compact.min-files": "17"})
    strict = tmp_path / "catalogs.yaml"
    strict.write_text("health:\n  compact.min-files: 17\n  delta.max-commits-since-checkpoint: 1000\n")
    from_file = table(small, conf_file=str(strict))
    assert "compact" not in recs(from_file) and from_file["thresholds"]["compact.min-files"] == 17
    over = table(small, conf_file=str(strict), thresholds={"compact.min-files": "16"})
    assert "compact" in recs(over) and over["thresholds"]["compact.min-files"] == 16
    # delta_events' own tablekeeper.health.delta.max-commits-since-checkpoint=3 beats the file's 1000
    own = table(events, conf_file=str(strict))
    assert "expire-snapshots" in recs(own) and own["thresholds"]["delta.max-commits-since-checkpoint"] == 3
    assert "expire-snapshots" not in jobs(events, thresholds={"delta.max-commits-since-checkpoint": "4"})
    # rewrite-manifests.min-manifests unset: the table's commit.manifest.min-count-to-merge (100)
    assert fleet.plain["manifests"]["thresholds"] == {
        **fleet.plain["manifests"]["thresholds"],
        "rewrite-manifests.min-manifests": 100,
        "compact.min-files": 5,
        "expire-snapshots.min-bytes": 1,  # the fixture's file
    }
    limited = fleet.health(catalog=FS_CATALOG, namespace=NS, tables="delta_*", limit=1, sort="files")
    assert limited.metrics["tables_checked"] == 2 and limited.metrics["tables_shown"] == 1
    assert list(by_table(limited)) == ["delta_events"]  # the most files to remove


# --------------------------------------------------------------------------------------------
# The jobs, run as health recommended, against what it predicted


@pytest.fixture(scope="module")
def iceberg_jobs(fleet: Fleet, spark) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    catalog = fleet.catalog()

    def ident(name: str) -> tuple[Any, str]:
        return catalog, f"{NS}.{name}"

    runs: dict[str, Any] = {
        "orphans": run_orphans(RemoveOrphansOptions(table=f"{NS}.small"), *ident("small"), spark),
        "compact": run_compact(CompactOptions(table=f"{NS}.small"), *ident("small"), spark),
        "compact_evolved": run_compact(CompactOptions(table=f"{NS}.evolved"), *ident("evolved"), spark),
        "expire": run_expire(ExpireSnapshotsOptions(table=f"{NS}.old"), *ident("old"), spark),
        "manifests": run_rewrite_manifests(
            RewriteManifestsOptions(f"{NS}.manifests"), *ident("manifests"), spark
        ),
        "deletes": run_rewrite_position_deletes(
            RewritePositionDeletesOptions(f"{NS}.deletes"), *ident("deletes"), spark
        ),
    }
    runs["after"] = {
        name: by_table(fleet.health(table=f"{NS}.{name}", catalog=FS_CATALOG, list_files=True))[name]
        for name in ("small", "evolved", "old", "manifests", "deletes")
    }
    return runs


def _live(fleet: Fleet, name: str) -> tuple[int, int, int]:
    """(data files, delete files, data manifests) of the table's current snapshot."""
    table = fleet.catalog().require(f"{NS}.{name}")
    snapshot = table.metadata.current_snapshot()
    files = live_files(table.io, table.metadata, snapshot)
    manifests = [m for m in load_manifests(table.io, snapshot) if m.content == MANIFEST_DATA]
    return len(files.data), len(files.deletes), len(manifests)


@pytest.mark.parametrize(("name", "run"), [("evolved", "compact_evolved"), ("small", "compact")])
def test_compact_rewrote_the_files_health_predicted(
    fleet: Fleet, iceberg_jobs: dict[str, Any], name: str, run: str
) -> None:
    predicted = recs(fleet.plain[name])["compact"]["expected"]
    m = iceberg_jobs[run].metrics
    assert m["failed_data_files_count"] == 0, m
    close(predicted["files_rewritten"], m["rewritten_data_files_count"], "files rewritten")
    close(predicted["bytes_rewritten"], m["rewritten_bytes_count"], "bytes rewritten")
    close(predicted["groups"], len(m["groups"]), "groups")
    assert iceberg_jobs["after"][name]["metrics"]["data_files"] == _live(fleet, name)[0]


def test_compact_left_the_files_health_predicted(fleet: Fleet, iceberg_jobs: dict[str, Any]) -> None:
    predicted = recs(fleet.plain["evolved"])["compact"]["expected"]
    close(predicted["data_files_after"], _live(fleet, "evolved")[0], "data files after compact")
    assert "compact" not in recs(iceberg_jobs["after"]["evolved"])


def test_remove_orphans_deleted_what_health_listed(fleet: Fleet, iceberg_jobs: dict[str, Any]) -> None:
    predicted = recs(fleet.ready["small"])["remove-orphans"]["expected"]
    m = iceberg_jobs["orphans"].metrics
    close(predicted["orphan_files"], m["orphan_file_count"], "orphan files")
    close(predicted["bytes_freed"], m["bytes_freed"], "orphan bytes freed")
    assert not (fleet.root / "small" / "data" / "planted-orphan.parquet").exists()
    assert "remove-orphans" not in recs(iceberg_jobs["after"]["small"])


def test_expire_snapshots_freed_what_health_predicted(fleet: Fleet, iceberg_jobs: dict[str, Any]) -> None:
    predicted = recs(fleet.plain["old"])["expire-snapshots"]["expected"]
    m = iceberg_jobs["expire"].metrics
    kinds = [k for k in m if k.startswith("deleted_") and k.endswith("_count") and "metadata" not in k]
    close(predicted["bytes_freed"], m["bytes_freed"], "bytes freed")
    close(predicted["files_deleted"], sum(m[k] for k in kinds), "files deleted")
    for kind in ("deleted_data_files_count", "deleted_manifest_files_count", "deleted_manifest_lists_count"):
        close(predicted.get(kind, 0), m[kind], kind)
    snapshots = len(fleet.catalog().require(f"{NS}.old").metadata.snapshots)
    close(predicted["snapshots_after"], snapshots, "snapshots after")
    assert "expire-snapshots" not in recs(iceberg_jobs["after"]["old"])


def test_rewrite_manifests_left_what_health_predicted(fleet: Fleet, iceberg_jobs: dict[str, Any]) -> None:
    predicted = recs(fleet.plain["manifests"])["rewrite-manifests"]["expected"]
    m = iceberg_jobs["manifests"].metrics
    close(predicted["manifests_rewritten"], m["rewritten_manifests_count"], "manifests rewritten")
    close(predicted["data_manifests_after"], _live(fleet, "manifests")[2], "data manifests after")
    assert "rewrite-manifests" not in recs(iceberg_jobs["after"]["manifests"])


def test_rewrite_position_deletes_left_what_health_predicted(
    fleet: Fleet, iceberg_jobs: dict[str, Any]
) -> None:
    predicted = recs(fleet.plain["deletes"])["rewrite-position-deletes"]["expected"]
    m = iceberg_jobs["deletes"].metrics
    close(predicted["files_rewritten"], m["rewritten_position_delete_files_count"], "delete files rewritten")
    close(predicted["delete_files_after"], _live(fleet, "deletes")[1], "delete files after")
    assert "rewrite-position-deletes" not in recs(iceberg_jobs["after"]["deletes"])


@pytest.fixture(scope="module")
def delta_jobs(fleet: Fleet) -> dict[str, Any]:
    path = fleet.delta("delta_events")
    runs: dict[str, Any] = {}
    runs["vacuum"] = remove_orphans.run(RemoveOrphansOptions(table=path), fleet.context)
    runs["after_vacuum"] = by_table(fleet.health(table=path))["delta_events"]
    runs["optimize"] = compact.run(CompactOptions(table=path), fleet.context)
    runs["files_after"] = load_snapshot(path).files.num_rows
    runs["checkpoint"] = expire_snapshots.run(ExpireSnapshotsOptions(table=path), fleet.context)
    runs["after"] = by_table(fleet.health(table=path))["delta_events"]
    dv = fleet.delta("delta_dv")
    runs["dv_vacuum"] = remove_orphans.run(RemoveOrphansOptions(table=dv, dry_run=True), fleet.context)
    return runs


def test_delta_vacuum_deleted_the_tombstones_health_counted(fleet: Fleet, delta_jobs: dict[str, Any]) -> None:
    predicted = recs(fleet.plain["delta_events"])["remove-orphans"]
    m = delta_jobs["vacuum"].metrics
    close(predicted["expected"]["files_deleted"], m["deleted_files_count"], "files VACUUM deleted")
    close(predicted["expected"]["bytes_freed"], m["bytes_freed"], "bytes VACUUM freed")
    assert predicted["bytes_freed"] == predicted["expected"]["bytes_freed"]


def test_delta_optimize_left_the_files_health_predicted(fleet: Fleet, delta_jobs: dict[str, Any]) -> None:
    predicted = recs(fleet.plain["delta_events"])["compact"]["expected"]
    m = delta_jobs["optimize"].metrics
    close(predicted["files_rewritten"], m["rewritten_data_files_count"], "files OPTIMIZE rewrote")
    close(predicted["bytes_rewritten"], m["rewritten_bytes_count"], "bytes OPTIMIZE rewrote")
    close(predicted["data_files_after"], delta_jobs["files_after"], "files after OPTIMIZE")
    assert "compact" not in recs(delta_jobs["after"])


def test_delta_checkpoint_clears_the_commits_health_counted(delta_jobs: dict[str, Any]) -> None:
    assert delta_jobs["checkpoint"].metrics["checkpoint_version"] >= 3
    after = delta_jobs["after"]
    assert after["metrics"]["commits_since_checkpoint"] == 0
    assert "expire-snapshots" not in recs(after)


# --------------------------------------------------------------------------------------------
# Where health's prediction and the job part ways (each names the defect it shows)


def test_compact_writes_within_the_files_health_predicted(fleet: Fleet, iceberg_jobs: dict[str, Any]) -> None:
    """With a 32 KiB target each partition's group makes several files. compact rolls them by the
    bytes it writes, fewer than the sixteen small files held (each had its own footer): health's
    count, from the input bytes, is more than it writes here, and one file per group the least;
    every file compact wrote but the last of its partition reaches the target, so health calls
    none small (the file alone in its partition stays small: nothing to pack it with)."""
    predicted = recs(fleet.plain["small"])["compact"]["expected"]
    written = iceberg_jobs["compact"].metrics
    groups = [(g["expected_output_files"], g.get("added_files")) for g in written["groups"]]
    after = _live(fleet, "small")[0]
    least, most = predicted["data_files_after_at_least"], predicted["data_files_after"]
    assert least <= after < most, (predicted, groups)
    assert iceberg_jobs["after"]["small"]["metrics"]["small_files"] == 1, iceberg_jobs["after"]["small"]
    assert "compact" not in recs(iceberg_jobs["after"]["small"])


def test_after_vacuum_health_does_not_count_the_tombstones_again(delta_jobs: dict[str, Any]) -> None:
    """VACUUM deleted every file past the table's retention; nothing was removed since. The
    tombstones stay in the log (until a checkpoint drops them): health must not recommend a
    VACUUM that would find nothing, nor promise their bytes again."""
    assert delta_jobs["vacuum"].metrics["deleted_files_count"] == 12
    after = delta_jobs["after_vacuum"]
    assert "remove-orphans" not in recs(after), (after["recommendations"], after["metrics"])


def test_deletion_vectors_are_not_tombstones_vacuum_deletes(fleet: Fleet, delta_jobs: dict[str, Any]) -> None:
    """A DELETE with deletion vectors removes (file, no DV) and adds (file, DV): the file stays
    live, so VACUUM deletes nothing of it."""
    vacuum = delta_jobs["dv_vacuum"].metrics
    predicted = recs(fleet.plain["delta_dv"]).get("remove-orphans", {}).get("expected", {})
    assert predicted.get("files_deleted", 0) == vacuum["orphan_file_count"], (
        predicted,
        vacuum,
        fleet.plain["delta_dv"]["metrics"],
    )
