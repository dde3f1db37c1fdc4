"""Which files some snapshots reach and others do not: the rule of one comparison, without the
engine.

Both sides are keyed by their comparison key, so for each key the expired snapshots' files meet
the kept snapshots' references, and one pass over a key's rows tells whether the file goes. A
file counts once per key and kind, as the driver engine counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable

from tablekeeper.files.manifests import FileRow

DoomedPair = tuple[str, FileRow | None]  # key, and the row of a candidate (None: a kept reference)


def candidate_pair(row: FileRow) -> DoomedPair:
    return row[1], row


def kept_pair(key: str) -> DoomedPair:
    return key, None


def unkept(
    candidates: Iterable[FileRow], kept: Container[str], only: Callable[[FileRow], bool] | None = None
) -> list[FileRow]:
    """The ``candidates`` whose key ``kept`` does not hold (of them, those ``only`` allows), one
    per key and kind: the first row of each."""
    first: dict[tuple[str, str], FileRow] = {}
    for row in candidates:
        first.setdefault((row[1], row[2]), row)
    return [row for (key, _), row in first.items() if key not in kept and (only is None or only(row))]


def unkept_pairs(pairs: Iterable[DoomedPair], only: Callable[[FileRow], bool] | None = None) -> list[FileRow]:
    """``unkept`` over one bucket of candidate and kept pairs, in any order."""
    kept: set[str] = set()
    candidates: list[FileRow] = []
    for key, row in pairs:
        if row is None:
            kept.add(key)
        else:
            candidates.append(row)
    return unkept(candidates, kept, only)
