"""Distributed listing of a table location, for orphan detection.

The driver lists the first levels (breadth first, until there are enough subtrees to spread);
each executor task lists whole subtrees through the FileIO. Hidden paths (``.x`` and ``_x``) are
skipped unless ``_x`` is a partition directory (``_p=1`` where ``_p`` is a partition field), and
so are the trees of other tables nested under the location (their own ``metadata/*.metadata.json``
or ``_delta_log``): their files are not this table's to judge.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tablekeeper.io import FileIO
from tablekeeper.io.fileio import FileInfo
from tablekeeper.io.uri import strip_trailing_slash
from tablekeeper.spark.reachability import PathRules

LISTED_SCHEMA = StructType(
    [
        StructField("path", StringType(), False),
        StructField("key", StringType(), False),
        StructField("path_key", StringType(), False),
        StructField("size", LongType(), False),
        StructField("mtime_ms", LongType(), False),
    ]
)
_TABLE_MARKERS = (
    re.compile(r"^(.*)/metadata/[^/]+\.metadata\.json(\.gz)?$"),
    re.compile(r"^(.*)/_delta_log/.+$"),
)
_DRIVER_DEPTH = 3


def path_key(key: str) -> str:
    """The path part of a comparison key (no scheme or authority), for prefix-mismatch checks."""
    rest = key.split("://", 1)[-1]
    return "/" + rest.split("/", 1)[1] if "/" in rest else "/"


def path_key_column(key: Column) -> Column:
    """``path_key`` of a key column, computed in the JVM."""
    return F.regexp_replace(key, r"^[^:/]+://[^/]*", "")


def is_hidden(relative: str, partition_names: frozenset[str]) -> bool:
    for segment in relative.split("/")[:-1]:  # directories only: a file's own name may start with _
        if segment.startswith("."):
            return True
        if segment.startswith("_") and not ("=" in segment and segment.split("=", 1)[0] in partition_names):
            return True
    name = relative.rsplit("/", 1)[-1]
    return name.startswith((".", "_"))


def _row(info: FileInfo, rules: PathRules) -> tuple[Any, ...]:
    key = rules.key(info.location)
    return (info.location, key, path_key(key), info.size, info.mtime_ms)


def _list_tree(location: str, rules: PathRules) -> Iterator[tuple[Any, ...]]:
    for info in FileIO.for_location(location).list(location, recursive=True):
        yield _row(info, rules)


def list_location(
    spark: SparkSession, location: str, rules: PathRules, partition_names: frozenset[str]
) -> DataFrame:
    """Every file under ``location`` that is not hidden and not inside a nested table."""
    io = FileIO.for_location(location)
    stem = strip_trailing_slash(location)
    sc = spark.sparkContext
    wanted = sc.defaultParallelism * 4
    driver_rows: list[tuple[Any, ...]] = []
    frontier = [stem]
    for _ in range(_DRIVER_DEPTH):
        if len(frontier) >= wanted:
            break
        deeper: list[str] = []
        for d in frontier:
            files, dirs = io.list_dir(d)
            driver_rows.extend(_row(f, rules) for f in files)
            deeper.extend(dirs)
        frontier = deeper
    listed = spark.createDataFrame(driver_rows, LISTED_SCHEMA)
    if frontier:
        slices = max(1, min(len(frontier), wanted))
        trees = sc.parallelize(frontier, slices).flatMap(lambda d: _list_tree(d, rules))
        listed = listed.unionByName(spark.createDataFrame(trees, LISTED_SCHEMA))
    listed = listed.cache()  # read twice: nested-table markers, then the visible files
    own_key = rules.key(stem)
    nested = _nested_tables(listed, own_key)
    # Hidden paths, decided in the JVM: a second Python pass over every file would cost more than
    # the listing itself.
    relative = F.substring(listed.key, len(own_key) + 2, 1 << 30)
    visible = listed.where(~relative.rlike(hidden_pattern(partition_names)))
    for root in nested:
        visible = visible.where(~visible.key.startswith(root + "/"))
    return visible


def hidden_pattern(partition_names: frozenset[str]) -> str:
    """A Java regex matching relative paths with a hidden segment (what ``is_hidden`` decides)."""
    allowed = "|".join(re.escape(n) for n in sorted(partition_names) if n.startswith("_"))
    underscore = f"(?!(?:{allowed})=)_" if allowed else "_"
    return rf"(^|/)(\.|{underscore})[^/]*/|(^|/)[._][^/]*$"


def _nested_tables(listed: DataFrame, own_key: str) -> list[str]:
    """Roots of other tables under the location (few: collected)."""
    roots: set[str] = set()
    markers = listed.where(listed.key.rlike(r"/metadata/[^/]+\.metadata\.json(\.gz)?$|/_delta_log/"))
    for (key,) in markers.select("key").collect():
        for pattern in _TABLE_MARKERS:
            match = pattern.match(key)
            if match and match.group(1) != own_key and match.group(1).startswith(own_key + "/"):
                roots.add(match.group(1))
                break
    # A table nested inside a nested table is covered by the outer one.
    return sorted(r for r in roots if not any(r != o and r.startswith(o + "/") for o in roots))
