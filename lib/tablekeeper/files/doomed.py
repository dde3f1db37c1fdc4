"""Which files some snapshots reach and others do not: the rule of one comparison, without the
engine.

Both sides are keyed by their comparison key, so for each key the expired snapshots' files meet
the kept snapshots' references, and one pass over a key's rows tells whether the file goes. A
file counts once per key and kind, as the driver engine counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tablekeeper.files.manifests import FileRow

DoomedPair = tuple[str, FileRow | None]  # key, and the row of a candidate (None: a kept reference)


def candidate_pair(row: FileRow) -> DoomedPair:
    return row[1], row


def kept_pair(key: str) -> DoomedPair:
    return key, None


def unkept(pairs: Iterable[DoomedPair], only: Callable[[FileRow], bool] | None = None) -> list[FileRow]:
    """The candidates among ``pairs`` whose key no kept pair names (of them, those ``only``
    allows), one per key and kind."""
    kept: set[str] = set()
    candidates: dict[tuple[str, str], FileRow] = {}
    for key, row in pairs:
        if row is None:
            kept.add(key)
        else:
            candidates.setdefault((key, row[2]), row)
    return [row for (key, _), row in candidates.items() if key not in kept and (only is None or only(row))]
