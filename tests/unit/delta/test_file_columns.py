"""Data files from Delta adds as columns against the per-file path (``to_iceberg.data_file``):
the manifests both write must decode to the same entries, with the same manifest-list row, over
stats with every edge the per-file rules treat specially; whatever the column path cannot take
the same way must hand back (``None``)."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from tablekeeper.delta.file_columns import added_files
from tablekeeper.delta.reconcile import reconcile
from tablekeeper.delta.replay import CommitActions
from tablekeeper.delta.schema import column_mapping, parse_schema_string
from tablekeeper.delta.snapshot import add_files_of
from tablekeeper.delta.to_iceberg import data_file, map_schema, partition_spec
from tablekeeper.iceberg.content import ADDED, ManifestEntry
from tablekeeper.iceberg.entry_columns import write_added_manifest
from tablekeeper.iceberg.manifest import write_manifest

ROOT = "file:///lake/t"


def _field(name: str, kind: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


COLUMNS = [
    _field("id", "long"),
    _field("i", "integer"),
    _field("sh", "short"),
    _field("s", "string"),
    _field("d", "double"),
    _field("f", "float"),
    _field("dt", "date"),
    _field("ts", "timestamp"),
    _field("tsn", "timestamp_ntz"),
    _field("b", "boolean"),
    _field("n", {"type": "struct", "fields": [_field("x", "long"), _field("y", "string")]}),
    _field("tags", {"type": "array", "elementType": "string", "containsNull": True}),
    _field("p", "string"),
    _field("pd", "date"),
    _field("pi", "integer"),
]
PARTITIONS = ("p", "pd", "pi")

CHOICES: dict[str, list[Any]] = {
    "id": [0, -1, 2**63 - 1, -(2**63), 12345678901, None],
    "i": [0, 2**31 - 1, -(2**31), 7, None],
    "sh": [1, -5, None],
    "s": ["", "abc", "ü€😀", "cut\ufffd", "\ufffd", "x" * 40, None],
    "d": [0.0, -0.0, 1.5, -2.25e300, 3, 1e-310, None],
    "f": [0.0, -0.0, 1.1, 3.4e38, 2, None],
    "dt": ["2024-02-29", "1969-12-31", "2024-02-30", "not a date", "2024-01-01T10:00:00", None],
    "ts": [
        "2024-01-01T00:00:00.123Z",
        "2024-01-01T00:00:00.123+01:00",
        "1900-01-01T00:00:00.000Z",
        "bad",
        None,
    ],
    "tsn": ["2024-01-01T00:00:00.123", "2024-01-01 00:00:00", "nope", None],
    "b": [True, False, None],
}


def _stats(rng: random.Random) -> str:
    mins: dict[str, Any] = {}
    maxes: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for name, values in CHOICES.items():
        for target in (mins, maxes):
            v = rng.choice(values)
            if v is not None or rng.random() < 0.3:
                target[name] = v
        if rng.random() < 0.8:
            nulls[name] = rng.choice([0, 0, 3, 10**12])
    if rng.random() < 0.8:
        mins["n"] = {"x": rng.choice([1, None]), "y": rng.choice(["a", "\ufffd"])}
        maxes["n"] = {"x": rng.choice([5, -5])} if rng.random() < 0.7 else None
        nulls["n"] = {"x": rng.choice([0, 2])}
    nulls["tags"] = rng.choice([0, 4])
    body: dict[str, Any] = {"numRecords": rng.choice([0, 10, 2**40])}
    if rng.random() < 0.9:
        body["minValues"] = mins
    if rng.random() < 0.9:
        body["maxValues"] = maxes
    if rng.random() < 0.9:
        body["nullCount"] = nulls
    if rng.random() < 0.3:
        body["tightBounds"] = rng.choice([True, False])
    return json.dumps(body, ensure_ascii=rng.random() < 0.5)


def _adds(n: int, seed: int, stats: Any = None, **extra: Any) -> pa.Table:
    rng = random.Random(seed)
    actions = CommitActions()
    for i in range(n):
        body: dict[str, Any] = {
            "path": f"p={i % 3}/part-{i:05d} {'é' * (i % 2)}.parquet",
            "partitionValues": {
                "p": rng.choice(["a", "", None, "ü/x"]),
                "pd": rng.choice(["2024-01-01", None]),
                "pi": rng.choice(["1", "-7", None]),
            },
            "size": rng.randrange(0, 2**40),
            "modificationTime": 1_700_000_000_000,
            "dataChange": True,
            "stats": _stats(rng) if stats is None else stats(i, rng),
            **extra,
        }
        actions.add(body, True, len(actions))
    return reconcile([actions.table()], ROOT).files


def _schema(columns: list[dict[str, Any]] = COLUMNS) -> tuple[Any, ...]:
    struct = parse_schema_string(json.dumps({"type": "struct", "fields": columns}))
    mapping = column_mapping({}, supports_column_mapping=False)
    mapped = map_schema(struct, mapping, {})
    return struct, mapping, mapped, partition_spec(mapped, PARTITIONS)


def _records(data: bytes) -> list[dict[str, Any]]:
    return list(fastavro.reader(io.BytesIO(data)))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("format_version", [1, 2, 3])
def test_columns_write_what_the_per_file_path_writes(seed: int, format_version: int) -> None:
    struct, mapping, mapped, spec = _schema()
    table = _adds(300, seed)
    files = added_files(table, struct, mapping, mapped, PARTITIONS)
    assert files is not None
    per_file = [
        data_file(
            a,
            struct=struct,
            mapping=mapping,
            mapped=mapped,
            partition_columns=PARTITIONS,
            spec_id=spec.spec_id,
        )
        for a in add_files_of(table)
    ]
    want, want_row = write_manifest(
        "m.avro",
        [ManifestEntry(ADDED, 9, f, None, None) for f in per_file],
        format_version=format_version,
        spec=spec,
        schema=mapped.schema,
        snapshot_id=9,
    )
    got = write_added_manifest(
        "m.avro", files, format_version=format_version, spec=spec, schema=mapped.schema, snapshot_id=9
    )
    assert got is not None
    assert _records(got[0]) == _records(want)
    assert got[1] == want_row
    # the cases this test is for do occur in the data
    lower = [r["data_file"]["lower_bounds"] for r in _records(want)]
    assert seed > 0 or (any(b for b in lower) and any(b is None for b in lower))


def _fallback(table: pa.Table, columns: list[dict[str, Any]] = COLUMNS) -> bool:
    struct, mapping, mapped, _ = _schema(columns)
    return added_files(table, struct, mapping, mapped, PARTITIONS) is None


def _bad_stat(text: str) -> Any:
    return lambda i, rng: text if i == 2 else _stats(rng)


@pytest.mark.parametrize(
    "stats",
    [
        _bad_stat('{"numRecords": 3, "minValues": {"d": "NaN"}}'),  # a string where a number goes
        _bad_stat('{"numRecords": 3, "minValues": {"i": 2147483648}}'),  # beyond an int column
        _bad_stat('{"numRecords": 3, "minValues": {"id": 99999999999999999999}}'),  # beyond 64 bits
        _bad_stat('{"numRecords": 3, "numRecords": 4}'),  # a duplicated key
        _bad_stat('{"minValues": {}}'),  # no record count: the footer is read
        _bad_stat('{"numRecords": -1}'),
        _bad_stat("not json"),
        _bad_stat('{"numRecords": 3}\n{"numRecords": 4}'),  # two objects: not stats
        _bad_stat('{"numRecords": 3} x'),
        _bad_stat(""),
        lambda i, rng: None if i == 1 else _stats(rng),
        # Arrow's reader crashed on a leading null, read a byte-order mark orjson refuses, and
        # two objects in one value plus a blank one would shift the stats between files.
        lambda i, rng: "null" if i == 0 else _stats(rng),
        lambda i, rng: '\ufeff{"numRecords": 3}' if i == 0 else _stats(rng),
        lambda i, rng: {1: '{"numRecords": 1} {"numRecords": 5}', 2: " "}.get(i) or _stats(rng),
        lambda i, rng: {1: '{"numRecords": 1}\n{"numRecords": 5}', 2: "\n"}.get(i) or _stats(rng),
    ],
)
def test_what_the_columns_cannot_take_the_same_way_hands_back(stats: Any) -> None:
    assert _fallback(_adds(5, 1, stats=stats))


def test_deletion_vectors_and_decimals_hand_back() -> None:
    dv = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "sizeInBytes": 36, "cardinality": 2}
    assert _fallback(_adds(3, 1, deletionVector=dv))
    assert _fallback(_adds(3, 1), [*COLUMNS, _field("amount", "decimal(10,2)")])
    assert not _fallback(_adds(3, 1))


def test_spark_large_strings_give_the_same_files_or_hand_back() -> None:
    # Spark sends large strings when spark.sql.execution.arrow.useLargeVarTypes is on.
    struct, mapping, mapped, spec = _schema()
    table = _adds(40, 3)
    large = pa.schema([f.with_type(pa.large_string()) if f.type == pa.string() else f for f in table.schema])
    got = added_files(table.cast(large), struct, mapping, mapped, PARTITIONS)
    want = added_files(table, struct, mapping, mapped, PARTITIONS)
    assert want is not None
    if got is not None:
        encoded = [
            write_added_manifest(
                "m.avro", f, format_version=2, spec=spec, schema=mapped.schema, snapshot_id=1
            )
            for f in (got, want)
        ]
        assert encoded[0] is not None and encoded[1] is not None
        assert _records(encoded[0][0]) == _records(encoded[1][0])
