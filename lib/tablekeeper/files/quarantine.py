"""Quarantine: what a destructive run would delete, moved aside instead, so it can be put back.

A run with ``--quarantine`` moves each file it would delete to its run's directory under the
table's own metadata location, at the file's path relative to the table location::

    <table>/metadata/_tablekeeper/quarantine/<created ms>-<job>-<run id>/
        files/<path relative to the table>     each file moved there
        part-00000.jsonl.gz                   the run's journal parts: [path, key, kind, size]
        run.json                              job, table, run id, when, how many files and bytes
        restoring                             while ``restore`` puts the files back

The move is a rename where the store has one (local disks, HDFS, Azure with a hierarchical
namespace) and a server-side copy then a delete where it does not (S3, GCS, flat Azure): a crash
between the two leaves both copies, never neither. The directory is hidden by Iceberg's rule
(``_tablekeeper``), so no orphan removal, tablekeeper's or Iceberg's, lists it, and it is inside
the table, so nothing is ever written outside it.

The run's journal (``files.journal``) carries the quarantine directory: a run killed while moving
is finished by the next run the same way, by moving, and ``run.json`` is written only once every
file is moved (the journal goes after). ``restore`` and ``purge`` are idempotent: each file's
state on storage says what is left to do, so running either again after a crash converges.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pyarrow.fs import FileType

from tablekeeper import clock, faults
from tablekeeper.errors import AlreadyExists, CorruptMetadataError, FileNotFound, TablekeeperError
from tablekeeper.files.containment import Containment
from tablekeeper.files.deletes import DeleteOutcome, by_store, contained, delete_rows, each_row
from tablekeeper.files.manifests import FileRow
from tablekeeper.io import FileIO
from tablekeeper.io.uri import location_to_path, strip_trailing_slash

log = logging.getLogger(__name__)

QUARANTINE = "_tablekeeper/quarantine"
RUN = "run.json"
RESTORING = "restoring"
FILES = "files"
# Where a file outside the table location (a write.data.path elsewhere) goes: by its full path.
ELSEWHERE = "_elsewhere"


def quarantine_location(table_location: str) -> str:
    return f"{strip_trailing_slash(table_location)}/metadata/{QUARANTINE}"


@dataclass(frozen=True)
class Quarantine:
    """Where one run's files go (pickled to executors)."""

    location: str  # the run's directory
    table_location: str

    @classmethod
    def for_run(cls, table_location: str, name: str) -> Quarantine:
        return cls(f"{quarantine_location(table_location)}/{name}", strip_trailing_slash(table_location))

    @property
    def name(self) -> str:
        return self.location.rsplit("/", 1)[-1]

    def target(self, path: str) -> str:
        """Where ``path`` goes: at its place relative to the table, or (a file under another of
        the table's roots, e.g. its write.data.path) by its scheme, authority and path."""
        root = self.table_location + "/"
        if path.startswith(root):
            return f"{self.location}/{FILES}/{path[len(root) :]}"
        parts = location_to_path(path)
        where = f"{parts.scheme}/{parts.authority or '_'}/{parts.path.lstrip('/')}"
        return f"{self.location}/{FILES}/{ELSEWHERE}/{where}"

    def original(self, target: str) -> str:
        """The path a quarantined file came from (``target``'s inverse)."""
        rest = target[len(f"{self.location}/{FILES}/") :]
        if not rest.startswith(ELSEWHERE + "/"):
            return f"{self.table_location}/{rest}"
        scheme, authority, path = rest[len(ELSEWHERE) + 1 :].split("/", 2)
        if scheme == "file":
            return "/" + path
        return f"{scheme}://{'' if authority == '_' else authority}/{path}"


# Stores (scheme://authority) whose move of a file failed once: a server-side copy from then on,
# without asking again (flat Azure answers a rename only after its own retries).
_NO_RENAME: set[str] = set()


def move(io: FileIO, src: str, dst: str) -> bool:
    """Give ``src``'s file the location ``dst``: True when moved, False when ``src`` is gone
    (moved before, or deleted). A ``dst`` already there from an interrupted copy is replaced."""
    store = src.split("/", 3)[2] if "://" in src else ""
    try:
        if store in _NO_RENAME:
            return _copy_then_delete(io, src, dst)
        io.rename_if_absent(src, dst)
        return True
    except FileNotFound:
        return False
    except AlreadyExists:
        # A copy-then-delete killed between the two (or a rerun): the source is the truth.
        if not io.exists(src):
            return False
        io.delete(dst, missing_ok=True)
        return move(io, src, dst)
    except TablekeeperError:
        if not io.exists(src):
            return False
        # A store whose move is not a rename of files (flat Azure).
        _NO_RENAME.add(store)
        return _copy_then_delete(io, src, dst)


def _copy_then_delete(io: FileIO, src: str, dst: str) -> bool:
    if not io.exists(src):
        return False
    io.filesystem.copy_file(io.fs_path(src), io.fs_path(dst))
    io.delete(src, missing_ok=True)
    return True


def move_rows(
    rows: Sequence[FileRow], quarantine: Quarantine, threads: int = 1, kill: faults.RemoteKill | None = None
) -> DeleteOutcome:
    """Move every row's path into the quarantine (rows already inside the table: the caller's
    containment), counted as ``delete_rows`` counts deletes; a file already gone counts as
    missing."""
    if not rows:
        return DeleteOutcome({}, 0, 0, ())
    io = FileIO.for_location(rows[0][0])

    def one(row: FileRow) -> str | None:
        try:
            return None if move(io, row[0], quarantine.target(row[0])) else ""
        except (TablekeeperError, OSError) as err:
            return f"not quarantined: {err.message if isinstance(err, TablekeeperError) else err}"

    if kill is None:
        return each_row(rows, one, threads)
    first = each_row(rows[:1], one, 1)
    kill.fire()
    return DeleteOutcome.merge([first, each_row(rows[1:], one, threads)])


