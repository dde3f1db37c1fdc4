"""A comparison bucket spills listed rows past its bound and classifies them as the in-memory
rule does: a location may hold far more files than its table references."""

from __future__ import annotations

import pytest

from tablekeeper.files.orphans import classify, listed_pair, reference_pair
from tablekeeper.spark import unreferenced


def _pairs() -> list[tuple[str, object]]:
    listed = [listed_pair((f"/t/data/f{i}.parquet", f"file:/t/data/f{i}.parquet", i)) for i in range(50)]
    listed += [listed_pair((f"s3://b/t/data/m{i}", f"s3://b/t/data/m{i}", i)) for i in range(5)]
    refs = [reference_pair(f"file:/t/data/f{i}.parquet") for i in range(0, 50, 3)]
    refs += [reference_pair(f"s3a://b/t/data/m{i}") for i in range(3)]
    mixed = listed + refs
    return mixed[::2] + mixed[1::2]  # references arrive among the listed rows


@pytest.mark.parametrize("bound", [1, 3, 7, 1_000])
def test_a_bucket_that_spills_finds_what_memory_finds(bound: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unreferenced, "LISTED_IN_MEMORY", bound)
    found = list(unreferenced.classify_bucket(_pairs()))
    assert sorted(found) == sorted(classify(_pairs()))
    statuses = [r[0] for r in found]
    assert statuses.count("orphan") == 50 - 17 + 2 and statuses.count("mismatch") == 3
