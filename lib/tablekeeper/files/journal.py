"""Journals: what a destructive run is about to delete, or has staged, written down first.

A run that deletes files or writes files it may have to take back records them under the table's
metadata location before it changes anything, so a run killed at any point leaves the next run
enough to finish the job::

    <table>/metadata/_tablekeeper/journals/<created ms>-<job>-<run id>/
        journal.json           what the run is: job, table, owner, the metadata it planned on,
                               how paths compare, and for staging runs where it writes new files
        part-00000.jsonl.gz    delete runs: the files to delete, [path, key, kind, size] per line
        ready.json             delete runs: every part is written (the plan is complete)
        committed.json         the metadata location the run's commit produced
        heartbeat              rewritten every minute while the run lives

The ``_tablekeeper`` directory is hidden by Iceberg's rule (a name starting with ``_``), so neither
tablekeeper's nor Iceberg's orphan removal ever lists a journal. A delete run writes its parts and
``ready.json`` before it commits and deletes after; a staging run writes ``journal.json`` before
its first new file. Finishing a journal (``tablekeeper.files.finish``) re-checks every file in it
against the table as it is then, so a file anything references survives whatever the run did.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tablekeeper import clock
from tablekeeper.errors import CorruptMetadataError, TablekeeperError
from tablekeeper.files.containment import Containment
from tablekeeper.files.manifests import FileRow
from tablekeeper.files.rules import PathRules
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

JOURNALS = "_tablekeeper/journals"
HEADER = "journal.json"
READY = "ready.json"
COMMITTED = "committed.json"
HEARTBEAT = "heartbeat"
FORMAT = 1
# A journal whose run moves its files aside (files.quarantine): a reader that knows only FORMAT
# would delete them, so it must refuse the journal (it leaves it for a person) instead.
QUARANTINE_FORMAT = 2
# An owner on another host is presumed alive while its journal moved this recently.
STALE_AFTER_MS = 3_600_000
HEARTBEAT_EVERY_MS = 60_000

Kind = Literal["delete", "stage"]


def run_name(created_ms: int, job: str, run_id: str) -> str:
    """A run's directory name, its journal's and its quarantine's: sorted by time."""
    return f"{created_ms:013d}-{job}-{run_id}"


def journals_location(table_location: str) -> str:
    return f"{table_location.rstrip('/')}/metadata/{JOURNALS}"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            return Path(path).read_text(encoding="ascii").strip()
        except OSError:
            continue
    return ""


def _pid_namespace() -> str:
    try:
        return str(Path("/proc/self/ns/pid").readlink())
    except OSError:
        return ""


def _process_start(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot, state letter) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[19]), fields[0]


@dataclass(frozen=True)
class Owner:
    """The process that wrote a journal, told apart from a later process with the same pid."""

    host: str
    boot_id: str
    pid: int
    started: int
    pid_namespace: str = ""  # containers sharing a host name see different pids
    machine_id: str = ""  # machines may share a host name

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        start = _process_start(pid)
        return cls(
            socket.gethostname(), _boot_id(), pid, start[0] if start else 0, _pid_namespace(), _machine_id()
        )

    def state(self) -> Literal["alive", "dead", "unknown"]:
        """Whether the owner still runs, as far as this process can tell: only a process it can
        see (same machine, same pid namespace) is ever called dead or alive."""
        if self.host != socket.gethostname():
            return "unknown"
        here = _machine_id()
        if self.machine_id and here and self.machine_id != here:
            return "unknown"
        if self.pid_namespace and self.pid_namespace != _pid_namespace():
            return "unknown"
        boot = _boot_id()
        if boot and self.boot_id and boot != self.boot_id:
            return "dead"  # the host rebooted since
        if not os.path.isdir("/proc"):  # noqa: PTH112
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return "dead"
            except PermissionError:
                return "alive"
            return "alive"
        found = _process_start(self.pid)
        if found is None or found[1] in ("Z", "X") or (self.started and found[0] != self.started):
            return "dead"
        return "alive"


@dataclass(frozen=True)
class Staged:
    """Where a staging run writes: files (or, with ``directories``, whole directories) directly
    under ``location`` whose names contain ``token``."""

    location: str
    token: str
    directories: bool = False


