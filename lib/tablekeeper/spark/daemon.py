"""PySpark's worker daemon for the sessions tablekeeper starts (``spark.python.daemon.module``).

Two changes to the stock daemon, made before it forks the workers so every worker has them:

- **Zip archives on the path are read again only when they change.** Before each task a worker
  invalidates the import caches, and on Python 3.11 every zip importer then re-reads its archive's
  directory: Spark puts ``pyspark.zip`` and its core jar (thousands of entries) on the path, with
  one importer per imported package. That cost about 0.15 s per task here, more than most of a
  maintenance job's tasks do, paid by each of thousands of tasks. Python 3.12 made the re-read
  lazy; this keeps it eager but skips it while the archive's inode, size and mtime hold, so a
  zip Spark ships to the workers later is still seen.
- **No traceback for a worker whose task Spark killed** (unless
  ``TABLEKEEPER_WORKER_TRACEBACKS`` is set, as sessions started at ``--log-level DEBUG`` do).
  When a job fails, Spark kills the other running tasks of its stage; their workers find the
  socket closed (EOFError) and the stock daemon prints that as a traceback. In local mode it
  lands on the job's terminal under the one-line reason that already says what failed. Every
  other failure is printed as before; a task's own error reaches the driver through its socket.
"""

from __future__ import annotations

import os
import sys
import traceback
import zipimport
from pathlib import Path
from typing import Any

TRACEBACKS = "TABLEKEEPER_WORKER_TRACEBACKS"

_CLOSED = (EOFError, BrokenPipeError, ConnectionResetError)
_print_exc = traceback.print_exc
_reread = zipimport.zipimporter.invalidate_caches


def _print_unless_closed(*args: Any, **kwargs: Any) -> None:
    error = sys.exc_info()[1]
    if isinstance(error, _CLOSED):
        return
    _print_exc(*args, **kwargs)


def _signature(archive: str) -> tuple[int, int, int] | None:
    try:
        found = Path(archive).stat()
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def _reread_when_changed(importer: zipimport.zipimporter) -> None:
    now = _signature(importer.archive)
    if now is None or importer.__dict__.get("_read_as") != now:
        _reread(importer)
        importer.__dict__["_read_as"] = now


def install() -> None:
    """Patch this process (the daemon, before it forks) as the module docstring says."""
    setattr(zipimport.zipimporter, "invalidate_caches", _reread_when_changed)  # noqa: B010 (typeshed types it oddly)
    for importer in list(sys.path_importer_cache.values()):
        if isinstance(importer, zipimport.zipimporter):
            importer.__dict__["_read_as"] = _signature(importer.archive)
    if not os.environ.get(TRACEBACKS):
        traceback.print_exc = _print_unless_closed


if __name__ == "__main__":
    from pyspark import daemon

    install()
    daemon.manager()  # type: ignore[no-untyped-call]
