"""Every job on object storage behind Iceberg's REST catalog, as production tables live.

An S3-compatible server (S3Proxy) and Iceberg's own REST catalog test server run on loopback. The
tables sit in the bucket and are registered in that catalog; each job runs through the command line
against it, and Iceberg Spark, configured with the same REST catalog, reads every result. The
module ends by scanning all the output it collected for the configuration's secrets.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import CatalogsConfig, parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.cli import main
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.io.storage import configure_storage
from tests.interop.test_concurrent_commits import RETRY_PROPS, collect, start_workers
from tests.support.iceberg_writer import write_rows
from tests.support.object_store import S3_BUCKET, S3Endpoint
from tests.support.rest_catalog_server import REST_WAREHOUSE, RestCatalogServer

pytestmark = pytest.mark.spark

CATALOG = "lake"
DELTA_ROOT = f"s3a://{S3_BUCKET}/delta/events"


@dataclass
class Lake:
    conf: Path
    catalogs: CatalogsConfig
    s3: S3Endpoint
    secrets: tuple[str, ...]
    outputs: list[str] = field(default_factory=list)

    def fs(self) -> pafs.S3FileSystem:
        return self.s3.filesystem()


@pytest.fixture(scope="module")
def lake(
    spark: Any,
    s3_server: S3Endpoint,
    rest_server: RestCatalogServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Lake]:
    oauth_secret = "tkoauth" + secrets.token_hex(12)
    props = {
        **s3_server.properties(),
        "client.region": s3_server.region,
        "credential": f"tkclient:{oauth_secret}",
    }
    body = "".join(f"    {k}: '{v}'\n" for k, v in props.items())
    conf = tmp_path_factory.mktemp("lake") / "catalogs.yaml"
    conf.write_text(
        f"default: {CATALOG}\ncatalogs:\n  {CATALOG}:\n    type: rest\n"
        f"    uri: {rest_server.uri}\n    warehouse: {REST_WAREHOUSE}\n{body}"
    )
    catalogs = parse_catalogs(conf.read_text(), conf.parent)
    # The shared session reaches the bucket (S3A, executors) and knows the catalog as Iceberg Spark.
    configure_storage(catalogs.get(CATALOG).storage)
    for key, value in iceberg_catalog_conf(catalogs.get(CATALOG)).items():
        spark.conf.set(key, value)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    yield Lake(conf, catalogs, s3_server, (s3_server.secret_key, s3_server.access_key, oauth_secret))
    configure_storage({})  # later tests work on local disks


def tk(
    lake: Lake, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, *args: str
) -> tuple[int, dict[str, Any]]:
    caplog.clear()
    caplog.set_level(logging.DEBUG)  # every record reaches the scan, not only warnings
    code = main(["--log-level", "DEBUG", *args, "--catalog", CATALOG, "--conf-file", str(lake.conf)])
    out, err = capfd.readouterr()
    lake.outputs += [out, err, caplog.text]
    lines = [line for line in out.strip().splitlines() if line.startswith("{")]
    return code, json.loads(lines[-1]) if lines else {}


def ok(
    lake: Lake, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, *args: str
) -> dict[str, Any]:
    code, result = tk(lake, capfd, caplog, *args)
    assert code == 0, (result, lake.outputs[-2][-3000:])
    assert result["status"] in ("ok", "dry_run"), result
    return result


def rows(spark: Any, table: str, columns: str = "id, cat") -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(f"SELECT {columns} FROM {table}").collect())


def keys(lake: Lake, prefix: str) -> set[str]:
    infos = lake.fs().get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return {i.path for i in infos if i.type == pafs.FileType.File}


def small_table(spark: Any, name: str, batches: int = 6, version: int = 2) -> str:
    table = f"{CATALOG}.db.{name}"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version'='{version}')"
    )
    for b in range(batches):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CAST(id % 2 AS STRING) FROM range({b * 50}, {b * 50 + 50})"
        )
    return table


def test_convert_delta_from_the_bucket_into_the_rest_catalog(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    spark.sql(
        f"CREATE TABLE delta.`{DELTA_ROOT}` (id BIGINT, cat STRING) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    for b in range(3):
        ids = f"range({b * 100}, {b * 100 + 100})"
        spark.sql(f"INSERT INTO delta.`{DELTA_ROOT}` SELECT id, CAST(id % 3 AS STRING) FROM {ids}")
    spark.sql(f"DELETE FROM delta.`{DELTA_ROOT}` WHERE id % 10 = 0")  # deletion vectors
    expected = rows(spark, f"delta.`{DELTA_ROOT}`")
    assert len(expected) == 270

    result = ok(lake, capfd, caplog, "convert-delta", "--source", DELTA_ROOT, "--target", "db.events")
    assert result["metrics"]["snapshots_committed"] >= 1, result

    spark.sql(f"REFRESH TABLE {CATALOG}.db.events")
    assert rows(spark, f"{CATALOG}.db.events") == expected
    location = spark.sql(f"SELECT file FROM {CATALOG}.db.events.metadata_log_entries").collect()[-1][0]
    assert location.startswith(f"{REST_WAREHOUSE}/db/events/metadata/")

    # Incremental: one more Delta commit, and the catalog's table follows it.
    spark.sql(f"INSERT INTO delta.`{DELTA_ROOT}` VALUES (1000, 'x')")
    ok(
        lake,
        capfd,
        caplog,
        "convert-delta",
        "--source",
        DELTA_ROOT,
        "--target",
        "db.events",
        "--mode",
        "incremental",
    )
    spark.sql(f"REFRESH TABLE {CATALOG}.db.events")
    assert rows(spark, f"{CATALOG}.db.events") == sorted([*expected, (1000, "x")])


def test_converted_history_is_created_in_one_request_with_our_ids(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    """A full conversion with history goes into the REST catalog as one create transaction: every
    version a snapshot, schemas evolving by Delta's column ids, nothing visible before the end."""
    root = f"s3a://{S3_BUCKET}/delta/history"
    spark.sql(f"CREATE TABLE delta.`{root}` (id BIGINT, cat STRING) USING delta")
    spark.sql(f"INSERT INTO delta.`{root}` SELECT id, CAST(id % 2 AS STRING) FROM range(0, 40)")
    spark.sql(f"ALTER TABLE delta.`{root}` ADD COLUMNS (note STRING)")
    spark.sql(f"INSERT INTO delta.`{root}` VALUES (100, 'x', 'added later')")
    spark.sql(f"DELETE FROM delta.`{root}` WHERE id < 5")
    versions = [r[0] for r in spark.sql(f"DESCRIBE HISTORY delta.`{root}`").collect()]
    result = ok(
        lake, capfd, caplog, "convert-delta", "--source", root, "--target", "db.history", "--history", "all"
    )
    assert result["metrics"]["snapshots_committed"] == len(versions), result
    table = f"{CATALOG}.db.history"
    spark.sql(f"REFRESH TABLE {table}")
    by_version = {
        int(r[1]): r[0]
        for r in spark.sql(
            f"SELECT snapshot_id, summary['tablekeeper.delta-version'] FROM {table}.snapshots"
        ).collect()
    }
    assert sorted(by_version) == sorted(versions)
    for v, snapshot_id in by_version.items():
        delta = rows(spark, f"delta.`{root}` VERSION AS OF {v}", "*")
        assert rows(spark, f"{table} VERSION AS OF {snapshot_id}", "*") == delta, v
    # One metadata file: the table was created with all of it.
    assert len(spark.sql(f"SELECT * FROM {table}.metadata_log_entries").collect()) == 1