@dataclass(frozen=True)
class Header:
    job: str
    table: str
    run_id: str
    kind: Kind
    created_ms: int
    owner: Owner
    base_metadata: str | None = None
    rules: PathRules = field(default_factory=PathRules)
    staged: tuple[Staged, ...] = ()
    # How long after its owner died a commit it sent may still land (a REST server finishing a
    # request whose client is gone): the journal is finished only once that has passed.
    settle_ms: int = 0
    # A delete run that moves its files aside instead (files.quarantine): its quarantine's name.
    quarantine: str | None = None

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "format": QUARANTINE_FORMAT if self.quarantine else FORMAT,
                "job": self.job,
                "table": self.table,
                "run-id": self.run_id,
                "kind": self.kind,
                "created-ms": self.created_ms,
                "owner": {
                    "host": self.owner.host,
                    "boot-id": self.owner.boot_id,
                    "pid": self.owner.pid,
                    "started": self.owner.started,
                    "pid-namespace": self.owner.pid_namespace,
                    "machine-id": self.owner.machine_id,
                },
                "settle-ms": self.settle_ms,
                "quarantine": self.quarantine,
                "base-metadata": self.base_metadata,
                "rules": self.rules.to_json(),
                "staged": [
                    {"location": s.location, "token": s.token, "directories": s.directories}
                    for s in self.staged
                ],
            },
            option=orjson.OPT_INDENT_2,
        )

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> Header:
        try:
            obj = orjson.loads(data)
            if obj.get("format") not in (FORMAT, QUARANTINE_FORMAT):
                raise ValueError(f"format {obj.get('format')!r}")
            owner = obj["owner"]
            kind = obj["kind"]
            if kind not in ("delete", "stage"):
                raise ValueError(f"kind {kind!r}")
            return cls(
                job=str(obj["job"]),
                table=str(obj["table"]),
                run_id=str(obj["run-id"]),
                kind=kind,
                created_ms=int(obj["created-ms"]),
                owner=Owner(
                    str(owner["host"]),
                    str(owner["boot-id"]),
                    int(owner["pid"]),
                    int(owner["started"]),
                    str(owner.get("pid-namespace", "")),
                    str(owner.get("machine-id", "")),
                ),
                settle_ms=int(obj.get("settle-ms", 0)),
                quarantine=_name(obj.get("quarantine")),
                base_metadata=obj.get("base-metadata"),
                rules=PathRules.from_json(obj["rules"]),
                staged=tuple(
                    Staged(str(s["location"]), str(s["token"]), bool(s["directories"])) for s in obj["staged"]
                ),
            )
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as err:
            raise CorruptMetadataError(f"journal {source} is not readable ({err})") from None


def _name(value: Any) -> str | None:
    """A quarantine's name: one path segment, never a way out of the quarantine directory."""
    if value is None:
        return None
    name = str(value)
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"quarantine {name!r}")
    return name


@dataclass(frozen=True)
class Ready:
    parts: tuple[str, ...]
    files: int
    bytes: int


def encode_rows(rows: Iterable[FileRow]) -> bytes:
    return gzip.compress(b"".join(orjson.dumps(list(r)) + b"\n" for r in rows), compresslevel=1)


def decode_rows(data: bytes, source: str) -> list[FileRow]:
    try:
        return [
            (str(r[0]), str(r[1]), str(r[2]), int(r[3]))
            for r in (orjson.loads(line) for line in gzip.decompress(data).splitlines() if line)
        ]
    except (OSError, EOFError, ValueError, IndexError, TypeError, orjson.JSONDecodeError) as err:
        raise CorruptMetadataError(f"journal part {source} is not readable ({err})") from None


def part_name(index: int) -> str:
    return f"part-{index:05d}.jsonl.gz"


def write_part(directory: str, index: int, rows: Sequence[FileRow]) -> tuple[str, int, int]:
    """Write one part of a delete journal (from the driver or a task); (location, files, bytes)."""
    location = f"{directory}/{part_name(index)}"
    FileIO.for_location(location).write(location, encode_rows(rows))
    return location, len(rows), sum(r[3] for r in rows)


