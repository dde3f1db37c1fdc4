"""remove-orphans from an S3 Inventory report at 10M, 100M and 1B inventory rows
(``make bench-scale`` runs it after bench.scale; alone: ``python -m bench.scale_inventory``).

A bucket holds one table (``db.t``, a sql catalog; 20 appends) and 1,000 orphans under it, all
real objects in an S3 server on loopback (S3Proxy keeping objects as files under
``bench/out/scale_inventory/``). Its inventory report (S3 Inventory's layout: Parquet data files of
10M rows, ``manifest.json`` and ``manifest.checksum``) lists those objects and N synthetic rows of
other tables in the bucket, which need not exist as objects: a report of a big bucket is mostly
other tables' files. Before each run the orphans are planted again, and the run writes the
report's manifest anew once its session is up (a new creation time: a report delivered now),
with a cut-off of 1 s.

- ``tablekeeper-spark``: ``remove-orphans --inventory <manifest> --engine spark`` (each data file
  read by one task, filtered in Arrow; the orphans looked at again, then deleted);
- ``iceberg``: Iceberg's DeleteOrphanFiles Spark action with ``compareToFileList`` over the same
  data files read by Spark (``concat('s3://', bucket, '/', key)`` as ``file_path``,
  ``last_modified_date`` as ``last_modified``) -- what ``remove_orphan_files`` with
  ``file_list_view`` runs; the action, since the procedure refuses a cut-off under 24 hours.

Each run is its own process (a local[2] session, ``spark.driver.memory`` 2g) measured from
outside (bench.scale_child: the Python process's and the driver JVM's peak RSS). Each must delete
the 1,000 orphans. Goal: the driver's peak memory flat across the sizes, time linear. Prints a table,
writes ``bench/out/scale_inventory.json`` and ``bench/results/scale_remove_orphans_inventory.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
HOME = OUT / "scale_inventory"
RESULTS = REPO / "bench" / "results"
ENGINES = ("tablekeeper-spark", "iceberg")
SIZES = "10000000,100000000,1000000000"
QUICK = "1000000,3000000"
ROWS_PER_PART = 10_000_000
ORPHANS = 1000
APPENDS = 20
BUCKET, REPORTS = "lake", "lake-reports"
OLD_MS = 1_700_000_000_000  # the synthetic rows' last modification: long before any cut-off


def _catalogs(s3: Any) -> Any:
    from tablekeeper.catalog.config import parse_catalogs

    props = "".join(f"    {k}: '{v}'\n" for k, v in s3.properties().items())
    text = (
        f"default: lake\ncatalogs:\n  lake:\n    type: sql\n"
        f"    uri: sqlite:///{HOME}/catalog.db\n    warehouse: s3://{BUCKET}/wh\n{props}"
    )
    return parse_catalogs(text, HOME)


def _endpoint() -> Any:
    from tests.support.object_store import S3Endpoint

    return S3Endpoint(**json.loads((HOME / "endpoint.json").read_text()))


def build_table(s3: Any) -> None:
    """The table and its orphans, once (kept in the server's directory for later runs)."""
    from tests.support.iceberg_writer import appended_table
    from tests.unit.files.test_journal import SCHEMA

    from tablekeeper.catalog import catalog_for
    from tablekeeper.io.storage import configure_storage

    config = _catalogs(s3).get("lake")
    configure_storage(config.storage)
    s3.create_bucket(BUCKET)
    s3.create_bucket(REPORTS)
    appended_table(catalog_for(config), "db.t", SCHEMA, APPENDS)
    plant(s3)


def plant(s3: Any) -> None:
    """The orphans (again: each run deletes them)."""
    from concurrent.futures import ThreadPoolExecutor

    from tablekeeper.io import FileIO
    from tablekeeper.io.storage import configure_storage

    configure_storage(_catalogs(s3).get("lake").storage)
    fileio = FileIO.for_location(f"s3://{BUCKET}/wh")
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: fileio.write(_orphan(i), b"left by a failed writer"), range(ORPHANS)))


def _orphan(i: int) -> str:
    return f"s3://{BUCKET}/wh/db/t/data/lost-{i:05d}.parquet"


