"""The hive catalog shared with Iceberg Spark's HiveCatalog on one Hive Metastore: the catalogs file
of docs/reference/catalogs/hive.md, as written, drives the jobs through the command line on tables
Iceberg Spark created and wrote, and Iceberg Spark reads the same rows after each; tablekeeper
processes and Iceberg Spark race appends through the metastore's table lock and no commit is lost;
a writer SIGKILLed before or after the pointer swap leaves the old or the new state."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.base import Catalog
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.catalog.hive_metastore import MetastoreClient, SdField, TableField
from tablekeeper.catalog.hive_thrift import TList, TType, string_map, struct_of, text
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.cli import main
from tests.conftest import REPO_ROOT
from tests.interop.test_concurrent_commits import RETRY_PROPS
from tests.support.append_worker import run_worker
from tests.support.catalog_jobs import race
from tests.support.hive_metastore import MetastoreServer

pytestmark = pytest.mark.spark

MARKER = "<!-- run as written by tests/interop/test_hive_catalog.py -->"
NAME = "hms"  # the docs example's catalog
RETRY = ", ".join(f"'{k}'='{v}'" for k, v in RETRY_PROPS.items())


def docs_block() -> str:
    text = (REPO_ROOT / "docs" / "reference" / "catalogs" / "hive.md").read_text(encoding="utf-8")
    assert MARKER in text, "docs/reference/catalogs/hive.md lost its tested hive catalogs file"
    match = re.search(r"```yaml\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
    assert match is not None
    return match.group(1) + "\n"


@dataclass(frozen=True)
class Hms:
    conf: Path
    catalog: Catalog
    server: MetastoreServer


@pytest.fixture(scope="module")
def hms(spark, hive_metastore: MetastoreServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hms]:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("hive-catalog")
    conf = root / "catalogs.yaml"
    conf.write_text(docs_block())
    with pytest.MonkeyPatch.context() as mp:
        # Job processes the tests start read the same file: they inherit the environment.
        mp.setenv("HMS_HOST", hive_metastore.uri.removeprefix("thrift://"))
        config = parse_catalogs(conf.read_text(), root).get(NAME)
        for key, value in iceberg_catalog_conf(config).items():
            spark.conf.set(key, value)  # Iceberg Spark's HiveCatalog on the same metastore
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {NAME}.db")
        yield Hms(conf, catalog_for(config), hive_metastore)
    assert not hive_metastore.missing_classes(), "conf/jars.txt lacks a jar the metastore used"


def ordered(items: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(items, key=repr)  # any values, None included


def rows(spark: Any, table: str, columns: str = "*") -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return ordered(tuple(r) for r in spark.sql(f"SELECT {columns} FROM {table}").collect())


def cli(capfd: pytest.CaptureFixture[str], hms: Hms, *args: str) -> dict[str, Any]:
    code = main([*args, "--catalog", NAME, "--conf-file", str(hms.conf)])
    out, _ = capfd.readouterr()
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert code == 0 and result["status"] == "ok", result
    return dict(result)


def create(spark: Any, name: str, props: str = "", partitioned: bool = False) -> str:
    table = f"{NAME}.db.{name}"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, writer STRING) USING iceberg "
        + ("PARTITIONED BY (writer) " if partitioned else "")
        + f"TBLPROPERTIES ('format-version'='2', {RETRY}{', ' + props if props else ''})"
    )
    return table


def test_jobs_through_the_cli_leave_iceberg_spark_reading_the_same_rows(spark, hms: Hms, capfd) -> None:  # type: ignore[no-untyped-def]
    table = create(spark, "events")
    for b in range(4):
        spark.sql(f"INSERT INTO {table} SELECT id, 'spark' FROM range({b * 10}, {b * 10 + 10})")
    before = rows(spark, table)
    assert hms.catalog.list_tables("db") == ["db.events"]
    spark_location = hms.catalog.load_table("db.events").metadata_location

    assert cli(capfd, hms, "compact", "--table", "db.events", "--min-input-files", "2")["status"] == "ok"
    assert rows(spark, table) == before
    assert spark.sql(f"SELECT count(*) FROM {table}.files").collect()[0][0] == 1
    compacted = hms.catalog.load_table("db.events")
    assert compacted.metadata.metadata_log[-1].metadata_file == spark_location  # on top of Spark's commit

    cli(capfd, hms, "rewrite-manifests", "--table", "db.events")
    assert rows(spark, table) == before
    assert spark.sql(f"SELECT count(*) FROM {table}.manifests").collect()[0][0] == 1

    now_ms = str(int(time.time() * 1000) + 1000)
    expired = cli(capfd, hms, "expire-snapshots", "--table", "db.events", "--older-than", now_ms)
    assert expired["metrics"]["expired_snapshots_count"] >= 4
    assert rows(spark, table) == before
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0] == 1

    location = Path(compacted.metadata.location.removeprefix("file:"))
    orphan = location / "data" / "left-by-a-dead-writer.parquet"
    orphan.write_bytes(b"PAR1")
    old = time.time() - 10 * 86_400
    os.utime(orphan, (old, old))
    cli(capfd, hms, "remove-orphans", "--table", "db.events")
    assert not orphan.exists()
    assert rows(spark, table) == before

    cli(capfd, hms, "compute-stats", "--table", "db.events")
    assert hms.catalog.load_table("db.events").metadata.statistics
    assert rows(spark, table) == before

    deletes = create(
        spark,
        "deletes",
        "'write.delete.mode'='merge-on-read', 'write.delete.granularity'='partition'",
    )
    spark.sql(f"INSERT INTO {deletes} SELECT id, 'spark' FROM range(0, 30)")
    for k in range(3):
        spark.sql(f"DELETE FROM {deletes} WHERE id = {k}")
    kept = rows(spark, deletes)
    rewritten = cli(capfd, hms, "rewrite-position-deletes", "--table", "db.deletes", "--min-input-files", "2")
    assert rewritten["metrics"]["rewritten_delete_files_count"] == 3
    assert rows(spark, deletes) == kept

    lineage = create(spark, "lineage")
    for b in range(2):
        spark.sql(f"INSERT INTO {lineage} SELECT id, 'spark' FROM range({b * 5}, {b * 5 + 5})")
    plain = rows(spark, lineage)
    cli(capfd, hms, "backfill-row-lineage", "--table", "db.lineage")
    assert hms.catalog.load_table("db.lineage").metadata.format_version == 3
    assert rows(spark, lineage) == plain
    ids = [r[0] for r in rows(spark, lineage, "_row_id")]
    assert None not in ids and len(set(ids)) == len(plain)

    code = main(["health", "--catalog", NAME, "--conf-file", str(hms.conf), "--output", "json"])
    out, _ = capfd.readouterr()
    health = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert code == 0, health
    found = {t["table"] for t in health["tables"] if t.get("format") == "iceberg"}
    assert {"db.events", "db.deletes", "db.lineage"} <= found

    # doctor shows the catalog as configured; Spark got Iceberg's hive catalog settings.
    assert main(["doctor", "--conf-file", str(hms.conf)]) in (0, 2)
    out, _ = capfd.readouterr()
    assert re.search(rf"catalog {NAME}\s+hive {re.escape(hms.server.uri)}", out), out
    assert spark.conf.get(f"spark.sql.catalog.{NAME}.type") == "hive"


def register_delta(server: MetastoreServer, db: str, name: str, location: str) -> None:
    """Record a Delta table in the metastore as Spark's session catalog does: provider delta, its
    location in the storage descriptor's serde ``path``."""
    host, port = server.uri.removeprefix("thrift://").split(":")
    sd = struct_of(
        (SdField.COLS, TType.LIST, TList(TType.STRUCT)),
        (SdField.SERDE, TType.STRUCT, struct_of((3, TType.MAP, string_map({"path": location})))),
    )
    table = struct_of(
        (TableField.NAME, TType.STRING, text(name)),
        (TableField.DB, TType.STRING, text(db)),
        (TableField.SD, TType.STRUCT, sd),
        (
            TableField.PARAMETERS,
            TType.MAP,
            string_map({"spark.sql.sources.provider": "delta", "EXTERNAL": "TRUE"}),
        ),
        (TableField.TABLE_TYPE, TType.STRING, text("EXTERNAL_TABLE")),
    )
    client = MetastoreClient([(host, int(port))], 30)
    try:
        client.create_table(table, {})
    finally:
        client.close()


