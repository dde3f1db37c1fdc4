"""The ``tablekeeper`` command: argv in, one result out, a documented exit code.

Every failure ends with a one-line reason as the last line of stderr; tracebacks go to the debug
log only (``--log-level DEBUG``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tablekeeper import __version__
from tablekeeper.errors import ExitCode, TablekeeperError, exit_code

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tablekeeper.catalog import Catalog, LoadedTable
    from tablekeeper.catalog.config import CatalogsConfig
    from tablekeeper.jobs.result import JobResult

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse prints usage and exits 2 itself; keep that code but make the last line the reason."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"tablekeeper: {message}: see '{self.prog} --help'\n")
        raise SystemExit(ExitCode.USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tablekeeper", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tablekeeper {__version__}")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging on stderr (default WARNING)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    doctor = sub.add_parser("doctor", help="show runtime versions and jar paths; fix what is missing")
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.add_argument(
        "--conf-file", help="catalog definitions to show, secrets masked; default conf/catalogs.yaml"
    )
    inspect = sub.add_parser("inspect", help="print a table's metadata tables as JSON")
    _table_options(inspect)
    inspect.add_argument("--snapshot", type=int, help="snapshot id (default: current)")
    inspect.add_argument(
        "--what",
        default="all",
        choices=["metadata", "snapshots", "refs", "manifests", "files", "all"],
        help="which metadata table (default all)",
    )
    inspect.add_argument(
        "--format",
        default="auto",
        choices=["auto", "iceberg", "delta"],
        help="table format (auto: delta when the path holds a _delta_log)",
    )
    inspect.add_argument("--version", dest="delta_version", type=int, help="Delta: time travel to a version")
    inspect.add_argument("--timestamp-ms", type=int, help="Delta: time travel to a commit time (epoch ms)")
    inspect.add_argument("--json", action="store_true", help="print JSON (the only format; kept for scripts)")
    convert = sub.add_parser("convert-delta", help="convert a Delta table to Iceberg by replaying its log")
    convert.add_argument("--source", required=True, help="Delta table path or URI")
    convert.add_argument("--target", required=True, help="<namespace>.<table> in the Iceberg catalog")
    convert.add_argument("--catalog", help="catalog name from the catalog file (default: its default)")
    convert.add_argument("--conf-file", help="catalog definitions (YAML); default conf/catalogs.yaml")
    convert.add_argument("--warehouse", help="local warehouse for ${warehouse} in the catalog file")
    convert.add_argument("--mode", default="full", choices=["full", "incremental"])
    convert.add_argument("--history", default="latest", choices=["latest", "all"])
    convert.add_argument("--format-version", type=int, default=2, choices=[2, 3])
    convert.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "driver", "spark"],
        help="who writes manifests (auto: the executors of a spark-submit session for large tables)",
    )
    convert.add_argument(
        "--verify",
        nargs="?",
        const="metadata",
        default="off",
        choices=["off", "metadata", "rows"],
        help="check every converted version before publishing: live rows per partition from both "
        "sides' metadata (--verify or --verify metadata), also counted through Spark (rows)",
    )
    _job_options(convert)
    expire = sub.add_parser(
        "expire-snapshots", help="drop old snapshots, then delete the files only they reached"
    )
    _table_options(expire)
    expire.add_argument(
        "--older-than",
        help="expire snapshots older than this: ISO-8601 time (UTC unless zoned), epoch ms, or a "
        "duration like 5d (default: history.expire.max-snapshot-age-ms, else 5 days)",
    )
    expire.add_argument(
        "--retain-last",
        type=_positive,
        help="keep at least this many ancestors of each branch "
        "(default: history.expire.min-snapshots-to-keep, else 1)",
    )
    expire.add_argument(
        "--snapshot-ids", type=_int_list, default=(), help="also expire these ids (comma-separated)"
    )
    expire.add_argument(
        "--clean-expired-metadata",
        action="store_true",
        help="also remove partition specs and schemas no retained snapshot uses",
    )
    expire.add_argument(
        "--metadata-only",
        action="store_true",
        help="delete only the table's own manifests, lists and statistics, never a data or delete "
        "file (for gc.enabled=false tables, e.g. a converted Delta table)",
    )
    expire.add_argument(
        "--max-concurrent-deletes", type=_positive, help="delete tasks at once (default: one per core)"
    )
    expire.add_argument(
        "--file-list", help="dry run: write every file it would delete here instead of the JSON"
    )
    _engine_option(expire)
    _job_options(expire)
    orphans = sub.add_parser(
        "remove-orphans", help="delete files under a table location no metadata references"
    )
    _table_options(orphans)
    orphans.add_argument(
        "--older-than",
        help="only files older than this: ISO-8601 time, epoch ms or a duration (default 3d, Delta: "
        "delta.deletedFileRetentionDuration; under 24h needs --force-short-retention)",
    )
    orphans.add_argument(
        "--location", help="scan this directory inside the table location (default: all of it)"
    )
    orphans.add_argument("--equal-schemes", default="s3a=s3,s3n=s3", help="schemes that name one store")
    orphans.add_argument("--equal-authorities", help="authorities that name one store (a=b,c=d)")
    orphans.add_argument("--prefix-mismatch", default="error", choices=["error", "ignore", "delete"])
    orphans.add_argument("--force-short-retention", action="store_true", help="allow --older-than under 24h")
    orphans.add_argument(
        "--max-concurrent-deletes", type=_positive, help="delete tasks at once (default: one per core)"
    )
    orphans.add_argument(
        "--file-list", help="write every orphan location here (the JSON keeps a count and sample)"
    )
    _engine_option(orphans)
    _job_options(orphans)
    _compact_parser(sub)
    backfill = sub.add_parser(
        "backfill-row-lineage", help="upgrade to Iceberg v3 and give existing rows row ids (metadata only)"
    )
    _table_options(backfill)
    backfill.add_argument(
        "--branch",
        action="append",
        default=[],
        help="also assign ids on this branch (repeatable; main always)",
    )
    _job_options(backfill)
    return parser


def _compact_parser(sub: Any) -> None:
    compact = sub.add_parser(
        "compact", help="rewrite small data files into target-size files, deletes applied, lineage kept"
    )
    _table_options(compact)
    compact.add_argument("--strategy", default="binpack", choices=["binpack", "sort"])
    compact.add_argument(
        "--sort-order",
        help='sort strategy: "c1 ASC NULLS FIRST, c2 DESC" (default: the table\'s order); '
        "Delta: zorder(c1,c2)",
    )
    compact.add_argument(
        "--where", help="Spark SQL predicate: only files holding matching rows (Delta: partition columns)"
    )
    compact.add_argument(
        "--target-file-size", help="e.g. 512MB (default: write.target-file-size-bytes, else 512MB)"
    )
    compact.add_argument("--min-file-size", help="files below are rewritten (default 75%% of the target)")
    compact.add_argument("--max-file-size", help="files above are rewritten (default 180%% of the target)")
    compact.add_argument("--min-input-files", type=_positive, default=5, help="smallest group rewritten (5)")
    compact.add_argument(
        "--delete-file-threshold", type=int, help="rewrite files read with at least this many delete files"
    )
    compact.add_argument("--rewrite-all", action="store_true", help="rewrite every file, whatever its size")
    compact.add_argument(
        "--partial-progress", action="store_true", help="commit batches of groups as they finish"
    )
    compact.add_argument("--max-commits", type=_positive, default=10, help="with --partial-progress (10)")
    compact.add_argument(
        "--max-concurrent-groups", type=_positive, default=5, help="groups rewritten at once (5)"
    )
    compact.add_argument("--output-spec-id", type=int, help="partition spec of the new files (current)")
    compact.add_argument(
        "--writer",
        default="auto",
        choices=["auto", "spark"],
        help="auto: Arrow on the executors where no shuffle is needed; spark: always Spark SQL (auto)",
    )
    _job_options(compact)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of snapshot ids") from None


def _engine_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "driver", "spark"],
        help="driver: this process, no Spark; spark: the executors; auto: the driver for tables "
        "reaching up to 200,000 files, else Spark (auto)",
    )


def _job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="plan and report; change nothing")
    parser.add_argument("--result-file", help="also write the JSON result to this file")


def _table_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", required=True, help="<namespace>.<table> in a catalog, or a table path")
    parser.add_argument("--catalog", help="catalog name from the catalog file (default: its default)")
    parser.add_argument("--conf-file", help="catalog definitions (YAML); default conf/catalogs.yaml")
    parser.add_argument("--warehouse", help="local warehouse for ${warehouse} in the catalog file")


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "doctor":
        from pathlib import Path

        from tablekeeper.cli import doctor

        return doctor.run(as_json=args.json, conf_file=Path(args.conf_file) if args.conf_file else None)
    if args.command == "inspect":
        return _inspect(args)
    if args.command == "convert-delta":
        return _convert_delta(args)
    if args.command == "expire-snapshots":
        return _expire_snapshots(args)
    if args.command == "remove-orphans":
        return _remove_orphans(args)
    if args.command == "compact":
        return _compact(args)
    if args.command == "backfill-row-lineage":
        return _backfill(args)
    raise AssertionError(f"unhandled command {args.command}")


def _load_table(args: argparse.Namespace) -> LoadedTable:
    from tablekeeper.catalog import resolve_table

    catalog, identifier = resolve_table(args.table, args.catalog, _catalogs(args))
    return catalog.require(identifier)


def _is_delta(args: argparse.Namespace) -> bool:
    if args.format != "auto":
        return bool(args.format == "delta")
    from tablekeeper.catalog import looks_like_path
    from tablekeeper.io import FileIO

    if not looks_like_path(args.table):
        return False
    root = args.table.rstrip("/")
    io = FileIO.for_location(root)
    return io.exists(f"{root}/_delta_log") or any(True for _ in io.list(f"{root}/_delta_log"))


def _inspect(args: argparse.Namespace) -> int:
    if _is_delta(args):
        from tablekeeper.tables.delta import load_snapshot
        from tablekeeper.tables.inspect_delta import inspect_delta

        snapshot = load_snapshot(args.table, version=args.delta_version, timestamp_ms=args.timestamp_ms)
        print(json.dumps(inspect_delta(snapshot, with_files=args.what in ("files", "all")), default=str))
        return 0
    from tablekeeper.tables.inspect_iceberg import inspect_table

    result = inspect_table(_load_table(args), args.what, args.snapshot)
    print(json.dumps(result, default=str))
    return 0


def _catalogs(args: argparse.Namespace) -> CatalogsConfig:
    from pathlib import Path

    from tablekeeper.catalog.config import load_catalogs
    from tablekeeper.io.storage import configure_storage

    catalogs = load_catalogs(
        Path(args.conf_file) if args.conf_file else None,
        Path(args.warehouse).resolve() if args.warehouse else None,
    )
    # The job's catalog also says how to reach storage outside it (a Delta source, a path table).
    name = getattr(args, "catalog", None) or catalogs.default
    if name in catalogs.catalogs or name in catalogs.unusable:
        configure_storage(catalogs.get(name).storage)
    return catalogs


def _emit(result: JobResult, result_file: str | None) -> None:
    from tablekeeper.redact import redact

    line = redact(result.to_json())
    print(line)
    if result_file:
        from pathlib import Path

        Path(result_file).write_text(line + "\n", encoding="utf-8")


def _run_job(args: argparse.Namespace, job: str, table: str, run: Callable[[], JobResult]) -> int:
    """Run a job; whatever happens, stdout's last line is its JSON result."""
    from dataclasses import replace

    from tablekeeper.jobs.result import JobClock

    clock = JobClock()
    try:
        result = run()
    except TablekeeperError as err:
        failed = clock.result(job, table, dry_run=bool(args.dry_run), metrics={})
        if err.exit_code == ExitCode.REFUSED:
            failed = replace(failed, status="refused", error=err.message)
        else:
            failed = replace(failed, status="failed", error=err.message)
        _emit(failed, args.result_file)
        raise
    _emit(result, args.result_file)
    return 0


