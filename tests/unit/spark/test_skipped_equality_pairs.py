"""The Spark rewrite's equality-delete join leaves out the (data file, delete file) pairs Iceberg
Java's planning skips by the files' statistics, which the delete index already left out of the
tasks: only pairs the sequence-number and partition rule would join are listed."""

from __future__ import annotations

import pytest

from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, DataFile, ManifestEntry
from tablekeeper.iceberg.delete_index import AppliedDeletes
from tablekeeper.iceberg.rewrite_plan import FileTask
from tablekeeper.spark.rewrite import _skipped_pairs

pytestmark = pytest.mark.unit


def _entry(
    path: str, seq: int, content: int = DATA, part: tuple[object, ...] = ("a",), spec: int = 1
) -> ManifestEntry:
    f = DataFile(content, path, "PARQUET", part, 1, 1, spec_id=spec, equality_ids=(1,) if content else None)
    return ManifestEntry(1, 1, f, seq, seq)


def test_only_the_pairs_the_rule_joins_but_the_index_skipped_are_listed() -> None:
    scoped, other, global_ = (
        _entry("eq-a", 5, EQUALITY_DELETES),
        _entry("eq-b", 5, EQUALITY_DELETES, ("b",)),
        _entry("eq-g", 5, EQUALITY_DELETES, (), 0),
    )
    kept = FileTask(_entry("s3://b/d1", 1), AppliedDeletes(equalities=(scoped, global_)))
    pruned = FileTask(_entry("s3://b/d2", 1), AppliedDeletes(equalities=(global_,)))  # eq-a skipped
    newer = FileTask(_entry("s3://b/d3", 9), AppliedDeletes())  # newer than every delete
    elsewhere = FileTask(_entry("s3://b/d4", 1, part=("b",)), AppliedDeletes(equalities=(other,)))
    skipped = _skipped_pairs([kept, pruned, newer, elsewhere], frozenset({0}))
    assert skipped == {"eq-a": ["/d2"], "eq-g": ["/d4"]}  # path keys: no scheme or bucket
