"""Which listed files no reference names: the rules of one comparison, without the engine.

Both sides are keyed by the path part of their key (no scheme or authority), so for each path the
listed files meet the keys the table references. One pass then tells a referenced file (its key is
referenced), a prefix mismatch (its path is referenced under another scheme or authority) and an
orphan (its path is referenced under no spelling).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

ORPHAN = "orphan"
MISMATCH = "mismatch"
# Listed by an inventory report as old and unreferenced, but gone or written again since: kept.
CHANGED = "changed"

ListedPair = tuple[str, tuple[str, str, int]]  # path part, (key, path, size)
Referenced = dict[str, set[str] | str]  # path part: the key(s) referencing it


def path_part(key: str) -> str:
    """The path of a comparison key without its ``scheme://authority``."""
    colon = key.find(":")
    if colon > 0 and key.startswith("//", colon + 1) and "/" not in key[:colon]:
        slash = key.find("/", colon + 3)
        return key[slash:] if slash >= 0 else ""
    return key


def bucket_of(path: str) -> int:
    # Stable across processes (unlike hash() of a str), so both sides of a path meet.
    return zlib.crc32(path.encode("utf-8", "surrogatepass"))


def listed_pair(row: tuple[Any, ...]) -> ListedPair:
    """A listed (path, key, size, ...) row keyed by its path part."""
    path, key, size = row[0], row[1], row[2]
    return path_part(key), (key, path, size)


def reference_pair(key: str) -> tuple[str, str]:
    return path_part(key), key


def gather(pairs: Iterable[tuple[str, Any]], listed: Callable[[ListedPair], object]) -> Referenced:
    """The referenced keys of each path among ``pairs`` (listed and reference pairs mixed);
    the listed pairs are handed to ``listed``."""
    referenced: Referenced = {}
    for path, value in pairs:
        if isinstance(value, str):
            seen = referenced.get(path)
            if seen is None:
                referenced[path] = value  # nearly every path has one spelling: no set for it
            elif isinstance(seen, str):
                if seen != value:
                    referenced[path] = {seen, value}
            else:
                seen.add(value)
        else:
            listed((path, value))
    return referenced


def judge(referenced: Referenced, listed: Iterable[ListedPair]) -> Iterator[tuple[str, str, str, int]]:
    """(status, path, key, size) of each listed file no reference names: ``orphan``, or
    ``mismatch`` when its path is referenced under another scheme or authority."""
    for path, (key, location, size) in listed:
        keys = referenced.get(path)
        if keys is None:
            yield ORPHAN, location, key, size
        elif not (keys == key if isinstance(keys, str) else key in keys):
            yield MISMATCH, location, key, size


def classify(pairs: Iterable[tuple[str, Any]]) -> list[tuple[str, str, str, int]]:
    """(status, path, key, size) of each unreferenced listed file among ``pairs`` (listed and
    reference pairs mixed), as ``judge`` tells them."""
    listed: list[ListedPair] = []
    referenced = gather(pairs, listed.append)
    return list(judge(referenced, listed))


@dataclass(frozen=True)
class Summary:
    """What one pass over the unreferenced files found."""

    orphans: int
    orphan_bytes: int
    mismatches: int
    sample: tuple[str, ...]  # orphan paths
    mismatch_sample: tuple[str, ...]
    changed: int = 0


Tally = tuple[int, int, int, list[str], list[str], int]


def tally(rows: Iterable[tuple[str, str, str, int]], sample: int) -> Iterator[Tally]:
    orphans = size = mismatches = changed = 0
    paths: list[str] = []
    mismatched: list[str] = []
    for status, path, _, nbytes in rows:
        if status == ORPHAN:
            orphans += 1
            size += nbytes
            if len(paths) < sample:
                paths.append(path)
        elif status == MISMATCH:
            mismatches += 1
            if len(mismatched) < sample:
                mismatched.append(path)
        else:
            changed += 1
    yield orphans, size, mismatches, paths, mismatched, changed


def summary(tallies: Iterable[Tally], sample: int) -> Summary:
    """Counts, bytes and samples (the first paths in sorted order of per-part samples)."""
    parts = list(tallies)
    return Summary(
        sum(t[0] for t in parts),
        sum(t[1] for t in parts),
        sum(t[2] for t in parts),
        tuple(sorted(p for t in parts for p in t[3])[:sample]),
        tuple(sorted(p for t in parts for p in t[4])[:sample]),
        sum(t[5] for t in parts),
    )
