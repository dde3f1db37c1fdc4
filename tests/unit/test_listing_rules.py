"""remove-orphans' path rules: the JVM regex hides exactly what the Python rule hides."""

from __future__ import annotations

import re

import pytest

from tablekeeper.spark.listing import hidden_pattern, is_hidden, path_key

PATHS = [
    "data/a.parquet",
    "data/_temporary/0/x.parquet",
    "data/.staging.crc",
    "data/_p=1/x.parquet",
    "data/_q=1/x.parquet",
    "data/_p=1/_p=2/f.parquet",
    "data/_p/x.parquet",
    "_SUCCESS",
    ".hidden/x",
    "metadata/v1.metadata.json",
    "data/cat=a/_x.parquet",
    "data/cat=a/.x.parquet.crc",
    "data/cat=a/f.parquet",
    "data/x_y/_z=1/f.parquet",
]


@pytest.mark.parametrize("names", [frozenset(), frozenset({"cat"}), frozenset({"_p", "cat", "a.b"})])
def test_regex_and_python_rule_agree(names: frozenset[str]) -> None:
    pattern = hidden_pattern(names)
    for rel in PATHS:
        assert (re.search(pattern, rel) is not None) == is_hidden(rel, names), rel


def test_partition_directories_starting_with_underscore_are_visible_only_when_they_are_partitions() -> None:
    assert not is_hidden("data/_p=1/x.parquet", frozenset({"_p"}))
    assert is_hidden("data/_p=1/x.parquet", frozenset({"p"}))
    assert is_hidden("data/_p/x.parquet", frozenset({"_p"}))


def test_path_key_drops_scheme_and_authority() -> None:
    assert path_key("s3://bucket/t/data/f") == "/t/data/f"
    assert path_key("file:///tmp/t/f") == "/tmp/t/f"
    assert path_key("s3://bucket") == "/"
