"""health's layout check on tables Iceberg Spark wrote with random and with sorted keys, and
tablekeeper's sort compaction checked against what health predicted it would leave.

Both tables hold the same rows, in two partitions, with healthy file sizes (the target is set to
the files' own size, so bin-pack compaction has nothing to do) and the sort order ``id``. In
``scattered`` every file spans the whole id range of its partition; in ``ordered`` each holds one
slice of it. Only the first needs a sort rewrite, and after ``compact --strategy sort
--rewrite-all`` the files a lookup opens, measured from the new files' bounds, must be within 20%
of the figure health predicted.
"""

from __future__ import annotations

from typing import Any

import pytest

from tablekeeper.jobs import compute_stats, health
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.compact import CompactOptions, run_compact
from tests.conftest import FS_CATALOG

pytestmark = pytest.mark.spark

NS = "layout"
ROWS = 24_000
FILES_PER_PARTITION = 6
LAYOUT_PROPS = "'write.distribution-mode'='none', 'write.spark.fanout.enabled'='true'"


def _write(spark, name: str, ordered: bool) -> str:  # type: ignore[no-untyped-def]
    table = f"{FS_CATALOG}.{NS}.{name}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {FS_CATALOG}.{NS}")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, payload STRING) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ('format-version'='2', {LAYOUT_PROPS})"
    )
    rows = spark.range(0, ROWS).selectExpr(
        # Two keys, in no relation to the row number: a key's rows (three of the six files'
        # bytes a partition) pass the maximum file size, so after a sort each key fills two
        # files: the prediction takes the key count from the sketch compute-stats leaves, and the
        # 20% check holds it to what the rewrite really wrote.
        "pmod(xxhash64(id), 2) AS id",
        "IF(id % 2 = 0, 'a', 'b') AS cat",
        "sha2(CAST(id AS STRING), 256) AS payload",
    )
    if ordered:
        rows = rows.repartitionByRange(FILES_PER_PARTITION, "id").sortWithinPartitions("id")
    else:
        rows = rows.repartition(FILES_PER_PARTITION)
    rows.writeTo(table).append()
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY id")
    # Healthy sizes: the target is the files' mean, so only the layout can be wrong.
    mean = spark.sql(f"SELECT CAST(avg(file_size_in_bytes) AS BIGINT) FROM {table}.files").first()[0]
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.target-file-size-bytes'='{mean}')")
    return table


def _health(context: JobContext, name: str) -> dict[str, Any]:
    result = health.run(
        health.HealthOptions(table=f"{NS}.{name}", catalog=FS_CATALOG, output="json", engine="driver"),
        context,
    )
    (table,) = result.tables  # type: ignore[attr-defined]
    body: dict[str, Any] = table.to_json()
    return body


def lead_of(body: dict[str, Any]) -> float:
    """Files a lookup on the first judged column opens (the figure the advice is about)."""
    value: float = body["metrics"]["layout"]["columns"][0]["files_per_lookup"]
    return value


def _sort_advice(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in body["recommendations"] if r["expected"].get("strategy") == "sort"]


@pytest.fixture(scope="module")
def layouts(spark, catalogs) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    context = JobContext(catalogs, spark=lambda: spark, submitted=lambda: spark)
    _write(spark, "scattered", ordered=False)
    _write(spark, "ordered", ordered=True)
    stats = compute_stats.ComputeStatsOptions(table=f"{NS}.scattered", catalog=FS_CATALOG, columns=("id",))
    assert compute_stats.run(stats, context).status == "ok"
    out = {"scattered": _health(context, "scattered"), "ordered": _health(context, "ordered")}
    catalog = context.catalog(FS_CATALOG)
    options = CompactOptions(table=f"{NS}.scattered", strategy="sort", rewrite_all=True)
    out["compact"] = run_compact(options, catalog, f"{NS}.scattered", spark)
    out["after"] = _health(context, "scattered")
    return out


def test_scattered_keys_get_a_sort_rewrite_and_sorted_keys_none(layouts: dict[str, Any]) -> None:
    scattered, ordered = layouts["scattered"], layouts["ordered"]
    (advice,) = _sort_advice(scattered)
    assert advice["job"] == "compact"
    assert advice["expected"]["rewrite_all"] is True
    assert "--strategy sort --rewrite-all" in advice["expected"]["command"]
    assert _sort_advice(ordered) == []
    # File sizes are fine in both: no bin-pack advice either.
    assert [r["job"] for r in ordered["recommendations"]] == []
    lead = scattered["metrics"]["layout"]["columns"][0]
    assert lead["column"] == "id"
    assert scattered["metrics"]["layout"]["source"] == "sort-order"
    # Every scattered file spans its partition's range: a lookup opens (nearly) all six.
    assert lead["files_per_lookup"] > FILES_PER_PARTITION * 0.9
    assert lead["lookup_share"] > 0.9
    assert ordered["metrics"]["layout"]["columns"][0]["files_per_lookup"] < 1.2


