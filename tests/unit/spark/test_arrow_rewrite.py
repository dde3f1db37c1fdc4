"""How compaction's Arrow path cuts a group into tasks and files: runs near the ideal size, no
tiny file between large ones, files rolled at exactly the row limit, and a failed attempt
leaves no file behind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tablekeeper.iceberg.metrics import MetricsConfig
from tablekeeper.iceberg.position_delete_merge import write_position_delete_file
from tablekeeper.iceberg.types import NestedField, PrimitiveType, Schema
from tablekeeper.spark.arrow_output import Job, Output
from tablekeeper.spark.arrow_rewrite import _bins, position_file_positions
from tests.support.delete_files import avro_deletes, orc_deletes


@dataclass(frozen=True)
class _Sized:
    size: int


def _shape(sizes: list[int], count: int) -> list[tuple[list[int], int]]:
    return [([t.size for t in b], files) for b, files in _bins([_Sized(s) for s in sizes], count)]  # type: ignore[misc]


def test_runs_never_leave_a_tiny_file_between_large_ones() -> None:
    assert _shape([170, 5, 5, 5, 5, 5, 5, 170], 4) == [([170], 2), ([5, 5, 5, 5, 5, 5, 170], 2)]


def test_a_large_input_is_written_into_several_files() -> None:
    assert _shape([170, 170], 4) == [([170], 2), ([170], 2)]


def test_the_last_run_takes_the_rest() -> None:
    sizes = [500_000 + (i * 7919) % 1000 for i in range(2000)]
    shape = _shape(sizes, 2)
    assert [files for _, files in shape] == [1, 1] and sum(len(b) for b, _ in shape) == 2000


def test_the_runs_write_as_many_files_as_planned() -> None:
    # Runs of 2, 2 and 4 equal files: rounding each run on its own gave 1 + 1 + 2 files.
    assert sum(files for _, files in _shape([10] * 8, 3)) == 3
    for count in range(1, 12):
        for sizes in ([10] * 11, [1, 50, 3, 3, 90, 7, 7, 7, 40, 2, 2], [170, 5, 5, 5, 5, 5, 5, 170]):
            shape = _shape(sizes, count)
            assert sum(files for _, files in shape) == max(count, len(shape))
            assert all(files >= 1 for _, files in shape)


def test_even_inputs_split_evenly() -> None:
    assert _shape([10] * 8, 2) == [([10] * 4, 1), ([10] * 4, 1)]
    assert _shape([10] * 3, 1) == [([10] * 3, 1)]


def _job(directory: Path) -> Job:
    fields = (NestedField(1, "id", PrimitiveType("long")),)
    return Job(
        fields=fields,
        lineage=False,
        mapping=None,
        directory=str(directory),
        codec="zstd",
        level=3,
        row_group_bytes=128 << 20,
        page_bytes=1 << 20,
        dict_bytes=2 << 20,
        schema=Schema(0, fields),
        metrics=MetricsConfig(),
        sort_order_id=None,
    )


def test_files_roll_at_exactly_the_row_limit(tmp_path: Path) -> None:
    out = Output(_job(tmp_path), "t", 50_000, 0, ())
    for start in range(0, 130_000, 65_536):
        ids = pa.array(range(start, min(start + 65_536, 130_000)), pa.int64())
        out.add(pa.record_batch([ids], schema=out.schema))
    out.flush()
    out.close()
    assert [f.record_count for f in out.done] == [50_000, 50_000, 30_000]
    rows = [r for f in out.done for r in pq.read_table(f.file_path).column("id").to_pylist()]
    assert rows == list(range(130_000))


def test_a_failed_attempt_deletes_what_it_wrote(tmp_path: Path) -> None:
    out = Output(_job(tmp_path), "t", 10, 0, ())
    out.add(pa.record_batch([pa.array(range(25), pa.int64())], schema=out.schema))
    out.flush()  # the last 5 rows into a third file, left open
    assert len(list(tmp_path.iterdir())) == 3
    out.abandon()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("codec", ["snappy", "none"])
def test_codecs_without_a_level_write(tmp_path: Path, codec: str) -> None:
    job = _job(tmp_path)
    out = Output(Job(**{**job.__dict__, "codec": codec, "level": None}), "t", 100, 0, ())  # type: ignore[arg-type]
    out.add(pa.record_batch([pa.array([1, 2], pa.int64())], schema=out.schema))
    out.flush()
    out.close()
    assert out.done[0].record_count == 2


def _eq_job(tmp_path: Path) -> Job:
    from tablekeeper.iceberg.types import StructType

    fields = (
        NestedField(1, "id", PrimitiveType("long")),
        NestedField(
            2,
            "s",
            StructType(
                (NestedField(3, "x", PrimitiveType("long")), NestedField(4, "u", PrimitiveType("uuid")))
            ),
        ),
        NestedField(5, "d", PrimitiveType("double")),
    )
    return Job(**{**_job(tmp_path).__dict__, "fields": fields, "schema": Schema(0, fields)})  # type: ignore[arg-type]


def test_equality_deletes_on_struct_fields_and_uuids(tmp_path: Path) -> None:
    """Equality delete files keep the table's nesting; uuid keys compare by their bytes."""
    from tablekeeper.iceberg.arrow_project import write_schema
    from tablekeeper.spark.equality import equality_mask, equality_rows

    job = _eq_job(tmp_path)
    schema = write_schema(job.fields)
    u = pa.ExtensionArray.from_storage(pa.uuid(), pa.array([b"\x01" * 16, b"\x02" * 16, None], pa.binary(16)))
    rows = pa.record_batch(
        [
            pa.array([1, 2, 3], pa.int64()),
            pa.StructArray.from_arrays(
                [pa.array([5, 6, None], pa.int64()), u], fields=list(schema.field("s").type)
            ),
            pa.array([float("nan"), -0.0, 0.0]),
        ],
        schema=schema,
    )
    path = tmp_path / "eq.parquet"
    pq.write_table(pa.Table.from_batches([rows.slice(0, 1)]).select(["s"]), path, store_schema=False)
    for ids, want in (
        ((3,), [True, False, False]),
        ((4,), [True, False, False]),
        ((3, 4), [True, False, False]),
    ):
        deletes = equality_rows(job.fields, job.mapping, str(path), ids, {})
        assert len(deletes) == 1
        assert equality_mask(job.fields, rows.columns, ids, deletes).to_pylist() == want, ids  # type: ignore[union-attr]


