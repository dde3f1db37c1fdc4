"""Every real Delta table in ../shared/delta-tables is read exactly as delta-spark reads it.

Per table: delta-spark's snapshot (tests/support/delta_reference.py, read once per session through
tests/support/delta_corpus.py) is the oracle. Where it reads
the table, tablekeeper's pure and Spark replays must return the same version, protocol, schema,
partition columns, configuration and live file set (path, DV id), at the latest version and at the
earliest and a middle version delta-spark can rebuild. Where delta-spark refuses, tablekeeper must
refuse too, with a typed one-line error: the expected refusals are listed below, table by table.
"""

from __future__ import annotations

import json

import pytest

from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.errors import CorruptMetadataError, TablekeeperError, UnsupportedFeatureError
from tablekeeper.tables.delta import load_snapshot
from tests.support.delta_reference import DeltaReference, DeltaSparkRefused
from tests.support.delta_tables import SHARED_TABLES

pytestmark = pytest.mark.spark

# Tables both engines refuse, with the error class and words tablekeeper's message must contain.
REFUSED: dict[str, tuple[type[TablekeeperError], str]] = {
    # reader version 5 and an unknown reader feature 'blahabl'
    "simple_table_features": (UnsupportedFeatureError, "Delta reader version 5 is not supported"),
    # only 108.checkpoint.parquet, no commit files at all
    "table-with-domain-metadata": (CorruptMetadataError, "no commit file for version 108"),
}


def assert_same(mine: DeltaSnapshot, ref: DeltaReference) -> None:
    assert mine.version == ref.version
    p = mine.protocol
    assert (p.min_reader_version, p.min_writer_version) == (ref.min_reader_version, ref.min_writer_version)
    assert frozenset(p.reader_features or ()) == ref.reader_features
    assert frozenset(p.writer_features or ()) == ref.writer_features
    schema = (
        json.loads(mine.metadata.schema_string)
        if mine.metadata.schema_string
        else {"type": "struct", "fields": []}
    )
    assert schema == ref.schema_json
    assert mine.partition_columns == ref.partition_columns
    assert dict(mine.metadata.configuration) == ref.configuration
    assert mine.file_keys() == ref.files


def versions_to_check(delta_corpus, name: str) -> list[int]:  # type: ignore[no-untyped-def]
    available = delta_corpus.versions(name)
    return sorted({available[0], available[len(available) // 2], available[-1]})


@pytest.mark.parametrize("name", SHARED_TABLES)
def test_shared_table_matches_delta_spark(delta_corpus, name: str) -> None:  # type: ignore[no-untyped-def]
    path = delta_corpus.path(name)
    if name in REFUSED:
        error, words = REFUSED[name]
        with pytest.raises(DeltaSparkRefused):
            delta_corpus.state(name)
        with pytest.raises(error) as info:
            load_snapshot(str(path))
        assert words in str(info.value) and "\n" not in str(info.value)
        return
    for version in versions_to_check(delta_corpus, name):
        ref = delta_corpus.state(name, version)
        pure = load_snapshot(str(path), version=version)
        assert_same(pure, ref)
    distributed = delta_corpus.spark_replay(name)
    latest = load_snapshot(str(path))
    assert distributed.file_keys() == latest.file_keys()
    assert distributed.tombstones.num_rows == latest.tombstones.num_rows
    assert (distributed.protocol, distributed.metadata) == (latest.protocol, latest.metadata)


def test_every_shared_table_is_covered() -> None:
    assert len(SHARED_TABLES) >= 50
    assert set(REFUSED) <= set(SHARED_TABLES)
