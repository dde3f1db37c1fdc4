"""health's layout check reads a big table's bounds in one process per core: the same figures as
one process reading them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.iceberg.content import MANIFEST_DATA
from tablekeeper.jobs.health import layout
from tablekeeper.tables.iceberg import load_manifests
from tests.support.iceberg_writer import appended_table
from tests.unit.files.test_journal import SCHEMA


def test_bounds_read_in_processes_match_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = f"catalogs:\n  lake:\n    type: filesystem\n    warehouse: {tmp_path / 'wh'}\n"
    catalog = catalog_for(parse_catalogs(conf, tmp_path).get("lake"))
    table = appended_table(catalog, "db.t", SCHEMA, 4)  # one manifest per append
    manifests = [
        m for m in load_manifests(table.io, table.metadata.current_snapshot()) if m.content == MANIFEST_DATA
    ]
    (fid,) = [f.id for f in table.metadata.schema().fields if f.name == "id"]
    alone = layout.read_bounds(table, manifests, [fid])
    monkeypatch.setattr(layout, "PROCESS_MIN_MANIFESTS", 1)  # two processes for four manifests
    apart = layout.read_bounds(table, manifests, [fid])
    assert sorted(p.files for p in apart[0].measure()) == [4]
    assert apart[0].measure() == alone[0].measure()
