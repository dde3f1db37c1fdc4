"""Every job follows jobs.common.context's contract: ``<Job>Options`` named after the job and built from
the parsed command line, ``add_arguments``, and ``run(options, context)``; the CLI is only wiring."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from tablekeeper.cli import JOBS, build_parser

MINIMAL_ARGV = {
    "convert-delta": ["--source", "/data/delta/t", "--target", "db.t"],
    "validate-conversion": ["--source", "/data/delta/t", "--target", "db.t", "--delta-version", "3"],
    "restore": ["--table", "db.t", "--run", "0000000000001-expire-snapshots-abc"],
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_job_module_follows_the_contract(name: str) -> None:
    module = importlib.import_module(JOBS[name].module)
    assert name == module.JOB
    expected = "".join(part.capitalize() for part in name.split("-")) + "Options"
    assert module.Options.__name__ == expected
    assert dataclasses.is_dataclass(module.Options)
    assert module.Options.__dataclass_params__.frozen
    assert list(inspect.signature(module.run).parameters) == ["options", "context"]
    argv = MINIMAL_ARGV.get(name, ["--table", "db.t"])
    args = build_parser(name).parse_args([name, *argv, "--catalog", "other"])
    options = module.Options.from_args(args)
    assert isinstance(options, module.Options)
    assert options.catalog == "other"


def test_only_the_named_job_module_adds_its_options() -> None:
    parser = build_parser("compact")
    assert parser.parse_args(["compact", "--table", "db.t", "--strategy", "sort"]).strategy == "sort"
    with pytest.raises(SystemExit):
        parser.parse_args(["expire-snapshots", "--table", "db.t", "--retain-last", "2"])
