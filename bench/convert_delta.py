"""convert-delta against Iceberg's own Delta migration, and its scaling on large logs.

(a) ``real``: a Delta table of small real Parquet files (written here with pyarrow, stats in the
    log as delta-spark writes them), converted by tablekeeper (manifests written by the driver,
    and by Spark executors) and by Iceberg's ``iceberg-delta-lake`` SnapshotDeltaLakeTable action
    (Maven artifact pinned in conf/jars.txt, role "bench"), each into its own catalog, in its own
    process, in the same run.
(b) ``log``: synthetic logs of N live files (files absent: the stats are in the log) converted by
    tablekeeper alone, for the scaling curve; the goal at 1,000,000 files is 60 s and a driver
    peak under 2 GiB.

Timings exclude JVM start-up (reported as setup). Peak memory is the Python process's maximum
RSS; the JVM of the Spark engines is its own process and not included.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.child import run_child
from bench.delta_log_gen import PROTOCOL, SCHEMA_STRING

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
REAL_ENGINES = ("tablekeeper-driver", "tablekeeper-spark", "iceberg-delta-lake")
# The -verify engines run the same conversion with ``--verify`` (metadata), to show its cost.
LOG_ENGINES = (
    "tablekeeper-driver",
    "tablekeeper-spark",
    "tablekeeper-spark-verify",
)
TK_ENGINES = {
    "tablekeeper-driver": ("driver", "off"),
    "tablekeeper-driver-verify": ("driver", "metadata"),
    "tablekeeper-spark": ("spark", "off"),
    "tablekeeper-spark-verify": ("spark", "metadata"),
}


def write_real_table(root: Path, files: int, rows: int = 20) -> Path:
    """``files`` Parquet files of ``rows`` rows in 100 partitions, one commit adding them all."""
    marker = root / f".complete-{files}-{rows}"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    schema = pa.schema([("id", pa.int64()), ("value", pa.float64())])
    adds = []
    for i in range(files):
        part = i % 100
        rel = f"part={part}/part-{i:08d}-0b7e3a52-51f4-4f4e-8d3e-{i:012d}.c000.snappy.parquet"
        ids = pa.array(range(i * rows, (i + 1) * rows), pa.int64())
        table = pa.table({"id": ids, "value": pa.array([float(j % 97) for j in range(rows)])}, schema=schema)
        path = root / rel
        path.parent.mkdir(exist_ok=True)
        pq.write_table(table, path)
        stats = {
            "numRecords": rows,
            "minValues": {"id": i * rows, "value": 0.0},
            "maxValues": {"id": (i + 1) * rows - 1, "value": float(min(rows - 1, 96))},
            "nullCount": {"id": 0, "value": 0},
        }
        adds.append(
            {
                "add": {
                    "path": rel,
                    "partitionValues": {"part": str(part)},
                    "size": path.stat().st_size,
                    "modificationTime": 1_700_000_000_000,
                    "dataChange": True,
                    "stats": json.dumps(stats),
                }
            }
        )
    first = [
        {"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "CREATE TABLE"}},
        {"protocol": PROTOCOL},
        {
            "metaData": {
                "id": "00000000-0000-0000-0000-000000000002",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": SCHEMA_STRING,
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": 1_700_000_000_000,
            }
        },
    ]
    (log_dir / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in first) + "\n")
    commit = [{"commitInfo": {"timestamp": 1_700_000_000_001, "operation": "WRITE"}}, *adds]
    (log_dir / f"{1:020d}.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")
    marker.touch()
    return root


def _catalogs(work: Path):  # type: ignore[no-untyped-def]
    from tablekeeper.catalog.config import parse_catalogs

    work.mkdir(parents=True, exist_ok=True)
    text = (
        "default: b\ncatalogs:\n"
        "  b: {type: sql, uri: 'sqlite:///${warehouse}/catalog.db', warehouse: '${warehouse}/wh'}\n"
    )
    return parse_catalogs(text, work)


def _spark(catalogs, with_reference: bool, conf: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    from tablekeeper.settings import BENCH_ROLE, jar_specs, jars_dir
    from tablekeeper.spark.session import get_spark, local_jar_paths

    jars = [str(p) for p in local_jar_paths()]
    if with_reference:
        jars += [str(jars_dir() / s.file_name) for s in jar_specs(include_bench=True) if s.role == BENCH_ROLE]
    return get_spark("bench-convert", catalogs=catalogs, conf={"spark.jars": ",".join(jars), **(conf or {})})


def run_engine(engine: str, table: str, work: Path, conf: dict[str, str] | None = None) -> dict[str, object]:
    """Runs inside the child process: one conversion into a fresh catalog under ``work``; ``conf``
    adds to the session's settings."""
    shutil.rmtree(work, ignore_errors=True)
    catalogs = _catalogs(work)
    started = time.perf_counter()
    setup = 0.0
    target = "bench.converted"
    if engine in TK_ENGINES:
        from tablekeeper.catalog import catalog_for
        from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert

        mode, verify = TK_ENGINES[engine]
        spark = None
        if mode == "spark":
            spark = _spark(catalogs, with_reference=False, conf=conf)
            setup = time.perf_counter() - started
        options = ConvertDeltaOptions(
            source=table, target=target, engine=mode, format_version=2, verify=verify
        )
        result = run_convert(options, catalog_for(catalogs.get("b")), spark)
        files = int(result.metrics["data_files"])  # type: ignore[call-overload]
    elif engine == "iceberg-delta-lake":
        spark = _spark(catalogs, with_reference=True, conf=conf)
        jvm = spark.sparkContext._jvm
        catalog = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergCatalog(spark._jsparkSession, "b")
        spark.sql("CREATE NAMESPACE IF NOT EXISTS b.bench")
        ident = jvm.org.apache.iceberg.catalog.TableIdentifier.parse(target)
        setup = time.perf_counter() - started
        actions = jvm.org.apache.iceberg.delta.DeltaLakeToIcebergMigrationActionsProvider.defaultActions()
        action = getattr(actions.snapshotDeltaLakeTable(table), "as")(ident)
        result = (
            action.deltaLakeConfiguration(spark._jsc.hadoopConfiguration())
            .icebergCatalog(catalog)
            .tableLocation(str(work / "wh" / "bench" / "converted"))
            .execute()
        )
        files = int(result.snapshotDataFilesCount())
    else:
        raise SystemExit(f"unknown engine {engine}")
    total = time.perf_counter() - started
    return {
        "engine": engine,
        "seconds": round(total - setup, 3),
        "setup_seconds": round(setup, 3),
        "files": files,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _child(engine: str, table: Path, work: Path) -> dict[str, object]:
    return run_child("bench.convert_delta", engine, "--table", str(table), "--work", str(work))


def _print(title: str, results: list[dict[str, object]], baseline: str) -> None:
    base = next((r for r in results if r.get("engine") == baseline and "seconds" in r), None)
    print(f"\n{title}\n")
    vs = "speed-up vs " + baseline
    print(f"{'engine':<26} {'files':>10} {'convert s':>10} {vs:>26} {'setup s':>8} {'peak MiB':>9}")
    for r in results:
        if "error" in r:
            print(f"{r['engine']!s:<26} failed: {r['error']}")
            continue
        secs = float(r["seconds"])  # type: ignore[arg-type]
        ratio = f"{float(base['seconds']) / secs:.1f}x" if base and secs else "-"  # type: ignore[arg-type]
        print(
            f"{r['engine']!s:<26} {r['files']:>10,} {secs:>10.2f} {ratio:>26} "
            f"{float(r['setup_seconds']):>8.2f} {float(r['peak_rss_mib']):>9.0f}"  # type: ignore[arg-type]
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default="real,log", help="real, log or both (comma-separated)")
    parser.add_argument("--real-files", type=int, default=100_000)
    parser.add_argument("--log-files", default="10000,100000,1000000", help="sizes of the scaling curve")
    parser.add_argument("--engines", default=None, help="restrict engines (comma-separated)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.child, args.table, Path(args.work))))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = set(args.engines.split(",")) if args.engines else None
    report: dict[str, object] = {}
    cases = args.cases.split(",")
    if "real" in cases:
        t = time.perf_counter()
        table = write_real_table(OUT / f"delta_real_{args.real_files}", args.real_files)
        print(
            f"table of {args.real_files:,} Parquet files ready in {time.perf_counter() - t:.1f}s",
            file=sys.stderr,
        )
        engines = [e for e in REAL_ENGINES if wanted is None or e in wanted]
        results = [_child(e, table, OUT / f"work_{e}") for e in engines]
        _print(f"(a) {args.real_files:,} real Parquet files, one commit", results, "iceberg-delta-lake")
        report["real"] = {"files": args.real_files, "results": results}
    if "log" in cases:
        from bench.delta_log_gen import generate

        curve = []
        for n in (int(x) for x in args.log_files.split(",")):
            table = generate(OUT / f"delta_{n}", n, 10, 1000)
            engines = [e for e in LOG_ENGINES if wanted is None or e in wanted]
            results = [_child(e, table, OUT / f"work_{e}") for e in engines]
            _print(
                f"(b) synthetic log: {n:,} live files (checkpoint + 10 commits)",
                results,
                "tablekeeper-driver",
            )
            curve.append({"files": n, "results": results})
        report["log"] = curve
    out = OUT / f"convert_delta_{'_'.join(cases)}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
