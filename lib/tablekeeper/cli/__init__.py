"""The ``tablekeeper`` command: argv in, one result out, a documented exit code.

Every failure ends with a one-line reason as the last line of stderr; tracebacks go to the debug
log only (``--log-level DEBUG``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from tablekeeper import __version__
from tablekeeper.errors import ExitCode, TablekeeperError, exit_code

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
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "doctor":
        from tablekeeper.cli import doctor

        return doctor.run(as_json=args.json)
    raise AssertionError(f"unhandled command {args.command}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return _dispatch(args)
    except TablekeeperError as err:
        log.debug("failed", exc_info=True)
        sys.stderr.write(f"tablekeeper: {err.message}\n")
        return int(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("tablekeeper: interrupted\n")
        return int(ExitCode.UNEXPECTED)
    except Exception as err:  # the last line must still be one readable reason
        log.debug("unexpected failure", exc_info=True)
        reason = " ".join(str(err).split()) or err.__class__.__name__
        sys.stderr.write(
            f"tablekeeper: unexpected {err.__class__.__name__}: {reason[:300]} "
            "(rerun with --log-level DEBUG for the trace)\n"
        )
        return int(exit_code(err))


def entrypoint() -> None:
    sys.exit(main())
