"""Every job through one catalog that Iceberg Spark shares: the sequence each catalog's interop test
runs (rewrite-position-deletes, compact, rewrite-manifests, compute-stats, expire-snapshots,
remove-orphans, backfill-row-lineage, convert-delta, health), with Iceberg Spark reading identical
rows through the same catalog after each. A catalog's own checks (what its server records, where
it puts tables, Delta tables it registers by name) come in through ``CatalogUnderTest``'s hooks."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import Catalog
from tablekeeper.cli import main
from tablekeeper.io import FileIO
from tests.interop.test_concurrent_commits import collect, start_workers


@dataclass
class CatalogUnderTest:
    name: str  # the catalogs file's entry, and Iceberg Spark's catalog of the same name
    conf: Path  # the catalogs file
    warehouse: Path  # what ${warehouse} in it stands for
    catalog: Catalog
    namespace: str = "db"
    # Run after tablekeeper's first swap over Iceberg Spark's commit, with the metadata location
    # Spark had left: the catalog's own record of the swap (its server's row, parameters, ...).
    after_first_swap: Callable[[str], None] | None = None
    # Given a Delta table's directory, the --source naming it (a catalog registering Delta tables
    # by name returns <catalog>.<db>.<table>); None: the path itself.
    delta_source: Callable[[Path], str] | None = None
    secrets: tuple[str, ...] = ()
    outputs: list[str] = field(default_factory=list)

    def tk(self, capfd: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
        """A job through the command line on this catalog; its one JSON result, which must be ok."""
        code = main(
            [*args, "--catalog", self.name, "--conf-file", str(self.conf), "--warehouse", str(self.warehouse)]
        )
        out, err = capfd.readouterr()
        self.outputs += [out, err]
        lines = [line for line in out.strip().splitlines() if line.startswith("{")]
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        assert code == 0 and result.get("status") == "ok", (args, result, err[-3000:])
        return result


def race(spark: Any, table: str, conf: Path, catalog_name: str, ident: str, spark_inserts: int) -> list[str]:
    """Two tablekeeper processes append 4 rows each (``tk0``, ``tk1``; ids ``w * 1000 + i``)
    through ``catalog_name`` while Iceberg Spark inserts ``spark_inserts`` rows (ids ``90_000 + i``)
    into ``table`` through the same catalog; every writer must finish. The data files tablekeeper
    committed."""
    procs = start_workers(conf, catalog_name, ident, workers=2, appends=4)
    errors: list[BaseException] = []

    def spark_appends() -> None:
        try:
            for i in range(spark_inserts):
                spark.sql(f"INSERT INTO {table} VALUES ({90_000 + i}, 'spark')")
        except BaseException as err:  # surfaced by the assertion below
            errors.append(err)

    thread = threading.Thread(target=spark_appends)
    thread.start()
    tk_files = collect(procs)
    thread.join(timeout=600)
    assert not errors, errors
    return tk_files


def rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE {table}")
    return sorted(tuple(r) for r in spark.sql(f"SELECT id, cat FROM {table}").collect())


def _local(location: str) -> bool:
    return "://" not in location or location.startswith("file:")


def _plant_orphan(location: str) -> tuple[Callable[[], bool], tuple[str, ...]]:
    """An unreferenced file in the table's data directory, old enough for remove-orphans'
    default retention on a local disk; an object store keeps no settable mtime, so there it is
    written through tablekeeper's FileIO and the job is told to take files older than a second.
    (whether it is gone now, the retention arguments)."""
    if _local(location):
        orphan = Path(location.removeprefix("file:")) / "data" / "lost-task-00001.parquet"
        orphan.write_bytes(b"orphan")
        os.utime(orphan, (time.time() - 10 * 86_400,) * 2)
        return (lambda: not orphan.exists()), ()
    where = f"{location}/data/lost-task-00001.parquet"
    io = FileIO.for_location(where)
    io.write(where, b"orphan")
    time.sleep(1.1)
    return (lambda: not io.exists(where)), ("--older-than", "1s", "--force-short-retention")


def _beside(location: str, name: str) -> str:
    """``name`` two levels above a table's location (beside its namespace), in the same store."""
    if _local(location):
        return str(Path(location.removeprefix("file:")).parent.parent / name)
    return f"{location.rstrip('/').rsplit('/', 2)[0]}/{name}"


