"""``build_segment`` and friends on synthetic ``_delta_log`` listings (no I/O, no Spark)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import orjson
import pytest

from tablekeeper.delta.segment import (
    LastCheckpointHint,
    LogEntry,
    build_segment,
    commit_timestamps,
    last_checkpoint_checksum,
    parse_last_checkpoint,
)
from tablekeeper.errors import ConfigError, CorruptMetadataError

DELTA_TABLES = Path(__file__).resolve().parents[3].parent / "shared" / "delta-tables" / "delta-rs"
UUID_A = "f5ee283b-37c7-46af-b64c-8f77c6a5c43a"


def commit(v: int, size: int = 100, mtime: int | None = None) -> LogEntry:
    return LogEntry(f"{v:020d}.json", size, 1_000 + v if mtime is None else mtime)


def classic(v: int, size: int = 5_000) -> LogEntry:
    return LogEntry(f"{v:020d}.checkpoint.parquet", size, 1_000 + v)


def part(v: int, i: int, n: int, size: int = 5_000) -> LogEntry:
    return LogEntry(f"{v:020d}.checkpoint.{i:010d}.{n:010d}.parquet", size, 1_000 + v)


def v2(v: int, ext: str = "parquet", uuid: str = UUID_A, size: int = 5_000) -> LogEntry:
    return LogEntry(f"{v:020d}.checkpoint.{uuid}.{ext}", size, 1_000 + v)


def commits(versions: range | list[int]) -> list[LogEntry]:
    return [commit(v) for v in versions]


def commit_versions(entries: tuple[LogEntry, ...]) -> list[int]:
    return [int(e.name.split(".")[0]) for e in entries]


# --- latest version and checkpoint choice -------------------------------------------------------


def test_no_checkpoint_replays_every_commit_from_zero() -> None:
    seg = build_segment(commits(range(5)))
    assert seg.version == 4
    assert seg.checkpoint is None
    assert commit_versions(seg.commits) == [0, 1, 2, 3, 4]


def test_latest_uses_newest_complete_checkpoint() -> None:
    entries = [*commits(range(13)), classic(5), classic(10)]
    seg = build_segment(entries)
    assert seg.version == 12
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 10
    assert seg.checkpoint.kind == "classic"
    assert commit_versions(seg.commits) == [11, 12]


def test_checkpoint_at_latest_version_needs_no_commits() -> None:
    seg = build_segment([*commits(range(11)), classic(10)])
    assert seg.version == 10
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 10
    assert seg.commits == ()


def test_listing_order_does_not_matter() -> None:
    entries = [*commits(range(13)), classic(10), classic(5)]
    seg = build_segment(list(reversed(entries)))
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 10
    assert commit_versions(seg.commits) == [11, 12]


def test_time_travel_picks_newest_checkpoint_at_or_below_target() -> None:
    entries = [*commits(range(13)), classic(5), classic(10)]
    seg = build_segment(entries, version=9)
    assert seg.version == 9
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 5
    assert commit_versions(seg.commits) == [6, 7, 8, 9]

    at_cp = build_segment(entries, version=10)
    assert at_cp.checkpoint is not None
    assert at_cp.checkpoint.version == 10
    assert at_cp.commits == ()

    before_any = build_segment(entries, version=3)
    assert before_any.checkpoint is None
    assert commit_versions(before_any.commits) == [0, 1, 2, 3]


def test_complete_multi_part_checkpoint_is_used_with_parts_in_order() -> None:
    entries = [*commits(range(9)), part(7, 3, 3), part(7, 1, 3), part(7, 2, 3)]
    seg = build_segment(entries)
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind == "multi"
    assert [e.name for e in seg.checkpoint.files] == [part(7, i, 3).name for i in (1, 2, 3)]
    assert commit_versions(seg.commits) == [8]


def test_incomplete_multi_part_falls_back_to_older_complete_checkpoint() -> None:
    entries = [*commits(range(12)), classic(5), part(10, 1, 3), part(10, 3, 3)]
    seg = build_segment(entries)
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 5
    assert commit_versions(seg.commits) == [6, 7, 8, 9, 10, 11]


def test_incomplete_multi_part_without_older_checkpoint_replays_from_zero() -> None:
    entries = [*commits(range(12)), part(10, 1, 2)]
    seg = build_segment(entries)
    assert seg.checkpoint is None
    assert commit_versions(seg.commits) == list(range(12))


def test_multi_part_parts_of_different_totals_do_not_combine() -> None:
    # Two aborted attempts, one of 2 parts and one of 3, together name parts 1, 2, 3 but neither
    # attempt is complete.
    entries = [*commits(range(6)), part(4, 1, 2), part(4, 2, 3), part(4, 3, 3)]
    seg = build_segment(entries)
    assert seg.checkpoint is None
    assert commit_versions(seg.commits) == list(range(6))


def test_zero_byte_checkpoints_are_ignored() -> None:
    entries = [*commits(range(12)), classic(5), classic(10, size=0), v2(10, size=0)]
    seg = build_segment(entries)
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 5


def test_zero_byte_part_makes_multi_part_incomplete() -> None:
    entries = [*commits(range(12)), classic(5), part(10, 1, 2), part(10, 2, 2, size=0)]
    seg = build_segment(entries)
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 5


@pytest.mark.parametrize(
    ("present", "expected_kind"),
    [
        (("classic", "multi", "v2"), "v2"),
        (("classic", "multi"), "multi"),
        (("classic", "v2"), "v2"),
        (("multi", "v2"), "v2"),
        (("classic",), "classic"),
    ],
)
def test_same_version_tie_break_prefers_v2_then_multi_then_classic(
    present: tuple[str, ...], expected_kind: str
) -> None:
    by_kind = {"classic": [classic(4)], "multi": [part(4, 1, 2), part(4, 2, 2)], "v2": [v2(4)]}
    entries = commits(range(6))
    for kind in present:
        entries += by_kind[kind]
    seg = build_segment(entries)
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 4
    assert seg.checkpoint.kind == expected_kind


def test_multi_part_with_more_parts_wins_a_tie() -> None:
    entries = [*commits(range(6)), part(4, 1, 2), part(4, 2, 2), *(part(4, i, 3) for i in (1, 2, 3))]
    seg = build_segment(entries)
    assert seg.checkpoint is not None
    assert len(seg.checkpoint.files) == 3


def test_uuid_checkpoint_in_json_is_recognised() -> None:
    seg = build_segment([*commits(range(4)), v2(2, ext="json")])
    assert seg.checkpoint is not None
    assert seg.checkpoint.kind == "v2"
    assert seg.checkpoint.files[0].name.endswith(".json")
    assert commit_versions(seg.commits) == [3]


# --- ignored names ------------------------------------------------------------------------------


def test_other_log_files_are_ignored() -> None:
    noise = [
        LogEntry(f"{0:020d}.{9:020d}.compacted.json", 900, 1),  # compaction of 0..9
        LogEntry(f"{3:020d}.crc", 10, 1),
        LogEntry(f".{3:020d}.json.crc", 10, 1),  # Hadoop checksum file
        LogEntry(f".{3:020d}.checkpoint.parquet.crc", 10, 1),
        LogEntry("_last_checkpoint", 30, 1),
        LogEntry(f"{20:020d}.json.tmp", 10, 1),  # temp files, even of newer versions
        LogEntry(f".{20:020d}.json.0b2f6a3e.tmp", 10, 1),
        LogEntry(f"{20:020d}.checkpoint.parquet.tmp", 10, 1),
        LogEntry(f"{3:020d}.checkpoint.parquet.crc", 10, 1),
        LogEntry("_commits", 0, 1),
        LogEntry("_sidecars", 0, 1),
        LogEntry(f"{5:d}.json", 10, 1),  # not 20 digits
    ]
    seg = build_segment([*commits(range(4)), *noise])
    assert seg.version == 3
    assert seg.checkpoint is None
    assert commit_versions(seg.commits) == [0, 1, 2, 3]


def test_compacted_file_does_not_fill_a_gap() -> None:
    entries = [commit(0), commit(1), LogEntry(f"{2:020d}.{3:020d}.compacted.json", 900, 1), commit(4)]
    with pytest.raises(CorruptMetadataError, match=r"commit 2 is missing"):
        build_segment(entries)


# --- errors -------------------------------------------------------------------------------------


def test_gap_after_checkpoint_names_missing_version() -> None:
    entries = [*commits([0, 1, 2, 3, 4, 5, 7, 8]), classic(4)]
    with pytest.raises(CorruptMetadataError, match=r"commit 6 is missing") as err:
        build_segment(entries)
    assert "checkpoint 4" in str(err.value)


def test_gap_without_checkpoint_names_missing_version() -> None:
    with pytest.raises(CorruptMetadataError, match=r"commit 2 is missing"):
        build_segment(commits([0, 1, 3, 4]))


def test_gap_in_the_middle_is_corruption_for_time_travel_too() -> None:
    # Commit 0 is there, so nothing was cleaned up: 2 is a hole in the log, the same corruption
    # a load of the latest version reports, not an old version that "can no longer be
    # reconstructed".
    with pytest.raises(CorruptMetadataError, match=r"commit 2 is missing"):
        build_segment(commits([0, 1, 3, 4]), version=4)


def test_time_travel_before_cleaned_up_log_is_a_config_error() -> None:
    # Commits 0..4 were cleaned up after checkpoint 5 (whose own commit file is kept).
    entries = [*commits(range(5, 11)), classic(5)]
    assert build_segment(entries).version == 10
    for target in (0, 3):
        with pytest.raises(ConfigError, match="can no longer be reconstructed"):
            build_segment(entries, version=target)


def test_time_travel_to_kept_commit_without_covering_checkpoint_is_a_config_error() -> None:
    # Commits 3.. remain, the only checkpoint is at 5: version 4 needs commits 0..2.
    entries = [*commits(range(3, 9)), classic(5)]
    with pytest.raises(ConfigError, match="can no longer be reconstructed"):
        build_segment(entries, version=4)
    assert build_segment(entries, version=6).checkpoint is not None


def test_version_beyond_latest_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"no version 7 \(latest is 4\)"):
        build_segment(commits(range(5)), version=7)


def test_negative_version_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_segment(commits(range(5)), version=-1)


def test_checkpoint_without_its_commit_file_is_corrupt() -> None:
    # Only a checkpoint at the latest version: its commit file (commitInfo, timestamps) is gone.
    with pytest.raises(CorruptMetadataError, match=f"{8:020d}.json"):
        build_segment([classic(8)])
    with pytest.raises(CorruptMetadataError, match="no commit file for version 8"):
        build_segment([*commits(range(6)), classic(8)])


def test_empty_listing_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataError, match="empty _delta_log"):
        build_segment([LogEntry("_last_checkpoint", 10, 1), LogEntry(f"{0:020d}.crc", 10, 1)])


def test_stale_hint_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    entries = [*commits(range(8)), classic(4)]
    with caplog.at_level(logging.WARNING, logger="tablekeeper.delta.segment"):
        seg = build_segment(entries, hint=LastCheckpointHint(6, None, None))
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 4
    assert "_last_checkpoint points at version 6" in caplog.text


def test_older_hint_does_not_hide_newer_checkpoint() -> None:
    entries = [*commits(range(12)), classic(4), classic(10)]
    seg = build_segment(entries, hint=LastCheckpointHint(4, None, None))
    assert seg.checkpoint is not None
    assert seg.checkpoint.version == 10


# --- _last_checkpoint ---------------------------------------------------------------------------


def test_parse_last_checkpoint_valid() -> None:
    hint = parse_last_checkpoint(b'{"version":10,"size":13,"parts":3,"sizeInBytes":1234}')
    assert hint == LastCheckpointHint(10, 3, None)
    v2_hint = parse_last_checkpoint(
        json.dumps(
            {"version": 8, "size": 11, "v2Checkpoint": {"path": v2(8).name, "sizeInBytes": 5}}
        ).encode()
    )
    assert v2_hint == LastCheckpointHint(8, None, v2(8).name)


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"not json", b"[]", b'"x"', b"{}", b'{"version":"ten"}', b'{"size":3}', b"\xff\xfe"],
)
def test_parse_last_checkpoint_corrupt_is_none(data: bytes) -> None:
    assert parse_last_checkpoint(data) is None


def test_parse_last_checkpoint_checksum_mismatch_is_none() -> None:
    obj = {"version": 10, "size": 13}
    good = dict(obj, checksum=last_checkpoint_checksum(obj))
    assert parse_last_checkpoint(json.dumps(good).encode()) == LastCheckpointHint(10, None, None)
    tampered = dict(good, version=11)
    assert parse_last_checkpoint(json.dumps(tampered).encode()) is None
    wrong = dict(obj, checksum="0" * 32)
    assert parse_last_checkpoint(json.dumps(wrong).encode()) is None


def test_checksum_protocol_test_vector() -> None:
    text = (
        '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2], '
        '{"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
    )
    obj = orjson.loads(text)
    assert last_checkpoint_checksum(obj) == "6a92d155a59bf2eecbd4b4ec7fd1f875"
    # The checksum key itself is left out: changing it changes nothing.
    assert last_checkpoint_checksum(dict(obj, checksum="other")) == "6a92d155a59bf2eecbd4b4ec7fd1f875"
    assert last_checkpoint_checksum({k: v for k, v in obj.items() if k != "checksum"}) == (
        "6a92d155a59bf2eecbd4b4ec7fd1f875"
    )
    assert last_checkpoint_checksum(dict(obj, k0="'v 1'")) != "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_checksum_is_independent_of_key_order() -> None:
    a = {"version": 3, "size": 7, "tags": {"b": "2", "a": "1"}}
    b = {"tags": {"a": "1", "b": "2"}, "size": 7, "version": 3}
    assert last_checkpoint_checksum(a) == last_checkpoint_checksum(b)


@pytest.mark.corpus  # reads ../shared
def test_real_v2_last_checkpoint_checksum_verifies() -> None:
    data = (DELTA_TABLES / "checkpoint-v2-table" / "_delta_log" / "_last_checkpoint").read_bytes()
    obj = orjson.loads(data)
    assert obj["checksum"] == last_checkpoint_checksum(obj)
    hint = parse_last_checkpoint(data)
    assert hint is not None
    assert hint.version == 8
    assert hint.v2_path == "00000000000000000008.checkpoint.e5ac4dc4-be27-4106-8a55-609707487f83.json"


# --- commit timestamps --------------------------------------------------------------------------


def test_commit_timestamps_are_made_strictly_increasing() -> None:
    entries = [
        commit(0, mtime=5_000),
        commit(1, mtime=4_000),  # clock went back
        commit(2, mtime=4_000),
        commit(3, mtime=9_000),
        commit(4, mtime=9_000),  # same millisecond
        classic(2),
        LogEntry("_last_checkpoint", 10, 1),
    ]
    assert commit_timestamps(entries) == {0: 5_000, 1: 5_001, 2: 5_002, 3: 9_000, 4: 9_001}


def test_commit_timestamps_keep_increasing_mtimes() -> None:
    entries = [commit(3, mtime=30), commit(1, mtime=10), commit(2, mtime=20)]
    assert commit_timestamps(entries) == {1: 10, 2: 20, 3: 30}
