"""rewrite-position-deletes end to end on the driver (the group tasks run in-process): a v3 table
(upgraded from v2) whose position deletes are held in Parquet, ORC and Avro files. Every file is
read, the DVs written hold every position, and no delete file the run did not read is removed."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.iceberg.content import POSITION_DELETES, DataFile
from tablekeeper.iceberg.position_delete_merge import read_position_deletes, write_position_delete_file
from tablekeeper.iceberg.puffin import deserialize_dv
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata, upgrade_format_version
from tablekeeper.io import FileIO
from tablekeeper.jobs import rewrite_position_deletes as job
from tablekeeper.spark.position_deletes import rewrite_group
from tablekeeper.tables.iceberg import live_files
from tests.support.delete_files import avro_deletes, orc_deletes
from tests.support.iceberg_writer import write_rows

SCHEMA = Schema(0, (NestedField(1, "id", LONG, True),))
IDENT = "db.t"


def _delete_file(location: str, fmt: str, data: bytes, rows: int, referenced: str | None) -> DataFile:
    FileIO.for_location(location).write(location, data)
    return DataFile(
        POSITION_DELETES, location, fmt, (), rows, len(data), spec_id=0, referenced_data_file=referenced
    )


def _table(tmp_path: Path) -> tuple[SqlCatalog, list[DataFile], list[DataFile]]:
    catalog = SqlCatalog("t", f"sqlite:///{tmp_path}/c.db", str(tmp_path / "wh"))
    location = catalog.default_table_location(IDENT)
    meta = new_table_metadata(
        schema=SCHEMA, location=location, timestamp_ms=int(time.time() * 1000), format_version=2
    )
    catalog.create_table(IDENT, meta)
    f1 = write_rows(meta, [{"id": i} for i in range(10)])[0]
    f2 = write_rows(meta, [{"id": i} for i in range(10, 20)])[0]
    committer = Committer(catalog, IDENT)
    committer.commit_snapshot(SnapshotChange("append", added_files=(f1, f2)))
    a, b = f1.file_path, f2.file_path
    parquet = write_position_delete_file(
        _rows([(a, 0), (a, 1)]), f"{location}/data/p-deletes.parquet", spec_id=0, partition=()
    )
    FileIO.for_location(parquet.file.file_path).write(parquet.file.file_path, parquet.data)
    deletes = [
        parquet.file,
        # Names two data files: it would stay live, shadowed by the new DV, if left unread.
        _delete_file(f"{location}/data/o-deletes.orc", "ORC", orc_deletes([(a, 2), (b, 3)]), 2, None),
        # Names one: a commit replacing a1's deletes by data file would remove it unread.
        _delete_file(f"{location}/data/v-deletes.avro", "AVRO", avro_deletes([(a, 4)]), 1, a),
    ]
    committer.commit_snapshot(SnapshotChange("delete", added_files=tuple(deletes)))
    Committer(catalog, IDENT).update_metadata(lambda m, ts: upgrade_format_version(m, 3, timestamp_ms=ts))
    return catalog, [f1, f2], deletes


def _rows(pairs: list[tuple[str, int]]) -> pa.Table:
    return pa.table(
        {"file_path": pa.array([p for p, _ in pairs]), "pos": pa.array([n for _, n in pairs], pa.int64())}
    )


def test_v3_reads_orc_and_avro_deletes_and_removes_nothing_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, (f1, f2), deletes = _table(tmp_path)
    monkeypatch.setattr(job, "rewrite_groups", lambda _spark, work: [rewrite_group(w) for w in work])
    session = SimpleNamespace(sparkContext=SimpleNamespace(setJobDescription=lambda _text: None))
    result = job.run_rewrite_position_deletes(
        job.RewritePositionDeletesOptions(IDENT),
        catalog,
        IDENT,
        lambda: session,  # type: ignore[arg-type,return-value]
    )
    table = catalog.require(IDENT)
    live = live_files(table.io, table.metadata, table.metadata.current_snapshot())
    left = [e.data_file for e in live.deletes]
    assert all(f.is_dv for f in left), [f.file_path for f in left]  # nothing left beside the DVs
    positions = {}
    for f in left:
        assert f.content_offset is not None and f.content_size_in_bytes is not None
        with table.io.open_input(f.file_path) as stream:
            blob = stream.read_at(f.content_size_in_bytes, f.content_offset)
        positions[f.referenced_data_file] = sorted(deserialize_dv(blob))
    assert positions == {f1.file_path: [0, 1, 2, 4], f2.file_path: [3]}
    assert result.metrics["rewritten_position_delete_files_count"] == 3, result.metrics
    # What was removed was read: every position of every removed file is in the DVs.
    for d in deletes:
        with table.io.open_input(d.file_path) as stream:
            rows = read_position_deletes(stream, d.file_format)
        for path, pos in zip(
            rows.column("file_path").to_pylist(), rows.column("pos").to_pylist(), strict=True
        ):
            assert pos in positions[path]
