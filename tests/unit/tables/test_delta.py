"""Log replay through ``load_snapshot`` on small hand-written ``_delta_log`` directories (no Spark)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.errors import ConfigError, CorruptMetadataError, NotATableError, UnsupportedFeatureError
from tablekeeper.tables.delta import load_snapshot

Action = Mapping[str, Any]

SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
PROTOCOL: Action = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}


def metadata(configuration: Mapping[str, str] | None = None, **extra: Any) -> Action:
    body: dict[str, Any] = {
        "id": "11111111-2222-3333-4444-555555555555",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA_STRING,
        "partitionColumns": [],
        "configuration": dict(configuration or {}),
        "createdTime": 1_700_000_000_000,
    }
    body.update(extra)
    return {"metaData": body}


def add(
    path: str,
    *,
    stats: str | None = None,
    dv: Mapping[str, Any] | None = None,
    pv: Mapping[str, str | None] | None = None,
    size: int = 100,
    **extra: Any,
) -> Action:
    body: dict[str, Any] = {
        "path": path,
        "partitionValues": dict(pv or {}),
        "size": size,
        "modificationTime": 1_700_000_000_000,
        "dataChange": True,
    }
    if stats is not None:
        body["stats"] = stats
    if dv is not None:
        body["deletionVector"] = dict(dv)
    body.update(extra)
    return {"add": body}


def remove(path: str, *, dv: Mapping[str, Any] | None = None, ts: int = 1_700_000_100_000) -> Action:
    body: dict[str, Any] = {
        "path": path,
        "deletionTimestamp": ts,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": {},
        "size": 100,
    }
    if dv is not None:
        body["deletionVector"] = dict(dv)
    return {"remove": body}


def dv(path_or_inline: str, offset: int | None = 1, cardinality: int = 2) -> dict[str, Any]:
    out: dict[str, Any] = {
        "storageType": "u",
        "pathOrInlineDv": path_or_inline,
        "sizeInBytes": 36,
        "cardinality": cardinality,
    }
    if offset is not None:
        out["offset"] = offset
    return out


DV1 = dv("ab^-aqEH.-t@S}K{vb[*k^")
DV2 = dv("cdvBn[lx{q8@P<9BNH/isA")


def write_commit(root: Path, version: int, actions: Sequence[Action], mtime_ms: int | None = None) -> Path:
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{version:020d}.json"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    if mtime_ms is not None:
        set_mtime(path, mtime_ms)
    return path


def write_log(root: Path, commits: Sequence[Sequence[Action]], mtimes: Sequence[int] | None = None) -> Path:
    for version, actions in enumerate(commits):
        write_commit(root, version, actions, None if mtimes is None else mtimes[version])
    return root


def set_mtime(path: Path, mtime_ms: int) -> None:
    ns = mtime_ms * 1_000_000
    os.utime(path, ns=(ns, ns))


def files_by_path(snap: DeltaSnapshot) -> dict[str, AddFile]:
    out: dict[str, AddFile] = {}
    for f in snap.add_files():
        assert f.absolute_path not in out, f"two live files for {f.absolute_path}"
        out[f.absolute_path] = f
    return out


def tombstone_keys(snap: DeltaSnapshot) -> set[tuple[str, str | None]]:
    t = snap.tombstones
    return set(zip(t.column("absolute_path").to_pylist(), t.column("dv_id").to_pylist(), strict=True))


def base() -> list[Action]:
    return [{"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE"}}, PROTOCOL, metadata()]


# --- file reconciliation -------------------------------------------------------------------------


def test_add_then_remove_is_a_tombstone(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base(), add("a.parquet"), add("b.parquet")], [remove("a.parquet")]])
    snap = load_snapshot(str(tmp_path))
    assert snap.version == 1
    assert set(files_by_path(snap)) == {f"{tmp_path}/b.parquet"}
    assert tombstone_keys(snap) == {(f"{tmp_path}/a.parquet", None)}
    assert snap.tombstones.column("deletion_timestamp").to_pylist() == [1_700_000_100_000]

    before = load_snapshot(str(tmp_path), version=0)
    assert set(files_by_path(before)) == {f"{tmp_path}/a.parquet", f"{tmp_path}/b.parquet"}
    assert before.tombstones.num_rows == 0


def test_dv_swap_in_one_commit_keeps_one_live_file_with_new_dv(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [*base(), add("a.parquet", dv=DV1)],
            [remove("a.parquet", dv=DV1), add("a.parquet", dv=DV2)],
        ],
    )
    snap = load_snapshot(str(tmp_path))
    files = list(snap.add_files())
    assert len(files) == 1
    live = files[0]
    assert live.deletion_vector is not None
    assert live.deletion_vector.path_or_inline_dv == DV2["pathOrInlineDv"]
    assert live.key == (f"{tmp_path}/a.parquet", "u" + DV2["pathOrInlineDv"] + "@1")
    assert snap.file_keys() == {live.key}
    assert tombstone_keys(snap) == {(f"{tmp_path}/a.parquet", "u" + DV1["pathOrInlineDv"] + "@1")}


def test_dv_swap_with_add_before_remove_in_the_commit(tmp_path: Path) -> None:
    # A valid commit's order is irrelevant: add(new DV) may precede remove(old DV).
    write_log(
        tmp_path,
        [
            [*base(), add("a.parquet")],
            [add("a.parquet", dv=DV1), remove("a.parquet")],
        ],
    )
    snap = load_snapshot(str(tmp_path))
    files = list(snap.add_files())
    assert len(files) == 1
    assert files[0].deletion_vector is not None
    assert files[0].deletion_vector.unique_id == "u" + DV1["pathOrInlineDv"] + "@1"
    assert tombstone_keys(snap) == {(f"{tmp_path}/a.parquet", None)}


def test_dv_without_offset_has_no_offset_in_its_id(tmp_path: Path) -> None:
    inline: dict[str, Any] = {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "sizeInBytes": 40,
        "cardinality": 6,
    }
    write_log(tmp_path, [[*base(), add("a.parquet", dv=inline)]])
    snap = load_snapshot(str(tmp_path))
    (live,) = snap.add_files()
    assert live.deletion_vector is not None
    assert live.deletion_vector.offset is None
    assert live.key == (f"{tmp_path}/a.parquet", "i" + inline["pathOrInlineDv"])


def test_re_add_of_same_key_newest_stats_win(tmp_path: Path) -> None:
    old = '{"numRecords":10,"minValues":{"id":1},"maxValues":{"id":10},"nullCount":{"id":0}}'
    new = '{"numRecords":10,"minValues":{"id":2},"maxValues":{"id":9},"nullCount":{"id":0}}'
    write_log(
        tmp_path,
        [
            [*base(), add("a.parquet", stats=old, tags={"k": "old"})],
            [add("a.parquet", stats=new, tags={"k": "new"}, dataChange=False)],
        ],
    )
    snap = load_snapshot(str(tmp_path))
    (live,) = snap.add_files()
    assert live.stats == new
    assert live.tags == {"k": "new"}
    assert live.data_change is False
    assert snap.tombstones.num_rows == 0
    (v0,) = load_snapshot(str(tmp_path), version=0).add_files()
    assert v0.stats == old


def test_restore_re_add_of_removed_path_is_live_again(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [*base(), add("a.parquet")],
            [remove("a.parquet"), add("b.parquet")],
            [remove("b.parquet"), add("a.parquet")],  # RESTORE TO VERSION 0
        ],
    )
    snap = load_snapshot(str(tmp_path))
    assert set(files_by_path(snap)) == {f"{tmp_path}/a.parquet"}
    assert tombstone_keys(snap) == {(f"{tmp_path}/b.parquet", None)}
    mid = load_snapshot(str(tmp_path), version=1)
    assert set(files_by_path(mid)) == {f"{tmp_path}/b.parquet"}
    assert tombstone_keys(mid) == {(f"{tmp_path}/a.parquet", None)}


def test_relative_and_absolute_paths(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [
                *base(),
                add("rel.parquet"),
                add("p=1/nested.parquet"),
                add("/elsewhere/abs.parquet"),
                add("file:/elsewhere/uri.parquet"),
                add("s3://bucket/clone/obj.parquet"),
            ]
        ],
    )
    snap = load_snapshot(str(tmp_path))
    by_abs = {f.absolute_path: f.path for f in snap.add_files()}
    assert by_abs == {
        f"{tmp_path}/rel.parquet": "rel.parquet",
        f"{tmp_path}/p=1/nested.parquet": "p=1/nested.parquet",
        "/elsewhere/abs.parquet": "/elsewhere/abs.parquet",
        "file:/elsewhere/uri.parquet": "file:/elsewhere/uri.parquet",
        "s3://bucket/clone/obj.parquet": "s3://bucket/clone/obj.parquet",
    }


def test_relative_and_absolute_spelling_of_one_file_are_one_key(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base(), add("a.parquet")], [remove(f"{tmp_path}/a.parquet")]])
    snap = load_snapshot(str(tmp_path))
    assert snap.num_files == 0
    assert tombstone_keys(snap) == {(f"{tmp_path}/a.parquet", None)}


def test_root_with_trailing_slash(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base(), add("a.parquet")]])
    snap = load_snapshot(str(tmp_path) + "/")
    assert set(files_by_path(snap)) == {f"{tmp_path}/a.parquet"}


def test_paths_are_percent_decoded_exactly_once(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [
                *base(),
                add("x=a%2520b/one.parquet"),
                add("x=B%20B/two.parquet"),
                add("x=1+2/three.parquet"),
                add("x=1%2B2/four.parquet"),
                add("x=%C3%A9t%C3%A9/five.parquet"),
                add("ts=2021-01-01%2000%253A00%253A00/six.parquet"),
                add("file:///data/dir%20x/seven.parquet"),
            ]
        ],
    )
    snap = load_snapshot(str(tmp_path))
    assert set(files_by_path(snap)) == {
        f"{tmp_path}/x=a%20b/one.parquet",
        f"{tmp_path}/x=B B/two.parquet",
        f"{tmp_path}/x=1+2/three.parquet",
        f"{tmp_path}/x=1+2/four.parquet",
        f"{tmp_path}/x=été/five.parquet",
        f"{tmp_path}/ts=2021-01-01 00%3A00%3A00/six.parquet",
        "file:///data/dir x/seven.parquet",
    }


def test_encoded_colon_does_not_make_a_relative_path_absolute(tmp_path: Path) -> None:
    # "dir%3Aname/f.parquet" has no URI scheme: its colon is encoded. Only after decoding does it
    # look like "dir:name/...", which must still resolve under the table root.
    write_log(tmp_path, [[*base(), add("dir%3Aname/f.parquet")]])
    snap = load_snapshot(str(tmp_path))
    assert set(files_by_path(snap)) == {f"{tmp_path}/dir:name/f.parquet"}


def test_encoded_and_decoded_spelling_of_a_path_are_one_key(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base(), add("x=B%20B/a.parquet")], [remove("x=B B/a.parquet")]])
    snap = load_snapshot(str(tmp_path))
    assert snap.num_files == 0
    assert tombstone_keys(snap) == {(f"{tmp_path}/x=B B/a.parquet", None)}


def test_partition_values_and_row_tracking_fields_pass_through(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [
                *base(),
                add(
                    "part=a/f.parquet",
                    pv={"part": "a", "other": None},
                    baseRowId=100,
                    defaultRowCommitVersion=0,
                    clusteringProvider="liquid",
                    size=4242,
                ),
            ]
        ],
    )
    (live,) = load_snapshot(str(tmp_path)).add_files()
    assert live.partition_values == {"part": "a", "other": None}
    assert live.base_row_id == 100
    assert live.default_row_commit_version == 0
    assert live.clustering_provider == "liquid"
    assert live.size == 4242


# --- non-file actions ----------------------------------------------------------------------------


def test_txn_latest_per_app_id(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [*base(), {"txn": {"appId": "app1", "version": 1, "lastUpdated": 10}}],
            [
                {"txn": {"appId": "app2", "version": 7}},
                {"txn": {"appId": "app1", "version": 2, "lastUpdated": 20}},
            ],
            [{"txn": {"appId": "app1", "version": 3, "lastUpdated": 30}}],
        ],
    )
    snap = load_snapshot(str(tmp_path))
    assert {k: (t.version, t.last_updated) for k, t in snap.txns.items()} == {
        "app1": (3, 30),
        "app2": (7, None),
    }
    assert load_snapshot(str(tmp_path), version=1).txns["app1"].version == 2


def test_domain_metadata_removed_drops_the_domain(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [
                *base(),
                {
                    "domainMetadata": {
                        "domain": "delta.rowTracking",
                        "configuration": '{"rowIdHighWaterMark":4}',
                        "removed": False,
                    }
                },
                {"domainMetadata": {"domain": "user.x", "configuration": "{}", "removed": False}},
            ],
            [
                {"domainMetadata": {"domain": "user.x", "configuration": "{}", "removed": True}},
                {
                    "domainMetadata": {
                        "domain": "delta.rowTracking",
                        "configuration": '{"rowIdHighWaterMark":9}',
                        "removed": False,
                    }
                },
            ],
        ],
    )
    snap = load_snapshot(str(tmp_path))
    assert set(snap.domains) == {"delta.rowTracking"}
    assert snap.domains["delta.rowTracking"].configuration == '{"rowIdHighWaterMark":9}'
    assert set(load_snapshot(str(tmp_path), version=0).domains) == {"delta.rowTracking", "user.x"}


def test_protocol_and_metadata_newest_wins(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [*base()],
            [
                {
                    "protocol": {
                        "minReaderVersion": 3,
                        "minWriterVersion": 7,
                        "readerFeatures": ["deletionVectors"],
                        "writerFeatures": ["deletionVectors"],
                    }
                },
                metadata({"delta.enableDeletionVectors": "true"}, partitionColumns=["part"], name="t2"),
            ],
            [metadata({"delta.appendOnly": "true"}, name="t3")],
        ],
    )
    snap = load_snapshot(str(tmp_path))
    assert snap.protocol.min_reader_version == 3
    assert snap.protocol.reader_features == ("deletionVectors",)
    # metaData replaces the previous one wholesale: no merging of configuration.
    assert snap.metadata.configuration == {"delta.appendOnly": "true"}
    assert snap.metadata.name == "t3"
    assert snap.partition_columns == ()
    v1 = load_snapshot(str(tmp_path), version=1)
    assert v1.metadata.configuration == {"delta.enableDeletionVectors": "true"}
    assert v1.partition_columns == ("part",)
    v0 = load_snapshot(str(tmp_path), version=0)
    assert v0.protocol.min_reader_version == 1


def test_unknown_actions_and_fields_are_ignored(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [
                {"commitInfo": {"timestamp": 1, "operation": "WRITE", "futureField": {"x": [1]}}},
                {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2, "someNewField": True}},
                {"metaData": {**metadata()["metaData"], "unknownField": 5}},
                {"futureAction": {"path": "ghost.parquet", "size": 1}},
                {"checkpoint": {"version": 0}},
                {
                    "cdc": {
                        "path": "_change_data/c.parquet",
                        "partitionValues": {},
                        "size": 1,
                        "dataChange": False,
                    }
                },
                add("a.parquet", unknownAddField={"deep": True}, maxRowIndex=3),
            ],
            [{"anotherFutureAction": [1, 2, 3]}, {"remove": {"path": "zz.parquet", "brandNew": 1}}],
        ],
    )
    snap = load_snapshot(str(tmp_path))
    assert set(files_by_path(snap)) == {f"{tmp_path}/a.parquet"}
    assert tombstone_keys(snap) == {(f"{tmp_path}/zz.parquet", None)}


def test_commit_info_of_the_snapshot_version(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [*base()],
            [{"commitInfo": {"timestamp": 2, "operation": "WRITE"}}, add("a.parquet")],
            [add("b.parquet")],  # no commitInfo
        ],
    )
    assert load_snapshot(str(tmp_path)).commit_info is None
    ci = load_snapshot(str(tmp_path), version=1).commit_info
    assert ci is not None
    assert ci.operation == "WRITE"
    assert ci.version == 1


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base()]])
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text("\n" + json.dumps(add("a.parquet")) + "\n\n")
    assert load_snapshot(str(tmp_path)).num_files == 1


# --- errors --------------------------------------------------------------------------------------


def test_corrupt_json_line_names_version_and_line(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base()]])
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text(
        json.dumps(add("a.parquet"))
        + "\n"
        + json.dumps(add("b.parquet"))
        + "\n"
        + '{"add": {"path": "c.par\n'
    )
    with pytest.raises(CorruptMetadataError, match=r"commit 1 line 3 "):
        load_snapshot(str(tmp_path))
    assert load_snapshot(str(tmp_path), version=0).version == 0


def test_non_object_line_is_corrupt(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base()]])
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text("[1, 2]\n")
    with pytest.raises(CorruptMetadataError, match=r"commit 1 line 1"):
        load_snapshot(str(tmp_path))


def test_add_without_path_is_corrupt(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base(), {"add": {"size": 1, "partitionValues": {}}}]])
    with pytest.raises(CorruptMetadataError, match="add without a path"):
        load_snapshot(str(tmp_path))


@pytest.mark.parametrize(
    "action",
    [
        {"txn": {"version": 1}},  # no appId
        {"txn": {"appId": "a"}},  # no version
        {"domainMetadata": {"configuration": "{}", "removed": False}},  # no domain
    ],
)
def test_malformed_non_file_action_is_corrupt(tmp_path: Path, action: Action) -> None:
    write_log(tmp_path, [[*base()], [action]])
    with pytest.raises(CorruptMetadataError):
        load_snapshot(str(tmp_path))


def test_missing_protocol_is_corrupt(tmp_path: Path) -> None:
    write_log(tmp_path, [[metadata(), add("a.parquet")]])
    with pytest.raises(CorruptMetadataError, match="no protocol"):
        load_snapshot(str(tmp_path))


def test_missing_metadata_is_corrupt(tmp_path: Path) -> None:
    write_log(tmp_path, [[PROTOCOL, add("a.parquet")]])
    with pytest.raises(CorruptMetadataError, match="no metaData"):
        load_snapshot(str(tmp_path))


def test_unreadable_protocol_is_refused(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [
            [
                {
                    "protocol": {
                        "minReaderVersion": 3,
                        "minWriterVersion": 7,
                        "readerFeatures": ["futureThing"],
                        "writerFeatures": ["futureThing"],
                    }
                },
                metadata(),
            ]
        ],
    )
    with pytest.raises(UnsupportedFeatureError, match="futureThing"):
        load_snapshot(str(tmp_path))


def test_non_table_directory(tmp_path: Path) -> None:
    (tmp_path / "data.parquet").write_bytes(b"PAR1")
    with pytest.raises(NotATableError):
        load_snapshot(str(tmp_path))
    with pytest.raises(NotATableError):
        load_snapshot(str(tmp_path / "does-not-exist"))
    (tmp_path / "_delta_log").mkdir()
    with pytest.raises(NotATableError):
        load_snapshot(str(tmp_path))


def test_gap_in_commits_is_corrupt(tmp_path: Path) -> None:
    write_log(tmp_path, [[*base()], [add("a.parquet")], [add("b.parquet")]])
    (tmp_path / "_delta_log" / f"{1:020d}.json").unlink()
    with pytest.raises(CorruptMetadataError, match="commit 1 is missing"):
        load_snapshot(str(tmp_path))


# --- time travel ---------------------------------------------------------------------------------


def test_time_travel_by_version_and_file_mtime(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [[*base()], [add("a.parquet")], [add("b.parquet")], [remove("a.parquet")]],
        mtimes=[1_000_000, 2_000_000, 3_000_000, 4_000_000],
    )
    assert load_snapshot(str(tmp_path), version=2).num_files == 2
    assert load_snapshot(str(tmp_path)).timestamp_ms == 4_000_000

    at = load_snapshot(str(tmp_path), timestamp_ms=3_500_000)
    assert at.version == 2
    assert at.timestamp_ms == 3_000_000
    assert at.num_files == 2
    assert load_snapshot(str(tmp_path), timestamp_ms=2_500_000).version == 1
    assert load_snapshot(str(tmp_path), timestamp_ms=2_000_000).version == 1
    assert load_snapshot(str(tmp_path), timestamp_ms=1_999_999).version == 0
    assert load_snapshot(str(tmp_path), timestamp_ms=10**13).version == 3
    with pytest.raises(ConfigError):
        load_snapshot(str(tmp_path), timestamp_ms=999_999)
    with pytest.raises(ConfigError):
        load_snapshot(str(tmp_path), version=1, timestamp_ms=2_000_000)
    with pytest.raises(ConfigError, match="no version 9"):
        load_snapshot(str(tmp_path), version=9)


def test_time_travel_timestamp_of_snapshot(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [[*base()], [add("a.parquet")], [add("b.parquet")]],
        mtimes=[1_000_000, 2_000_000, 3_000_000],
    )
    snap = load_snapshot(str(tmp_path), version=1)
    assert snap.timestamp_ms == 2_000_000


def test_non_monotonic_mtimes_are_monotonized_for_time_travel(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [[*base()], [add("a.parquet")], [add("b.parquet")]],
        mtimes=[5_000_000, 4_000_000, 6_000_000],
    )
    # Version 1's mtime went back; it counts as 5_000_001.
    assert load_snapshot(str(tmp_path), timestamp_ms=5_000_000).version == 0
    assert load_snapshot(str(tmp_path), timestamp_ms=5_000_001).version == 1
    assert load_snapshot(str(tmp_path), version=1).timestamp_ms == 5_000_001


def ict_commit(ict: int, *rest: Action) -> list[Action]:
    return [{"commitInfo": {"timestamp": ict + 7, "inCommitTimestamp": ict, "operation": "WRITE"}}, *rest]


ICT_PROTOCOL: Action = {
    "protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["inCommitTimestamp"]}
}


def test_time_travel_by_in_commit_timestamp(tmp_path: Path) -> None:
    config = {"delta.enableInCommitTimestamps": "true"}
    write_log(
        tmp_path,
        [
            ict_commit(100_000, ICT_PROTOCOL, metadata(config)),
            ict_commit(200_000, add("a.parquet")),
            ict_commit(300_000, add("b.parquet")),
        ],
        # File mtimes disagree with the in-commit timestamps (a copied table): ICT decides.
        mtimes=[9_000_000, 9_000_000, 9_000_000],
    )
    snap = load_snapshot(str(tmp_path))
    assert snap.timestamp_ms == 300_000
    assert load_snapshot(str(tmp_path), version=1).timestamp_ms == 200_000
    assert load_snapshot(str(tmp_path), timestamp_ms=250_000).version == 1
    assert load_snapshot(str(tmp_path), timestamp_ms=300_000).version == 2
    assert load_snapshot(str(tmp_path), timestamp_ms=199_999).version == 0
    with pytest.raises(ConfigError):
        load_snapshot(str(tmp_path), timestamp_ms=99_999)


def test_in_commit_timestamps_ignored_when_not_enabled(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        [ict_commit(100_000, PROTOCOL, metadata()), ict_commit(200_000, add("a.parquet"))],
        mtimes=[1_000_000, 2_000_000],
    )
    assert load_snapshot(str(tmp_path)).timestamp_ms == 2_000_000
    assert load_snapshot(str(tmp_path), timestamp_ms=150_000 + 10**6).version == 0


# --- checkpoints ---------------------------------------------------------------------------------

STR_MAP = pa.map_(pa.string(), pa.string())
DV_STRUCT = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)
STATS_PARSED = pa.struct(
    [
        ("numRecords", pa.int64()),
        ("minValues", pa.struct([("id", pa.int64())])),
        ("maxValues", pa.struct([("id", pa.int64())])),
        ("nullCount", pa.struct([("id", pa.int64())])),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", STR_MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("tags", STR_MAP),
                    ("deletionVector", DV_STRUCT),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                    ("clusteringProvider", pa.string()),
                    ("stats", pa.string()),
                    ("stats_parsed", STATS_PARSED),
                ]
            ),
        ),
        (
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("extendedFileMetadata", pa.bool_()),
                    ("partitionValues", STR_MAP),
                    ("size", pa.int64()),
                    ("deletionVector", DV_STRUCT),
                    ("baseRowId", pa.int64()),
                    ("defaultRowCommitVersion", pa.int64()),
                ]
            ),
        ),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", STR_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", STR_MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        (
            "domainMetadata",
            pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
        ),
    ]
)


def checkpoint_row(**action: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(CHECKPOINT_SCHEMA.names)
    row.update(action)
    return row


def cp_add(
    path: str, stats_min: int, dv_: Mapping[str, Any] | None = None, part: str = "a"
) -> dict[str, Any]:
    return {
        "path": path,
        "partitionValues": [("part", part)],
        "size": 100,
        "modificationTime": 1_700_000_000_000,
        "dataChange": False,
        "tags": [("INSERTION_TIME", "1")],
        "deletionVector": None if dv_ is None else {**dv_, "maxRowIndex": None},
        "baseRowId": None,
        "defaultRowCommitVersion": None,
        "clusteringProvider": None,
        "stats": json.dumps({"numRecords": 10, "minValues": {"id": stats_min}}),
        "stats_parsed": {
            "numRecords": 10,
            "minValues": {"id": stats_min},
            "maxValues": {"id": 99},
            "nullCount": {"id": 0},
        },
    }


def checkpoint_rows(config: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    meta = dict(metadata(config, partitionColumns=["part"])["metaData"])
    meta["format"] = {"provider": "parquet", "options": []}
    meta["configuration"] = list((config or {}).items())
    meta.setdefault("name", None)
    meta.setdefault("description", None)
    return [
        checkpoint_row(
            protocol={
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors", "domainMetadata"],
            }
        ),
        checkpoint_row(metaData=meta),
        checkpoint_row(txn={"appId": "app", "version": 5, "lastUpdated": 1}),
        checkpoint_row(domainMetadata={"domain": "user.d", "configuration": "{}", "removed": False}),
        checkpoint_row(add=cp_add("part=a/keep.parquet", 1)),
        checkpoint_row(add=cp_add("part=a/gone.parquet", 2)),
        checkpoint_row(add=cp_add("part=b/dv.parquet", 3, DV1, part="b")),
        checkpoint_row(
            remove={
                "path": "part=a/old.parquet",
                "deletionTimestamp": 1_700_000_000_500,
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": [("part", "a")],
                "size": 100,
                "deletionVector": None,
                "baseRowId": None,
                "defaultRowCommitVersion": None,
            }
        ),
    ]


def write_checkpoint(log_dir: Path, version: int, rows: list[dict[str, Any]], parts: int = 1) -> None:
    table = pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA)
    if parts == 1:
        pq.write_table(table, log_dir / f"{version:020d}.checkpoint.parquet")
        return
    per = -(-table.num_rows // parts)
    for i in range(parts):
        pq.write_table(
            table.slice(i * per, per),
            log_dir / f"{version:020d}.checkpoint.{i + 1:010d}.{parts:010d}.parquet",
        )


def checkpointed_table(root: Path, parts: int = 1) -> Path:
    log_dir = root / "_delta_log"
    # Commits 0 and 1 were cleaned up; commit 2 is kept with its checkpoint.
    write_commit(root, 2, [{"commitInfo": {"timestamp": 3, "operation": "WRITE"}}])
    write_checkpoint(log_dir, 2, checkpoint_rows(), parts=parts)
    (log_dir / "_last_checkpoint").write_text(json.dumps({"version": 2, "size": 8}))
    write_commit(
        root,
        3,
        [
            {"commitInfo": {"timestamp": 4, "operation": "DELETE"}},
            remove("part=a/gone.parquet"),
            add("part=a/new.parquet", pv={"part": "a"}),
            {"txn": {"appId": "app", "version": 6}},
        ],
    )
    write_commit(
        root,
        4,
        [
            remove("part=b/dv.parquet", dv=DV1),
            add("part=b/dv.parquet", dv=DV2, pv={"part": "b"}),
            add("part=a/keep.parquet", pv={"part": "a"}, stats='{"numRecords":10}'),  # stats refresh
            {"domainMetadata": {"domain": "user.d", "configuration": "{}", "removed": True}},
        ],
    )
    return root


def assert_checkpointed_state(root: Path, snap: DeltaSnapshot) -> None:
    assert snap.version == 4
    assert snap.checkpoint_version == 2
    assert snap.protocol.reader_features == ("deletionVectors",)
    assert snap.partition_columns == ("part",)
    files = files_by_path(snap)
    assert set(files) == {
        f"{root}/part=a/keep.parquet",
        f"{root}/part=a/new.parquet",
        f"{root}/part=b/dv.parquet",
    }
    assert files[f"{root}/part=a/keep.parquet"].stats == '{"numRecords":10}'
    assert files[f"{root}/part=a/keep.parquet"].partition_values == {"part": "a"}
    dv_file = files[f"{root}/part=b/dv.parquet"]
    assert dv_file.deletion_vector is not None
    assert dv_file.deletion_vector.path_or_inline_dv == DV2["pathOrInlineDv"]
    assert tombstone_keys(snap) == {
        (f"{root}/part=a/old.parquet", None),
        (f"{root}/part=a/gone.parquet", None),
        (f"{root}/part=b/dv.parquet", "u" + DV1["pathOrInlineDv"] + "@1"),
    }
    assert {k: t.version for k, t in snap.txns.items()} == {"app": 6}
    assert snap.domains == {}


def test_checkpoint_plus_later_commits(tmp_path: Path) -> None:
    root = checkpointed_table(tmp_path)
    assert_checkpointed_state(root, load_snapshot(str(root)))


def test_a_checkpoint_naming_a_file_twice_keeps_its_newest_action(tmp_path: Path) -> None:
    """Checkpoints promise one row per file; a writer that broke it still yields each file once,
    its last row winning, as if the rows were commits (nothing is doubled in the conversion)."""
    log_dir = tmp_path / "_delta_log"
    write_commit(tmp_path, 2, [{"commitInfo": {"timestamp": 3, "operation": "WRITE"}}])
    rows = checkpoint_rows()
    twice = checkpoint_row(add=cp_add("part=a/keep.parquet", 7))
    removed_after_add = checkpoint_row(
        remove={"path": "part=a/gone.parquet", "deletionTimestamp": 5, "dataChange": True, "size": 100}
    )
    write_checkpoint(log_dir, 2, [*rows, twice, removed_after_add], parts=2)
    write_commit(tmp_path, 3, [add("part=a/new.parquet", pv={"part": "a"})])
    snap = load_snapshot(str(tmp_path))
    files = files_by_path(snap)
    assert sorted(files) == sorted(
        f"{tmp_path}/{p}" for p in ("part=a/keep.parquet", "part=b/dv.parquet", "part=a/new.parquet")
    )
    assert snap.num_files == 3
    assert json.loads(files[f"{tmp_path}/part=a/keep.parquet"].stats or "{}")["minValues"] == {"id": 7}
    assert (f"{tmp_path}/part=a/gone.parquet", None) in tombstone_keys(snap)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"path": "a.parquet", "size": "12", "partitionValues": {}}, "int64"),
        ({"path": "a.parquet", "size": 1, "partitionValues": ["x"]}, "malformed field"),
        ({"path": "a.parquet", "size": 1, "partitionValues": {"p": 3}}, "malformed field"),
        ({"path": 5, "size": 1, "partitionValues": {}}, "malformed field"),
    ],
)
def test_a_malformed_file_action_field_is_corrupt(tmp_path: Path, body: dict[str, Any], problem: str) -> None:
    write_log(tmp_path, [[*base()], [{"add": body}]])
    with pytest.raises(CorruptMetadataError, match=problem):
        load_snapshot(str(tmp_path))
    assert load_snapshot(str(tmp_path), version=0).num_files == 0


def test_checkpoint_alone_at_its_version(tmp_path: Path) -> None:
    root = checkpointed_table(tmp_path)
    snap = load_snapshot(str(root), version=2)
    assert snap.checkpoint_version == 2
    files = files_by_path(snap)
    assert set(files) == {
        f"{root}/part=a/keep.parquet",
        f"{root}/part=a/gone.parquet",
        f"{root}/part=b/dv.parquet",
    }
    keep = files[f"{root}/part=a/keep.parquet"]
    assert keep.stats == json.dumps({"numRecords": 10, "minValues": {"id": 1}})
    assert keep.tags == {"INSERTION_TIME": "1"}
    assert keep.data_change is False
    dv_file = files[f"{root}/part=b/dv.parquet"]
    assert dv_file.deletion_vector is not None
    assert dv_file.deletion_vector.unique_id == "u" + DV1["pathOrInlineDv"] + "@1"
    assert dv_file.partition_values == {"part": "b"}
    assert tombstone_keys(snap) == {(f"{root}/part=a/old.parquet", None)}
    assert snap.txns["app"].version == 5
    assert set(snap.domains) == {"user.d"}


def test_multi_part_checkpoint_plus_later_commits(tmp_path: Path) -> None:
    root = checkpointed_table(tmp_path, parts=3)
    assert_checkpointed_state(root, load_snapshot(str(root)))


def test_time_travel_before_cleaned_checkpoint_fails(tmp_path: Path) -> None:
    root = checkpointed_table(tmp_path)
    with pytest.raises(ConfigError, match="can no longer be reconstructed"):
        load_snapshot(str(root), version=1)


def test_stale_last_checkpoint_pointing_at_missing_checkpoint_still_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_log(tmp_path, [[*base(), add("a.parquet")], [add("b.parquet")], [remove("a.parquet")]])
    (tmp_path / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 1, "size": 4}))
    with caplog.at_level(logging.WARNING):
        snap = load_snapshot(str(tmp_path))
    assert snap.version == 2
    assert snap.checkpoint_version is None
    assert set(files_by_path(snap)) == {f"{tmp_path}/b.parquet"}
    assert "_last_checkpoint points at version 1" in caplog.text


def test_stale_last_checkpoint_falls_back_to_older_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = checkpointed_table(tmp_path)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 4, "size": 3}))
    with caplog.at_level(logging.WARNING):
        snap = load_snapshot(str(root))
    assert_checkpointed_state(root, snap)
    assert "_last_checkpoint points at version 4" in caplog.text


def test_corrupt_last_checkpoint_still_loads(tmp_path: Path) -> None:
    root = checkpointed_table(tmp_path)
    (root / "_delta_log" / "_last_checkpoint").write_text('{"version": 2, "si')
    assert_checkpointed_state(root, load_snapshot(str(root)))


def test_last_checkpoint_hint_missing_uses_listing(tmp_path: Path) -> None:
    root = checkpointed_table(tmp_path)
    (root / "_delta_log" / "_last_checkpoint").unlink()
    assert_checkpointed_state(root, load_snapshot(str(root)))


def test_in_commit_timestamp_at_a_checkpoint_version(tmp_path: Path) -> None:
    # The checkpoint drops commitInfo, so the snapshot's timestamp must come from the commit file
    # kept at the checkpoint version.
    config = {"delta.enableInCommitTimestamps": "true"}
    log_dir = tmp_path / "_delta_log"
    write_log(
        tmp_path,
        [ict_commit(100_000, ICT_PROTOCOL, metadata(config)), ict_commit(200_000, add("a.parquet"))],
        mtimes=[9_000_000, 9_000_000],
    )
    rows = [
        checkpoint_row(
            protocol={
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "readerFeatures": None,
                "writerFeatures": ["inCommitTimestamp"],
            }
        ),
        checkpoint_row(
            metaData={
                **metadata(config)["metaData"],
                "name": None,
                "description": None,
                "format": {"provider": "parquet", "options": []},
                "configuration": list(config.items()),
            }
        ),
        checkpoint_row(add=cp_add("a.parquet", 1)),
    ]
    write_checkpoint(log_dir, 1, rows)
    snap = load_snapshot(str(tmp_path))
    assert snap.checkpoint_version == 1
    assert snap.num_files == 1
    assert snap.timestamp_ms == 200_000
