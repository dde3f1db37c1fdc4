"""The ``tablekeeper`` command: argv in, one result out, a documented exit code.

Every failure ends with a one-line reason as the last line of stderr; tracebacks go to the debug
log only (``--log-level DEBUG``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from tablekeeper import __version__
from tablekeeper.errors import ExitCode, TablekeeperError, exit_code, task_error
from tablekeeper.jobs import JOBS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tablekeeper.catalog import LoadedTable
    from tablekeeper.catalog.config import CatalogsConfig
    from tablekeeper.jobs.common.context import JobModule
    from tablekeeper.jobs.common.result import JobResult

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse prints usage and exits 2 itself; keep that code but make the last line the reason."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"tablekeeper: {message}: see '{self.prog} --help'\n")
        raise SystemExit(ExitCode.USAGE)


def build_parser(command: str | None = None, *, given_only: bool = False) -> argparse.ArgumentParser:
    """The whole command line. Only ``command``'s job module adds its options (a job module brings
    pyspark and its planning code, a third of a second each); None: every job's. ``given_only``:
    no defaults, so a parse holds just the options given (see ``given_options``)."""
    from tablekeeper.jobs.common.context import add_ledger_arguments, add_table_arguments

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
    add_table_arguments(inspect)
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
    history = sub.add_parser("history", help="recent runs from the ledger of runs, newest first")
    history.add_argument("--table", help="only runs on this table (as the runs named it)")
    history.add_argument("--job", help="only runs of this job, e.g. compact")
    history.add_argument("--since", help="only runs started since: a duration back (7d, 12h) or an ISO time")
    history.add_argument(
        "--limit",
        type=_count,
        help="at most this many runs (default 20; 0: all; with --accuracy: all unless given)",
    )
    history.add_argument(
        "--accuracy",
        action="store_true",
        help="per job and table, health's predictions against what the runs did (bytes freed, "
        "files removed, duration)",
    )
    history.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (the default when stdout is not a terminal)",
    )
    add_ledger_arguments(history)
    history.add_argument("--conf-file", help="catalog definitions (YAML); default conf/catalogs.yaml")
    history.add_argument("--warehouse", help="local warehouse for ${warehouse} in the catalog file")
    for name, entry in JOBS.items():
        job = sub.add_parser(name, help=entry.help)
        if command is None or name == command:
            _job_module(entry.module).add_arguments(job)
            if given_only:
                for action in job._actions:
                    action.default = argparse.SUPPRESS
    return parser


def given_options(argv: Sequence[str]) -> frozenset[str]:
    """The dests of the job options ``argv`` gives explicitly (abbreviated, ``--opt=value`` or
    not), as argparse itself reads them: a default is never mistaken for a choice."""
    command = _command(argv) or ""
    args = build_parser(command, given_only=True).parse_args(argv)
    return frozenset(vars(args)) - {"command", "log_level"}


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def _job_module(path: str) -> JobModule:
    module: JobModule = importlib.import_module(path)
    return module


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``, so only its job module is imported to parse the rest."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--log-level")
    pre.add_argument("rest", nargs=argparse.REMAINDER)
    known, _ = pre.parse_known_args(argv)
    rest = [a for a in known.rest if not a.startswith("-")]
    return rest[0] if rest else None


def _dispatch(args: argparse.Namespace, given: frozenset[str]) -> int:
    if args.command == "doctor":
        from pathlib import Path

        from tablekeeper.cli import doctor

        return doctor.run(as_json=args.json, conf_file=Path(args.conf_file) if args.conf_file else None)
    if args.command == "inspect":
        return _inspect(args)
    if args.command == "history":
        from tablekeeper.cli import history

        return history.run(args, _catalog_file(args))
    if args.command in JOBS:
        return _run(args, given)
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


def _catalog_file(args: argparse.Namespace) -> CatalogsConfig:
    from pathlib import Path

    from tablekeeper.catalog.config import load_catalogs

    conf_file, warehouse = getattr(args, "conf_file", None), getattr(args, "warehouse", None)
    path = Path(conf_file) if conf_file else None
    if path is not None and not path.is_absolute() and not path.exists() and len(path.parts) == 1:
        from tablekeeper.spark.session import submitted_file

        path = submitted_file(path.name) or path
    return load_catalogs(path, Path(warehouse).resolve() if warehouse else None)


def _catalogs(args: argparse.Namespace, parsed: CatalogsConfig | None = None) -> CatalogsConfig:
    from tablekeeper.io.storage import configure_storage

    catalogs = parsed if parsed is not None else _catalog_file(args)
    # The job's catalog also says how to reach storage outside it (a Delta source, a path table).
    name = getattr(args, "catalog", None) or catalogs.default
    if name in catalogs.catalogs or name in catalogs.unusable:
        configure_storage(catalogs.get(name).storage)
    return catalogs


def _emit(result: JobResult, result_file: str | None) -> None:
    from tablekeeper.redact import redact

    line = redact(result.to_json())
    from tablekeeper.jobs.common.result_schema import check_result, checking

    if checking():  # the tests' harness: every printed result keeps to the published schema
        check_result(line)
    print(line)
    if result_file:
        from pathlib import Path

        Path(result_file).write_text(line + "\n", encoding="utf-8")


def _run_job(
    args: argparse.Namespace,
    job: str,
    table: str,
    run: Callable[[], JobResult],
    catalog_file: Callable[[], CatalogsConfig] | None = None,
) -> int:
    """Run a job; whatever happens, stdout's last line is its JSON result. The run's id is its
    ledger row's and its OpenLineage events'; metrics and events go out only when configured."""
    import traceback
    from dataclasses import replace

    from tablekeeper import progress
    from tablekeeper.cli.observing import observer
    from tablekeeper.jobs.common.result import JobClock, new_run_id
    from tablekeeper.spark.progress import spark_tasks

    loaded = catalog_file or _once(lambda: _catalog_file(args))
    clock = JobClock()
    run_id = new_run_id()
    watching = observer(args, job, table, run_id, loaded, lambda: _catalogs(args, loaded()))
    if watching is not None:
        watching.started()

    def end(result: JobResult, code: ExitCode, stack_trace: str | None = None) -> None:
        recorded = _recorded(args, result, code, run_id, loaded)
        _emit(recorded, args.result_file)
        if watching is not None:
            watching.finished(recorded, stack_trace)

    try:
        try:
            # Phases and Spark's tasks on stderr (a terminal) or at INFO: never on stdout.
            with progress.activate(job), spark_tasks():
                result = run()
        except TablekeeperError:
            raise
        except Exception as err:
            typed = task_error(err)  # a Spark task's typed error: reported as itself
            if typed is None:
                raise
            log.debug("a Spark task failed", exc_info=True)
            raise typed from None
    except TablekeeperError as err:
        dry_run = bool(getattr(args, "dry_run", False))
        failed = clock.result(job, table, dry_run=dry_run, metrics=err.metrics)
        failed = replace(failed, status=err.status, error=err.message)
        end(failed, err.exit_code, traceback.format_exc())
        raise
    except Exception as err:
        # Unexpected, yet a run still ends with its JSON result (exit 1): schedulers parse it.
        dry_run = bool(getattr(args, "dry_run", False))
        failed = clock.result(job, table, dry_run=dry_run, metrics={})
        failed = replace(failed, status="failed", error=unexpected_reason(err))
        end(failed, exit_code(err), traceback.format_exc())
        raise
    end(result, ExitCode.OK)
    return 0


_T = TypeVar("_T")


def _once(load: Callable[[], _T]) -> Callable[[], _T]:
    """``load``'s value (or its error) the first time, then the same again: the catalog file is
    parsed once per run, whoever asks (the job, its ledger row, its telemetry)."""
    done: list[tuple[_T | None, BaseException | None]] = []

    def get() -> _T:
        if not done:
            try:
                done.append((load(), None))
            except Exception as err:
                done.append((None, err))
        value, error = done[0]
        if error is not None:
            raise error
        return value  # type: ignore[return-value]

    return get


def unexpected_reason(err: Exception) -> str:
    """One line for a failure no typed error describes: its class and its (scrubbed) text; for a
    Java failure (Spark's, py4j's) its root cause's class and the file it names first, so the cut
    of a long trace never loses them."""
    from tablekeeper.errors import java_cause
    from tablekeeper.redact import redact

    text = str(err)
    cause = java_cause(text)
    reason = redact(" ".join(text.split())) or err.__class__.__name__
    if cause is not None:
        return f"unexpected {err.__class__.__name__}: {redact(cause)} | {reason[:200]}"
    return f"unexpected {err.__class__.__name__}: {reason[:300]}"


def _recorded(
    args: argparse.Namespace,
    result: JobResult,
    code: ExitCode,
    run_id: str,
    catalog_file: Callable[[], CatalogsConfig],
) -> JobResult:
    """The result, appended to the ledger of runs when one is configured, saying where it went.
    A ledger that cannot be written changes neither the status nor the exit code."""
    from dataclasses import replace

    from tablekeeper.jobs.common.ledger import record_run
    from tablekeeper.jobs.common.predictions import predicted

    # health's prediction for this run first, so the ledger row and the printed result carry it.
    result = predicted(
        result,
        catalogs=lambda: _catalog_file(args),
        ledger_catalog=getattr(args, "ledger_catalog", None),
        ledger_table=getattr(args, "ledger_table", None),
        table=getattr(args, "table", None),
        catalog=getattr(args, "catalog", None),
    )
    note = record_run(
        result,
        exit_code=int(code),
        catalogs=catalog_file,
        catalog=getattr(args, "ledger_catalog", None),
        table=getattr(args, "ledger_table", None),
        run_id=run_id,
    )
    return result if note is None else replace(result, ledger=note)


def _spark_session(catalogs: CatalogsConfig, catalog: str | None = None) -> SparkSession:
    """The jobs that always run on Spark: the spark-submit session, or a local one."""
    from tablekeeper.spark import get_spark

    return get_spark("tablekeeper", catalogs=catalogs, catalog=catalog)


def _submitted() -> SparkSession | None:
    from tablekeeper.spark.session import submitted_session

    return submitted_session()


def _refuse_unhonoured(args: argparse.Namespace, module: JobModule, given: frozenset[str]) -> None:
    """A Delta ``--table`` (seen from its ``_delta_log`` on storage, as the job routes it) with an
    option the job cannot honour there, or for a job that takes only Iceberg tables: exit 2
    before the table is read. A catalog identifier always names an Iceberg table."""
    from tablekeeper.jobs.common.context import delta_root
    from tablekeeper.jobs.common.formats import check_delta_options

    table = getattr(args, "table", None)
    if table and delta_root(table) is not None:
        check_delta_options(args.command, table, module.DELTA_OPTIONS, given)


def _run(args: argparse.Namespace, given: frozenset[str]) -> int:
    """One job: its options from the command line, its context, its result printed."""
    from tablekeeper.jobs.common.context import JobContext

    module = _job_module(JOBS[args.command].module)
    # health over a catalog names no table: its failures name the catalog.
    table = getattr(args, "table", None) or getattr(args, "target", None) or args.catalog or ""
    catalog_file = _once(lambda: _catalog_file(args))

    def run() -> JobResult:
        from tablekeeper.jobs.common.ledger import preflight

        options = module.Options.from_args(args)
        catalogs = _catalogs(args, catalog_file())  # also the storage settings a path table is reached with
        _refuse_unhonoured(args, module, given)
        # A --ledger-table naming an ordinary table is refused before the job touches anything.
        preflight(catalogs, getattr(args, "ledger_catalog", None), getattr(args, "ledger_table", None))
        used = getattr(args, "catalog", None)
        context = JobContext(
            catalogs,
            spark=lambda: _spark_session(catalogs, used),
            submitted=_submitted,
            ledger_catalog=getattr(args, "ledger_catalog", None),
            ledger_table=getattr(args, "ledger_table", None),
        )
        return module.run(options, context)

    return _run_job(args, args.command, table, run, catalog_file)


def main(argv: Sequence[str] | None = None) -> int:
    from tablekeeper.redact import install_log_redaction, redact

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_command(argv) or "").parse_args(argv)
    given = given_options(argv) if args.command in JOBS else frozenset()
    install_log_redaction()
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return _dispatch(args, given)
    except TablekeeperError as err:
        log.debug("failed", exc_info=True)
        sys.stderr.write(f"tablekeeper: {redact(err.message)}\n")
        return int(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("tablekeeper: interrupted\n")
        return int(ExitCode.UNEXPECTED)
    except Exception as err:  # the last line must still be one readable reason
        log.debug("unexpected failure", exc_info=True)
        sys.stderr.write(
            f"tablekeeper: {unexpected_reason(err)} (rerun with --log-level DEBUG for the trace)\n"
        )
        return int(exit_code(err))


def entrypoint() -> None:
    sys.exit(main())