def build_report(s3: Any, rows: int) -> list[dict[str, Any]]:
    """The report's data files for ``rows`` synthetic rows (plus the bucket's real objects in the
    first), uploaded; returns the manifest's ``files`` entries."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tablekeeper.io import FileIO
    from tablekeeper.io.storage import configure_storage

    configure_storage(_catalogs(s3).get("lake").storage)
    fileio = FileIO.for_location(f"s3://{BUCKET}/wh")
    real = list(fileio.list(f"s3://{BUCKET}/wh"))
    entries = []
    parts = max(1, -(-rows // ROWS_PER_PART))
    for n in range(parts):
        lo, hi = n * ROWS_PER_PART, min(rows, (n + 1) * ROWS_PER_PART)
        n_rows = hi - lo
        ids = pa.array(np.arange(lo, hi, dtype=np.int64))
        table_of = pc.utf8_lpad(pc.cast(pc.divide(ids, 1_000_000), pa.string()), 5, "0")
        keys = pc.binary_join_element_wise(
            "wh/other/t", table_of, "/data/", pc.utf8_lpad(pc.cast(ids, pa.string()), 12, "0"), ".parquet", ""
        )
        batch = {
            "bucket": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n_rows, np.int32)), pa.array([BUCKET])
            ),
            "key": keys,
            "size": pa.array(np.full(n_rows, 4096, np.int64)),
            "last_modified_date": pa.array(np.full(n_rows, OLD_MS, np.int64)).cast(
                pa.timestamp("ms", tz="UTC")
            ),
        }
        table = pa.table(batch)
        if n == 0:
            extra = pa.table(
                {
                    "bucket": pa.array([BUCKET] * len(real)).dictionary_encode(),
                    "key": [r.location.split(f"s3://{BUCKET}/", 1)[1] for r in real],
                    "size": pa.array([r.size for r in real], pa.int64()),
                    "last_modified_date": pa.array([r.mtime_ms for r in real], pa.int64()).cast(
                        pa.timestamp("ms", tz="UTC")
                    ),
                }
            )
            table = pa.concat_tables([extra, table.cast(extra.schema)])
        sink = io.BytesIO()
        pq.write_table(
            table,
            sink,
            compression="zstd",
            use_dictionary=["bucket"],
            column_encoding={"key": "DELTA_BYTE_ARRAY"},
        )
        data = sink.getvalue()
        key = f"inventory/{BUCKET}/daily-{rows}/data/part-{n:05d}.parquet"
        FileIO.for_location(f"s3://{REPORTS}/{key}").write(f"s3://{REPORTS}/{key}", data)
        entries.append(
            {
                "key": key,
                "size": len(data),
                "MD5checksum": hashlib.md5(data, usedforsecurity=False).hexdigest(),
            }
        )
        print(f"  report of {rows:,}: part {n + 1}/{parts}", file=sys.stderr)
    return entries


def deliver(rows: int, entries: list[dict[str, Any]]) -> str:
    """The report's manifest, created now (a report delivered now); returns its location."""
    from tablekeeper.io import FileIO

    schema = (
        "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); "
        "optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); }"
    )
    body = json.dumps(
        {
            "sourceBucket": BUCKET,
            "destinationBucket": f"arn:aws:s3:::{REPORTS}",
            "version": "2016-11-30",
            "creationTimestamp": str(int(time.time() * 1000)),
            "fileFormat": "Parquet",
            "fileSchema": schema,
            "files": entries,
        }
    ).encode()
    base = f"s3://{REPORTS}/inventory/{BUCKET}/daily-{rows}/run"
    fileio = FileIO.for_location(base)
    fileio.write(f"{base}/manifest.json", body)
    fileio.write(f"{base}/manifest.checksum", hashlib.md5(body, usedforsecurity=False).hexdigest().encode())
    return f"{base}/manifest.json"


