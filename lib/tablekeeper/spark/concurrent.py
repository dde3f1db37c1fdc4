"""How driver threads and Python tasks run.

``Background``: Spark jobs from a second driver thread, so two phases can share the executors. A
job whose tasks leave cores idle (one large manifest, a listing on the driver) runs faster next
to another than before or after it. The thread inherits the caller's local properties (job
group, scheduler pool) and sets its own job description.

``no_cycle_collection``: for task loops that allocate millions of short-lived, acyclic objects
while holding many (a manifest's entries, a listing): the cycle collector would rescan the
held ones over and over for nothing (a fifth to a third of such a task's time).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from pyspark import InheritableThread
from pyspark.sql import SparkSession

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` running in a driver thread; ``result()`` waits and re-raises its error."""

    def __init__(self, spark: SparkSession, description: str, fn: Callable[[], T]) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None

        def run() -> None:
            spark.sparkContext.setJobDescription(description)
            try:
                self._value = fn()
            except BaseException as err:  # handed to the waiting thread, which decides
                self._error = err

        self._thread = InheritableThread(target=run, session=spark, daemon=True)
        self._thread.start()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