def _session(engine: str, catalogs: CatalogsConfig) -> SparkSession | None:
    """spark: start or reuse a session; auto: only an active one or the one spark-submit prepared."""
    if engine == "spark":
        return _spark_session(catalogs)
    if engine == "auto":
        from tablekeeper.spark.session import submitted_session

        return submitted_session()
    return None


def _convert_delta(args: argparse.Namespace) -> int:
    from tablekeeper.catalog import catalog_for
    from tablekeeper.jobs.convert_delta import ConvertOptions, run_convert

    def run() -> JobResult:
        options = ConvertOptions(
            source=args.source,
            target=args.target,
            mode=args.mode,
            history=args.history,
            format_version=args.format_version,
            dry_run=args.dry_run,
            engine=args.engine,
            verify=args.verify,
        )
        catalogs = _catalogs(args)
        counting = args.verify == "rows" and not args.dry_run
        spark = _spark_session(catalogs) if counting else _session(args.engine, catalogs)
        return run_convert(options, catalog_for(catalogs.get(args.catalog)), spark)

    return _run_job(args, "convert-delta", args.target, run)


def _delta_path(table: str) -> str | None:
    """The table's root when ``--table`` is the path of a Delta table."""
    from tablekeeper.catalog import looks_like_path
    from tablekeeper.jobs.delta_maintenance import is_delta_table

    if looks_like_path(table) and is_delta_table(table):
        return table.rstrip("/")
    return None