def test_convert_delta_found_by_name_in_the_metastore(spark, hms: Hms, tmp_path: Path, capfd) -> None:  # type: ignore[no-untyped-def]
    source = (tmp_path / "delta_events").as_uri()
    spark.range(0, 40).selectExpr("id", "CAST(id % 3 AS STRING) AS writer").repartition(2).write.format(
        "delta"
    ).save(source)
    expected = ordered(tuple(r) for r in spark.read.format("delta").load(source).collect())
    register_delta(hms.server, "db", "delta_events", source)
    assert hms.catalog.delta_tables("db") == [source]
    cli(capfd, hms, "convert-delta", "--source", f"{NAME}.db.delta_events", "--target", "converted.events")
    assert hms.catalog.list_tables("converted") == ["converted.events"]
    assert rows(spark, f"{NAME}.converted.events") == expected


def test_tablekeeper_and_iceberg_spark_race_and_no_commit_is_lost(spark, hms: Hms) -> None:  # type: ignore[no-untyped-def]
    table = create(spark, "race")
    spark.sql(f"INSERT INTO {table} VALUES (-1, 'spark')")
    tk_files = race(spark, table, hms.conf, NAME, "db.race", 3)
    expected = ordered(
        [
            (-1, "spark"),
            *((90_000 + i, "spark") for i in range(3)),
            *((w * 1000 + i, f"tk{w}") for w in range(2) for i in range(4)),
        ]
    )
    assert rows(spark, table) == expected
    assert len(tk_files) == 8
    loaded = hms.catalog.load_table("db.race")
    assert len(loaded.metadata.ancestors(loaded.metadata.current_snapshot_id)) == 12


def test_a_writer_killed_at_the_swap_leaves_old_or_new_and_the_next_commit_converges(spark, hms: Hms) -> None:  # type: ignore[no-untyped-def]
    table = create(spark, "killed")

    def appended() -> int:
        loaded = hms.catalog.load_table("db.killed")  # the pointer names a complete metadata file
        snapshot = loaded.metadata.current_snapshot()
        return 0 if snapshot is None else len(loaded.metadata.ancestors(snapshot.snapshot_id))

    # SIGKILL right after the second swap
    run_worker(hms.conf, NAME, "db.killed", 1, 3, kill_at="commit.swapped@2")
    assert appended() == 2  # the new state
    # SIGKILL before the swap
    run_worker(hms.conf, NAME, "db.killed", 2, 1, kill_at="commit.metadata-written")
    assert appended() == 2  # the old state
    run_worker(hms.conf, NAME, "db.killed", 3, 2)  # the next writer goes on from there, the lock free
    assert appended() == 4
    spark.sql(f"INSERT INTO {table} VALUES (7, 'spark')")  # and so does Iceberg Spark
    assert rows(spark, table) == ordered(
        [(1000, "tk1"), (1001, "tk1"), (3000, "tk3"), (3001, "tk3"), (7, "spark")]
    )
