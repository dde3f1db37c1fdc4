"""Options are declared once, by each job's parser: the options page, the Airflow DAGs' keys and
the jobs' Options classes all follow it."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import fields
from pathlib import Path

import pytest

from tablekeeper.cli import build_parser, reference
from tablekeeper.jobs import JOBS

ROOT = Path(__file__).resolve().parents[3]
# Options of the run, not of the job: the context, the result, the ledger and lineage take them.
RUN_OPTIONS = {
    "conf_file",
    "warehouse",
    "result_file",
    "ledger_catalog",
    "ledger_table",
    "lineage_parent",
    "help",
}
# Options a job reads under another name (its from_args converts them).
READ_AS = {
    "compute-stats": {"snapshot": "snapshot_id"},
    "backfill-row-lineage": {"branch": "branches"},
    "health": {"threshold": "thresholds"},
    "validate-conversion": {"convert_result": "delta_version"},
}


def test_the_generated_options_page_and_airflow_keys_are_current() -> None:
    assert reference.main(["--root", str(ROOT)]) == 0, "run: python -m tablekeeper.cli.reference --write"


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_option_a_job_declares_reaches_its_options(name: str) -> None:
    """No option accepted and then ignored: each one the parser takes is a field of the job's
    Options (or read into one), and each field is an option or set by the job itself."""
    parser = build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    dests = {a.dest for a in sub.choices[name]._actions} - RUN_OPTIONS
    module = importlib.import_module(JOBS[name].module)
    names = {f.name for f in fields(module.Options)}
    aliases = READ_AS.get(name, {})
    assert {aliases.get(d, d) for d in dests} <= names
    if name == "health":
        names -= {"conf_file"}  # health reads the catalogs file itself (its --catalog sweep)
    internal = {"compact": {"branch"}, "convert-delta": {"default_partition_timezone"}}.get(name, set())
    assert names - internal <= {aliases.get(d, d) for d in dests}


def test_a_stale_page_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "airflow_dags").mkdir()
    assert reference.main(["--root", str(tmp_path)]) == 1
    assert "is not current" in capsys.readouterr().err
    assert reference.main(["--root", str(tmp_path), "--write"]) == 0
    assert reference.main(["--root", str(tmp_path)]) == 0