def _spark_session(catalogs: CatalogsConfig) -> SparkSession:
    """The jobs that always run on Spark: the spark-submit session, or a local one."""
    from tablekeeper.spark import get_spark

    return get_spark("tablekeeper", catalogs=catalogs)


def _delta_session(args: argparse.Namespace) -> SparkSession:
    return _spark_session(_catalogs(args))


def _spark_table(args: argparse.Namespace) -> tuple[Catalog, str, SparkSession]:
    """``--table``'s catalog and identifier, and the Spark session the job runs on."""
    from tablekeeper.catalog import resolve_table

    catalogs = _catalogs(args)
    catalog, identifier = resolve_table(args.table, args.catalog, catalogs)
    return catalog, identifier, _spark_session(catalogs)


def _lazy_spark_table(args: argparse.Namespace) -> tuple[Catalog, str, Callable[[], SparkSession]]:
    """Like ``_spark_table``, but Spark starts only when the job asks for it (a failure decided
    from metadata, or a table the driver handles alone, never starts a JVM)."""
    from tablekeeper.catalog import resolve_table

    catalogs = _catalogs(args)
    catalog, identifier = resolve_table(args.table, args.catalog, catalogs)
    return catalog, identifier, lambda: _spark_session(catalogs)


def _expire_snapshots(args: argparse.Namespace) -> int:
    from tablekeeper.jobs.expire_snapshots import ExpireOptions, run_expire

    def run() -> JobResult:
        delta = _delta_path(args.table)
        if delta is not None:
            from tablekeeper.jobs.delta_maintenance import run_log_cleanup

            return run_log_cleanup(delta, _delta_session(args), dry_run=args.dry_run)
        options = ExpireOptions(
            table=args.table,
            older_than=args.older_than,
            retain_last=args.retain_last,
            snapshot_ids=tuple(args.snapshot_ids),
            clean_expired_metadata=args.clean_expired_metadata,
            max_concurrent_deletes=args.max_concurrent_deletes,
            dry_run=args.dry_run,
            file_list=args.file_list,
            engine=args.engine,
            metadata_only=args.metadata_only,
        )
        return run_expire(options, *_lazy_spark_table(args))

    return _run_job(args, "expire-snapshots", args.table, run)


