"""health on Delta from the log alone: what VACUUM would delete and how many rows the files hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from tablekeeper.jobs.health.delta import delta_health
from tablekeeper.jobs.health.model import Thresholds
from tests.conftest import DELTA_TABLES
from tests.unit.tables.test_delta import add, base, remove, write_log

NOW_MS = 1_800_000_000_000


def test_tombstone_without_deletion_timestamp_is_past_retention(tmp_path: Path) -> None:
    """delta-spark's VACUUM reads a remove without deletionTimestamp as removed at 0
    (``RemoveFile.delTimestamp``): past any retention, so VACUUM deletes the file."""
    stats = '{"numRecords": 3}'
    undated = remove("b.parquet")
    del undated["remove"]["deletionTimestamp"]
    recent = remove("c.parquet", ts=NOW_MS - 1000)
    write_log(
        tmp_path,
        [
            [
                *base(),
                add("a.parquet", stats=stats),
                add("b.parquet", stats=stats),
                add("c.parquet", stats=stats),
            ],
            [undated, recent],
        ],
    )
    for name in ("a.parquet", "b.parquet", "c.parquet"):
        (tmp_path / name).write_bytes(b"x" * 100)
    health = delta_health(str(tmp_path), Thresholds(), {}, now_ms=NOW_MS)
    assert health.metrics["tombstones"] == 2
    assert health.metrics["tombstones_past_retention"] == 1  # b; c is within the week
    assert health.metrics["tombstone_bytes_past_retention"] == 100
    assert [r.job for r in health.recommendations] == ["remove-orphans"]


@pytest.mark.corpus  # reads ../shared
def test_record_count_reads_stats_parsed_where_the_checkpoint_has_only_it() -> None:
    # delta-rs wrote this table's checkpoint with stats_parsed alone for 10 of its 12 files.
    health = delta_health(
        str(DELTA_TABLES / "delta-1.2.1-only-struct-stats"), Thresholds(), {}, now_ms=NOW_MS
    )
    assert health.metrics["data_files"] == 12
    assert health.metrics["data_records"] == 12


@pytest.mark.corpus  # reads ../shared
def test_record_count_is_unknown_when_a_file_has_no_stats_of_either_form() -> None:
    health = delta_health(
        str(DELTA_TABLES / "delta-checkpoint-stats-optional"), Thresholds(), {}, now_ms=NOW_MS
    )
    assert health.metrics["data_records"] is None
