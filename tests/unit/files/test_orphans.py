"""remove-orphans' comparison of listed files with references, one bucket at a time."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys

import pytest

from tablekeeper.files.orphans import (
    CHANGED,
    MISMATCH,
    ORPHAN,
    bucket_of,
    classify,
    listed_pair,
    path_part,
    reference_pair,
    tally,
)
from tablekeeper.files.rules import PathRules

SCHEME_AND_AUTHORITY = re.compile(r"^[^:/]+://[^/]*")


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("s3://bucket/db/t/data/a.parquet", "/db/t/data/a.parquet"),
        ("file:///tmp/t/a", "/tmp/t/a"),
        ("hdfs://nn:8020/t/a", "/t/a"),
        ("s3://bucket", ""),
        ("/local/t/a", "/local/t/a"),
        ("a/b:c//d", "a/b:c//d"),  # a colon after a slash is no scheme
        ("://x/y", "://x/y"),  # an empty scheme is none
    ],
)
def test_path_part_drops_scheme_and_authority(key: str, path: str) -> None:
    assert path_part(key) == path


def test_path_part_agrees_with_the_pattern_on_odd_spellings() -> None:
    rng = random.Random(7)
    alphabet = "ab:/._=%"
    for _ in range(5000):
        key = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert path_part(key) == SCHEME_AND_AUTHORITY.sub("", key, count=1), key


def test_bucket_is_stable_and_spelling_independent_of_scheme() -> None:
    rules = PathRules()
    a = path_part(rules.key("s3a://bucket/t/data/f.parquet"))
    b = path_part(rules.key("s3://other/t/data/f.parquet"))
    assert a == b and bucket_of(a) == bucket_of(b) == bucket_of("/t/data/f.parquet")


def test_bucket_is_the_same_in_every_worker_process() -> None:
    paths = ["/t/x", "/t/data/ä.parquet", ""]
    code = (
        "import sys; from tablekeeper.files.orphans import bucket_of; "
        "print([bucket_of(p) for p in sys.argv[1:]])"
    )
    for seed in ("1", "2"):  # str hashes differ between these processes; buckets must not
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, *paths], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == str([bucket_of(p) for p in paths])


def _pairs(listed: list[str], referenced: list[str], rules: PathRules) -> list[tuple[str, object]]:
    rows = [(p, rules.key(p), 10 + i, 0) for i, p in enumerate(listed)]
    pairs: list[tuple[str, object]] = [listed_pair(r) for r in rows]
    pairs += [reference_pair(rules.key(p)) for p in referenced]
    random.Random(3).shuffle(pairs)  # a bucket's rows arrive in any order
    return pairs


def test_classify_tells_referenced_orphan_and_mismatch() -> None:
    rules = PathRules()
    listed = [
        "s3://b/t/data/kept.parquet",
        "s3a://b/t/data/spelled.parquet",  # referenced as s3:// : one file
        "s3://b/t/data/orphan.parquet",
        "s3://b/t/data/moved.parquet",  # referenced under another bucket
        "s3://b/t/data/twice.parquet",  # referenced under two spellings, one of them its own
    ]
    referenced = [
        "s3://b/t/data/kept.parquet",
        "s3://b/t/data/kept.parquet",  # several manifests list it
        "s3://b/t/data/spelled.parquet",
        "s3://other/t/data/moved.parquet",
        "s3://other/t/data/twice.parquet",
        "s3://b/t/data/twice.parquet",
        "s3://b/t/data/gone.parquet",  # referenced, not listed
    ]
    out = sorted(classify(_pairs(listed, referenced, rules)))
    assert out == [
        (MISMATCH, "s3://b/t/data/moved.parquet", "s3://b/t/data/moved.parquet", 13),
        (ORPHAN, "s3://b/t/data/orphan.parquet", "s3://b/t/data/orphan.parquet", 12),
    ]


def test_classify_takes_gcs_and_azure_spellings_of_a_reference_for_the_file() -> None:
    rules = PathRules()
    listed = [
        "gs://b/t/data/a.parquet",  # referenced as gcs://
        "abfss://c@acct.dfs.core.windows.net/t/data/b.parquet",  # referenced through the Blob host
        "abfss://c@acct.dfs.core.windows.net/t/data/c.parquet",  # referenced as abfs://
        "abfss://c@acct.dfs.core.windows.net/t/data/d.parquet",  # another account's: a mismatch
        "gs://b/t/data/orphan.parquet",
    ]
    referenced = [
        "gcs://b/t/data/a.parquet",
        "wasbs://c@acct.blob.core.windows.net/t/data/b.parquet",
        "abfs://c@acct.dfs.core.windows.net/t/data/c.parquet",
        "abfss://c@other.dfs.core.windows.net/t/data/d.parquet",
    ]
    out = sorted(classify(_pairs(listed, referenced, rules)))
    assert [(kind, location) for kind, location, _, _ in out] == [
        (MISMATCH, "abfss://c@acct.dfs.core.windows.net/t/data/d.parquet"),
        (ORPHAN, "gs://b/t/data/orphan.parquet"),
    ]


def test_classify_with_a_mismatch_spelled_three_ways() -> None:
    rules = PathRules()
    listed = ["s3://mine/t/f"]
    referenced = ["s3://x/t/f", "s3://y/t/f", "s3://z/t/f"]
    assert [r[0] for r in classify(_pairs(listed, referenced, rules))] == [MISMATCH]


def test_tally_counts_and_samples() -> None:
    rows = [(ORPHAN, f"p{i}", f"k{i}", i) for i in range(10)] + [(MISMATCH, "m", "m", 99)]
    rows += [(CHANGED, "c", "c", 5)]  # an inventory's file written again since: neither
    ((orphans, size, mismatches, sample, mismatched, changed),) = list(tally(rows, 3))
    assert (orphans, size, mismatches, changed) == (10, 45, 1, 1)
    assert sample == ["p0", "p1", "p2"] and mismatched == ["m"]
