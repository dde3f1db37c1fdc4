"""The compatibility tier's spark-submit driver: the jobs' own scripts (jobs/<job>.py), run one
after another in one application, each exactly as spark-submit would run it alone (its argv, its
``__main__``, its exit), so one cluster submit proves every job on the line for the price of one
driver and one executor start.

Arguments: the jobs/ directory, then a JSON list of ``[script, [args...]]``. Prints one JSON line:
``status`` (``ok`` when every job exited 0 with an ``ok`` result) and, per job, its exit code, its
result (the last line it printed) and when it ran (epoch ms), by which the test attributes the
executors' tasks of the application's event log to the job. It imports nothing of the tests and
nothing of tablekeeper: the jobs import tablekeeper from the submitted zip.
"""

import contextlib
import io
import json
import runpy
import sys
import time
import traceback
from pathlib import Path


def run_script(script: Path, args: list[str]) -> tuple[int, str]:
    """One job script as ``python <script> <args>`` runs it: its exit code and its stdout."""
    out = io.StringIO()
    sys.argv = [str(script), *args]
    code: int
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except Exception:  # a job script must end in SystemExit; anything else is reported as such
        traceback.print_exc()
        code = 1
    return code, out.getvalue()


def main() -> int:
    jobs_dir, plan = Path(sys.argv[1]), json.loads(sys.argv[2])
    runs = []
    for script, args in plan:
        start = int(time.time() * 1000)
        code, stdout = run_script(jobs_dir / script, args)
        lines = [line for line in stdout.splitlines() if line.strip()]
        result = json.loads(lines[-1]) if lines else None
        end = int(time.time() * 1000)
        runs.append({"script": script, "args": args, "code": code, "result": result, "ms": [start, end]})
    ok = all(r["code"] == 0 and r["result"] is not None and r["result"]["status"] == "ok" for r in runs)
    print(json.dumps({"status": "ok" if ok else "failed", "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
