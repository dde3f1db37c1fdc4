"""A synthetic Delta log: a checkpoint with N live files plus C commits that each swap K files.

Only the log is written (no data files): log replay never opens data files, so every engine is
measured on the same work. The layout follows what delta-spark writes (checkpoint columns and
types), so delta-spark and delta-rs read it as a real table.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)
PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
METADATA = {
    "id": "00000000-0000-0000-0000-000000000001",
    "format": {"provider": "parquet", "options": {}},
    "schemaString": SCHEMA_STRING,
    "partitionColumns": ["part"],
    "configuration": {},
    "createdTime": 1_700_000_000_000,
}
STR_MAP = pa.map_(pa.string(), pa.string())


def _stats(i: int) -> str:
    return (
        f'{{"numRecords":1000,"minValues":{{"id":{i * 1000},"value":0.5}},'
        f'"maxValues":{{"id":{i * 1000 + 999},"value":99.5}},"nullCount":{{"id":0,"value":3}}}}'
    )


def _path(i: int) -> str:
    return f"part={i % 100}/part-{i:08d}-6f1b0c7e-2f0a-4b8e-9a47-{i:012d}.c000.snappy.parquet"


def _add(i: int) -> dict[str, object]:
    return {
        "path": _path(i),
        "partitionValues": {"part": str(i % 100)},
        "size": 1_048_576 + i % 1000,
        "modificationTime": 1_700_000_000_000 + i,
        "dataChange": True,
        "stats": _stats(i),
    }


# Rows per checkpoint row group, and per chunk built in memory: a 10M-file log is written a
# row group at a time, so generating it never holds more than one chunk of Python objects.
ROWS_PER_GROUP = 100_000
ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STR_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STR_MAP),
    ]
)
PROTOCOL_TYPE = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
META_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STR_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STR_MAP),
        ("createdTime", pa.int64()),
    ]
)
CHECKPOINT_SCHEMA = pa.schema([("add", ADD_TYPE), ("protocol", PROTOCOL_TYPE), ("metaData", META_TYPE)])


def _checkpoint_chunk(ids: range, lead: int) -> pa.Table:
    """Checkpoint rows for the adds ``ids``, after ``lead`` rows that hold protocol and metaData
    (only the first chunk has them)."""
    pad = [None] * lead
    n = lead + len(ids)
    adds = pa.StructArray.from_arrays(
        [
            pa.array([*pad, *(_path(i) for i in ids)], pa.string()),
            pa.array([*pad, *([("part", str(i % 100))] for i in ids)], STR_MAP),
            pa.array([*pad, *(1_048_576 + i % 1000 for i in ids)], pa.int64()),
            pa.array([*pad, *(1_700_000_000_000 + i for i in ids)], pa.int64()),
            pa.array([*pad, *([False] * len(ids))], pa.bool_()),
            pa.array([*pad, *(_stats(i) for i in ids)], pa.string()),
            pa.nulls(n, STR_MAP),
        ],
        fields=list(ADD_TYPE),
        mask=pa.array([*([True] * lead), *([False] * len(ids))]),
    )
    protocol = [PROTOCOL] if lead else []
    meta = dict(METADATA)
    meta["format"] = {"provider": "parquet", "options": []}
    meta["configuration"] = []
    metadata = [None, meta] if lead else []
    return pa.table(
        {
            "add": adds,
            "protocol": pa.array([*protocol, *([None] * (n - len(protocol)))], PROTOCOL_TYPE),
            "metaData": pa.array([*metadata, *([None] * (n - len(metadata)))], META_TYPE),
        },
        schema=CHECKPOINT_SCHEMA,
    )


def write_checkpoint(log_dir: Path, version: int, files: int) -> None:
    # Chunks end where the row groups do, so the file is the one a single write would make.
    lead = 2
    with pq.ParquetWriter(log_dir / f"{version:020d}.checkpoint.parquet", CHECKPOINT_SCHEMA) as writer:
        start = 0
        while True:
            stop = min(files, start + ROWS_PER_GROUP - lead)
            writer.write_table(_checkpoint_chunk(range(start, stop), lead), row_group_size=ROWS_PER_GROUP)
            start, lead = stop, 0
            if start >= files:
                break
    (log_dir / "_last_checkpoint").write_text(json.dumps({"version": version, "size": files + 2}))


def _write_adds(path: Path, header: dict[str, object], files: int) -> None:
    """A commit of ``header`` and ``files`` adds, written a chunk of lines at a time."""
    with path.open("w") as out:
        out.write(json.dumps(header) + "\n")
        for start in range(0, files, ROWS_PER_GROUP):
            chunk = range(start, min(files, start + ROWS_PER_GROUP))
            out.write("\n".join(json.dumps({"add": _add(i)}) for i in chunk) + "\n")


def generate(root: Path, files: int = 1_000_000, commits: int = 100, swap: int = 1000) -> Path:
    marker = root / f".complete-{files}-{commits}-{swap}"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    first = [{"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "CREATE TABLE"}}]
    first += [{"protocol": PROTOCOL}, {"metaData": METADATA}]
    (log_dir / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in first) + "\n")
    commit_info = {"commitInfo": {"timestamp": 1_700_000_000_001, "operation": "WRITE"}}
    _write_adds(log_dir / f"{1:020d}.json", commit_info, files)
    write_checkpoint(log_dir, 1, files)
    next_id = files
    for c in range(commits):
        version = c + 2
        lines = [json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}})]
        for k in range(swap):
            old = c * swap + k
            lines.append(
                json.dumps(
                    {
                        "remove": {
                            "path": _path(old),
                            "deletionTimestamp": 1_700_000_000_000 + version,
                            "dataChange": True,
                            "extendedFileMetadata": True,
                            "partitionValues": {"part": str(old % 100)},
                            "size": 1_048_576 + old % 1000,
                        }
                    }
                )
            )
            lines.append(json.dumps({"add": _add(next_id)}))
            next_id += 1
        (log_dir / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    marker.write_text("ok")
    return root
