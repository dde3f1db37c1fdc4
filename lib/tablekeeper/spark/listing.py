"""Distributed listing of a table location, for orphan detection.

The driver lists the first levels (breadth first, until there are enough subtrees to spread);
each executor task lists whole subtrees through the FileIO. What a listing keeps (hidden paths,
nested tables) is decided by ``files.listing``, the same rules the driver engine lists by.

A task decides which of its files belong to a nested table from the markers it lists itself, so
that its rows can go straight into the comparison's shuffle: no second pass over a stored
listing. That holds when every nested table lies whole inside one task's subtree, which the plan
ensures: a table whose markers the driver saw is left out with all its files, and a table that
sits above a subtree holding its log or metadata directory (found from the subtree's own path)
is given whole to one task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import RDD, SparkContext, StorageLevel

from tablekeeper.cycles import no_cycle_collection
from tablekeeper.files.inventory import Inventory, Scope, read_part
from tablekeeper.files.listing import Classifier, nested, nested_prefixes, table_rows
from tablekeeper.io import FileIO

__all__ = ["ListingPlan", "inventory_rows", "plan_listing", "tree_rows"]

_DRIVER_DEPTH = 3

Row = tuple[str, str, int, int]  # path, key, size, mtime_ms


@dataclass(frozen=True)
class ListingPlan:
    """The files the driver listed and keeps, and the directories left to tasks (each listed
    whole by one task, none inside another)."""

    rows: tuple[Row, ...]
    trees: tuple[str, ...]


def _root_above(directory: str) -> str | None:
    """The root of a table whose marker files ``directory`` may hold while the root lies above
    it: the table of a ``_delta_log`` it is in, or of the ``metadata`` directory it is."""
    cut = (directory + "/").rfind("/_delta_log/")
    if cut >= 0:
        return directory[:cut]
    if directory.endswith("/metadata"):
        return directory[: -len("/metadata")]
    return None


def _outside(rows: Iterable[tuple[Any, ...]], roots: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return [r for r in rows if not (roots and r[1].startswith(roots))]


def plan_listing(io: FileIO, classify: Classifier, own_key: str, wanted: int) -> ListingPlan:
    """List the first levels of ``classify.stem`` on the driver until ``wanted`` subtrees are
    found (or a few levels are done); ``own_key`` is the location's own key (its markers are
    this table's, not a nested one's)."""
    rules = classify.rules
    found: list[tuple[Any, ...]] = []
    frontier = [classify.stem]
    for _ in range(_DRIVER_DEPTH):
        if len(frontier) >= wanted:
            break
        deeper: list[str] = []
        for directory in frontier:
            files, dirs = io.list_dir(directory)
            found.extend(classify.rows(files))
            deeper.extend(dirs)
        frontier = deeper
    # Tables the driver saw the markers of: none of their files, listed or not, are ours.
    seen = nested_prefixes(found, own_key)
    found = _outside(found, seen)
    frontier = [d for d in frontier if not (seen and rules.prefix(d).startswith(seen))]
    # A table above a subtree that may hold its markers: its whole tree goes to one task, and
    # what the driver listed of it is listed there again.
    above: dict[str, str] = {}
    for directory in frontier:
        root = _root_above(directory)
        if root is not None:
            above[rules.prefix(root)[:-1]] = root
    whole = nested(above, own_key)
    if whole:
        cut = tuple(k + "/" for k in whole)
        found = _outside(found, cut)
        frontier = [d for d in frontier if not rules.prefix(d).startswith(cut)]
        frontier += [above[k] for k in whole]
    return ListingPlan(tuple((r[0], r[1], r[2], r[3]) for r in found if not r[4]), tuple(frontier))


def tree_rows(directory: str, classify: Classifier, own_key: str) -> list[Row]:
    """The files under ``directory`` (one of a plan's trees) that are not hidden and not in a
    table nested in it."""
    with no_cycle_collection():
        rows = list(classify.rows(FileIO.for_location(directory).list(directory, recursive=True)))
        return table_rows(rows, own_key)


def inventory_rows(
    sc: SparkContext, inventory: Inventory, classify: Classifier, own_key: str
) -> tuple[RDD[Row], RDD[Any], int]:
    """What an inventory report lists under ``classify.stem`` as a listing's rows, one task per
    data file of the report. Nested tables are found from the markers across all its files, so
    the rows are held between that pass and the comparison (returned second, to release after);
    last, how many rows the location had."""
    scope = Scope.of(classify.stem)
    parts = sc.parallelize(inventory.parts, max(1, len(inventory.parts)))
    rows = parts.flatMap(lambda part: classify.rows(read_part(inventory, part, scope)))
    rows.persist(StorageLevel.MEMORY_AND_DISK)

    def markers(part: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, set[str]]]:
        count, roots = 0, set()
        for row in part:
            count += 1
            if row[5] is not None:
                roots.add(row[5])
        yield count, roots

    counted = rows.mapPartitions(markers).collect()
    inner = tuple(root + "/" for root in nested(set().union(*(r for _, r in counted)), own_key))
    table = rows.filter(lambda r: not r[4] and not (inner and r[1].startswith(inner))).map(
        lambda r: (r[0], r[1], r[2], r[3])
    )
    return table, rows, sum(n for n, _ in counted)
