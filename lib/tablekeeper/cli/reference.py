"""Every job's options as its parser declares them: the one declaration the documentation's option
tables and the Airflow DAGs' accepted keys are generated from.

``python -m tablekeeper.cli.reference --write`` rewrites ``docs/reference/options.md`` and
``airflow_dags/job_options.json`` (the DAGs run in Airflow's own environment, without tablekeeper,
so they read the names from that file); a test fails when either is not what this module makes
of the parsers now.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tablekeeper.cli import build_parser
from tablekeeper.jobs import JOBS

OPTIONS_PAGE = Path("docs/reference/options.md")
AIRFLOW_OPTIONS = Path("airflow_dags/job_options.json")


@dataclass(frozen=True)
class OptionDoc:
    flag: str  # the long flag, e.g. --older-than
    value: str  # what it takes: "" for a switch, the choices, or VALUE
    default: str  # "" when none
    required: bool
    help: str


def job_options(job: str) -> list[OptionDoc]:
    """``job``'s options in the order its parser declares them."""
    parser = build_parser(job)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    docs = []
    for action in sub.choices[job]._actions:
        flags = [o for o in action.option_strings if o.startswith("--")]
        if not flags or isinstance(action, argparse._HelpAction):
            continue
        if action.nargs == 0:
            value = ""
        elif action.choices is not None:
            value = " | ".join(str(c) for c in action.choices)
        else:
            value = "VALUE"
        default = action.default
        shown = "" if default in (None, False, (), [], argparse.SUPPRESS) else str(default)
        docs.append(OptionDoc(flags[0], value, shown, bool(action.required), action.help or ""))
    return docs


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def options_page() -> str:
    lines = [
        "# Job options",
        "",
        "Every job's options as its command line declares them: the same for `tablekeeper <job>`,",
        "`spark-submit jobs/<job>.py` and a table's `jobs:` entry in the Airflow tables file (there",
        "without the dashes). Generated from the jobs' own declarations",
        "(`python -m tablekeeper.cli.reference --write`); a test keeps it current.",
        "",
    ]
    for name, entry in JOBS.items():
        lines += [f"## {name}", "", entry.help[:1].upper() + entry.help[1:] + ".", ""]
        lines += ["| option | value | default | |", "|---|---|---|---|"]
        for o in job_options(name):
            value = f"`{_cell(o.value)}`" if o.value else ""
            default = "required" if o.required else (f"`{_cell(o.default)}`" if o.default else "")
            lines.append(f"| `{o.flag}` | {value} | {default} | {_cell(o.help)} |")
        lines.append("")
    return "\n".join(lines)


def airflow_options() -> str:
    """Per job, the option names a tables file may give (flags without their dashes)."""
    names = {name: [o.flag[2:] for o in job_options(name)] for name in JOBS}
    return json.dumps(names, indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tablekeeper.cli.reference", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the generated files")
    parser.add_argument("--root", default=".", help="the project root (default: here)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    generated = {OPTIONS_PAGE: options_page(), AIRFLOW_OPTIONS: airflow_options()}
    stale = [p for p, text in generated.items() if not (root / p).exists() or (root / p).read_text() != text]
    if args.write:
        for path in stale:
            (root / path).write_text(generated[path])
            print(f"wrote {path}")
        return 0
    for path in stale:
        print(f"{path} is not current: run python -m tablekeeper.cli.reference --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
