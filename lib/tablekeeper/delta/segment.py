"""Which files of ``_delta_log`` make up a snapshot: checkpoint choice and contiguous commits.

Pure: it works on a listing (names, sizes, mtimes) handed in by the caller. ``_last_checkpoint``
is only a hint; the listing decides.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import orjson

from tablekeeper.errors import ConfigError, CorruptMetadataError

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTI = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID = re.compile(r"^(\d{20})\.checkpoint\.([^.]+)\.(json|parquet)$")


@dataclass(frozen=True)
class LogEntry:
    name: str
    size: int
    mtime_ms: int


@dataclass(frozen=True)
class Checkpoint:
    version: int
    kind: str  # classic | multi | v2
    files: tuple[LogEntry, ...]  # parts in order

    @property
    def rank(self) -> tuple[int, int, int]:
        # Same-version tie-break (any complete one is correct): v2, then more parts, then classic.
        return (self.version, 2 if self.kind == "v2" else (1 if self.kind == "multi" else 0), len(self.files))


@dataclass(frozen=True)
class LogSegment:
    version: int
    checkpoint: Checkpoint | None
    commits: tuple[LogEntry, ...]  # ascending, checkpoint.version+1 .. version


@dataclass(frozen=True)
class LastCheckpointHint:
    version: int
    parts: int | None
    v2_path: str | None


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


def parse_listing(entries: Iterable[LogEntry]) -> tuple[dict[int, LogEntry], list[Checkpoint]]:
    commits: dict[int, LogEntry] = {}
    singles: list[Checkpoint] = []
    multi: dict[tuple[int, int], dict[int, LogEntry]] = {}
    for e in entries:
        if m := _COMMIT.match(e.name):
            commits[int(m.group(1))] = e
            continue
        if e.size == 0 and ".checkpoint." in e.name:
            continue  # Spark ignores empty checkpoints: a writer died mid-way
        if m := _CLASSIC.match(e.name):
            singles.append(Checkpoint(int(m.group(1)), "classic", (e,)))
        elif m := _MULTI.match(e.name):
            multi.setdefault((int(m.group(1)), int(m.group(3))), {})[int(m.group(2))] = e
        elif m := _UUID.match(e.name):
            singles.append(Checkpoint(int(m.group(1)), "v2", (e,)))
    for (version, total), parts in multi.items():
        if total > 0 and set(parts) == set(range(1, total + 1)):
            singles.append(Checkpoint(version, "multi", tuple(parts[i] for i in range(1, total + 1))))
        else:
            log.warning(
                "ignoring incomplete multi-part checkpoint %d (%d of %d parts)", version, len(parts), total
            )
    return commits, singles


def parse_last_checkpoint(data: bytes) -> LastCheckpointHint | None:
    """The hint, or None (with a warning) when it is corrupt or its checksum does not match."""
    try:
        obj = orjson.loads(data)
        version = int(obj["version"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        log.warning("_last_checkpoint is corrupt; ignoring it and listing the log")
        return None
    checksum = obj.get("checksum")
    if checksum is not None and checksum != last_checkpoint_checksum(obj):
        log.warning("_last_checkpoint checksum does not match; ignoring it and listing the log")
        return None
    v2 = obj.get("v2Checkpoint")
    return LastCheckpointHint(version, obj.get("parts"), v2.get("path") if isinstance(v2, dict) else None)


def _canon(value: Any, path: str, out: list[tuple[str, str]]) -> None:
    def enc(s: str) -> str:
        return quote(s, safe="-._~")

    if isinstance(value, dict):
        for k, v in value.items():
            _canon(v, f'{path}+"{enc(k)}"' if path else f'"{enc(k)}"', out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _canon(v, f"{path}+{i}", out)
    elif isinstance(value, str):
        out.append((path, f'"{enc(value)}"'))
    elif value is None:
        out.append((path, "null"))
    elif isinstance(value, bool):
        out.append((path, "true" if value else "false"))
    else:
        out.append((path, str(value)))


def last_checkpoint_checksum(obj: Mapping[str, Any]) -> str:
    """The protocol's canonical MD5 of ``_last_checkpoint`` without its ``checksum`` key."""
    pairs: list[tuple[str, str]] = []
    _canon({k: v for k, v in obj.items() if k != "checksum"}, "", pairs)
    pairs.sort(key=lambda p: p[0].encode("utf-8"))
    text = ",".join(f"{k}={v}" for k, v in pairs)
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def build_segment(
    entries: Sequence[LogEntry],
    *,
    version: int | None = None,
    hint: LastCheckpointHint | None = None,
    table: str = "the table",
    skip: frozenset[Checkpoint] = frozenset(),
) -> LogSegment:
    """The checkpoint and commits that rebuild ``version`` (default: the latest). ``skip``:
    checkpoints found unreadable, so an older one and more commits are used instead."""
    commits, checkpoints = parse_listing(entries)
    checkpoints = [c for c in checkpoints if c not in skip]
    if not commits and not checkpoints:
        raise CorruptMetadataError(f"{table} has an empty _delta_log (no commits, no checkpoints)")
    latest = max([*commits, *(c.version for c in checkpoints)])
    target = latest if version is None else version
    if target > latest:
        raise ConfigError(f"{table} has no version {target} (latest is {latest}): pick an existing version")
    if target < 0:
        raise ConfigError(f"version {target} is not valid: versions start at 0")
    usable = [c for c in checkpoints if c.version <= target]
    checkpoint = max(usable, key=lambda c: c.rank) if usable else None
    if hint is not None and version is None and not any(c.version == hint.version for c in checkpoints):
        log.warning(
            "_last_checkpoint points at version %d, which has no complete checkpoint; using the listing",
            hint.version,
        )
    if target not in commits and version is not None and commits and target < min(commits):
        raise ConfigError(
            f"version {target} of {table} can no longer be reconstructed: its log was cleaned up "
            f"(the earliest commit kept is {min(commits)}); time travel to a later version"
        )
    if target not in commits:
        # delta-spark refuses too: the version's own commit carries its commitInfo and timestamp,
        # which no checkpoint keeps, so the log was cleaned further than the protocol allows.
        raise CorruptMetadataError(
            f"{table} has no commit file for version {target} ({commit_name(target)}), only a checkpoint: "
            "the log is incomplete"
        )
    start = checkpoint.version + 1 if checkpoint else 0
    needed = range(start, target + 1)
    missing = [v for v in needed if v not in commits]
    if missing:
        earliest = min(commits) if commits else None
        if checkpoint is None and version is not None and earliest is not None and missing[0] < earliest:
            raise ConfigError(
                f"version {target} of {table} can no longer be reconstructed: its log was cleaned up "
                f"(commits from {earliest} remain and no checkpoint covers {target}); "
                "time travel to a later version"
            )
        raise CorruptMetadataError(
            f"{table} has a gap in its log: commit {missing[0]} is missing between "
            f"{'checkpoint ' + str(checkpoint.version) if checkpoint else 'version 0'} and {target}"
        )
    return LogSegment(target, checkpoint, tuple(commits[v] for v in needed))


