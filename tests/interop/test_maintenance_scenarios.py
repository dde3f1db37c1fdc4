"""More of issue 6's scenarios: unused specs and schemas cleaned like Iceberg's action, references
spelled under another authority (prefix mismatch), and one Spark job description per phase."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.commit.producer import SnapshotChange
from tablekeeper.commit.transaction import Committer
from tablekeeper.errors import SafetyRefusal
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.spark import reachability
from tests.conftest import FS_CATALOG
from tests.interop.test_expire_snapshots import _files
from tests.interop.test_remove_orphans import _age, _plant

pytestmark = pytest.mark.spark


def _shape(catalog, identifier: str) -> tuple[set[int], set[int]]:  # type: ignore[no-untyped-def]
    meta = catalog.require(identifier).metadata
    return {s.spec_id for s in meta.partition_specs}, {s.schema_id for s in meta.schemas}


def test_clean_expired_metadata_removes_what_icebergs_action_removes(
    spark, catalogs, warehouse: Path
) -> None:  # type: ignore[no-untyped-def]
    name = "expire_clean_meta"
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN w DOUBLE")
    spark.sql(f"INSERT INTO {table} VALUES (3, 'a', 1.5)")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(2, id)")
    spark.sql(f"ALTER TABLE {table} DROP PARTITION FIELD cat")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN z STRING")
    # Every live file rewritten under the newest spec: the older specs and schemas only live on
    # in snapshots that will expire.
    spark.sql(f"INSERT OVERWRITE {table} SELECT id, cat, w, 'z' FROM {table}")
    root = warehouse / "files" / "db" / name
    backup = warehouse / f"backup_{name}"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(root, backup)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    identifier = f"db.{name}"
    specs_before, schemas_before = _shape(catalog, identifier)
    assert len(specs_before) >= 3 and len(schemas_before) >= 3
    before = _files(root)
    rows_before = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table}").collect())
    now = int(time.time() * 1000) + 1

    jvm = spark.sparkContext._jvm
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    actions.expireSnapshots(loaded).expireOlderThan(now).retainLast(1).cleanExpiredMetadata(True).execute()
    iceberg_shape = _shape(catalog, identifier)
    deleted_by_iceberg = before - _files(root)

    shutil.rmtree(root)
    shutil.copytree(backup, root)
    spark.sql(f"REFRESH TABLE {table}")
    assert _shape(catalog, identifier) == (specs_before, schemas_before)
    run_expire(
        ExpireSnapshotsOptions(
            table=identifier, older_than=str(now), retain_last=1, clean_expired_metadata=True
        ),
        catalog,
        identifier,
        spark,
    )
    ours = _shape(catalog, identifier)
    assert ours == iceberg_shape
    assert ours[0] < specs_before and ours[1] < schemas_before  # something was actually cleaned
    # Metadata files differ (each commit writes its own); the data and manifests removed do not.
    assert {p for p in before - _files(root) if not p.endswith(".metadata.json")} == {
        p for p in deleted_by_iceberg if not p.endswith(".metadata.json")
    }
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table}").collect()) == rows_before


def _mismatched_table(spark, catalogs, warehouse: Path, name: str) -> tuple[str, Path, Path, Path]:  # type: ignore[no-untyped-def]
    """A table with one data file referenced as ``file://otherhost/...`` (the same path under
    another authority), a genuine orphan, and everything old."""
    table = f"{FS_CATALOG}.db.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    root = warehouse / "files" / "db" / name
    moved = _plant(root / "data" / "moved.parquet", 5)
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    spelled = f"file://otherhost{moved}"
    change = SnapshotChange(
        "append",
        added_files=(
            DataFile(
                content=DATA,
                file_path=spelled,
                file_format="PARQUET",
                partition=(),
                record_count=1,
                file_size_in_bytes=1,
            ),
        ),
    )
    Committer(catalog, f"db.{name}").commit_snapshot(change)
    stray = _plant(root / "data" / "stray.parquet", 5)
    _age(root, 5)
    return f"db.{name}", root, moved, stray


def test_prefix_mismatch_is_an_error_unless_told_how_to_treat_it(spark, catalogs, warehouse: Path) -> None:  # type: ignore[no-untyped-def]
    identifier, root, moved, stray = _mismatched_table(spark, catalogs, warehouse, "orphans_mismatch")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    before = _files(root)
    with pytest.raises(SafetyRefusal, match=r"another scheme or authority.*moved\.parquet"):
        run_orphans(RemoveOrphansOptions(table=identifier), catalog, identifier, spark)
    assert _files(root) == before

    def dry(**kw: object) -> set[str]:
        result = run_orphans(
            RemoveOrphansOptions(table=identifier, dry_run=True, **kw), catalog, identifier, spark
        )  # type: ignore[arg-type]
        assert result.files is not None
        return {p.removeprefix("file:") for p in result.files}

    assert dry(prefix_mismatch="ignore") == {str(stray)}
    assert dry(equal_authorities={"otherhost": ""}) == {str(stray)}
    assert dry(prefix_mismatch="delete") == {str(stray), str(moved)}
    assert _files(root) == before  # dry runs

    result = run_orphans(
        RemoveOrphansOptions(table=identifier, prefix_mismatch="ignore"), catalog, identifier, spark
    )
    assert result.metrics["deleted_files_count"] == 1
    assert moved.exists() and not stray.exists()
    again = run_orphans(
        RemoveOrphansOptions(table=identifier, prefix_mismatch="ignore"), catalog, identifier, spark
    )
    assert again.metrics["deleted_files_count"] == 0  # a second run is a no-op


def _descriptions(spark, after: int = -1) -> tuple[int, list[str]]:  # type: ignore[no-untyped-def]
    """(highest job id, descriptions of the jobs with ids above ``after``) from the driver's
    status store."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    top, out = after, []
    for i in range(jobs.size()):
        job = jobs.apply(i)
        top = max(top, int(job.jobId()))
        if int(job.jobId()) > after and job.description().isDefined():
            out.append(str(job.description().get()))
    return top, out


