"""convert-delta --history all on a log whose old adds have no stats and whose files VACUUM
already deleted: the versions that reach such a file are not converted (every run expires a
snapshot reaching a file already gone), the rest are; the newest version missing a file is a
broken table, refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import CatalogsConfig
from tablekeeper.errors import DataFileGone
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.tables.iceberg import iter_live_entries
from tests.unit.tables.test_delta import PROTOCOL, add, metadata, remove, write_log


def _parquet(root: Path, name: str, rows: int) -> None:
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), root / name)


def _stats(rows: int) -> str:
    return json.dumps({"numRecords": rows})


SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
)


def _table(root: Path, newest_gone: bool = False) -> Path:
    root.mkdir()
    for name, rows in (("a.parquet", 2), ("b.parquet", 3), ("c.parquet", 4), ("d.parquet", 5)):
        _parquet(root, name, rows)
    write_log(
        root,
        [
            [PROTOCOL, metadata(schemaString=SCHEMA), add("a.parquet", stats=_stats(2))],
            [add("b.parquet")],  # no stats: only the footer counts its rows
            [add("c.parquet")],
            [remove("b.parquet"), add("d.parquet", stats=_stats(5))],
        ],
    )
    (root / "b.parquet").unlink()  # VACUUM (with a short RETAIN) deleted it
    if newest_gone:
        (root / "c.parquet").unlink()  # live at the newest version, without stats
    return root


def test_versions_reaching_a_vacuumed_file_without_stats_are_not_converted(
    tmp_path: Path, catalogs: CatalogsConfig
) -> None:
    catalog = catalog_for(catalogs.get("tk"))
    source = _table(tmp_path / "delta")
    options = ConvertDeltaOptions(source=str(source), target="gone.hist", history="all", verify="metadata")
    metrics = run_convert(options, catalog).metrics
    skipped = metrics["not_converted_for_vacuum"]
    assert isinstance(skipped, dict) and skipped["delta_versions"] == [1, 2]
    assert "b.parquet" in skipped["reason"]
    table = catalog.require("gone.hist")
    versions = [s.summary["tablekeeper.delta-version"] for s in table.metadata.snapshots]
    assert versions == ["0", "3"]
    live = {
        Path(e.data_file.file_path).name: e.data_file.record_count
        for e in iter_live_entries(table.io, table.metadata, table.metadata.current_snapshot())
    }
    assert live == {"a.parquet": 2, "c.parquet": 4, "d.parquet": 5}
    # The same command again (a retry after a kill): its work is done despite the gap.
    assert run_convert(options, catalog).metrics["note"] == "already converted"


def test_newest_version_missing_a_file_is_refused_by_name(tmp_path: Path, catalogs: CatalogsConfig) -> None:
    source = _table(tmp_path / "delta", newest_gone=True)
    catalog = catalog_for(catalogs.get("tk"))
    for history in ("all", "latest"):
        options = ConvertDeltaOptions(source=str(source), target=f"gone.broken_{history}", history=history)
        with pytest.raises(DataFileGone, match=r"c\.parquet .*FSCK REPAIR TABLE"):
            run_convert(options, catalog)
        assert not catalog.table_exists(f"gone.broken_{history}")
