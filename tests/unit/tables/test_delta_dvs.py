"""Reading Delta deletion vectors through the table loader (u storage, shared real tables)."""

from __future__ import annotations

import pytest

from tablekeeper.iceberg.puffin import deserialize_dv
from tablekeeper.io import FileIO
from tablekeeper.tables.delta import dv_location, load_snapshot, read_deletion_vector
from tests.conftest import DELTA_TABLES

EXPECTED = {
    "table-with-dv-small": [0, 9],
    "cdf-table-with-cdc-and-dvs": [0, 1, 2, 3, 4, 6],
    "table_with_deletion_logs": [2, 79],
}


@pytest.mark.parametrize(("name", "positions"), sorted(EXPECTED.items()))
def test_dvs_read_as_bitmap_and_iceberg_blob(name: str, positions: list[int]) -> None:
    snap = load_snapshot(str(DELTA_TABLES / name))
    (add,) = [f for f in snap.add_files() if f.deletion_vector is not None]
    dv = add.deletion_vector
    assert dv is not None
    location = dv_location(snap.root, dv)
    assert location is not None and location.endswith(".bin") and location.startswith(snap.root)
    bitmap, blob = read_deletion_vector(FileIO.for_location(snap.root), snap.root, dv)
    assert list(bitmap) == positions == list(deserialize_dv(blob))
    assert len(blob) == dv.size_in_bytes + 8 and bitmap.cardinality == dv.cardinality