def _remove_orphans(args: argparse.Namespace) -> int:
    from tablekeeper.jobs.remove_orphans import (
        DEFAULT_OLDER_THAN,
        OrphanOptions,
        parse_equivalences,
        run_orphans,
    )

    def run() -> JobResult:
        delta = _delta_path(args.table)
        if delta is not None:
            from tablekeeper.jobs.delta_maintenance import run_vacuum

            return run_vacuum(
                delta,
                _delta_session(args),
                older_than=args.older_than,
                force_short_retention=args.force_short_retention,
                dry_run=args.dry_run,
                file_list=args.file_list,
            )
        options = OrphanOptions(
            table=args.table,
            older_than=args.older_than or DEFAULT_OLDER_THAN,
            location=args.location,
            equal_schemes=parse_equivalences(args.equal_schemes, "--equal-schemes"),
            equal_authorities=parse_equivalences(args.equal_authorities, "--equal-authorities"),
            prefix_mismatch=args.prefix_mismatch,
            force_short_retention=args.force_short_retention,
            max_concurrent_deletes=args.max_concurrent_deletes,
            dry_run=args.dry_run,
            file_list=args.file_list,
            engine=args.engine,
        )
        return run_orphans(options, *_lazy_spark_table(args))

    return _run_job(args, "remove-orphans", args.table, run)