def dispose(
    rows: Sequence[FileRow],
    containment: Containment,
    threads: int = 1,
    kill: faults.RemoteKill | None = None,
    quarantine: Quarantine | None = None,
) -> DeleteOutcome:
    """``delete_rows``, or with ``quarantine`` the same rows moved there: every engine's deletes
    come through here, a path outside the table never touched either way."""
    if quarantine is None:
        return delete_rows(rows, containment, threads, kill)
    rest, refused = contained(rows, containment)
    outcomes = [DeleteOutcome({}, 0, 0, (), tuple(refused))] if refused else []
    for group in by_store(rest).values():
        outcomes.append(move_rows(group, quarantine, threads, kill))
        kill = None
    return DeleteOutcome.merge(outcomes)


@dataclass(frozen=True)
class QuarantinedRun:
    """A run's quarantine as ``run.json`` tells it."""

    quarantine: Quarantine
    job: str
    table: str
    run_id: str
    created_ms: int
    quarantined_ms: int
    files: int
    bytes: int
    parts: tuple[str, ...]
    restoring: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "run": self.quarantine.name,
            "location": self.quarantine.location,
            "job": self.job,
            "quarantined_ms": self.quarantined_ms,
            "files": self.files,
            "bytes": self.bytes,
        }


def seal(
    quarantine: Quarantine,
    job: str,
    table: str,
    run_id: str,
    created_ms: int,
    parts: Sequence[str],
    files: int,
    size: int,
) -> QuarantinedRun:
    """Once every file is moved: the journal's parts copied beside the files, then ``run.json``
    with the plan's ``files`` and ``size`` (written last: a run without it is still moving, and
    its journal says what is left)."""
    io = FileIO.for_location(quarantine.location)
    own: list[str] = []
    for part in parts:
        copy = f"{quarantine.location}/{part.rsplit('/', 1)[-1]}"
        io.write(copy, io.read(part))
        own.append(copy)
    now = clock.now_ms()
    run = QuarantinedRun(quarantine, job, table, run_id, created_ms, now, files, size, tuple(own))
    body = {
        "job": job,
        "table": table,
        "run-id": run_id,
        "created-ms": created_ms,
        "quarantined-ms": run.quarantined_ms,
        "files": run.files,
        "bytes": run.bytes,
        "parts": [p.rsplit("/", 1)[-1] for p in own],
    }
    io.write(f"{quarantine.location}/{RUN}", orjson.dumps(body, option=orjson.OPT_INDENT_2))
    return run


def read_run(quarantine: Quarantine) -> QuarantinedRun | None:
    """A sealed run (None: none there, or still moving)."""
    io = FileIO.for_location(quarantine.location)
    try:
        data = io.read(f"{quarantine.location}/{RUN}")
    except FileNotFound:
        return None
    try:
        obj = orjson.loads(data)
        parts = tuple(f"{quarantine.location}/{str(p).rsplit('/', 1)[-1]}" for p in obj["parts"])
        return QuarantinedRun(
            quarantine,
            str(obj["job"]),
            str(obj["table"]),
            str(obj["run-id"]),
            int(obj["created-ms"]),
            int(obj["quarantined-ms"]),
            int(obj["files"]),
            int(obj["bytes"]),
            parts,
            io.exists(f"{quarantine.location}/{RESTORING}"),
        )
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as err:
        raise CorruptMetadataError(
            f"quarantine {quarantine.location}/{RUN} is not readable ({err})"
        ) from None


def list_runs(table_location: str) -> list[Quarantine]:
    root = quarantine_location(table_location)
    io = FileIO.for_location(root)
    _, dirs = io.list_dir(root)
    names = sorted(d.rstrip("/").rsplit("/", 1)[-1] for d in dirs)
    return [Quarantine.for_run(table_location, n) for n in names]


def remove_run(quarantine: Quarantine, kill: faults.RemoteKill | None = None) -> int:
    """Delete a run's quarantine: its files first, ``run.json`` last (a run half removed by a
    kill still says what it was, and removing it again finishes). Returns the files deleted."""
    root = quarantine_location(quarantine.table_location) + "/"
    name = quarantine.name
    if not quarantine.location.startswith(root) or "/" in name or name in ("", ".", ".."):
        raise TablekeeperError(f"{quarantine.location} is not a quarantined run: not removed")
    io = FileIO.for_location(quarantine.location)
    run = f"{quarantine.location}/{RUN}"
    names = [i.location for i in io.list(quarantine.location, recursive=True) if i.location != run]
    if kill is not None and names:
        io.delete(names[0], missing_ok=True)
        kill.fire()
    report = io.delete_many(names)
    if report.failures:
        path, why = report.failures[0]
        raise TablekeeperError(f"could not remove quarantine {quarantine.location}: {path}: {why}")
    io.delete(run, missing_ok=True)
    # What is left are the directories of a store that has them (its files are all gone).
    fs = io.filesystem
    if fs.get_file_info(io.fs_path(quarantine.location)).type == FileType.Directory:
        fs.delete_dir(io.fs_path(quarantine.location))
    io.remove_empty_directory(root.rstrip("/"))  # quarantine/, then _tablekeeper/, once empty
    io.remove_empty_directory(root.rstrip("/").rsplit("/", 1)[0])
    return report.deleted
