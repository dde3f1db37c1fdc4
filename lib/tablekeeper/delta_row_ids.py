"""Which Delta files hold row ids other than ``baseRowId + position``.

Delta materializes a row's id in a hidden column when it copies the row (UPDATE, MERGE,
OPTIMIZE, ...). A file from a commit that only adds rows cannot hold one; any other file is
checked by its Parquet schema. A materialized column under Iceberg's row-id field id is fine: an
Iceberg reader sees the same values Delta does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.segment import LogEntry
from tablekeeper.errors import TablekeeperError
from tablekeeper.files.local import parallel_map
from tablekeeper.io import FileIO
from tablekeeper.tables.delta import LOG_DIR

ROW_ID_FIELD_ID = 2147483540
ROW_COMMIT_VERSION_FIELD_ID = 2147483539  # Iceberg's _last_updated_sequence_number
# Operations whose new files hold only new rows: no row id was copied into them.
FRESH_OPERATIONS = frozenset(
    {
        "WRITE",
        "STREAMING UPDATE",
        "CREATE TABLE AS SELECT",
        "REPLACE TABLE AS SELECT",
        "CREATE OR REPLACE TABLE AS SELECT",
        "COPY INTO",
    }
)
_COMMIT_HEAD = 64 * 1024


def commit_operations(
    io: FileIO, root: str, entries: Sequence[LogEntry], versions: Iterable[int]
) -> dict[int, str | None]:
    """The operation each of ``versions`` recorded in its commitInfo (None when the commit is gone
    or says none); commitInfo leads a commit file, so only its head is read."""
    wanted = sorted(set(versions) & set(log_versions(entries)))

    def operation(version: int) -> str | None:
        with io.open_input(f"{root}/{LOG_DIR}/{version:020d}.json") as stream:
            head = stream.read(_COMMIT_HEAD)
        for line in head.split(b"\n")[:-1] if len(head) == _COMMIT_HEAD else head.split(b"\n"):
            if b'"commitInfo"' in line:
                info = orjson.loads(line).get("commitInfo") or {}
                op = info.get("operation")
                return str(op) if op is not None else None
        return None

    return dict(zip(wanted, parallel_map(operation, wanted), strict=True))


def materialized_ids(io: FileIO, add: AddFile, columns: Mapping[str, int]) -> str | None:
    """Why the file's row ids or commit versions differ from ``baseRowId + position`` and
    ``defaultRowCommitVersion`` for an Iceberg reader: it holds one of Delta's materialized columns
    (name -> the field id Iceberg reads it by) without that field id. None when it does not."""
    with io.open_input(add.absolute_path) as stream:
        schema = pq.read_schema(stream)
    for f in schema:
        wanted = columns.get(f.name)
        if wanted is None:
            continue
        field_id = (f.metadata or {}).get(b"PARQUET:field_id")
        if field_id == str(wanted).encode():
            continue
        return (
            f"{add.path} holds values Delta copied into {f.name} without Iceberg's field id "
            f"{wanted}, which Iceberg readers cannot see"
        )
    return None


def unsound_file(
    io: FileIO, adds: Sequence[AddFile], columns: Mapping[str, int], operations: Mapping[int, str | None]
) -> str | None:
    """The first reason a file's rows would not keep Delta's ids, or None."""
    missing = next((a for a in adds if a.base_row_id is None or a.default_row_commit_version is None), None)
    if missing is not None:
        return f"{missing.path} has no baseRowId or defaultRowCommitVersion"
    if not columns:
        return None
    # Files from commits that only add rows cannot hold copied ids; the rest are checked.
    suspects = [
        a for a in adds if operations.get(int(a.default_row_commit_version or 0)) not in FRESH_OPERATIONS
    ]
    for reason in parallel_map(lambda a: _checked(io, a, columns), suspects):
        if reason is not None:
            return reason
    return None


def _checked(io: FileIO, add: AddFile, columns: Mapping[str, int]) -> str | None:
    try:
        return materialized_ids(io, add, columns)
    except (OSError, pa.ArrowInvalid, TablekeeperError) as err:
        return f"{add.path} could not be checked for copied row ids ({str(err).splitlines()[0][:200]})"


def log_versions(entries: Sequence[LogEntry]) -> list[int]:
    """The versions whose commit files the log still has."""
    return [int(e.name[:20]) for e in entries if e.name.endswith(".json") and e.name[:20].isdigit()]
