"""Whether a converted file's rows keep Delta's row ids in Iceberg: Delta's materialized columns
must carry the field ids Iceberg reads them by, and ids are carried only under a known high-water
mark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.delta.models import AddFile
from tablekeeper.delta_row_ids import ROW_COMMIT_VERSION_FIELD_ID, ROW_ID_FIELD_ID, materialized_ids
from tablekeeper.io import FileIO
from tablekeeper.jobs.convert_delta.lineage import plan_lineage
from tablekeeper.tables.delta import load_snapshot

ROW_ID = "_row-id-col-1"
COMMIT = "_row-commit-version-col-1"
COLUMNS = {ROW_ID: ROW_ID_FIELD_ID, COMMIT: ROW_COMMIT_VERSION_FIELD_ID}


def parquet(path: Path, ids: dict[str, int | None]) -> AddFile:
    fields = [pa.field("x", pa.int64())]
    for name, fid in ids.items():
        meta = {b"PARQUET:field_id": str(fid).encode()} if fid is not None else None
        fields.append(pa.field(name, pa.int64(), metadata=meta))
    schema = pa.schema(fields)
    pq.write_table(pa.table({f.name: [1] for f in schema}, schema=schema), path)
    return AddFile(path.name, str(path), {}, path.stat().st_size, 0, True)


@pytest.mark.parametrize(
    ("ids", "unsound"),
    [
        ({}, None),  # no materialized column: ids are baseRowId + position
        ({ROW_ID: ROW_ID_FIELD_ID, COMMIT: ROW_COMMIT_VERSION_FIELD_ID}, None),
        ({ROW_ID: None}, ROW_ID),
        ({ROW_ID: ROW_ID_FIELD_ID, COMMIT: None}, COMMIT),  # commit versions Iceberg cannot see
        ({ROW_ID: ROW_ID_FIELD_ID, COMMIT: ROW_ID_FIELD_ID}, COMMIT),
    ],
)
def test_materialized_columns_need_icebergs_field_ids(
    tmp_path: Path, ids: dict[str, int | None], unsound: str | None
) -> None:
    add = parquet(tmp_path / "f.parquet", ids)
    reason = materialized_ids(FileIO.for_location(str(tmp_path)), add, COLUMNS)
    if unsound is None:
        assert reason is None
    else:
        assert reason is not None and unsound in reason


def _log(root: Path) -> None:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    actions = [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": [],
                "writerFeatures": ["rowTracking", "domainMetadata"],
            }
        },
        {
            "metaData": {
                "id": "t",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(
                    {
                        "type": "struct",
                        "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}}],
                    }
                ),
                "partitionColumns": [],
                "configuration": {"delta.enableRowTracking": "true"},
                "createdTime": 0,
            }
        },
    ]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_no_high_water_mark_carries_only_where_the_table_is_known_empty(tmp_path: Path) -> None:
    _log(tmp_path)
    snap = load_snapshot(str(tmp_path))
    assert snap.num_files == 0 and snap.row_tracking.high_water_mark is None
    empty = plan_lineage(snap, {}, False, 3)
    assert empty is not None and empty.carry and empty.high_water_mark == -1
    # The executors' snapshot holds no files whatever the table holds: the count is unknown.
    unknown = plan_lineage(snap, {}, False, 3, files_known=False)
    assert unknown is not None and not unknown.carry
    assert unknown.reason is not None and "high-water mark" in unknown.reason
