"""Options shared by the jobs that delete: ``--older-than`` and the file list of a dry run."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path

from tablekeeper.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
# Anything above this many digits is read as epoch milliseconds, not a year.
_EPOCH_DIGITS = 9
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


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
    return (parsed - _EPOCH) // dt.timedelta(milliseconds=1)  # exact: float seconds can lose a ms


def write_file_list(location: str, paths: Sequence[str]) -> None:
    """The full list of a run's files, one per line (for runs too large for the JSON result)."""
    try:
        Path(location).write_text("".join(f"{p}\n" for p in paths), encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot write --file-list {location}: {err.strerror or err}") from err
