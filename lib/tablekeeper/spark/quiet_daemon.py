"""PySpark's worker daemon, without the traceback of a worker whose task Spark killed.

When a job fails, Spark kills the other running tasks of its stage; their workers find the socket
closed (EOFError) and the stock daemon prints that as a traceback. In local mode it lands on the
job's terminal under the one-line reason that already says what failed, so sessions tablekeeper
starts use this daemon (``spark.python.daemon.module``) below ``--log-level DEBUG``. Every other
failure is printed as before; a task's own error reaches the driver through its socket anyway.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

_CLOSED = (EOFError, BrokenPipeError, ConnectionResetError)
_print_exc = traceback.print_exc


def _print_unless_closed(*args: Any, **kwargs: Any) -> None:
    error = sys.exc_info()[1]
    if isinstance(error, _CLOSED):
        return
    _print_exc(*args, **kwargs)


if __name__ == "__main__":
    from pyspark import daemon

    traceback.print_exc = _print_unless_closed
    daemon.manager()  # type: ignore[no-untyped-call]
