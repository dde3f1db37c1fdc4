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


def _file(root: Path, name: str, rows: int) -> DataFile:
    pq.write_table(pa.table({"x": pa.array(range(rows), pa.int64())}), root / name)
    return DataFile(
        content=DATA,
        file_path=str(root / name),
        file_format="PARQUET",
        partition=(),
        record_count=rows,
        file_size_in_bytes=(root / name).stat().st_size,
    )


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

    # A rewrite (operation replace) moves next-row-id but gives no row a new id: still carried.
    compacted = _file(tmp_path, "compacted.parquet", 10)
    rewrite = SnapshotChange(
        "replace", added_files=(compacted,), removed_paths=frozenset({str(root / "a.parquet")})
    )
    Committer(catalog, target).commit_snapshot(rewrite)
    assert catalog.require(target).metadata.next_row_id > 15
    _append(root, 2, "b2.parquet", 15, 1)
    assert convert()["row_lineage"] == {"row_ids": "delta", "reason": None}
    after = catalog.require(target).metadata.next_row_id

    # Another writer appends 3 rows: they take ids from next-row-id on.
    other = _file(tmp_path, "other.parquet", 3)
    Committer(catalog, target).commit_snapshot(SnapshotChange("append", added_files=(other,)))
    assert catalog.require(target).metadata.next_row_id == after + 3

    _append(root, 3, "c.parquet", 16, 4)  # Delta's next ids, which may be the ones that writer took
    lineage = convert()["row_lineage"]
    assert lineage["row_ids"] == "fresh" and "another writer added rows" in lineage["reason"]
    table = catalog.require(target)
    first_ids = {
        Path(e.data_file.file_path).name: e.data_file.first_row_id
        for e in iter_live_entries(table.io, table.metadata, table.metadata.current_snapshot())
    }
    # Delta's files before keep their ids; c.parquet's come after the other writer's.
    assert first_ids["b.parquet"] == 10 and first_ids["b2.parquet"] == 15
    assert first_ids["other.parquet"] == after and first_ids["c.parquet"] == after + 3
    _append(root, 4, "d.parquet", 20, 1)
    assert convert()["row_lineage"] == {
        "row_ids": "fresh",
        "reason": "an earlier run gave the target fresh row ids",
    }
