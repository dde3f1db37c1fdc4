"""health's tally of live files against compact's planner.

``estimate_compaction`` must be what ``plan_rewrite`` plans on the same entries (files, bytes,
groups, files written): for randomized tables with four partition specs (partitions with NaN and
signed zeros, files of older specs that compact packs into the current spec's partitions), sizes
around every bound, ORC files, and delete files (DVs, file- and partition-scoped position deletes,
equality deletes) that make good files candidates. The size-only read of manifests (tables
without deletes) must tally what the full read does, and tallies of split entry lists merged in
order must equal one tally.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from tablekeeper.iceberg.content import (
    DATA,
    DELETED,
    EQUALITY_DELETES,
    EXISTING,
    POSITION_DELETES,
    DataFile,
    ManifestEntry,
    ManifestFile,
)
from tablekeeper.iceberg.delete_index import AppliedDeletes, DeleteIndex
from tablekeeper.iceberg.health import (
    Tally,
    estimate_compaction,
    histogram_bounds,
    histogram_rows,
    new_tally,
    tally_entries,
    top_small_partitions,
)
from tablekeeper.iceberg.manifest import write_manifest
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.rewrite_plan import (
    DEFAULT_MAX_GROUP_SIZE,
    NO_DELETE_THRESHOLD,
    RewriteOptions,
    RewritePlan,
    expected_files_after,
    plan_rewrite,
)
from tablekeeper.iceberg.types import DOUBLE, LONG, STRING, NestedField, Schema
from tablekeeper.io import FileIO
from tablekeeper.jobs.compact.order import coerce_into
from tablekeeper.tables.iceberg import iter_entries, tally_manifests

SCHEMA = Schema(
    schema_id=0,
    fields=(
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "cat", STRING),
        NestedField(3, "x", DOUBLE),
    ),
)
CAT = PartitionField(2, 1000, "cat", "identity")
SPECS = (
    PartitionSpec(0, (CAT,)),
    PartitionSpec(1, (CAT, PartitionField(1, 1001, "id_bucket", "bucket[4]"))),
    PartitionSpec(2, (PartitionField(3, 1002, "x", "identity"),)),  # cat dropped, x added
    PartitionSpec(3, ()),
)
UNPARTITIONED = 3  # its equality deletes are global
PARTITIONS: dict[int, list[tuple[object, ...]]] = {
    0: [("a",), ("b",), (None,)],
    1: [("a", 0), ("a", 1), ("a", None), ("b", 3), (None, 2)],
    2: [(0.0,), (-0.0,), (math.nan,), (1.5,), (None,)],
    3: [()],
}
SEEDS = range(300)


def _meta(current: int) -> TableMetadata:
    return TableMetadata(
        format_version=2,
        table_uuid="9a9f9c2e-6f0c-4a57-9d7b-2f1a8c7c1d11",
        location="s3://b/t",
        last_updated_ms=0,
        last_column_id=3,
        schemas=(SCHEMA,),
        current_schema_id=0,
        partition_specs=SPECS,
        default_spec_id=current,
        last_partition_id=1002,
    )


def _entry(f: DataFile, seq: int, status: int = EXISTING) -> ManifestEntry:
    return ManifestEntry(status, 1, f, seq, seq)


def _size(rng: random.Random, o: RewriteOptions) -> int:
    pick = rng.random()
    if pick < 0.1:
        return rng.choice([0, 1, o.min_file_size - 1, o.min_file_size, o.max_file_size, o.max_file_size + 1])
    if pick < 0.6:
        return rng.randrange(1, max(2, o.target_file_size // 50))  # tiny
    if pick < 0.8:
        return rng.randrange(1, max(2, o.min_file_size))  # small
    if pick < 0.93:
        return rng.randrange(o.min_file_size, o.max_file_size + 1)  # left alone unless deleted from
    return rng.randrange(o.max_file_size + 1, o.max_file_size * 3)  # split


def _options(rng: random.Random) -> RewriteOptions:
    """Random compact options (``rewrite_all`` and ``max_files_to_rewrite`` stay off: health
    plans with compact's defaults, which never set them)."""
    target = rng.choice([1000, 64 * 1024, 128 * 1024 * 1024])
    kw: dict[str, object] = {
        "min_input_files": rng.choice([1, 2, 5, 12]),
        "max_file_group_size": rng.choice([target, target * 3, target * 10, DEFAULT_MAX_GROUP_SIZE]),
        "delete_file_threshold": rng.choice([NO_DELETE_THRESHOLD, 1, 2, 3]),
        "delete_ratio_threshold": rng.choice([0.05, 0.3, 1.0]),
    }
    if rng.random() < 0.3:
        kw["min_file_size"] = rng.randrange(0, target)
        kw["max_file_size"] = rng.randrange(target + 1, target * 3)
    return RewriteOptions.resolve({}, target_file_size=target, **kw)  # type: ignore[arg-type]


def _data_files(
    rng: random.Random, o: RewriteOptions, specs: Sequence[int] = (0, 0, 1, 2, 3)
) -> list[DataFile]:
    out = []
    for i in range(rng.randrange(0, 80)):
        spec = rng.choice(specs)
        fmt = "ORC" if rng.random() < 0.05 else "PARQUET"
        out.append(
            DataFile(
                DATA,
                f"s3://b/t/data/{i}.{fmt.lower()}",
                fmt,
                rng.choice(PARTITIONS[spec]),
                rng.randrange(1, 300),
                _size(rng, o),
                spec_id=spec,
            )
        )
    return out


def _deletes(rng: random.Random, data: Sequence[ManifestEntry]) -> list[ManifestEntry]:
    """Live delete entries for ``data``: DVs and file-scoped position deletes naming one file,
    partition-scoped position deletes and equality deletes."""
    out: list[ManifestEntry] = []
    for i, e in enumerate(data):
        f, seq, kind = e.data_file, e.sequence_number or 0, rng.random()
        if kind < 0.2:  # a DV naming this file (its spec and partition, never older than it)
            dv = DataFile(
                POSITION_DELETES,
                f"s3://b/t/data/dv-{i}.puffin",
                "PUFFIN",
                f.partition,
                rng.randrange(0, f.record_count + 1),
                rng.randrange(100, 5000),
                spec_id=f.spec_id,
                referenced_data_file=f.file_path,
                content_offset=4,
                content_size_in_bytes=rng.randrange(10, 90),
            )
            out.append(_entry(dv, seq + rng.randrange(0, 3)))
        elif kind < 0.35:  # a position delete file naming this file alone (it counts for the ratio)
            d = DataFile(
                POSITION_DELETES,
                f"s3://b/t/data/pos-{i}.parquet",
                rng.choice(["PARQUET", "PARQUET", "AVRO"]),
                f.partition,
                rng.randrange(1, f.record_count + 1),
                rng.randrange(100, 5000),
                spec_id=f.spec_id,
                referenced_data_file=f.file_path,
            )
            out.append(_entry(d, seq + rng.randrange(-1, 3)))  # sometimes too old to apply
    for j in range(rng.randrange(0, 12)):
        spec = rng.choice([s.spec_id for s in SPECS])
        content = rng.choice([POSITION_DELETES, EQUALITY_DELETES])
        d = DataFile(
            content,
            f"s3://b/t/data/del-{j}.parquet",
            rng.choice(["PARQUET", "PARQUET", "PARQUET", "ORC"]),
            rng.choice(PARTITIONS[spec]),
            rng.randrange(1, 50),
            rng.randrange(100, 5000),
            spec_id=spec,
            equality_ids=(1,) if content == EQUALITY_DELETES else None,
        )
        out.append(_entry(d, rng.randrange(1, 7)))
    rng.shuffle(out)
    return out


def _scenario(seed: int) -> tuple[RewriteOptions, TableMetadata, list[ManifestEntry], list[ManifestEntry]]:
    rng = random.Random(seed)
    o = _options(rng)
    meta = _meta(rng.choice([s.spec_id for s in SPECS]))
    data = [_entry(f, rng.randrange(1, 6)) for f in _data_files(rng, o)]
    return o, meta, data, _deletes(rng, data)


def _index(deletes: Sequence[ManifestEntry]) -> DeleteIndex:
    return DeleteIndex(deletes, frozenset({UNPARTITIONED}))


def _compact_plan(
    meta: TableMetadata, data: Sequence[ManifestEntry], index: DeleteIndex, o: RewriteOptions
) -> RewritePlan:
    """What compact plans by default: candidates packed into the current spec's partitions."""
    return plan_rewrite(data, index, o, scope=coerce_into(meta, meta.spec()))


def _full(
    meta: TableMetadata, data: Sequence[ManifestEntry], deletes: Sequence[ManifestEntry], o: RewriteOptions
) -> Tally:
    index = _index(deletes)
    tally = new_tally(meta, o)
    for e in data:
        tally.add_data(e, index.for_data_file(e), o)
    for e in deletes:
        tally.add_delete(e)
    return tally


def _same(estimate_of: Tally, plan: RewritePlan, o: RewriteOptions) -> None:
    estimate = estimate_compaction(estimate_of, o)
    assert (estimate.files, estimate.bytes, estimate.groups, estimate.output_files, estimate.live_files) == (
        plan.files,
        plan.bytes,
        len(plan.groups),
        sum(g.expected_output_files for g in plan.groups),
        plan.live_files,
    ), o
    assert estimate.files_after == expected_files_after(plan, plan.live_files)
    assert estimate_of.skipped_files == plan.skipped_files


def _state(t: Tally) -> dict[str, object]:
    out: dict[str, object] = {name: getattr(t, name) for name in Tally.__slots__}
    out["candidates"] = {k: list(v) for k, v in t.candidates.items()}
    out["partition_values"] = {k: repr(v) for k, v in t.partition_values.items()}  # NaN != NaN
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_estimate_is_what_plan_rewrite_plans_per_file_spec(seed: int) -> None:
    o, _, data, deletes = _scenario(seed)
    index = _index(deletes)
    tally = tally_entries(((e, index.for_data_file(e)) for e in data), deletes, o)
    _same(tally, plan_rewrite(data, index, o), o)


@pytest.mark.parametrize("seed", SEEDS)
def test_estimate_is_what_compact_plans_into_the_current_spec(seed: int) -> None:
    o, meta, data, deletes = _scenario(seed)
    _same(_full(meta, data, deletes, o), _compact_plan(meta, data, _index(deletes), o), o)


def test_the_random_tables_reach_every_branch() -> None:
    """The scenarios above are only worth something if they plan all kinds of groups."""
    seen = dict.fromkeys(
        ("groups", "delete-only", "split", "skipped", "nothing", "several", "merged-specs"), 0
    )
    for seed in SEEDS:
        o, meta, data, deletes = _scenario(seed)
        plan = _compact_plan(meta, data, _index(deletes), o)
        seen["groups"] += len(plan.groups)
        seen["nothing"] += not plan.groups and plan.live_files > 0
        seen["skipped"] += plan.skipped_files > 0
        seen["several"] += len({(g.spec_id, repr(g.partition)) for g in plan.groups}) > 1
        seen["merged-specs"] += any(len({t.file.spec_id for t in g.tasks}) > 1 for g in plan.groups)
        for g in plan.groups:
            seen["split"] += g.expected_output_files > 1
            seen["delete-only"] += len(g.tasks) == 1 and o.min_file_size <= g.input_size <= o.max_file_size
    assert all(n >= 5 for n in seen.values()), seen


def _manifests(
    tmp_path: Path, rng: random.Random, meta: TableMetadata, data: Sequence[ManifestEntry]
) -> tuple[FileIO, list[ManifestFile]]:
    """The entries written as manifests of their specs (a few per spec, with DELETED entries
    beside them), in a shuffled manifest order, as a committed snapshot holds them."""
    io = FileIO.for_location(str(tmp_path))
    chunks: list[tuple[int, list[ManifestEntry]]] = []
    for spec in SPECS:
        mine = [e for e in data if e.data_file.spec_id == spec.spec_id]
        cuts = (
            sorted(rng.sample(range(1, len(mine)), k=min(2, max(0, len(mine) - 1)))) if len(mine) > 1 else []
        )
        chunks += [(spec.spec_id, mine[a:b]) for a, b in itertools.pairwise([0, *cuts, len(mine)])]
    rng.shuffle(chunks)
    manifests = []
    for n, (spec_id, entries) in enumerate(chunks):
        gone = [
            _entry(dataclasses.replace(e.data_file, file_path=e.data_file.file_path + ".gone"), 1, DELETED)
            for e in entries[:2]
        ]
        mixed = [x for pair in itertools.zip_longest(entries, gone) for x in pair if x is not None]
        path = f"{tmp_path}/m{n}.avro"
        data_bytes, manifest = write_manifest(
            path, mixed, format_version=2, spec=meta.spec(spec_id), schema=SCHEMA, snapshot_id=1
        )
        io.write(path, data_bytes)
        manifests.append(dataclasses.replace(manifest, sequence_number=7, min_sequence_number=1))
    return io, manifests


@pytest.mark.parametrize("seed", range(40))
def test_size_only_read_tallies_what_the_full_read_does(tmp_path: Path, seed: int) -> None:
    """A table without delete files is read for sizes and partitions only (``add_sizes``)."""
    rng = random.Random(2000 + seed)
    o, meta = _options(rng), _meta(rng.choice([s.spec_id for s in SPECS]))
    data = [_entry(f, rng.randrange(1, 6)) for f in _data_files(rng, o)]
    io, manifests = _manifests(tmp_path, rng, meta, data)
    empty = _index(())
    sizes_only = tally_manifests(io, meta, manifests, empty, o)
    read_back = list(iter_entries(io, meta, manifests))
    assert len(read_back) == len(data)
    full = new_tally(meta, o)
    for e in read_back:
        full.add_data(e, AppliedDeletes(), o)
    assert _state(sizes_only) == _state(full)
    _same(sizes_only, _compact_plan(meta, read_back, empty, o), o)


@pytest.mark.parametrize("seed", range(40))
def test_manifests_with_deletes_tally_what_compact_plans(tmp_path: Path, seed: int) -> None:
    rng = random.Random(3000 + seed)
    o, meta = _options(rng), _meta(rng.choice([s.spec_id for s in SPECS]))
    data = [_entry(f, rng.randrange(1, 6)) for f in _data_files(rng, o)]
    io, manifests = _manifests(tmp_path, rng, meta, data)
    read_back = list(iter_entries(io, meta, manifests))
    deletes = _deletes(rng, read_back) or [
        _entry(
            DataFile(EQUALITY_DELETES, "eq.parquet", "PARQUET", (), 1, 10, spec_id=3, equality_ids=(1,)), 9
        )
    ]
    index = _index(deletes)
    tally = tally_manifests(io, meta, manifests, index, o)
    _same(tally, _compact_plan(meta, read_back, index, o), o)


@pytest.mark.parametrize("seed", range(60))
def test_tallies_of_split_entry_lists_merge_into_one_tally(seed: int) -> None:
    o, meta, data, deletes = _scenario(1000 + seed)
    rng = random.Random(seed)
    whole = _full(meta, data, deletes, o)
    cuts = sorted(rng.sample(range(len(data) + 1), k=min(len(data) + 1, rng.randrange(1, 5))))
    pieces = [data[a:b] for a, b in itertools.pairwise([0, *cuts, len(data)])]
    index = _index(deletes)
    parts = []
    for piece in pieces:
        part = new_tally(meta, o)
        for e in piece:
            part.add_data(e, index.for_data_file(e), o)
        parts.append(part)
    delete_cut = rng.randrange(len(deletes) + 1)
    for chunk in (deletes[:delete_cut], deletes[delete_cut:]):
        part = new_tally(meta, o)
        for e in chunk:
            part.add_delete(e)
        parts.append(part)
    merged = parts[0]
    for part in parts[1:]:
        merged.merge(part)
    assert _state(merged) == _state(whole)
    assert estimate_compaction(merged, o) == estimate_compaction(whole, o)


def test_merge_keeps_the_packing_order_of_the_manifests() -> None:
    """Next-fit packing depends on order: a merged tally must pack as the entries came."""
    o = RewriteOptions.resolve({}, target_file_size=1000, max_file_group_size=1000, min_input_files=2)
    sizes = [600, 300, 300, 600, 300, 300]  # in order: [600,300] [300,600] [300,300]
    data = [
        _entry(DataFile(DATA, f"f{i}", "PARQUET", ("a",), 10, s, spec_id=0), 1) for i, s in enumerate(sizes)
    ]
    meta = _meta(0)
    first, second = _full(meta, data[:3], [], o), _full(meta, data[3:], [], o)
    first.merge(second)
    assert list(first.candidates[(0, ("a",))]) == sizes
    assert [len(g.tasks) for g in plan_rewrite(data, _index([]), o).groups] == [2, 2, 2]
    assert estimate_compaction(first, o) == estimate_compaction(_full(meta, data, [], o), o)
    assert estimate_compaction(first, o).groups == 3


def test_files_of_a_dropped_partition_field_pack_together() -> None:
    """Three old partitions of three small files each: one group once the spec is unpartitioned."""
    o = RewriteOptions.resolve({}, target_file_size=1000)
    data = [
        _entry(DataFile(DATA, f"{c}{i}", "PARQUET", (c,), 10, 50, spec_id=0), 1)
        for c in "abc"
        for i in range(3)
    ]
    assert estimate_compaction(_full(_meta(0), data, [], o), o).files == 0  # 3 < min-input-files
    estimate = estimate_compaction(_full(_meta(3), data, [], o), o)
    assert (estimate.files, estimate.groups, estimate.files_after) == (9, 1, 1)


def test_a_good_file_taken_for_its_deletes_is_rewritten_alone() -> None:
    o = RewriteOptions.resolve({}, target_file_size=1000)
    good = _entry(DataFile(DATA, "good", "PARQUET", ("a",), 100, 900, spec_id=0), 1)
    dv = DataFile(
        POSITION_DELETES,
        "dv.puffin",
        "PUFFIN",
        ("a",),
        30,
        4000,
        spec_id=0,
        referenced_data_file="good",
        content_offset=4,
        content_size_in_bytes=40,
    )
    tally = _full(_meta(0), [good], [_entry(dv, 2)], o)
    assert list(tally.candidates[(0, ("a",))]) == [-901]  # taken for its deletes
    assert (tally.small_files, tally.dv_files, tally.delete_bytes, tally.position_deleted_rows) == (
        0,
        1,
        40,
        30,
    )
    estimate = estimate_compaction(tally, o)
    assert (estimate.files, estimate.groups, estimate.output_files, estimate.files_after) == (1, 1, 1, 1)
    # 29% deleted stays under the 30% ratio: nothing to do.
    fewer = _full(_meta(0), [good], [_entry(dataclasses.replace(dv, record_count=29), 2)], o)
    assert estimate_compaction(fewer, o).files == 0


@pytest.mark.parametrize("seed", range(20))
def test_counts_and_histogram_add_up(seed: int) -> None:
    o, meta, data, deletes = _scenario(5000 + seed)
    t = _full(meta, data, deletes, o)
    files = [e.data_file for e in data]
    assert (t.data_files, t.data_bytes, t.data_records) == (
        len(files),
        sum(f.file_size_in_bytes for f in files),
        sum(f.record_count for f in files),
    )
    small = [f for f in files if f.file_size_in_bytes < o.min_file_size]
    assert (t.small_files, t.small_bytes) == (len(small), sum(f.file_size_in_bytes for f in small))
    assert sum(n for n, _ in t.small_by_partition.values()) == t.small_files
    rows = histogram_rows(t)
    assert [r["files"] for r in rows] == [
        sum(1 for f in files if r["from_bytes"] <= f.file_size_in_bytes < (r["below_bytes"] or 1 << 62))
        for r in rows
    ]
    assert sum(r["bytes"] for r in rows) == t.data_bytes  # type: ignore[misc]
    assert rows[0]["from_bytes"] == 0 and rows[-1]["below_bytes"] is None
    assert all(a["below_bytes"] == b["from_bytes"] for a, b in itertools.pairwise(rows))
    # The bucket of files compaction leaves alone starts at the small-file size and ends past the maximum.
    assert o.min_file_size in histogram_bounds(o) and o.max_file_size + 1 in histogram_bounds(o)
    pos = [d.data_file for d in deletes if d.data_file.content == POSITION_DELETES]
    assert t.dv_files == sum(1 for d in pos if d.is_dv)
    assert t.position_delete_files == sum(1 for d in pos if not d.is_dv)
    assert t.equality_delete_files == sum(1 for d in deletes if d.data_file.content == EQUALITY_DELETES)


def test_top_small_partitions_name_fields_and_rank_by_count() -> None:
    o = RewriteOptions.resolve({}, target_file_size=1000)
    data = [_entry(DataFile(DATA, f"a{i}", "PARQUET", ("a", 1), 1, 10, spec_id=1), 1) for i in range(3)]
    data += [_entry(DataFile(DATA, f"n{i}", "PARQUET", (math.nan,), 1, 10, spec_id=2), 1) for i in range(4)]
    data += [_entry(DataFile(DATA, "big", "PARQUET", ("b", 2), 1, 900, spec_id=1), 1)]
    names = {s.spec_id: tuple(f.name for f in s.fields) for s in SPECS}
    rows = top_small_partitions(_full(_meta(3), data, [], o), names)
    assert [r["small_files"] for r in rows] == [4, 3]
    assert rows[0]["spec_id"] == 2 and str(rows[0]["partition"]["x"]).lower() == "nan"  # type: ignore[index]
    # Listed by the files' own spec, whatever spec compaction would pack them into.
    assert rows[1] == {
        "spec_id": 1,
        "partition": {"cat": "a", "id_bucket": 1},
        "small_files": 3,
        "small_bytes": 30,
    }
    assert top_small_partitions(_full(_meta(3), data, [], o), {}, limit=1)[0]["partition"] == {}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_partition_values_print_as_json(value: float) -> None:
    """health prints one JSON line: a float partition value that is NaN or infinite must not
    turn it into Python's ``NaN``/``Infinity``, which JSON parsers reject."""
    o = RewriteOptions.resolve({}, target_file_size=1000)
    data = [_entry(DataFile(DATA, "n", "PARQUET", (value,), 1, 10, spec_id=2), 1)]
    rows = top_small_partitions(_full(_meta(2), data, [], o), {2: ("x",)})
    json.dumps(rows, allow_nan=False)
