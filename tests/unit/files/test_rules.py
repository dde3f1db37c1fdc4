"""PathRules.key takes a per-directory shortcut; it must equal the full normalisation."""

from __future__ import annotations

import pickle
import random

import pytest

from tablekeeper.files.rules import PathRules
from tablekeeper.io.uri import normalize_location

SEGMENTS = ["a", "B", ".", "..", "", "x=1", "_p", "%20", "f.parquet"]
PREFIXES = [
    "",
    "/",
    "file:",
    "file:/",
    "file://",
    "file:///",
    "file://localhost/",
    "S3A://Bucket",
    "s3://bucket/",
    "s3n://b",
    "hdfs://nn:8020/",
    "hdfs:///",
    "gs://g/",
    "abfss://c@acct.dfs.core.windows.net/",
    "rel/",
]


def _locations(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        body = "/".join(rnd.choice(SEGMENTS) for _ in range(rnd.randint(0, 5)))
        out.append(rnd.choice(PREFIXES) + body + rnd.choice(["", "/", "/f.parquet", "/.."]))
    return [loc for loc in out if loc]


@pytest.mark.parametrize(
    "rules",
    [PathRules(), PathRules({}, None), PathRules({"s3a": "s3"}, {"Bucket": "other", "": "nn:8020"})],
)
def test_key_equals_full_normalisation(rules: PathRules) -> None:
    for loc in _locations(3000, 7):
        assert rules.key(loc) == normalize_location(
            loc, rules.equivalent_schemes, rules.equivalent_authorities
        ), loc


def test_rules_pickle_and_compare_by_their_mappings() -> None:
    rules = PathRules({"s3a": "s3"}, {"a": "b"})
    copy = pickle.loads(pickle.dumps(rules))
    assert copy == rules
    assert copy.key("s3a://A/x/y") == "s3://b/x/y"
    assert PathRules({"s3a": "s3"}, None).key("s3a://A/x/y") == "s3://a/x/y"


def test_prefix_is_what_keys_of_files_in_the_directory_start_with() -> None:
    rules = PathRules()
    for loc in _locations(500, 11):
        directory = loc.rstrip("/")
        if not directory or directory.endswith(":"):
            continue
        assert rules.prefix(directory) + "f.parquet" == normalize_location(directory + "/f.parquet"), loc
    assert rules.prefix("s3a://B") == "s3://b/"