def test_equality_deletes_compare_floats_as_java() -> None:
    """All NaNs are equal and -0.0 is not 0.0, in one column or several."""
    from tablekeeper.spark.equality import equality_mask

    job = _eq_job(Path("/nonexistent"))
    d = pa.array([float("nan"), -0.0, 0.0, None])
    ids = pa.array([1, 1, 1, 1], pa.int64())
    s = pa.nulls(4, pa.struct([pa.field("x", pa.int64()), pa.field("u", pa.uuid())]))
    arrays = [ids, s, d]
    one = pa.table({"c0": pa.array([float("nan"), -0.0])})
    assert equality_mask(job.fields, arrays, (5,), one).to_pylist() == [True, True, False, False]  # type: ignore[union-attr]
    two = pa.table({"c0": pa.array([float("nan"), -0.0]), "c1": pa.array([1, 1], pa.int64())})
    assert equality_mask(job.fields, arrays, (5, 1), two).to_pylist() == [True, True, False, False]  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", ["PARQUET", "ORC", "AVRO"])
def test_position_delete_files_are_read_in_every_format(tmp_path: Path, fmt: str) -> None:
    """Compaction on the Arrow path reads a position delete file's rows for the wanted data files,
    whatever the file's format."""
    rows = [("file:/t/data/a.parquet", 3), ("file:/t/data/b.parquet", 1), ("file:/t/data/a.parquet", 0)]
    if fmt == "PARQUET":
        data = write_position_delete_file(
            pa.table(
                {"file_path": [p for p, _ in rows], "pos": pa.array([n for _, n in rows], pa.int64())}
            ).sort_by([("file_path", "ascending"), ("pos", "ascending")]),
            "x",
            spec_id=0,
            partition=(),
        ).data
    else:
        data = orc_deletes(rows) if fmt == "ORC" else avro_deletes(rows)
    location = tmp_path / f"deletes.{fmt.lower()}"
    location.write_bytes(data)
    found = position_file_positions(str(location), fmt, frozenset({"/t/data/a.parquet"}))
    assert {k: sorted(v.to_pylist()) for k, v in found.items()} == {"/t/data/a.parquet": [0, 3]}


