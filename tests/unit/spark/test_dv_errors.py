"""A deletion vector whose CRC does not match is a typed error naming its file, whichever task
reads it (no Spark: the task functions run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.puffin import serialize_dv
from tablekeeper.iceberg.roaring import RoaringBitmap64
from tablekeeper.spark.arrow_rewrite import dv_positions


def test_a_dv_with_a_bad_crc_names_its_file(tmp_path: Path) -> None:
    blob = bytearray(serialize_dv(RoaringBitmap64((1, 5, 9))))
    blob[-1] ^= 0xFF  # the CRC no longer matches
    path = tmp_path / "dv.puffin"
    path.write_bytes(b"PFA1" + bytes(blob))
    with pytest.raises(CorruptMetadataError, match=r"deletion vector in .*dv\.puffin: .*CRC-32 mismatch"):
        dv_positions(str(path), 4, len(blob), 3)