def run_engine(engine: str, size: int, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Inside the child: one engine removes the orphans (the parent planted them again)."""
    from tablekeeper.catalog import catalog_for
    from tablekeeper.io.storage import configure_storage
    from tablekeeper.spark.session import get_spark

    s3 = _endpoint()
    catalogs = _catalogs(s3)
    configure_storage(catalogs.get("lake").storage)
    started = time.perf_counter()
    spark = get_spark(
        "bench-scale-inventory",
        catalogs=catalogs,
        conf={"spark.master": "local[2]", "spark.driver.memory": "2g"},
    )
    setup = time.perf_counter() - started
    # A report delivered now; the orphans were planted before the session started, more than the
    # cut-off's 1 s ago.
    manifest = deliver(size, entries)
    t0 = time.perf_counter()
    if engine == "iceberg":
        paths = [f"s3a://{REPORTS}/{e['key']}" for e in entries]
        view = spark.read.parquet(*paths).selectExpr(
            "concat('s3://', bucket, '/', key) AS file_path", "last_modified_date AS last_modified"
        )
        # The action, not the procedure: the procedure refuses a cut-off under 24 hours.
        jvm = spark.sparkContext._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, "lake.db.t")
        actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
        action = actions.deleteOrphanFiles(table).olderThan(int(time.time() * 1000) - 1000)
        result = action.compareToFileList(view._jdf).execute()
        orphans = sum(1 for _ in result.orphanFileLocations())
    else:
        from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans

        options = RemoveOrphansOptions(
            "db.t", older_than="1s", force_short_retention=True, inventory=manifest, engine="spark"
        )
        metrics = run_orphans(options, catalog_for(catalogs.get("lake")), "db.t", spark).metrics
        orphans = int(metrics["deleted_files_count"])
    seconds = time.perf_counter() - t0
    from bench.scale_child import vm_hwm_mib

    jvm = spark.sparkContext._jvm
    # VmHWM, not ru_maxrss: the latter keeps the bench's own size from before the exec.
    python_peak = vm_hwm_mib(os.getpid()) or 0.0
    jvm_peak = vm_hwm_mib(int(jvm.java.lang.ProcessHandle.current().pid())) or 0.0
    return {
        "engine": engine,
        "seconds": round(seconds, 2),
        "setup_seconds": round(setup, 2),
        "orphans": orphans,
        "python_peak_mib": python_peak,
        "jvm_peak_mib": jvm_peak,
        "driver_peak_mib": round(python_peak + jvm_peak, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", help=f"inventory rows (default {SIZES})")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK}")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds a run may take")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, size = args.child[0], int(args.child[1])
        entries = json.loads((HOME / f"entries-{size}.json").read_text())
        print(json.dumps(run_engine(engine, size, entries)))
        return
    from tests.support.object_store import run_s3proxy

    from bench.scale_chart import draw
    from bench.scale_child import run_measured

    sizes = [int(s) for s in (QUICK if args.quick else args.sizes or SIZES).split(",")]
    engines = args.engines.split(",")
    (HOME / "objects").mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    with run_s3proxy(HOME / "server", basedir=HOME / "objects") as s3:
        (HOME / "endpoint.json").write_text(json.dumps(s3.__dict__))
        if not (HOME / "table.built").exists():
            build_table(s3)
            (HOME / "table.built").write_text("ok")
        for size in sizes:
            saved = HOME / f"entries-{size}.json"
            if not saved.exists():
                plant(s3)  # the report lists them: a run before may have deleted them
                t = time.perf_counter()
                saved.write_text(json.dumps(build_report(s3, size)))
                print(f"report of {size:,} rows made in {time.perf_counter() - t:.0f} s", file=sys.stderr)
            entries = json.loads(saved.read_text())
            runs: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
            for rep in range(args.repeat):
                for engine in engines:
                    plant(s3)
                    log = OUT / "scale_inventory_logs" / f"{engine}-{size}-{rep}.log"
                    run = run_measured([engine, str(size)], args.timeout, log, module="bench.scale_inventory")
                    if run.get("status") == "ok" and run.get("orphans") != ORPHANS:  # each deleted them all
                        run = {**run, "status": "error", "message": f"found {run.get('orphans')} orphans"}
                    runs[engine].append(run)
                    print(f"  {size:,} rows, {engine}: {run}", file=sys.stderr)
            entry = {"size": size, "results": {e: _median(r) for e, r in runs.items()}}
            results.append(entry)
    (OUT / "scale_inventory.json").write_text(json.dumps(results, indent=2))
    print(
        f"\nremove-orphans from an S3 Inventory report ({ROWS_PER_PART:,} rows a Parquet file), "
        f"{ORPHANS:,} orphans\n"
    )
    head = ("rows", "engine", "status", "seconds", "driver peak MiB", "Python", "JVM")
    print("{:>15} {:<18} {:<8} {:>9} {:>16} {:>8} {:>8}".format(*head))
    for entry in results:
        for engine, run in entry["results"].items():
            cells = [run.get(k, "-") for k in ("status", "seconds", "driver_peak_mib", "python_peak_mib")]
            print(
                f"{entry['size']:>15,} {engine:<18} {cells[0]!s:<8} {cells[1]!s:>9} {cells[2]!s:>16} "
                f"{cells[3]!s:>8} {run.get('jvm_peak_mib', '-')!s:>8}"
            )
    draw(
        "remove-orphans --inventory: an S3 Inventory report of N rows, 1,000 orphans deleted",
        "inventory rows",
        results,
        engines,
        RESULTS / "scale_remove_orphans_inventory.png",
    )
    print(f"wrote {OUT / 'scale_inventory.json'} and {RESULTS / 'scale_remove_orphans_inventory.png'}")


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return runs[-1]
    best = dict(ok[-1])
    for field in ("seconds", "driver_peak_mib", "python_peak_mib", "jvm_peak_mib"):
        values = [float(r[field]) for r in ok if r.get(field) is not None]
        if values:
            best[field] = round(statistics.median(values), 2)
    return best


if __name__ == "__main__":
    main()
