"""Incremental convert-delta carrying Delta's row ids onto a target another writer appended to
since the last run: Delta's next ids (above its high-water mark) are the ones that writer took
from next-row-id, so the run assigns fresh ids and says why, and later runs stay fresh."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import CatalogsConfig
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.tables.iceberg import iter_live_entries
from tests.unit.tables.test_delta import write_commit

PROTOCOL = {
    "protocol": {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["rowTracking", "domainMetadata"],
    }
}
METADATA = {
    "metaData": {
        "id": "t",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(
            {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}}]}
        ),
        "partitionColumns": [],
        "configuration": {"delta.enableRowTracking": "true"},
        "createdTime": 0,
    }
}


def _append(root: Path, version: int, name: str, base_row_id: int, rows: int) -> None:
    """A Delta commit adding one file of ``rows`` rows with ids from ``base_row_id``."""
    pq.write_table(pa.table({"x": pa.array(range(rows), pa.int64())}), root / name)
    actions: list[dict[str, Any]] = [PROTOCOL, METADATA] if version == 0 else []
    actions += [
        {
            "add": {
                "path": name,
                "partitionValues": {},
                "size": (root / name).stat().st_size,
                "modificationTime": 0,
                "dataChange": True,
                "stats": json.dumps({"numRecords": rows}),
                "baseRowId": base_row_id,
                "defaultRowCommitVersion": version,
            }
        },
        {
            "domainMetadata": {
                "domain": "delta.rowTracking",
                "configuration": json.dumps({"rowIdHighWaterMark": base_row_id + rows - 1}),
                "removed": False,
            }
        },
    ]
    write_commit(root, version, actions)


def test_an_iceberg_append_between_runs_makes_the_next_run_fresh(
    tmp_path: Path, catalogs: CatalogsConfig
) -> None:
    catalog = catalog_for(catalogs.get("tk"))
    root = tmp_path / "delta"
    root.mkdir()
    _append(root, 0, "a.parquet", 0, 10)
    target = "foreign.ids"

    def convert() -> dict[str, Any]:
        options = ConvertDeltaOptions(source=str(root), target=target, mode="incremental", format_version=3)
        return run_convert(options, catalog).metrics

    assert convert()["row_lineage"] == {"row_ids": "delta", "reason": None}
    _append(root, 1, "b.parquet", 10, 5)
    assert convert()["row_lineage"] == {"row_ids": "delta", "reason": None}
    assert catalog.require(target).metadata.next_row_id == 15

    # Another writer appends 3 rows: they take ids 15-17 from next-row-id.
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": pa.array([1, 2, 3], pa.int64())}), other)
    added = DataFile(
        content=DATA,
        file_path=str(other),
        file_format="PARQUET",
        partition=(),
        record_count=3,
        file_size_in_bytes=other.stat().st_size,
    )
    Committer(catalog, target).commit_snapshot(SnapshotChange("append", added_files=(added,)))
    assert catalog.require(target).metadata.next_row_id == 18

    _append(root, 2, "c.parquet", 15, 4)  # Delta's ids 15-18: the same ids
    lineage = convert()["row_lineage"]
    assert lineage["row_ids"] == "fresh" and "another writer added rows" in lineage["reason"]
    table = catalog.require(target)
    first_ids = {
        Path(e.data_file.file_path).name: e.data_file.first_row_id
        for e in iter_live_entries(table.io, table.metadata, table.metadata.current_snapshot())
    }
    # Delta's files before keep their ids; c.parquet's come after the other writer's.
    assert first_ids == {"a.parquet": 0, "b.parquet": 10, "other.parquet": 15, "c.parquet": 18}
    _append(root, 3, "d.parquet", 19, 1)
    assert convert()["row_lineage"] == {
        "row_ids": "fresh",
        "reason": "an earlier run gave the target fresh row ids",
    }
