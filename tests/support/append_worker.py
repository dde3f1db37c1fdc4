"""A separate writer process: N appends of one small Parquet file each, through tablekeeper.

Usage: python -m tests.support.append_worker <catalog yaml> <catalog name> <table> <worker> <count>
Prints one JSON line: the data files it committed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.faults import KILL_ENV
from tablekeeper.io.storage import configure_storage
from tests.support.iceberg_writer import write_rows


def main() -> None:
    conf_path, catalog_name, table, worker, count = sys.argv[1:6]
    conf = parse_catalogs(Path(conf_path).read_text(), Path(conf_path).parent)
    configure_storage(conf.get(catalog_name).storage)  # its data files go where the table lives
    catalog = catalog_for(conf.get(catalog_name))
    committed = []
    attempts = 0
    for i in range(int(count)):
        meta = catalog.load_table(table).metadata
        files = write_rows(meta, [{"id": int(worker) * 1000 + i, "writer": f"tk{worker}"}])
        result = Committer(catalog, table).commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
        attempts += result.attempts
        committed.extend(f.file_path for f in files)
    print(json.dumps({"files": committed, "attempts": attempts}))


def run_worker(
    conf: Path,
    catalog_name: str,
    table: str,
    worker: int,
    count: int,
    kill_at: str | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """This worker as a process of its own, to its end, or SIGKILLed at ``kill_at`` (a kill point,
    e.g. ``commit.swapped@2``): it must die there exactly when one is named. ``env`` adds to the
    caller's environment (a store's or catalog's credentials)."""
    repo = Path(__file__).resolve().parents[2]
    full = {
        **os.environ,
        **(env or {}),
        # The repository first; what the runner's path holds after it (a checkout's lib) stays.
        "PYTHONPATH": os.pathsep.join(filter(None, (str(repo), os.environ.get("PYTHONPATH")))),
    }
    full.pop(KILL_ENV, None)
    if kill_at:
        full[KILL_ENV] = kill_at
    args = [str(conf), catalog_name, table, str(worker), str(count)]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.append_worker", *args],
        cwd=repo,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,  # it leads its group: the SIGKILL takes nothing else
        check=False,
    )
    assert (proc.returncode == -signal.SIGKILL) == bool(kill_at), proc.stderr[-2000:]


if __name__ == "__main__":
    main()
