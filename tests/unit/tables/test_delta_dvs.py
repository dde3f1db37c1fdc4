"""Reading Delta deletion vectors through the table loader (u storage, shared real tables)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.puffin import deserialize_dv
from tablekeeper.io import FileIO
from tablekeeper.tables.delta import dv_location, load_snapshot, read_deletion_vector
from tests.conftest import DELTA_TABLES

EXPECTED = {
    "table-with-dv-small": [0, 9],
    "cdf-table-with-cdc-and-dvs": [0, 1, 2, 3, 4, 6],
    "table_with_deletion_logs": [2, 79],
}


@pytest.mark.corpus  # reads ../shared
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


@pytest.mark.corpus  # reads ../shared
def test_stored_dv_without_offset_is_read_at_zero_as_the_protocol_says(tmp_path: Path) -> None:
    """A ``u``/``p`` descriptor without ``offset`` starts at 0 (the protocol; delta-spark's and
    delta-kernel's ``offset.getOrElse(0)``), never silently at the first DV of the file."""
    root = DELTA_TABLES / "table-with-dv-small"
    (add,) = [f for f in load_snapshot(str(root)).add_files() if f.deletion_vector is not None]
    stored = add.deletion_vector
    assert stored is not None and stored.offset == 1
    location = dv_location(str(root), stored)
    assert location is not None
    # The same file, and a descriptor naming it by absolute path without an offset.
    copy = tmp_path / "dv.bin"
    shutil.copyfile(location, copy)
    absent = replace(stored, storage_type="p", path_or_inline_dv=copy.as_uri(), offset=None)
    io = FileIO.for_location(str(tmp_path))
    with pytest.raises(CorruptMetadataError, match="without offset is read at 0"):
        read_deletion_vector(io, str(tmp_path), absent)
    # Stated, the same DV reads.
    bitmap, _ = read_deletion_vector(io, str(tmp_path), replace(absent, offset=1))
    assert list(bitmap) == EXPECTED["table-with-dv-small"]