def _compact(args: argparse.Namespace) -> int:
    from tablekeeper.jobs.compact import CompactOptions, run_compact

    def run() -> JobResult:
        delta = _delta_path(args.table)
        if delta is not None:
            from tablekeeper.jobs.delta_maintenance import run_optimize

            return run_optimize(
                delta,
                _delta_session(args),
                sort_order=args.sort_order,
                where=args.where,
                dry_run=args.dry_run,
            )
        options = CompactOptions(
            table=args.table,
            strategy=args.strategy,
            sort_order=args.sort_order,
            where=args.where,
            target_file_size=args.target_file_size,
            min_file_size=args.min_file_size,
            max_file_size=args.max_file_size,
            min_input_files=args.min_input_files,
            delete_file_threshold=args.delete_file_threshold,
            rewrite_all=args.rewrite_all,
            partial_progress=args.partial_progress,
            max_commits=args.max_commits,
            max_concurrent_groups=args.max_concurrent_groups,
            output_spec_id=args.output_spec_id,
            dry_run=args.dry_run,
            writer=args.writer,
        )
        return run_compact(options, *_lazy_spark_table(args))

    return _run_job(args, "compact", args.table, run)


def _backfill(args: argparse.Namespace) -> int:
    from tablekeeper.catalog import resolve_table
    from tablekeeper.jobs.backfill_row_lineage import BackfillOptions, run_backfill

    def run() -> JobResult:
        catalog, identifier = resolve_table(args.table, args.catalog, _catalogs(args))
        options = BackfillOptions(table=args.table, branches=tuple(args.branch), dry_run=args.dry_run)
        return run_backfill(options, catalog, identifier)

    return _run_job(args, "backfill-row-lineage", args.table, run)


def main(argv: Sequence[str] | None = None) -> int:
    from tablekeeper.redact import install_log_redaction, redact

    args = build_parser().parse_args(argv)
    install_log_redaction()
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return _dispatch(args)
    except TablekeeperError as err:
        log.debug("failed", exc_info=True)
        sys.stderr.write(f"tablekeeper: {redact(err.message)}\n")
        return int(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("tablekeeper: interrupted\n")
        return int(ExitCode.UNEXPECTED)
    except Exception as err:  # the last line must still be one readable reason
        log.debug("unexpected failure", exc_info=True)
        reason = redact(" ".join(str(err).split())) or err.__class__.__name__
        sys.stderr.write(
            f"tablekeeper: unexpected {err.__class__.__name__}: {reason[:300]} "
            "(rerun with --log-level DEBUG for the trace)\n"
        )
        return int(exit_code(err))


def entrypoint() -> None:
    sys.exit(main())
