"""A partitioned Iceberg table committed by tablekeeper, without a JVM: two specs, position
deletes (v2) or a deletion vector (v3), an equality delete, and a partition emptied by a delete,
the files named in manifests only (nothing reads their rows)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, POSITION_DELETES, DataFile
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import LONG, STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata

SCHEMA = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "cat", STRING)))
SPEC0 = PartitionSpec(0, (PartitionField(2, 1000, "cat", "identity"),))
SPEC1 = PartitionSpec(1, (*SPEC0.fields, PartitionField(1, 1001, "id_bucket", "bucket[2]")))


def evolved_table(root: Path, version: int) -> tuple[SqlCatalog, list[int]]:
    """``db.t``: a1 and b1 in spec 0; spec 1 added; a2 in spec 1; a position delete file (v2) or
    a DV (v3) against a1 and an equality delete in spec 1; b1 deleted. Returns the snapshot ids."""
    catalog = SqlCatalog("c", f"sqlite:///{root}/c.db", str(root))
    location = catalog.default_table_location("db.t")
    meta = new_table_metadata(
        schema=SCHEMA,
        location=location,
        timestamp_ms=int(time.time() * 1000),
        spec=SPEC0,
        format_version=version,
    )
    catalog.create_table("db.t", meta)
    committer = Committer(catalog, "db.t")

    def commit(change: SnapshotChange) -> int:
        time.sleep(0.002)  # distinct snapshot timestamps: the newest one is each row's last update
        snapshot = committer.commit_snapshot(change).snapshot
        assert snapshot is not None
        return snapshot.snapshot_id

    a1 = DataFile(DATA, f"{location}/data/a1.parquet", "PARQUET", ("a",), 10, 100)
    b1 = DataFile(DATA, f"{location}/data/b1.parquet", "PARQUET", ("b",), 5, 50)
    ids = [commit(SnapshotChange("append", added_files=(a1, b1)))]
    committer.update_metadata(
        lambda base, now: replace(
            base,
            partition_specs=(SPEC0, SPEC1),
            default_spec_id=1,
            last_partition_id=1001,
            last_updated_ms=now,
        )
    )
    a2 = DataFile(DATA, f"{location}/data/a2.parquet", "PARQUET", ("a", 1), 20, 200, spec_id=1)
    ids.append(commit(SnapshotChange("append", added_files=(a2,))))
    if version == 2:
        positions = DataFile(POSITION_DELETES, f"{location}/data/p.parquet", "PARQUET", ("a",), 3, 30)
    else:
        positions = DataFile(
            POSITION_DELETES,
            f"{location}/data/dv.puffin",
            "PUFFIN",
            ("a",),
            3,
            40,
            referenced_data_file=a1.file_path,
            content_offset=4,
            content_size_in_bytes=30,
        )
    equality = DataFile(
        EQUALITY_DELETES,
        f"{location}/data/e.parquet",
        "PARQUET",
        ("a", 1),
        2,
        25,
        spec_id=1,
        equality_ids=(1,),
    )
    ids.append(commit(SnapshotChange("overwrite", added_files=(positions, equality))))
    ids.append(commit(SnapshotChange("delete", removed_paths=frozenset({b1.file_path}))))
    return catalog, ids
