"""The helper thread that decodes checkpoint slices ahead of the replay."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tablekeeper.delta.replay import prefetched


def _helpers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "tablekeeper-prefetch")


def test_items_arrive_in_order_and_the_helper_ends() -> None:
    assert list(prefetched(iter(range(1000)), depth=2)) == list(range(1000))
    assert _helpers() == 0


def test_a_failure_of_the_source_is_raised_to_the_consumer() -> None:
    def source() -> Iterator[int]:
        yield 1
        raise OSError("disk gone")

    seen = []
    with pytest.raises(OSError, match="disk gone"):
        for item in prefetched(source(), depth=1):
            seen.append(item)
    assert seen == [1]
    assert _helpers() == 0


def test_a_consumer_that_stops_early_stops_and_joins_the_helper() -> None:
    produced = []

    def source() -> Iterator[int]:
        for i in range(10_000):
            produced.append(i)
            yield i

    items = prefetched(source(), depth=1)
    assert next(items) == 0
    items.close()
    assert _helpers() == 0
    assert len(produced) < 10  # it stopped instead of draining the source