def test_decimals_are_stored_as_the_spec_asks_with_their_bounds(tmp_path: Path) -> None:
    """int32 up to precision 9, int64 up to 18, fixed_len_byte_array above (the spec's Parquet
    appendix), with lower and upper bounds in Iceberg's decimal form either way."""
    from decimal import Decimal

    from tablekeeper.iceberg.conversions import to_bytes
    from tablekeeper.iceberg.types import DecimalType

    types = [DecimalType(5, 2), DecimalType(15, 2), DecimalType(30, 2)]
    fields = tuple(NestedField(i + 1, f"d{i}", t) for i, t in enumerate(types))
    job = Job(**{**_job(tmp_path).__dict__, "fields": fields, "schema": Schema(0, fields)})  # type: ignore[arg-type]
    out = Output(job, "t", 100, 0, ())
    values = [
        [Decimal("-999.99"), Decimal("1.25"), None],
        [Decimal("-9999999999999.99"), Decimal("42.00"), None],
        [Decimal("-" + "9" * 28 + ".99"), Decimal("0.01"), None],
    ]
    columns = [pa.array(v, pa.decimal128(t.precision, t.scale)) for v, t in zip(values, types, strict=True)]
    out.add(pa.record_batch(columns, schema=out.schema))
    out.close()
    f = out.done[0]
    footer = pq.read_metadata(f.file_path)
    physical = [footer.row_group(0).column(i).physical_type for i in range(3)]
    assert physical == ["INT32", "INT64", "FIXED_LEN_BYTE_ARRAY"]
    for i, (t, v) in enumerate(zip(types, values, strict=True)):
        assert f.lower_bounds[i + 1] == to_bytes(t, v[0])
        assert f.upper_bounds[i + 1] == to_bytes(t, v[1])
        assert f.null_value_counts[i + 1] == 1
    back = pq.read_table(f.file_path)
    assert [back.column(i).to_pylist() for i in range(3)] == values


def _sized_job(tmp_path: Path, target: int) -> Job:
    return Job(
        **{  # type: ignore[arg-type]
            **_job(tmp_path).__dict__,
            "target_bytes": target,
            "small_bytes": int(target * 0.75),
            "max_bytes": int(target * 1.4),
        }
    )


@pytest.mark.parametrize("kind", ["sorted", "random"])
def test_files_roll_at_the_written_target(tmp_path: Path, kind: str) -> None:
    """Rows that compress 10x or not at all: every file but the last reaches the target, and
    none passes it by more than a small row group."""
    import random

    target = 64 << 10
    out = Output(_sized_job(tmp_path, target), "t", 2**62, 0, ())
    values = list(range(400_000)) if kind == "sorted" else random.Random(7).sample(range(2**40), 60_000)
    for start in range(0, len(values), 65_536):
        out.add(pa.record_batch([pa.array(values[start : start + 65_536], pa.int64())], schema=out.schema))
    out.close()
    sizes = [f.file_size_in_bytes for f in out.done]
    assert len(sizes) > 3, sizes
    assert all(target <= s <= target * 1.1 for s in sizes[:-1]), sizes
    rows = [r for f in out.done for r in pq.read_table(f.file_path).column("id").to_pylist()]
    assert rows == values