def test_compact_then_expire_snapshots(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    table = small_table(spark, "small")
    before = rows(spark, table)
    files_before = spark.sql(f"SELECT count(*) FROM {table}.files").collect()[0][0]
    assert files_before == 12

    result = ok(lake, capfd, caplog, "compact", "--table", "db.small", "--min-input-files", "2")
    assert result["status"] == "ok"
    spark.sql(f"REFRESH TABLE {table}")
    assert rows(spark, table) == before
    assert spark.sql(f"SELECT count(*) FROM {table}.files").collect()[0][0] == 2

    data = f"{S3_BUCKET}/rest/db/small/data"
    assert len(keys(lake, data)) == 14  # the 12 small files are still needed by old snapshots
    # The compacted snapshot's partition statistics, committed as a REST set-partition-statistics.
    stats = ok(lake, capfd, caplog, "compute-stats", "--table", "db.small", "--partition-stats-only")
    pstats = stats["metrics"]["partition_statistics_file"]
    assert stats["metrics"]["partitions"] == 2
    assert pstats.startswith(f"s3://{S3_BUCKET}/rest/db/small/metadata/partition-stats-")
    now = datetime.now(timezone.utc).isoformat()
    dry = ok(lake, capfd, caplog, "expire-snapshots", "--table", "db.small", "--older-than", now, "--dry-run")
    assert keys(lake, data) and len(keys(lake, data)) == 14
    result = ok(lake, capfd, caplog, "expire-snapshots", "--table", "db.small", "--older-than", now)
    assert result["status"] == "ok" and dry["status"] == "dry_run"
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0] == 1
    assert rows(spark, table) == before
    live = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    assert {f"s3://{k}" for k in keys(lake, data)} == live  # only what the current snapshot reaches
    # The current snapshot's partition statistics file stays, registered, as Java loads it.
    assert pstats.removeprefix("s3://") in keys(lake, f"{S3_BUCKET}/rest/db/small/metadata")
    loaded = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    assert [f.path() for f in loaded.partitionStatisticsFiles()] == [pstats]


