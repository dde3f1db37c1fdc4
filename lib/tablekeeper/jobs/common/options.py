"""Options shared by the jobs: ``--older-than`` and the file list of a dry run, byte sizes, sort orders."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tablekeeper.errors import ConfigError
from tablekeeper.jobs.common.result import EPOCH

log = logging.getLogger(__name__)

# Locations a dry run's JSON lists at most; --file-list takes any number (streamed to the file).
LISTED_FILES = 10_000

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
# Anything above this many digits is read as epoch milliseconds, not a year.
_EPOCH_DIGITS = 9


def parse_older_than(text: str, now_ms: int) -> int:
    """``--older-than`` as epoch milliseconds: an ISO-8601 timestamp (UTC unless it names a zone),
    epoch milliseconds, or a duration back from now (``3d``, ``12h``, ``90m``, ``30s``, ``2w``)."""
    raw = text.strip()
    match = _DURATION.match(raw)
    if match:
        return now_ms - int(match.group(1)) * _UNIT_MS[match.group(2).lower()]
    if raw.isdigit() and len(raw) >= _EPOCH_DIGITS:
        return int(raw)
    try:
        parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--older-than {text!r} is not a timestamp, epoch milliseconds or duration: "
            "use e.g. 2026-11-01T00:00:00Z, 1793491200000 or 3d"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return (parsed - EPOCH) // dt.timedelta(milliseconds=1)  # exact: float seconds can lose a ms


def write_file_list(location: str, paths: Iterable[str]) -> None:
    """The full list of a run's files, one per line (for runs too large for the JSON result),
    written as the paths come: a caller may stream more than fits in memory."""
    try:
        with Path(location).open("w", encoding="utf-8") as out:
            for path in paths:
                out.write(f"{path}\n")
    except OSError as err:
        raise ConfigError(f"cannot write --file-list {location}: {err.strerror or err}") from err


@dataclass(frozen=True)
class FileReport:
    """Where a run's file locations went: the JSON's ``files`` (``listed``) or ``--file-list``."""

    metrics: dict[str, object]
    listed: list[str] | None


def report_files(
    paths: Callable[[int | None], Iterator[str]], count: int, file_list: str | None
) -> FileReport:
    """Every location into ``file_list`` when given; else the first ``LISTED_FILES`` in sorted
    order for the JSON, saying when there are more. ``paths(limit)`` yields them sorted."""
    if file_list:
        write_file_list(file_list, paths(None))
        return FileReport({"file_list": file_list}, None)
    listed = list(paths(LISTED_FILES))
    if count <= len(listed):
        return FileReport({}, listed)
    log.warning("%d files: the result lists the first %d; --file-list takes them all", count, len(listed))
    return FileReport({"files_truncated": True, "files_listed": len(listed)}, listed)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNIT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str, option: str) -> int:
    """A byte size: ``536870912``, ``512MB``, ``512m``, ``1.5GiB`` (units are powers of 1024,
    as Iceberg's table properties count them)."""
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(f"{option} {text!r} is not a size: use e.g. 512MB, 1GB or a byte count")
    unit = (match.group(2) or "").lower()[:1]
    return int(float(match.group(1)) * _SIZE_UNIT[unit])


@dataclass(frozen=True)
class SortKey:
    column: str
    ascending: bool = True
    nulls_first: bool = True
    transform: str = "identity"  # Iceberg's form: identity, bucket[16], truncate[4], day, ...


@dataclass(frozen=True)
class SortSpec:
    keys: tuple[SortKey, ...] = ()
    zorder: tuple[str, ...] = ()


_COLUMN = r"(`[^`]+`|[A-Za-z_][\w.]*)"
_SORT_TERM = re.compile(
    rf"^\s*(?:(?P<fn>[A-Za-z_]+)\s*\(\s*(?:(?P<n1>\d+)\s*,\s*)?{_COLUMN.replace('(', '(?P<fcol>', 1)}"
    rf"\s*(?:,\s*(?P<n2>\d+)\s*)?\)|{_COLUMN.replace('(', '(?P<col>', 1)})"
    r"\s*(?P<dir>ASC|DESC)?\s*(?:NULLS\s+(?P<nulls>FIRST|LAST))?\s*$",
    re.IGNORECASE,
)
_ZORDER = re.compile(r"^\s*zorder\s*\((.*)\)\s*$", re.IGNORECASE)
# Spark SQL's names for Iceberg transforms (as in ALTER TABLE ... WRITE ORDERED BY), and Iceberg's.
_TRANSFORMS = {
    "years": "year",
    "year": "year",
    "months": "month",
    "month": "month",
    "days": "day",
    "day": "day",
    "date": "day",
    "hours": "hour",
    "hour": "hour",
    "date_hour": "hour",
    "identity": "identity",
}


def parse_sort_order(text: str) -> SortSpec:
    """``--sort-order``: ``c1 ASC NULLS FIRST, bucket(16, c2) DESC, days(ts)`` (nulls first for
    ascending, last for descending unless given, as Iceberg), or ``zorder(c1, c2)``."""
    zorder = _ZORDER.match(text)
    if zorder:
        columns = tuple(c.strip().strip("`") for c in zorder.group(1).split(",") if c.strip())
        if not columns:
            raise ConfigError(f"--sort-order {text!r} names no column: use e.g. zorder(c1, c2)")
        return SortSpec(zorder=columns)
    keys = []
    for term in _split_terms(text):
        match = _SORT_TERM.match(term)
        if not match:
            raise ConfigError(
                f"--sort-order term {term.strip()!r} is not "
                "'[transform(]column[)] [ASC|DESC] [NULLS FIRST|LAST]' "
                "(transforms: bucket(N, c), truncate(W, c), years, months, days, hours), or zorder(c1, c2)"
            )
        ascending = (match.group("dir") or "ASC").upper() == "ASC"
        nulls = match.group("nulls")
        nulls_first = ascending if nulls is None else nulls.upper() == "FIRST"
        column = (match.group("col") or match.group("fcol")).strip("`")
        keys.append(SortKey(column, ascending, nulls_first, _transform(term, match)))
    return SortSpec(tuple(keys))


def _split_terms(text: str) -> list[str]:
    """Terms split at commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _transform(term: str, match: re.Match[str]) -> str:
    fn = match.group("fn")
    if fn is None:
        return "identity"
    name = fn.lower()
    number = match.group("n1") or match.group("n2")
    if name in ("bucket", "truncate"):
        if number is None:
            raise ConfigError(
                f"--sort-order term {term.strip()!r}: {name} needs a number, e.g. {name}(16, c)"
            )
        return f"{name}[{int(number)}]"
    if name in _TRANSFORMS and number is None:
        return _TRANSFORMS[name]
    raise ConfigError(f"--sort-order term {term.strip()!r}: unknown transform {fn!r}")