def test_sort_compaction_leaves_what_health_predicted(layouts: dict[str, Any]) -> None:
    (advice,) = _sort_advice(layouts["scattered"])
    predicted = advice["expected"]["files_per_lookup_after"]
    measured = layouts["after"]["metrics"]["layout"]["columns"][0]["files_per_lookup"]
    assert layouts["compact"].metrics["rewritten_data_files_count"] == advice["expected"]["files_rewritten"]
    before = (lead_of(layouts["scattered"]), lead_of(layouts["ordered"]))
    print(f"iceberg: {before} before, {measured} after, predicted {predicted}")
    assert abs(measured - predicted) <= 0.2 * predicted, (measured, predicted)
    assert _sort_advice(layouts["after"]) == []


# --------------------------------------------------------------------------------------------
# Delta: the same measure from the files' stats, judged by the named columns or the clustering


def _delta_health(context: JobContext, path: str, columns: str | None = None) -> dict[str, Any]:
    result = health.run(health.HealthOptions(table=path, output="json", layout_columns=columns), context)
    (table,) = result.tables  # type: ignore[attr-defined]
    body: dict[str, Any] = table.to_json()
    return body


@pytest.fixture(scope="module")
def delta_layouts(spark, catalogs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from tablekeeper.jobs import compact

    context = JobContext(catalogs, spark=lambda: spark, submitted=lambda: spark)
    root = tmp_path_factory.mktemp("delta-layout")
    scattered, clustered = str(root / "scattered"), str(root / "clustered")
    rows = spark.range(0, ROWS // 4).selectExpr(
        "xxhash64(id) AS id", "sha2(CAST(id AS STRING), 256) AS payload"
    )
    rows.repartition(FILES_PER_PARTITION).write.format("delta").save(scattered)
    spark.sql(f"CREATE TABLE delta.`{clustered}` (id BIGINT, payload STRING) USING delta CLUSTER BY (id)")
    rows.repartition(FILES_PER_PARTITION).write.format("delta").mode("append").save(clustered)
    out = {
        "scattered": _delta_health(context, scattered, "id"),
        "unnamed": _delta_health(context, scattered),
        "clustered": _delta_health(context, clustered),
    }
    options = compact.CompactOptions(table=scattered, strategy="sort", sort_order="zorder(id)")
    out["compact"] = compact.run(options, context)
    out["after"] = _delta_health(context, scattered, "id")
    return out


def test_delta_files_overlapping_on_the_named_column_get_a_zorder(delta_layouts: dict[str, Any]) -> None:
    scattered = delta_layouts["scattered"]
    (advice,) = _sort_advice(scattered)
    assert advice["expected"]["sort_order"] == "zorder(id)"
    assert advice["expected"]["command"] == 'compact --strategy sort --sort-order "zorder(id)"'
    lead = scattered["metrics"]["layout"]["columns"][0]
    assert lead["files_per_lookup"] > FILES_PER_PARTITION * 0.9
    # A Delta table says nothing of which lookups matter unless it is clustered: not judged.
    assert "layout" not in delta_layouts["unnamed"]["metrics"]
    measured = delta_layouts["after"]["metrics"]["layout"]["columns"][0]["files_per_lookup"]
    predicted = advice["expected"]["files_per_lookup_after"]
    print(f"delta: {lead['files_per_lookup']} before, {measured} after, predicted {predicted}")
    assert abs(measured - predicted) <= 0.2 * predicted, (measured, predicted)


def test_a_clustered_delta_table_is_judged_by_its_clustering_columns(delta_layouts: dict[str, Any]) -> None:
    clustered = delta_layouts["clustered"]
    layout = clustered["metrics"]["layout"]
    assert layout["source"] == "clustering"
    assert [c["column"] for c in layout["columns"]] == ["id"]
    (advice,) = [r for r in clustered["recommendations"] if r["job"] == "compact"]
    assert advice["expected"]["command"] == "compact"  # OPTIMIZE clusters; ZORDER BY is refused there
