"""The wall clock jobs judge retention by (``--older-than``, young-file windows, Delta's vacuum
horizon). One place, so a test can move time instead of ageing files or sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class _Source:
    """Where the time comes from (a holder, so injecting needs no ``global``)."""

    read: Callable[[], float] = time.time


def now_ms() -> int:
    """Milliseconds since the epoch, from the injected source (``time.time`` unless a test set one)."""
    return int(_Source.read() * 1000)


@contextmanager
def injected(source: Callable[[], float]) -> Iterator[None]:
    """Within the block, ``now_ms`` reads ``source`` (seconds since the epoch). Tests only."""
    previous = _Source.read
    _Source.read = source
    try:
        yield
    finally:
        _Source.read = previous
