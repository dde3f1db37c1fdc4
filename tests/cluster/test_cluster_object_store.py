"""Jobs on the cluster against tables in an S3-compatible store behind Iceberg's REST catalog (the
session's servers, tests/conftest.py), as production tables live: the executors reach the bucket
only through what the job's catalog file says (S3A for Spark's own reads and writes, pyarrow for
tablekeeper's tasks), with the README's S3 jars (conf/jars.txt role ``s3``) shipped by --jars.
PyIceberg, through the same REST catalog, reads each result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from tests.support.cluster_submit import S3_ROLE, Submission, runtime_jars
from tests.support.object_store import S3_BUCKET, S3Endpoint
from tests.support.rest_catalog_server import REST_WAREHOUSE, RestCatalogServer
from tests.support.spark_cluster import StandaloneCluster
from tests.support.spark_submit import ROWS_PER_FILE, delta_table_in_versions

VERSIONS = 8
DELTA_SOURCE = f"{S3_BUCKET}/cluster/delta/events"
EXPECTED = list(range(VERSIONS * ROWS_PER_FILE))
# The PyIceberg table's appends: enough rows that compact's output, sized by the bytes it writes
# (about 4 KB for these ids), takes several files at the test's 1 KB target, every file rewritten
# (--rewrite-all: each input file is itself above the target), both workers writing.
APPENDED_ROWS = 400
APPENDED = list(range(VERSIONS * APPENDED_ROWS))


@pytest.fixture(scope="module")
def lake_conf(
    s3_server: S3Endpoint, rest_server: RestCatalogServer, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    props = {**s3_server.properties(), "client.region": s3_server.region}
    body = "".join(f"    {k}: '{v}'\n" for k, v in props.items())
    conf = tmp_path_factory.mktemp("cluster-lake") / "catalogs.yaml"
    conf.write_text(
        "default: lake\ncatalogs:\n  lake:\n    type: rest\n"
        f"    uri: {rest_server.uri}\n    warehouse: {REST_WAREHOUSE}\n{body}"
    )
    return conf


def pyiceberg_table(s3: S3Endpoint, rest: RestCatalogServer, ident: str) -> Any:
    from pyiceberg.catalog.rest import RestCatalog

    catalog = RestCatalog("lake", uri=rest.uri, warehouse=REST_WAREHOUSE, **s3.properties())
    return catalog.load_table(ident)


def pyiceberg_appended(s3: S3Endpoint, rest: RestCatalogServer, ident: str, appends: int) -> Any:
    """A v2 table PyIceberg creates in the REST catalog, one data file per append."""
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = RestCatalog("lake", uri=rest.uri, warehouse=REST_WAREHOUSE, **s3.properties())
    if ("db",) not in catalog.list_namespaces():
        catalog.create_namespace("db")
    table = catalog.create_table(ident, schema=Schema(NestedField(1, "id", LongType(), required=False)))
    for i in range(appends):
        table.append(
            pa.table({"id": pa.array(range(i * APPENDED_ROWS, (i + 1) * APPENDED_ROWS), pa.int64())})
        )
    return catalog.load_table(ident)


def objects(s3: S3Endpoint, prefix: str) -> set[str]:
    selector = pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
    return {i.path for i in s3.filesystem().get_file_info(selector) if i.type == pafs.FileType.File}


def test_jobs_on_the_bucket_in_one_application_run_on_both_workers(
    cluster: StandaloneCluster,
    s3_server: S3Endpoint,
    rest_server: RestCatalogServer,
    lake_conf: Path,
    tmp_path: Path,
) -> None:
    """Two tables in the bucket. A Delta table converted into the REST catalog by executor tasks,
    then expired metadata-only: its files stay the Delta table's, so every Delta file stays. A table
    PyIceberg wrote, one file and one manifest per append: its manifests rewritten, then compacted,
    its old snapshots expired and its orphans removed, each by executor tasks on both workers
    reading, writing and deleting objects; then upgraded to v3 (metadata only), its statistics
    computed and judged by health, one table per executor task. The jobs run one after another in
    one application (each as spark-submit runs it alone), so the test pays for one driver and two
    executors, not nine."""
    local = tmp_path / "delta"
    delta_table_in_versions(local, VERSIONS)
    pafs.copy_files(str(local), DELTA_SOURCE, destination_filesystem=s3_server.filesystem())
    delta_files = objects(s3_server, DELTA_SOURCE)
    table = pyiceberg_appended(s3_server, rest_server, "db.cluster_appended", VERSIONS)
    originals = {t.file.file_path for t in table.scan().plan_files()}
    data = table.location().split("://", 1)[1] + "/data"
    planted = [f"{data}/left-by-a-failed-write-{i}.parquet" for i in range(6)]
    fs = s3_server.filesystem()
    for key in planted:
        with fs.open_output_stream(key) as out:
            out.write(b"not referenced")
    # Object stores keep no settable mtime: remove-orphans runs with a 2 s retention, seconds after
    # the planting (five jobs run before it).
    lake = ["--conf-file", str(lake_conf)]
    common = ["--table", "db.cluster_appended", *lake]
    converted_table = ["--table", "db.cluster_converted", *lake]
    plan: list[tuple[str, list[str]]] = [
        (
            "convert_delta.py",
            [
                *("--source", f"s3a://{DELTA_SOURCE}", "--target", "db.cluster_converted"),
                *("--engine", "spark", "--history", "all", *lake),
            ],
        ),
        (
            "expire_snapshots.py",
            [*converted_table, "--older-than", "0s", "--metadata-only", "--engine", "spark"],
        ),
        ("rewrite_manifests.py", [*common, "--engine", "spark"]),
        ("compact.py", [*common, "--target-file-size", "1024", "--rewrite-all"]),
        ("expire_snapshots.py", [*common, "--older-than", "0s", "--engine", "spark"]),
        (
            "remove_orphans.py",
            [*common, "--older-than", "2s", "--force-short-retention", "--engine", "spark"],
        ),
        ("backfill_row_lineage.py", common),
        ("compute_stats.py", common),
        ("health.py", ["--namespace", "db", "--tables", "cluster_*", *lake, "--engine", "spark"]),
    ]
    submitted = Submission.under(cluster, tmp_path, "jobs").run_plan(plan, jars=runtime_jars(S3_ROLE))
    runs = submitted.runs()
    assert [r["script"] for r in runs] == [script for script, _ in plan]
    converted, expired_metadata, manifests, compacted, expired, removed, backfilled, stats, health = runs

    # The conversion: manifests written by executor tasks; expiring it deleted metadata only.
    assert converted["result"]["metrics"]["data_files"] == VERSIONS, converted
    assert converted["result"]["metrics"]["snapshots_committed"] == VERSIONS, converted
    start, end = converted["ms"]
    assert [t for t, _ in submitted.tasks().launches if start <= t <= end], "no executor wrote a manifest"
    assert expired_metadata["result"]["metrics"]["deleted_data_files_count"] == 0, expired_metadata
    assert expired_metadata["result"]["metrics"]["deleted_manifest_lists_count"] >= 1, expired_metadata
    assert objects(s3_server, DELTA_SOURCE) == delta_files
    converted_table = pyiceberg_table(s3_server, rest_server, "db.cluster_converted")
    assert sorted(converted_table.scan().to_arrow().column("id").to_pylist()) == EXPECTED

    assert manifests["result"]["metrics"]["rewritten_manifests_count"] == VERSIONS, manifests
    assert manifests["result"]["metrics"]["added_manifests_count"] == 1, manifests
    assert compacted["result"]["metrics"]["rewritten_data_files_count"] == VERSIONS, compacted
    assert compacted["result"]["metrics"]["added_data_files_count"] >= 2, compacted
    assert expired["result"]["metrics"]["engine"] == "spark", expired
    assert expired["result"]["metrics"]["deleted_data_files_count"] == VERSIONS, expired
    assert not {p.split("://", 1)[1] for p in originals} & objects(s3_server, f"{S3_BUCKET}/")
    assert removed["result"]["metrics"]["orphan_file_count"] == len(planted), removed
    assert not set(planted) & objects(s3_server, f"{S3_BUCKET}/")
    for run in (manifests, compacted, expired, removed):
        submitted.assert_both_workers_ran_tasks_of(run)
    assert backfilled["result"]["job"] == "backfill-row-lineage", backfilled

    table = pyiceberg_table(s3_server, rest_server, "db.cluster_appended")
    assert table.metadata.format_version == 3
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == APPENDED
    assert stats["result"]["metrics"]["ndv"] == {"id": len(APPENDED)}, stats
    (registered,) = table.metadata.statistics
    assert registered.statistics_path == stats["result"]["metrics"]["statistics_file"]
    judged = {t["table"] for t in health["result"]["tables"]}
    assert {"db.cluster_appended", "db.cluster_converted"} <= judged, health
    start, end = health["ms"]
    assert [t for t, _ in submitted.tasks().launches if start <= t <= end], "no executor judged a table"