def every_job(spark: Any, cat: CatalogUnderTest, capfd: pytest.CaptureFixture[str], prefix: str) -> None:
    """Each job on tables Iceberg Spark created and wrote through ``cat``; names start with ``prefix``
    so several catalogs may share one server and namespace."""
    ns = cat.namespace
    events, lineage, converted = f"{prefix}_events", f"{prefix}_lineage", f"{prefix}_orders"
    table = f"{cat.name}.{ns}.{events}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat.name}.{ns}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    for b in range(2):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CAST(id % 3 AS STRING) FROM range({b * 50}, {b * 50 + 50})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 10 = 0")  # position delete files
    expected = rows(spark, table)
    assert len(expected) == 90
    spark_location = cat.catalog.load_table(f"{ns}.{events}").metadata_location  # Spark's, read by us
    assert f"{ns}.{events}" in cat.catalog.list_tables(ns)

    base = ("--table", f"{ns}.{events}")
    cat.tk(capfd, "rewrite-position-deletes", *base, "--rewrite-all")
    assert cat.catalog.load_table(f"{ns}.{events}").metadata_location != spark_location
    if cat.after_first_swap is not None:
        cat.after_first_swap(spark_location)
    assert rows(spark, table) == expected
    cat.tk(capfd, "compact", *base, "--min-input-files", "2")
    assert rows(spark, table) == expected
    assert spark.sql(f"SELECT count(*) FROM {table}.data_files").collect()[0][0] == 1
    cat.tk(capfd, "rewrite-manifests", *base, "--rewrite-all")
    assert rows(spark, table) == expected
    cat.tk(capfd, "compute-stats", *base)
    assert rows(spark, table) == expected
    assert spark.sql(f"SELECT count(*) FROM {table}.metadata_log_entries").collect()[0][0] >= 7
    cat.tk(capfd, "expire-snapshots", *base, "--older-than", datetime.now(timezone.utc).isoformat())
    assert rows(spark, table) == expected
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0] == 1
    location = cat.catalog.load_table(f"{ns}.{events}").metadata.location
    gone, retention = _plant_orphan(location)
    result = cat.tk(capfd, "remove-orphans", *base, *retention)
    assert result["metrics"]["deleted_files_count"] == 1 and gone(), result
    assert rows(spark, table) == expected

    # A second table, upgraded to format version 3 with row ids for every row.
    spark.sql(
        f"CREATE TABLE {cat.name}.{ns}.{lineage} (id BIGINT, cat STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"INSERT INTO {cat.name}.{ns}.{lineage} SELECT id, 'x' FROM range(0, 40)")
    before = rows(spark, f"{cat.name}.{ns}.{lineage}")
    cat.tk(capfd, "backfill-row-lineage", "--table", f"{ns}.{lineage}")
    assert rows(spark, f"{cat.name}.{ns}.{lineage}") == before
    props = dict(spark.sql(f"SHOW TBLPROPERTIES {cat.name}.{ns}.{lineage}").collect())
    assert props.get("format-version") == "3"
    ids = spark.sql(f"SELECT count(DISTINCT _row_id), count(*) FROM {cat.name}.{ns}.{lineage}").collect()[0]
    assert ids[0] == ids[1] == 40

    # A Delta table converted into the catalog (named as the catalog knows it where it can).
    delta = _beside(location, f"delta/{prefix}_orders_delta")
    spark.sql(f"CREATE TABLE delta.`{delta}` (id BIGINT, cat STRING) USING delta")
    spark.sql(f"INSERT INTO delta.`{delta}` SELECT id, CAST(id % 2 AS STRING) FROM range(0, 30)")
    source = cat.delta_source(Path(delta)) if cat.delta_source is not None else str(delta)
    cat.tk(capfd, "convert-delta", "--source", source, "--target", f"{ns}.{converted}")
    assert rows(spark, f"{cat.name}.{ns}.{converted}") == rows(spark, f"delta.`{delta}`")

    # Health over the namespace: these Iceberg tables, and a Delta table the catalog registers.
    report = cat.tk(capfd, "health", "--namespace", ns)
    found = {t["table"]: t["format"] for t in report["tables"]}
    mine = {f"{ns}.{events}", f"{ns}.{lineage}", f"{ns}.{converted}"}
    assert {t: found.get(t) for t in mine} == dict.fromkeys(mine, "iceberg"), report
    if cat.delta_source is not None:
        assert found.get(str(delta)) == "delta", report
    assert all(not t.get("error") for t in report["tables"]), report
    said = "\n".join(cat.outputs)
    assert not [secret for secret in cat.secrets if secret in said]