@dataclass(frozen=True)
class Journal:
    """A journal as found on storage."""

    location: str
    header: Header | None
    ready: Ready | None
    committed: str | None
    touched_ms: int  # the newest modification of any of its files
    problem: str | None = None  # why it cannot be finished

    @property
    def empty(self) -> bool:
        """No header: its run died before it recorded anything."""
        return self.header is None and self.problem is None

    def owner_state(self) -> Literal["alive", "dead", "unknown"]:
        return self.header.owner.state() if self.header is not None else "unknown"

    def abandoned(self, now_ms: int) -> bool:
        """Nobody is still writing it: its owner is gone, or (owner elsewhere) it went quiet."""
        state = self.owner_state()
        if state == "dead":
            assert self.header is not None
            return now_ms - self.touched_ms >= self.header.settle_ms
        return state == "unknown" and now_ms - self.touched_ms > STALE_AFTER_MS

    def describe(self) -> dict[str, Any]:
        h = self.header
        return {
            "journal": self.location,
            "job": h.job if h else None,
            "run_id": h.run_id if h else None,
            "kind": h.kind if h else None,
            "planned_on": h.base_metadata if h else None,
            "committed": self.committed,
        }


def list_journals(io: FileIO, table_location: str) -> list[Journal]:
    """Every journal under a table's metadata location, oldest first."""
    root = journals_location(table_location)
    # A journals directory that is a link elsewhere would make finishing delete there.
    Containment.of((table_location,)).check_directory(root, "the journals directory")
    by_dir: dict[str, dict[str, int]] = {}
    for info in io.list(root, recursive=True):
        directory, _, name = info.location.rpartition("/")
        if directory.rstrip("/") == root.rstrip("/"):
            continue  # a stray file beside the journals
        by_dir.setdefault(directory, {})[name] = info.mtime_ms
    return [_read_journal(io, d, names) for d, names in sorted(by_dir.items())]


def _read_journal(io: FileIO, directory: str, names: dict[str, int]) -> Journal:
    touched = max(names.values())
    header: Header | None = None
    problem: str | None = None
    ready: Ready | None = None
    committed: str | None = None
    if HEADER not in names:
        # Killed while writing its header (the first file of every journal): it planned nothing.
        return Journal(directory, None, None, None, touched)
    try:
        header = Header.from_bytes(io.read(f"{directory}/{HEADER}"), f"{directory}/{HEADER}")
        if READY in names:
            obj = orjson.loads(io.read(f"{directory}/{READY}"))
            ready = Ready(tuple(str(p) for p in obj["parts"]), int(obj["files"]), int(obj["bytes"]))
            stray = [p for p in ready.parts if not own_part(directory, p)]
            if stray:
                # Parts are written into the journal's own directory: any other file is not its.
                raise CorruptMetadataError(f"journal {directory} names a part outside it: {stray[0]}")
            missing = [p for p in ready.parts if p.rsplit("/", 1)[-1] not in names]
            if missing:
                raise CorruptMetadataError(f"journal {directory} lost its part {missing[0]}")
        if COMMITTED in names:
            committed = str(orjson.loads(io.read(f"{directory}/{COMMITTED}"))["metadata-location"])
    except (TablekeeperError, ValueError, KeyError, TypeError, orjson.JSONDecodeError) as err:
        problem = err.message if isinstance(err, TablekeeperError) else f"{directory}: {err}"
    return Journal(directory, header, ready, committed, touched, problem)


_PART = re.compile(r"part-[0-9]{5}\.jsonl\.gz")
_KEYS = PathRules()


def own_part(directory: str, part: str) -> bool:
    """Whether ``part`` is a part file directly in the journal ``directory`` (however spelled)."""
    name = part.rsplit("/", 1)[-1]
    return _PART.fullmatch(name) is not None and _KEYS.key(part) == _KEYS.prefix(directory) + name


def read_parts(ready: Ready) -> list[FileRow]:
    """Every row of a complete delete journal, on this process."""
    return [r for part in ready.parts for r in decode_rows(FileIO.for_location(part).read(part), part)]


def remove(io: FileIO, directory: str) -> None:
    """Delete a journal: ``ready.json`` first, the header last, so a journal half removed by a
    kill is never a complete plan with parts missing, and still says what it was."""
    cut = directory.rfind(f"/metadata/{JOURNALS}/")
    if cut <= 0:
        raise TablekeeperError(f"{directory} is not a journal directory: not removed")
    Containment.of((directory[:cut],)).check_directory(directory, "journal")
    header, ready = f"{directory}/{HEADER}", f"{directory}/{READY}"
    io.delete(ready, missing_ok=True)
    names = [i.location for i in io.list(directory, recursive=True)]
    report = io.delete_many([n for n in names if n != header])
    if report.failures:
        path, why = report.failures[0]
        raise TablekeeperError(f"could not remove journal {directory}: {path}: {why}")
    io.delete(header, missing_ok=True)
    io.remove_empty_directory(directory)
    parent = directory.rsplit("/", 1)[0]
    io.remove_empty_directory(parent)  # journals/, then _tablekeeper/, once nothing is left
    io.remove_empty_directory(parent.rsplit("/", 1)[0])


