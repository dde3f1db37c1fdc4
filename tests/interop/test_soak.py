"""A short soak: destructive jobs killed at random phases while Iceberg Spark appends to the same
table (the 200-kill run is ``python -m bench.soak``; ``tests/support/soak.py`` says what is checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tablekeeper.catalog import catalog_for
from tests.conftest import SQL_CATALOG
from tests.support.soak import soak

pytestmark = pytest.mark.spark

# Every phase of every job is killed deterministically by the kill-point matrix (test_kill_points);
# this run adds random phases under a live writer, long enough for each job to be killed.
KILLS = 4


def test_random_kills_while_iceberg_spark_appends(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    table = f"{SQL_CATALOG}.db.soak"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='20')"
    )
    for i in range(6):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'a', 1.0), ({i + 100}, 'b', 2.0)")
    root = Path(catalog_for(catalogs.get(SQL_CATALOG)).require("db.soak").metadata.location)
    conf = warehouse / "soak-catalogs.yaml"
    conf.write_text(
        f"default: {SQL_CATALOG}\ncatalogs:\n  {SQL_CATALOG}:\n    type: sql\n"
        f"    uri: sqlite:///{warehouse}/catalog.db\n    warehouse: {warehouse}/sql\n"
    )
    report = soak(spark, table, "db.soak", root, ["--conf-file", str(conf)], kills=KILLS, seed=19)
    assert sum(report.kills.values()) == KILLS
    assert report.appended > 0
