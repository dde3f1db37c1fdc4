"""How driver threads and Python tasks run.

``Background``: Spark jobs from a second driver thread, so two phases can share the executors. A
job whose tasks leave cores idle (one large manifest, a listing on the driver) runs faster next
to another than before or after it. The thread inherits the caller's local properties (job
group, scheduler pool) and sets its own job description.

``no_cycle_collection`` (``cycles``): for task loops that allocate millions of
short-lived, acyclic objects while holding many.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from pyspark.sql import SparkSession

from tablekeeper.cycles import no_cycle_collection
from tablekeeper.spark.compat import inheritable_thread

__all__ = ["Background", "no_cycle_collection"]

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

        self._thread = inheritable_thread(run, spark)
        self._thread.start()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
