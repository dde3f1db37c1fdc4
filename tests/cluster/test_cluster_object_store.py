"""Jobs on the cluster against tables in an S3-compatible store behind Iceberg's REST catalog (the
session's servers, tests/conftest.py), as production tables live: the executors reach the bucket
only through what the job's catalog file says (S3A for Spark's own reads and writes, pyarrow for
tablekeeper's tasks), with the README's S3 jars (conf/jars.txt role ``s3``) shipped by --jars.
PyIceberg, through the same REST catalog, reads each result."""

from __future__ import annotations

import time
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


def test_convert_from_the_bucket_then_expire_metadata_only(
    cluster: StandaloneCluster,
    s3_server: S3Endpoint,
    rest_server: RestCatalogServer,
    lake_conf: Path,
    tmp_path: Path,
) -> None:
    """A Delta table in the bucket converted into the REST catalog by executor tasks; its files stay
    the Delta table's, so expiring deletes metadata only and every Delta file stays."""
    local = tmp_path / "delta"
    delta_table_in_versions(local, VERSIONS)
    pafs.copy_files(str(local), DELTA_SOURCE, destination_filesystem=s3_server.filesystem())
    delta_files = objects(s3_server, DELTA_SOURCE)
    converted = Submission.under(cluster, tmp_path, "convert").run(
        "convert_delta.py",
        *("--source", f"s3a://{DELTA_SOURCE}", "--target", "db.cluster_converted", "--engine", "spark"),
        *("--history", "all"),
        *("--conf-file", str(lake_conf)),
        jars=runtime_jars(S3_ROLE),
    )
    assert converted.metrics["data_files"] == VERSIONS, converted.result
    assert converted.metrics["snapshots_committed"] == VERSIONS, converted.result
    table = pyiceberg_table(s3_server, rest_server, "db.cluster_converted")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == EXPECTED
    assert converted.tasks().succeeded, "no executor wrote a manifest"

    expired = Submission.under(cluster, tmp_path, "expire").run(
        "expire_snapshots.py",
        *("--table", "db.cluster_converted", "--older-than", "0s", "--metadata-only", "--engine", "spark"),
        *("--conf-file", str(lake_conf)),
        jars=runtime_jars(S3_ROLE),
    )
    assert expired.metrics["deleted_data_files_count"] == 0, expired.result
    assert expired.metrics["deleted_manifest_lists_count"] >= 1, expired.result
    assert objects(s3_server, DELTA_SOURCE) == delta_files
    table = pyiceberg_table(s3_server, rest_server, "db.cluster_converted")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == EXPECTED


def test_compact_expire_and_remove_orphans_on_the_bucket_run_on_both_workers(
    cluster: StandaloneCluster,
    s3_server: S3Endpoint,
    rest_server: RestCatalogServer,
    lake_conf: Path,
    tmp_path: Path,
) -> None:
    """A table PyIceberg wrote into the bucket, one file and one manifest per append: its manifests
    rewritten, its statistics computed, then compacted, its old snapshots expired and its orphans
    removed, each by executor tasks reading, writing and deleting objects; then upgraded to v3
    (metadata only) and judged by health, one table per executor task."""
    table = pyiceberg_appended(s3_server, rest_server, "db.cluster_appended", VERSIONS)
    originals = {t.file.file_path for t in table.scan().plan_files()}
    common = ("--table", "db.cluster_appended", "--conf-file", str(lake_conf))
    jars = runtime_jars(S3_ROLE)

    manifests = Submission.under(cluster, tmp_path, "manifests").run(
        "rewrite_manifests.py", *common, "--engine", "spark", jars=jars
    )
    assert manifests.metrics["rewritten_manifests_count"] == VERSIONS, manifests.result
    assert manifests.metrics["added_manifests_count"] == 1, manifests.result
    table = pyiceberg_table(s3_server, rest_server, "db.cluster_appended")
    assert len(table.current_snapshot().manifests(table.io)) == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == APPENDED
    manifests.assert_both_workers_ran_tasks()

    stats = Submission.under(cluster, tmp_path, "stats").run("compute_stats.py", *common, jars=jars)
    assert stats.metrics["ndv"] == {"id": len(APPENDED)}, stats.result
    (registered,) = pyiceberg_table(s3_server, rest_server, "db.cluster_appended").metadata.statistics
    assert registered.statistics_path == stats.metrics["statistics_file"]

    compacted = Submission.under(cluster, tmp_path, "compact").run(
        "compact.py", *common, *("--target-file-size", "1024", "--rewrite-all"), jars=jars
    )
    assert compacted.metrics["rewritten_data_files_count"] == VERSIONS, compacted.result
    assert compacted.metrics["added_data_files_count"] >= 2, compacted.result
    table = pyiceberg_table(s3_server, rest_server, "db.cluster_appended")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == APPENDED
    compacted.assert_both_workers_ran_tasks()

    expired = Submission.under(cluster, tmp_path, "expire").run(
        "expire_snapshots.py", *common, *("--older-than", "0s", "--engine", "spark"), jars=jars
    )
    assert expired.metrics["engine"] == "spark", expired.result
    assert expired.metrics["deleted_data_files_count"] == VERSIONS, expired.result
    assert not {p.split("://", 1)[1] for p in originals} & objects(s3_server, f"{S3_BUCKET}/")
    table = pyiceberg_table(s3_server, rest_server, "db.cluster_appended")
    assert len(table.snapshots()) == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == APPENDED
    expired.assert_both_workers_ran_tasks()

    data = table.location().split("://", 1)[1] + "/data"
    planted = [f"{data}/left-by-a-failed-write-{i}.parquet" for i in range(6)]
    fs = s3_server.filesystem()
    for key in planted:
        with fs.open_output_stream(key) as out:
            out.write(b"not referenced")
    time.sleep(2.5)  # object stores keep no settable mtime: the short retention below is forced
    removed = Submission.under(cluster, tmp_path, "orphans").run(
        "remove_orphans.py",
        *common,
        *("--older-than", "2s", "--force-short-retention", "--engine", "spark"),
        jars=jars,
    )
    assert removed.metrics["orphan_file_count"] == len(planted), removed.result
    assert not set(planted) & objects(s3_server, f"{S3_BUCKET}/")
    table = pyiceberg_table(s3_server, rest_server, "db.cluster_appended")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == APPENDED
    removed.assert_both_workers_ran_tasks()

    backfilled = Submission.under(cluster, tmp_path, "backfill").run(
        "backfill_row_lineage.py", *common, jars=jars
    )
    assert backfilled.result["job"] == "backfill-row-lineage", backfilled.result
    table = pyiceberg_table(s3_server, rest_server, "db.cluster_appended")
    assert table.metadata.format_version == 3
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == APPENDED

    health = Submission.under(cluster, tmp_path, "health").run(
        "health.py",
        *("--namespace", "db", "--tables", "cluster_*", "--conf-file", str(lake_conf), "--engine", "spark"),
        jars=jars,
    )
    assert "db.cluster_appended" in {t["table"] for t in health.result["tables"]}, health.result
    assert health.tasks().succeeded, "no executor judged a table"