def test_remove_orphans_matches_s3a_listing_to_s3_metadata(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    table = small_table(spark, "orphans", batches=2)
    before = rows(spark, table)
    fs = lake.s3.filesystem(allow_delayed_open=True)
    planted = {
        f"{S3_BUCKET}/rest/db/orphans/data/cat=0/lost-task-00001.parquet",
        f"{S3_BUCKET}/rest/db/orphans/metadata/00099-crashed.metadata.json",
    }
    for key in planted:
        with fs.open_output_stream(key) as out:
            out.write(b"orphan")
    everything = keys(lake, f"{S3_BUCKET}/rest/db/orphans")
    time.sleep(2.5)
    # The metadata spells locations s3://; the scan is asked for s3a://, so the listing is too.
    args = ["remove-orphans", "--table", "db.orphans", "--location", f"s3a://{S3_BUCKET}/rest/db/orphans"]
    args += ["--older-than", "2s", "--force-short-retention"]
    dry = ok(lake, capfd, caplog, *args, "--dry-run")
    assert dry["metrics"]["orphan_file_count"] == 2, dry
    assert set(dry["files"]) == {f"s3a://{k}" for k in planted}  # spelled as the scan was asked
    assert keys(lake, f"{S3_BUCKET}/rest/db/orphans") == everything
    result = ok(lake, capfd, caplog, *args)
    assert result["metrics"]["deleted_files_count"] == 2, result
    assert keys(lake, f"{S3_BUCKET}/rest/db/orphans") == everything - planted
    spark.sql(f"REFRESH TABLE {table}")
    assert rows(spark, table) == before


def test_remove_orphans_on_spark_from_an_s3_inventory(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    """The Spark engine reads an S3 Inventory report of the whole bucket (Parquet, three data
    files, one task each) and finds what its listing finds; the orphans it deletes are those."""
    from tablekeeper.io import FileIO
    from tests.support.inventories import listing, write_s3

    table = small_table(spark, "inventoried", batches=2)
    before = rows(spark, table)
    fs = lake.s3.filesystem(allow_delayed_open=True)
    planted = {
        f"{S3_BUCKET}/rest/db/inventoried/data/cat=0/lost-task-00002.parquet",
        f"{S3_BUCKET}/rest/db/inventoried/metadata/00098-crashed.metadata.json",
    }
    for key in planted:
        with fs.open_output_stream(key) as out:
            out.write(b"orphan")
    time.sleep(1.1)
    args = ["remove-orphans", "--table", "db.inventoried", "--older-than", "1s", "--force-short-retention"]
    args += ["--engine", "spark"]
    listed = ok(lake, capfd, caplog, *args, "--dry-run")
    io = FileIO.for_location(f"s3://{S3_BUCKET}/rest")

    def report() -> str:  # of every table of the bucket, taken now (newer than the cut-off)
        listed = listing(io, f"s3://{S3_BUCKET}", S3_BUCKET)
        return write_s3(
            io, f"s3://{S3_BUCKET}/reports", S3_BUCKET, listed, "Parquet", int(time.time() * 1000), files=3
        )

    dry = ok(lake, capfd, caplog, *args, "--dry-run", "--inventory", report())
    assert set(dry["files"]) == set(listed["files"]) == {f"s3://{k}" for k in planted}, (dry, listed)
    everything = keys(lake, f"{S3_BUCKET}/rest/db/inventoried")
    result = ok(lake, capfd, caplog, *args, "--inventory", report())
    assert result["metrics"]["engine"] == "spark" and result["metrics"]["deleted_files_count"] == 2, result
    assert keys(lake, f"{S3_BUCKET}/rest/db/inventoried") == everything - planted
    spark.sql(f"REFRESH TABLE {table}")
    assert rows(spark, table) == before


def test_backfill_row_lineage(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    table = small_table(spark, "lineage", batches=3)
    before = rows(spark, table)
    ok(lake, capfd, caplog, "backfill-row-lineage", "--table", "db.lineage")
    spark.sql(f"REFRESH TABLE {table}")
    props = dict(spark.sql(f"SHOW TBLPROPERTIES {table}").collect())
    assert props.get("format-version") == "3"
    assert rows(spark, table) == before
    ids = spark.sql(
        f"SELECT count(DISTINCT _row_id), count(*), min(_row_id), max(_row_id) FROM {table}"
    ).collect()[0]
    assert ids[0] == ids[1] == len(before) and ids[2] == 0 and ids[3] == len(before) - 1


def test_credentials_the_catalog_vends_reach_driver_and_executors(  # type: ignore[no-untyped-def]
    spark, lake: Lake, rest_server: RestCatalogServer, capfd, caplog
) -> None:
    """A catalog entry with no keys at all: only what the server vends with the table can work."""
    table = small_table(spark, "vended", batches=4)
    before = rows(spark, table)
    conf = lake.conf.parent / "vending.yaml"
    conf.write_text(
        f"catalogs:\n  vend:\n    type: rest\n    uri: {rest_server.uri}\n    warehouse: {REST_WAREHOUSE}\n"
        f"    s3.endpoint: {lake.s3.endpoint}\n    s3.region: {lake.s3.region}\n"
    )
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    code = main(
        [
            *("--log-level", "DEBUG", "compact", "--table", "db.vended", "--min-input-files", "2"),
            *("--catalog", "vend", "--conf-file", str(conf)),
        ]
    )
    out, err = capfd.readouterr()
    lake.outputs += [out, err, caplog.text]
    assert code == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["metrics"]["added_data_files_count"] == 2
    assert "vended storage settings for db.vended" in caplog.text
    spark.sql(f"REFRESH TABLE {table}")
    assert rows(spark, table) == before
    configure_storage(lake.catalogs.get(CATALOG).storage)  # back to the keyed entry for what follows


class _Interleaved:
    """The REST catalog, with an Iceberg Spark commit landing right after tablekeeper loads its base."""

    def __init__(self, inner: Any, spark: Any, table: str) -> None:
        self.inner, self.spark, self.table, self.loads = inner, spark, table, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def require(self, identifier: str) -> Any:
        loaded = self.inner.require(identifier)
        self.loads += 1
        if self.loads == 2:  # the base of the first commit attempt
            self.spark.sql(f"INSERT INTO {self.table} VALUES (7001, 'spark')")
        return loaded


def test_concurrent_commits_with_iceberg_spark(spark, lake: Lake, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = f"{CATALOG}.db.conc"
    retry = ", ".join(f"'{k}'='{v}'" for k, v in RETRY_PROPS.items())  # both engines read these
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, writer STRING) USING iceberg "
        f"TBLPROPERTIES ('format-version'='2', {retry})"
    )
    catalog = catalog_for(lake.catalogs.get(CATALOG))

    # A commit whose base went stale gets 409, refreshes and lands on top of Spark's.
    racing = _Interleaved(catalog, spark, table)
    files = write_rows(catalog.load_table("db.conc").metadata, [{"id": -1, "writer": "race"}])
    result = Committer(racing, "db.conc").commit_snapshot(SnapshotChange("append", added_files=tuple(files)))  # type: ignore[arg-type]
    assert result.attempts == 2
    spark.sql(f"REFRESH TABLE {table}")
    assert rows(spark, table, "id, writer") == [(-1, "race"), (7001, "spark")]

    # Two tablekeeper processes and Iceberg Spark append at once: every commit lands once.
    procs = start_workers(lake.conf, CATALOG, "db.conc")
    errors: list[BaseException] = []

    def spark_appends() -> None:
        try:
            for i in range(4):
                spark.sql(f"INSERT INTO {table} VALUES ({90_000 + i}, 'spark')")
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=spark_appends)
    thread.start()
    tk_files = collect(procs)
    thread.join(timeout=600)
    assert not errors, errors
    spark.sql(f"REFRESH TABLE {table}")
    got = rows(spark, table, "id, writer")
    tk_rows = [r for r in got if r[1].startswith("tk")]
    assert len(tk_rows) == len(tk_files) and len({r[0] for r in tk_rows}) == len(tk_files)
    assert [r for r in got if r[1] == "spark"] == [
        (7001, "spark"),
        *[(90_000 + i, "spark") for i in range(4)],
    ]
    live = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    assert set(tk_files) <= live


def test_errors_name_the_problem(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    code, result = tk(lake, capfd, caplog, "compact", "--table", "db.missing")
    assert code == 2
    assert "db.missing not found in catalog lake" in result["error"]


def test_doctor_masks_catalog_secrets(lake: Lake, capfd) -> None:  # type: ignore[no-untyped-def]
    main(["doctor", "--json", "--conf-file", str(lake.conf)])
    out, err = capfd.readouterr()
    lake.outputs += [out, err]
    report = json.loads(out)
    props = next(c for c in report["catalogs"] if c["name"] == CATALOG)["properties"]
    assert props["s3.secret-access-key"] == "***" and props["credential"] == "***"
    assert props["s3.endpoint"] == lake.s3.endpoint


def test_no_secret_in_any_output(spark, lake: Lake, capfd, caplog) -> None:  # type: ignore[no-untyped-def]
    """Every result, log line and error of this module (it runs last), plus a failing job's."""
    code, result = tk(lake, capfd, caplog, "expire-snapshots", "--table", "db.nowhere", "--dry-run")
    assert code == 2 and result["status"] == "failed"
    text = "\n".join(lake.outputs)
    assert '"job": "expire-snapshots"' in text or '"job":"expire-snapshots"' in text
    for secret in lake.secrets:
        assert secret not in text
