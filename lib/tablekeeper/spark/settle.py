"""Which written files a rewrite writes again so that its files reach the target size.

Rewrite tasks run in parallel and roll their files at the target's written bytes, but none can
know how well its rows compress until they are written, so each leaves one file under the target
(its last). ``settle`` writes those files again together until at most one per partition is
under the target, and that one is not small (compact's and health's rule: under the minimum
size) unless the partition's rows make less than a small file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.io import FileIO

# Merges run in parallel while the files to merge hold more than this many targets (each merge
# then leaves one file under the target for every few targets), then as one; passes are bounded.
MERGE_TARGETS = 4
PASSES = 4


@dataclass(frozen=True)
class Sized:
    """A written file as an input of a run (runs are cut by size)."""

    file: DataFile

    @property
    def size(self) -> int:
        return self.file.file_size_in_bytes


def sizes_of(files: Iterable[DataFile]) -> tuple[int, int]:
    """(rows, written bytes) of files written again together: what the last merge's output
    expects to write, so its last file can take the remaining rows."""
    rows = size = 0
    for f in files:
        rows += f.record_count
        size += f.file_size_in_bytes
    return rows, size


def settle(
    sizes: tuple[int, int, int],
    directory: str,
    files: Sequence[DataFile],
    again: Callable[[Sequence[DataFile], int], Sequence[DataFile]],
) -> list[DataFile]:
    """``files`` with those ``merge_candidates`` picks written again by ``again(files, tasks)``
    (into ``directory``) until none is picked; ``sizes`` is (target, small, maximum) bytes."""
    target = sizes[0]
    out = list(files)
    for _ in range(PASSES):
        redo = merge_candidates(sizes, out)
        if not redo:
            break
        total = sum(f.file_size_in_bytes for f in redo)
        merged = again(redo, max(1, total // (MERGE_TARGETS * target)))
        gone = {f.file_path for f in redo}
        FileIO.for_location(directory).delete_many(sorted(gone))
        out = [f for f in out if f.file_path not in gone] + list(merged)
    return out


def merge_candidates(sizes: tuple[int, int, int], files: Sequence[DataFile]) -> list[DataFile]:
    """The files to write again: per partition, those under the target when there are several,
    or a small one with the smallest other file of its partition (which then takes its rows)."""
    target, small, _ = sizes
    scopes: dict[tuple[int, tuple[Any, ...]], list[DataFile]] = {}
    for f in files:
        scopes.setdefault((f.spec_id, partition_key(f.partition)), []).append(f)
    out: list[DataFile] = []
    for scope in scopes.values():
        under = [f for f in scope if f.file_size_in_bytes < target]
        if len(under) > 1:
            out.extend(under)
        elif under and under[0].file_size_in_bytes < small and len(scope) > 1:
            other = min((f for f in scope if f is not under[0]), key=lambda f: f.file_size_in_bytes)
            out.extend([under[0], other])
    return out
