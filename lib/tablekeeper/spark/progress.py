"""Spark's share of a run's progress: the running stages' tasks done of total.

A thread polls the status tracker of the session the run uses (whichever that is: a local one
started late, spark-submit's) and hands the figure to ``tablekeeper.progress``, so every job on
Spark shows its tasks without saying anything. It runs only while a run reports progress, and
never imports pyspark itself: no session, nothing polled.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tablekeeper import progress

POLL_S = 1.0


def _tasks() -> str:
    module = sys.modules.get("pyspark")
    if module is None:
        return ""
    sc = module.SparkContext._active_spark_context
    if sc is None:
        return ""
    tracker = sc.statusTracker()
    done = total = stages = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is None:
            continue
        stages += 1
        done += info.numCompletedTasks
        total += info.numTasks
    if not stages:
        return ""
    return f"Spark tasks {done:,}/{total:,}" + (f" in {stages} stages" if stages > 1 else "")


@contextmanager
def spark_tasks() -> Iterator[None]:
    """Poll Spark's tasks while the block runs (when the run reports progress at all)."""
    if progress.active() is None:
        yield
        return
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            try:
                progress.set_detail(_tasks())
            except Exception:  # a session stopping under us: progress is never worth a failure
                progress.set_detail("")

    thread = threading.Thread(target=poll, name="tablekeeper-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=POLL_S * 2)
