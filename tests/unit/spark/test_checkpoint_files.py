"""The checkpoint tasks' pieces without Spark: slices planned and read, the commits' supersession,
the digests that check a checkpoint names each file once, and when the tail is not taken."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tablekeeper.delta.reconcile import Superseded, key_digests, keyed, reconcile, unique_digests
from tablekeeper.errors import CorruptMetadataError
from tablekeeper.io import FileIO
from tablekeeper.spark.checkpoint_files import Slice, plan_slices, read_slice, slice_files
from tablekeeper.tables.delta import (
    CheckpointTail,
    list_log,
    load_snapshot,
    read_checkpoint_tail,
    readable_segment,
)
from tests.unit.tables.test_delta import (
    CHECKPOINT_SCHEMA,
    PROTOCOL,
    add,
    checkpoint_row,
    checkpoint_rows,
    checkpointed_table,
    cp_add,
    metadata,
    write_checkpoint,
    write_commit,
)


def with_survivors(root: Path, *, parts: int = 1, twice: bool = False) -> Path:
    """``checkpointed_table`` (whose commits supersede all of its checkpoint's adds) with two more
    checkpointed files no commit names, ``stay1`` written twice when ``twice``."""
    checkpointed_table(root)
    log_dir = root / "_delta_log"
    stay = [checkpoint_row(add=cp_add(f"part=a/stay{i}.parquet", 5)) for i in (1, 2)]
    rows = [*(stay[:1] if twice else []), *checkpoint_rows(), *stay]
    (log_dir / f"{2:020d}.checkpoint.parquet").unlink()
    write_checkpoint(log_dir, 2, rows, parts=parts)
    return root


def tail_of(root: Path, max_commit_bytes: int = 1 << 30) -> CheckpointTail | None:
    io = FileIO.for_location(str(root))
    segment, _ = readable_segment(io, str(root), list_log(io, str(root)))
    return read_checkpoint_tail(io, str(root), segment, max_commit_bytes)


def live_by_tasks(root: Path, tasks: int) -> tuple[pa.Table, list[bytes]]:
    """What the tasks and the commits' task would convert, and every task's digests."""
    tail = tail_of(root)
    assert tail is not None
    superseded = Superseded(tail.newer)
    parts, digests = [], []
    for piece in plan_slices(FileIO.for_location(str(root)), tail.parquet, tasks):
        adds, keys = slice_files(str(root), piece, superseded)
        digests.append(keys)
        if adds is not None:
            parts.append(adds.select(["absolute_path", "dv_id", "stats"]))
    parts.append(reconcile([tail.newer], str(root)).files.select(["absolute_path", "dv_id", "stats"]))
    return pa.concat_tables(parts), digests


@pytest.mark.parametrize("parts", [1, 3])
def test_slices_and_the_commits_give_the_replayed_live_files(tmp_path: Path, parts: int) -> None:
    root = with_survivors(tmp_path / "t", parts=parts)
    live, digests = live_by_tasks(root, tasks=8)
    expected = load_snapshot(str(root)).files
    got = {(r["absolute_path"], r["dv_id"], r["stats"]) for r in live.to_pylist()}
    assert len(got) == live.num_rows == 5
    assert got == {(r["absolute_path"], r["dv_id"], r["stats"]) for r in expected.to_pylist()}
    # The removed, the DV-swapped and the re-added checkpoint rows are all superseded.
    assert unique_digests(digests)


def test_a_checkpoint_naming_a_file_twice_is_caught_across_tasks(tmp_path: Path) -> None:
    # Three parts: the two copies of stay1 are read by different tasks.
    root = with_survivors(tmp_path / "t", parts=3, twice=True)
    _, digests = live_by_tasks(root, tasks=8)
    assert not unique_digests(digests)


def test_a_duplicate_the_commits_supersede_is_not_counted(tmp_path: Path) -> None:
    # The driver's replay checks only the rows that survive the newer actions; so do the tasks.
    root = checkpointed_table(tmp_path / "t", parts=1)
    log_dir = root / "_delta_log"
    rows = checkpoint_rows()
    gone = next(r for r in rows if r.get("add") and r["add"]["path"] == "part=a/gone.parquet")
    write_checkpoint(log_dir, 2, [*rows, gone])
    _, digests = live_by_tasks(root, tasks=8)
    assert unique_digests(digests)


def test_plan_slices_cuts_a_large_row_group_evenly_and_read_slice_takes_exact_rows(tmp_path: Path) -> None:
    n = 100_003  # several reader batches, not a multiple of anything
    path = tmp_path / "one_group.parquet"
    table = pa.table({"add": pa.StructArray.from_arrays([pa.array([f"f{i}" for i in range(n)])], ["path"])})
    pq.write_table(table, path, row_group_size=n)
    io = FileIO.for_location(str(path))
    slices = plan_slices(io, (str(path),), tasks=4)
    assert len(slices) == 4
    assert [s.row_group for s in slices] == [0, 0, 0, 0]
    assert slices[0].start == 0 and slices[-1].stop == n
    assert all(a.stop == b.start for a, b in itertools.pairwise(slices))
    read = [read_slice(io, s) for s in slices]
    paths = pa.concat_arrays([pc.struct_field(t.column("add"), "path").combine_chunks() for t in read if t])
    assert paths.to_pylist() == [f"f{i}" for i in range(n)]


def test_plan_slices_keeps_small_row_groups_whole(tmp_path: Path) -> None:
    path = tmp_path / "groups.parquet"
    table = pa.table({"add": pa.StructArray.from_arrays([pa.array([f"f{i}" for i in range(9)])], ["path"])})
    pq.write_table(table, path, row_group_size=3)
    slices = plan_slices(FileIO.for_location(str(path)), (str(path),), tasks=64)
    assert slices == [Slice(str(path), i, 0, 3, offset=3 * i) for i in range(3)]


def test_empty_row_groups_give_no_slice(tmp_path: Path) -> None:
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"add": pa.array([], pa.struct([("path", pa.string())]))}), empty)
    assert pq.read_metadata(empty).num_row_groups == 1  # pyarrow writes one, with no rows
    assert plan_slices(FileIO.for_location(str(empty)), (str(empty),), tasks=4) == []


def test_a_file_without_file_actions_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "meta_only.parquet"
    pq.write_table(pa.table({"metaData": [None]}), path)
    assert read_slice(FileIO.for_location(str(path)), Slice(str(path), 0, 0, 1)) is None


def test_a_missing_sidecar_is_named(tmp_path: Path) -> None:
    with pytest.raises(CorruptMetadataError, match=r"names gone\.parquet, which is missing"):
        plan_slices(FileIO.for_location(str(tmp_path)), (str(tmp_path / "gone.parquet"),), tasks=2)


def test_the_tail_is_not_taken_without_a_parquet_checkpoint_or_past_its_limit(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    write_commit(plain, 0, [PROTOCOL, metadata(), add("a.parquet")])
    assert tail_of(plain) is None
    root = checkpointed_table(tmp_path / "t")
    assert tail_of(root, max_commit_bytes=100) is None
    tail = tail_of(root)
    assert tail is not None and tail.state.metadata is not None
    # Commits 3 and 4 name four keys; the checkpoint's files are left to the tasks.
    assert tail.newer.num_rows == 5
    json_checkpoint = tmp_path / "json"
    write_commit(json_checkpoint, 0, [PROTOCOL, metadata(), add("a.parquet")])
    (json_checkpoint / "_delta_log" / f"{0:020d}.checkpoint.json").write_text(
        "".join(json.dumps(a) + "\n" for a in [PROTOCOL, metadata(), add("a.parquet")])
    )
    assert tail_of(json_checkpoint) is None


def test_digests_are_equal_for_equal_keys_only() -> None:
    table = keyed(
        pa.table(
            {
                "path": ["a", "a", "b", "a"],
                "dv": pa.array(
                    [None, None, None, {"storageType": "u", "pathOrInlineDv": "x", "offset": 1}],
                    CHECKPOINT_SCHEMA.field("add").type.field("deletionVector").type,
                ),
            }
        ),
        "/root",
    )
    digests = key_digests(table)
    assert len(digests) == 32
    values = [digests[i : i + 8] for i in range(0, 32, 8)]
    assert values[0] == values[1] and len(set(values)) == 3
    assert not unique_digests([digests])
    assert unique_digests([digests[:8], digests[16:]])
    assert unique_digests([]) and key_digests(table.slice(0, 0)) == b""