def commit_timestamps(entries: Sequence[LogEntry]) -> dict[int, int]:
    """Commit version -> file modification time, made strictly increasing as Spark does."""
    commits, _ = parse_listing(entries)
    out: dict[int, int] = {}
    previous: int | None = None
    for v in sorted(commits):
        ts = commits[v].mtime_ms
        if previous is not None and ts <= previous:
            ts = previous + 1
        out[v] = ts
        previous = ts
    return out


def sidecar_location(log_dir: str, sidecar: str) -> str:
    """``sidecar.path`` is URI-encoded: usually a bare name under _sidecars, possibly a full URI."""
    decoded = unquote(sidecar)
    if sidecar.startswith("/") or re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", sidecar):
        return decoded
    return f"{log_dir}/_sidecars/{decoded}"


def oldest_reconstructable(entries: Sequence[LogEntry], table: str = "the table") -> int:
    """The oldest version from which every later version can be rebuilt commit by commit: the
    start of the last unbroken run of commits, or the first checkpoint inside it."""
    commits, checkpoints = parse_listing(entries)
    if not commits:
        raise CorruptMetadataError(f"{table} has no commit files in its _delta_log")
    low = max(commits)
    while low - 1 in commits:
        low -= 1
    candidates = sorted({low, *(c.version for c in checkpoints if c.version >= low)})
    for version in candidates:
        try:
            build_segment(entries, version=version, table=table)
        except (ConfigError, CorruptMetadataError):
            continue
        return version
    raise CorruptMetadataError(
        f"{table}: no version from {low} on can be reconstructed (no checkpoint inside the kept commits)"
    )