def test_each_phase_shows_its_own_job_description(  # type: ignore[no-untyped-def]
    spark, catalogs, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    identifier, _, _, _ = _mismatched_table(spark, catalogs, warehouse, "orphans_phases")
    catalog = catalog_for(catalogs.get(FS_CATALOG))
    last, _ = _descriptions(spark)
    # A few manifest lists are read on the driver, in no job, and the location is listed in the
    # comparison's own tasks: one phase.
    run_orphans(
        RemoveOrphansOptions(table=identifier, prefix_mismatch="ignore", engine="spark", dry_run=True),
        catalog,
        identifier,
        spark,
    )
    last, seen = _descriptions(spark, last)
    phases = {d.split(": ", 1)[1].split(" ")[0] for d in seen if d.startswith("remove-orphans: ")}
    assert phases == {"compare"}, seen
    monkeypatch.setattr(reachability, "DRIVER_LISTS", 0)  # every list read by executors
    run_orphans(
        RemoveOrphansOptions(table=identifier, prefix_mismatch="ignore", engine="spark"),
        catalog,
        identifier,
        spark,
    )
    last, seen = _descriptions(spark, last)
    phases = {d.split(": ", 1)[1].split(" ")[0] for d in seen if d.startswith("remove-orphans: ")}
    assert phases == {"files", "compare", "delete"}, seen

    spark.sql(f"INSERT INTO {FS_CATALOG}.{identifier} VALUES (2)")
    last, _ = _descriptions(spark, last)
    run_expire(
        ExpireSnapshotsOptions(table=identifier, older_than="0s", retain_last=1, engine="spark"),
        catalog,
        identifier,
        spark,
    )
    _, seen = _descriptions(spark, last)
    assert all(d.startswith("expire-snapshots: ") for d in seen), seen
    assert any("retained snapshots" in d for d in seen)
    assert any("expired snapshots" in d for d in seen)
    assert any("delete unreachable files" in d for d in seen)
