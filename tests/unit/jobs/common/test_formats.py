"""Every job x every option x both table formats: an option is honoured or refused, never ignored.

The options are read from the argparse parsers themselves, so an option added later without a
declaration in its job's ``DELTA_OPTIONS`` fails here. On a Delta table, a refused option exits 2
naming it before anything reads the table; an honoured one must change what reaches delta-spark
(its SQL and session settings, through a recording stand-in: no JVM) or the job's result. On an
Iceberg table no option is refused.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tablekeeper import cli
from tablekeeper.jobs.common.formats import COMMON
from tablekeeper.jobs.common.result import JobClock, JobResult

JOBS = sorted(cli.JOBS)
# Values an option's type cannot be guessed from (others: a choice not the default, or 3).
SAMPLES: dict[str, list[str]] = {
    "older_than": ["30d"],
    "target_file_size": ["1MB"],
    "min_file_size": ["1MB"],
    "max_file_size": ["1MB"],
    "target_manifest_size": ["1MB"],
    "sort_order": ["zorder(id)", "--strategy", "sort"],
    "strategy": ["sort", "--sort-order", "zorder(id)"],
    "max_commits": ["3", "--partial-progress"],
    "where": ["p = 1"],
    "threshold": ["compact.min-files=3"],
    "location": ["sub"],
    "equal_schemes": ["a=b"],
    "equal_authorities": ["a=b"],
    "columns": ["id"],
    "sort_by": ["p"],
    "branch": ["b"],
    "lineage_parent": ["airflow/dag/0191e7a6-0b52-7c4e-9f2a-5d6b0c1e2f30"],
}
# The part of each sample that is its own option's baseline (max-commits is used with --partial-progress).
BASELINES: dict[str, list[str]] = {"max_commits": ["--partial-progress"]}
# Options a job requires besides --table, given before each sample (which may override them).
REQUIRED: dict[str, list[str]] = {"restore": ["--run", "0000000000001-expire-snapshots-abc"]}
# Honoured, yet with one table there is nothing for it to change: --limit bounds a report of one.
NOTHING_TO_CHANGE = {("health", "limit")}


def _parser(job: str) -> argparse.ArgumentParser:
    parser = cli.build_parser(job)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[job]
    return found


def _actions(job: str) -> dict[str, argparse.Action]:
    return {a.dest: a for a in _parser(job)._actions if a.dest != "help"}


def _module(job: str) -> Any:
    return cli._job_module(cli.JOBS[job].module)


def _flag(action: argparse.Action) -> str:
    return next(s for s in action.option_strings if s.startswith("--"))


def _sample(action: argparse.Action, tmp_path: Path) -> list[str]:
    flag = _flag(action)
    if action.nargs == 0:
        return [flag]
    if action.dest in ("file_list", "result_file", "html"):
        return [flag, str(tmp_path / f"{action.dest}.txt")]
    if action.dest in SAMPLES:
        value, *rest = SAMPLES[action.dest]
        return [flag, value, *rest]
    if action.choices:
        return [flag, str(next(c for c in action.choices if c != action.default))]
    return [flag, "3"]


def _cases() -> Iterator[tuple[str, str]]:
    """Jobs with a --table (convert-delta and validate-conversion have none: their --source is
    Delta and their --target Iceberg by role)."""
    for job in JOBS:
        actions = _actions(job)
        if "table" in actions:
            for dest in actions:
                yield job, dest


@pytest.fixture
def tables(tmp_path: Path) -> dict[str, str]:
    delta = tmp_path / "delta_t"
    (delta / "_delta_log").mkdir(parents=True)
    (delta / "_delta_log" / "00000000000000000000.json").write_text("{}\n")
    iceberg = tmp_path / "iceberg_t"
    iceberg.mkdir()
    return {"delta": str(delta), "iceberg": str(iceberg)}


@pytest.fixture
def conf(tmp_path: Path) -> list[str]:
    path = tmp_path / "catalogs.yaml"
    path.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {tmp_path}/wh\n")
    return ["--conf-file", str(path)]


def test_every_option_of_a_job_taking_delta_tables_is_declared() -> None:
    """A new option without a declaration fails here; a declaration of no option too."""
    for job in JOBS:
        declared = _module(job).DELTA_OPTIONS
        dests = set(_actions(job))
        if declared is None:
            continue  # Iceberg only, or no --table (convert-delta, validate-conversion)
        assert "table" in dests, job
        assert set(declared) == dests, (job, dests ^ set(declared))


@pytest.mark.parametrize(("job", "dest"), list(_cases()))
def test_option_is_honoured_or_refused_on_both_formats(
    job: str,
    dest: str,
    tables: dict[str, str],
    conf: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    actions = _actions(job)
    if dest in ("table", "conf_file"):
        return  # what every case below gives
    module = _module(job)
    sample = _sample(actions[dest], tmp_path)
    ran: list[object] = []

    def fake_run(options: object, context: object) -> JobResult:
        ran.append(options)
        return JobClock().result(job, "t", dry_run=False, metrics={})

    # Iceberg: nothing is refused; the job's own run is reached with the option.
    with monkeypatch.context() as patch:
        patch.setattr(module, "run", fake_run)
        code = cli.main([job, "--table", tables["iceberg"], *conf, *REQUIRED.get(job, []), *sample])
    err = capsys.readouterr().err
    flag = _flag(actions[dest])
    if code == 2 and flag in err.strip().splitlines()[-1]:
        assert not ran  # refused by name on any table (health: --namespace with --table)
    else:
        assert code == 0 and len(ran) == 1, (job, dest, err)
    declared = module.DELTA_OPTIONS
    # Delta: refused whole (Iceberg-only job), refused by name, or honoured and used.
    if declared is None or not declared[dest].honoured:
        ran.clear()
        with monkeypatch.context() as patch:
            patch.setattr(module, "run", fake_run)
            code = cli.main([job, "--table", tables["delta"], *conf, *REQUIRED.get(job, []), *sample])
        out, err = capsys.readouterr()
        last = err.strip().splitlines()[-1]
        assert code == 2 and not ran, (job, dest, err)
        if declared is None:
            assert "works on Iceberg tables" in last, last
        else:
            assert flag in last, last
        assert json.loads(out.strip().splitlines()[-1])["status"] == "failed"
        return
    if dest in COMMON or (job, dest) in NOTHING_TO_CHANGE:
        return  # the command line's own options, format-independent (tests/unit/cli)
    if (job, dest) == ("health", "html"):  # what it changes is a file: the Delta table's report
        _delta_run(job, tables["delta"], [*conf, *sample], monkeypatch, capsys)
        assert tables["delta"] in Path(sample[1]).read_text(encoding="utf-8")
        return
    baseline = BASELINES.get(dest, [])
    seen = [
        _delta_run(job, tables["delta"], [*conf, *baseline], monkeypatch, capsys),
        _delta_run(job, tables["delta"], [*conf, *sample], monkeypatch, capsys),
    ]
    assert seen[0] != seen[1], (job, dest, "accepted on a Delta table and not used", seen[1])


class _Frame:
    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def collect(self) -> list[Any]:
        return self.rows


class _RecordingSpark:
    """What delta-spark would be asked: every SQL statement and session setting, in order."""

    defaultParallelism = 2  # noqa: N815 - Spark's name

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.values: dict[str, str] = {}
        self.conf = self
        self.sparkContext = self

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.calls.append(("set", key, value))
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)

    def setJobDescription(self, text: str) -> None:  # noqa: N802 - Spark's name
        pass

    def sql(self, text: str) -> _Frame:
        from pyspark.sql import Row

        self.calls.append(("sql", text))
        if text.startswith("OPTIMIZE"):
            files = Row(totalSize=0)
            m = Row(
                numFilesRemoved=0,
                numFilesAdded=0,
                filesRemoved=files,
                filesAdded=files,
                partitionsOptimized=0,
            )
            return _Frame([Row(path="p", metrics=m)])
        return _Frame([])


def _delta_run(
    job: str,
    table: str,
    extra: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[object, ...]:
    """One run on a Delta table with delta-spark recorded, not run: (exit code, its calls, the
    health checks' inputs, the result without its times, what else stdout showed)."""
    from tablekeeper.jobs.common import delta_maintenance
    from tablekeeper.jobs.health import delta as health_delta
    from tablekeeper.jobs.health.model import TableHealth

    spark = _RecordingSpark()
    checks: list[object] = []

    def health(root: str, base: object, given: object, **kw: object) -> TableHealth:
        checks.append((given, kw.get("layout_columns")))
        return TableHealth(root, "delta")

    with monkeypatch.context() as patch:
        patch.setattr(cli, "_spark_session", lambda *a, **k: spark)
        patch.setattr(delta_maintenance, "_optimize_candidates", lambda *a: (10, 10, 1000, 1))
        patch.setattr(health_delta, "delta_health", health)
        code = cli.main([job, "--table", table, *extra])
    out, _ = capsys.readouterr()
    lines = out.strip().splitlines()
    result = json.loads(lines[-1])
    for key in ("started_at", "finished_at", "duration_ms", "run_id"):
        result.pop(key, None)
    return (
        code,
        tuple(spark.calls),
        tuple(map(str, checks)),
        json.dumps(result, sort_keys=True),
        tuple(lines[:-1]),
    )


def test_a_refusal_reads_no_more_than_the_log_listing(
    tables: dict[str, str],
    conf: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused before a session is asked for (so before any JVM) and before the job's own run."""

    def no_spark(*a: object, **k: object) -> None:
        raise AssertionError("a refusal started Spark")

    monkeypatch.setattr(cli, "_spark_session", no_spark)
    code = cli.main(["compact", "--table", tables["delta"], *conf, "--min-input", "3"])  # abbreviated
    assert code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "compact: --min-input-files does not apply to Delta table "
            f"{tables['delta']}: OPTIMIZE rewrites any bin of two or more small files; drop it"
        )
    )


def test_given_options_are_what_the_command_line_names() -> None:
    argv = ["compact", "--table", "t", "--min-input-files=5", "--partial", "--dry-run"]
    assert cli.given_options(argv) == {"table", "min_input_files", "partial_progress", "dry_run"}
