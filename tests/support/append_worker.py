"""A separate writer process: N appends of one small Parquet file each, through tablekeeper.

Usage: python -m tests.support.append_worker <catalog yaml> <catalog name> <table> <worker> <count>
Prints one JSON line: the data files it committed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.commit import Committer, SnapshotChange
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


if __name__ == "__main__":
    main()
