"""The expiry's comparison rule: a candidate goes unless a kept reference names its key."""

from __future__ import annotations

import random

from tablekeeper.files.doomed import candidate_pair, kept_pair, unkept_pairs
from tablekeeper.files.engine import MetadataOnly
from tablekeeper.iceberg.reachable import DATA_FILE, MANIFEST

A = ("s3a://b/t/data/a.parquet", "s3://b/t/data/a.parquet", DATA_FILE, 10)
A_OTHER_SPELLING = ("s3://b/t/data/a.parquet", "s3://b/t/data/a.parquet", DATA_FILE, 10)
B = ("s3://b/t/data/b.parquet", "s3://b/t/data/b.parquet", DATA_FILE, 20)
M = ("s3://b/t/metadata/m0.avro", "s3://b/t/metadata/m0.avro", MANIFEST, 5)
OTHER_M = ("s3://b/other/metadata/m1.avro", "s3://b/other/metadata/m1.avro", MANIFEST, 5)


def test_a_kept_key_saves_every_spelling_and_order_does_not_matter() -> None:
    pairs = [candidate_pair(A), candidate_pair(B), kept_pair(A_OTHER_SPELLING[1]), candidate_pair(M)]
    for _ in range(20):
        random.shuffle(pairs)
        assert sorted(unkept_pairs(pairs)) == sorted([B, M])


def test_a_file_counts_once_per_key_and_kind() -> None:
    # Two manifests of the expired snapshots list one file: it is deleted (and counted) once.
    found = unkept_pairs([candidate_pair(A), candidate_pair(A_OTHER_SPELLING), candidate_pair(B)])
    assert len(found) == 2 and B in found and {r[1] for r in found} == {A[1], B[1]}


def test_only_keeps_out_what_it_refuses() -> None:
    only = MetadataOnly("s3://b/t/metadata/")
    assert unkept_pairs([candidate_pair(r) for r in (A, B, M, OTHER_M)], only) == [M]


def test_references_alone_doom_nothing() -> None:
    assert unkept_pairs([kept_pair(A[1]), kept_pair(A[1]), kept_pair(B[1])]) == []