def test_the_last_file_takes_the_rest_when_it_knows_it(tmp_path: Path) -> None:
    """Written again with the rows and bytes it will write, an output's last file takes a rest
    that would have been small (never a small file after a merge)."""
    import random

    values = random.Random(3).sample(range(2**40), 22_000)
    target = 100_000
    first = Output(_sized_job(tmp_path, target), "a", 2**62, 0, ())
    first.add(pa.record_batch([pa.array(values, pa.int64())], schema=first.schema))
    first.close()
    written = sum(f.file_size_in_bytes for f in first.done)
    assert first.done[-1].file_size_in_bytes < target * 0.75  # without knowing: a small last file
    again = Output(_sized_job(tmp_path, target), "b", 2**62, 0, (), (len(values), written))
    again.add(pa.record_batch([pa.array(values, pa.int64())], schema=again.schema))
    again.close()
    sizes = [f.file_size_in_bytes for f in again.done]
    assert all(s >= target for s in sizes) and sizes[-1] <= target * 1.4, sizes


def test_settle_merges_the_files_under_the_target_per_partition() -> None:
    from tablekeeper.iceberg.content import DATA, DataFile
    from tablekeeper.spark.settle import merge_candidates

    def f(name: str, size: int, part: int) -> DataFile:
        return DataFile(DATA, name, "PARQUET", (part,), 10, size, spec_id=0)

    sizes = (100, 75, 140)
    files = [f("a1", 120, 1), f("a2", 50, 1), f("a3", 90, 1), f("b1", 110, 2), f("b2", 30, 2)]
    files += [f("c1", 80, 3), f("d1", 100, 4), f("d2", 105, 4), f("e1", 10, 5)]
    picked = sorted(x.file_path for x in merge_candidates(sizes, files))
    # Several under the target: merged. One small with others: merged with the smallest other.
    # One under the target but not small, or alone: kept.
    assert picked == ["a2", "a3", "b1", "b2"]


@pytest.mark.parametrize("target", [64 << 10, 512 << 20])
def test_files_compress_as_well_as_one_plain_write(tmp_path: Path, target: int) -> None:
    """Rows whose ids and names are all distinct, grouped by two small keys: the files written
    are no larger than one write of the same rows with those columns plain (what Iceberg Java
    writes). pyarrow's default dictionary-encoded them, 1.7x the bytes."""
    import random

    fields = (
        NestedField(1, "a", PrimitiveType("int")),
        NestedField(2, "b", PrimitiveType("int")),
        NestedField(3, "s", PrimitiveType("string")),
        NestedField(4, "id", PrimitiveType("long")),
    )
    (tmp_path / "out").mkdir()
    job = Job(
        **{**_sized_job(tmp_path / "out", target).__dict__, "fields": fields, "schema": Schema(0, fields)}
    )  # type: ignore[arg-type]
    ids = list(range(60_000))
    random.Random(11).shuffle(ids)
    ids.sort(key=lambda i: (i // 1500, i % 1500 // 94))  # equal keys together, ids shuffled within
    rows = pa.table(
        {
            "a": pa.array([i // 1500 for i in ids], pa.int32()),
            "b": pa.array([i % 1500 // 94 for i in ids], pa.int32()),
            "s": pa.array([f"row-{i}" for i in ids], pa.large_string()),
            "id": pa.array(ids, pa.int64()),
        }
    )
    out = Output(job, "t", 2**62, 0, ())
    for batch in rows.to_batches(max_chunksize=8192):
        out.add(batch.cast(out.schema))
    out.close()
    plain = tmp_path / "plain.parquet"
    pq.write_table(rows, plain, compression="zstd", compression_level=3, use_dictionary=["a", "b"])
    written = sum(f.file_size_in_bytes for f in out.done)
    assert written <= plain.stat().st_size * 1.1, (written, plain.stat().st_size, len(out.done))
    back = pa.concat_tables([pq.read_table(f.file_path) for f in out.done])
    assert back.column("id").to_pylist() == ids