class JournalWriter:
    """The journal of the running job."""

    def __init__(self, io: FileIO, table_location: str, header: Header) -> None:
        self.io = io
        self.header = header
        self.table_location = table_location
        self.location = (
            f"{journals_location(table_location)}/{run_name(header.created_ms, header.job, header.run_id)}"
        )
        self._released = threading.Event()
        self._lock = threading.Lock()  # a heartbeat never lands in a journal being removed
        self._touched = header.created_ms  # the last write of this journal that succeeded

    @classmethod
    def start(
        cls,
        io: FileIO,
        table_location: str,
        *,
        job: str,
        table: str,
        kind: Kind,
        base_metadata: str | None = None,
        rules: PathRules | None = None,
        staged: tuple[Staged, ...] = (),
        run_id: str | None = None,
        settle_ms: int = 0,
        quarantine: bool = False,
    ) -> JournalWriter:
        """``quarantine``: the run moves its files aside (files.quarantine), into a directory
        named as its journal."""
        run_id = run_id or uuid.uuid4().hex
        created = clock.now_ms()
        header = Header(
            job=job,
            table=table,
            run_id=run_id,
            kind=kind,
            created_ms=created,
            owner=Owner.current(),
            base_metadata=base_metadata,
            rules=rules or PathRules(),
            staged=staged,
            settle_ms=settle_ms,
            quarantine=run_name(created, job, run_id) if quarantine else None,
        )
        writer = cls(io, table_location, header)
        io.create_if_absent(f"{writer.location}/{HEADER}", header.to_bytes())
        threading.Thread(target=writer._beat, name="journal-heartbeat", daemon=True).start()
        return writer

    def _beat(self) -> None:
        """Touch the journal while this process runs, however long one step takes: a run on
        another host takes a journal for dead only once it went quiet for ``STALE_AFTER_MS``."""
        while not self._released.wait(HEARTBEAT_EVERY_MS / 1000):
            with self._lock:
                if self._released.is_set():
                    return
                try:
                    # Real time, not the injectable clock: other processes judge it by theirs.
                    now = int(time.time() * 1000)
                    self.io.write(f"{self.location}/{HEARTBEAT}", str(now).encode("ascii"))
                    self._touched = now
                except TablekeeperError as err:
                    log.warning("could not touch %s: %s", self.location, err.message)

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()  # removed, or left for the next run: either way no longer touched

    def release(self) -> None:
        """Stop touching the journal, which stays for the next run to finish."""
        with self._lock:
            self._released.set()

    def ready(self, parts: Sequence[tuple[str, int, int]]) -> Ready:
        """Record that the delete plan is complete; nothing may be committed before this."""
        ready = Ready(tuple(p for p, _, _ in parts), sum(n for _, n, _ in parts), sum(b for _, _, b in parts))
        body = {"parts": list(ready.parts), "files": ready.files, "bytes": ready.bytes}
        self.io.create_if_absent(f"{self.location}/{READY}", orjson.dumps(body))
        return ready

    def committed(self, metadata_location: str) -> None:
        try:
            self.io.write(
                f"{self.location}/{COMMITTED}", orjson.dumps({"metadata-location": metadata_location})
            )
        except TablekeeperError as err:  # informational: finishing re-checks against the table
            log.warning("could not record the commit in %s: %s", self.location, err.message)

    def intact(self) -> bool:
        """Whether this run may still commit what it staged: its journal is there, and was
        touched recently enough that no other host can have taken the run for dead (and removed
        its staged files). Checked right before each commit."""
        fresh = int(time.time() * 1000) - self._touched < STALE_AFTER_MS // 2  # the heartbeat's time
        return fresh and self.io.exists(f"{self.location}/{HEADER}")

    def remove(self) -> None:
        """Remove the journal once its run is done with it; if that fails the run still succeeded
        (the next run finds the journal, re-checks it and has nothing left to delete)."""
        self.release()
        try:
            remove(self.io, self.location)
        except TablekeeperError as err:
            log.warning("could not remove journal %s: %s", self.location, err.message)
