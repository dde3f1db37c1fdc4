"""Progress on stderr: redrawn on a terminal, logged at INFO otherwise, silent when unseen, and
never on stdout (the JSON result's line)."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from tablekeeper import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_one_redrawn_line_and_each_phase_kept() -> None:
    out, clock = _Terminal(), _Clock()
    with progress.activate("compact", stream=out, clock=clock) as reporter:
        assert reporter is not None and reporter.interactive
        with progress.phase("rewriting groups", 4, "groups") as shown:
            for _ in range(4):
                clock.now += 1.0  # past the redraw interval: every step is drawn
                shown.advance()
        clock.now += 1.0
        progress.set_detail("Spark tasks 3/8")
    text = out.getvalue()
    assert "\rcompact | Spark tasks 3/8 | 5.0s" in text
    assert "\rcompact | rewriting groups 2/4 groups (50%) | 2.0s" in text
    assert "compact | rewriting groups 4/4 groups done in 4.0s" in text
    assert text.endswith("\r")  # the last line cleared for what follows


def test_redraws_are_throttled() -> None:
    out, clock = _Terminal(), _Clock()
    with (
        progress.activate("expire-snapshots", stream=out, clock=clock),
        progress.phase("deleting files", 1000) as shown,
    ):
        for _ in range(1000):
            shown.advance()  # no time passes: drawn at the start and the end only
    assert out.getvalue().count("\r") < 10


def test_not_a_terminal_logs_at_info(caplog: pytest.LogCaptureFixture) -> None:
    out, clock = io.StringIO(), _Clock()
    with (
        caplog.at_level(logging.INFO, logger="tablekeeper.progress"),
        progress.activate("remove-orphans", stream=out, clock=clock),
        progress.phase("deleting files", 3) as shown,
    ):
        for _ in range(3):
            shown.advance()
    assert out.getvalue() == ""
    lines = [r.getMessage() for r in caplog.records if r.name == "tablekeeper.progress"]
    assert lines[0] == "remove-orphans | deleting files 0/3 files (0%) | 0.0s"
    assert lines[-1] == "remove-orphans | deleting files 3/3 files (100%) | 0.0s"
    assert len(lines) == 2  # throttled to LOG_EVERY_S between the phase's start and end


def test_nothing_when_nobody_would_see_it(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    with (
        caplog.at_level(logging.WARNING, logger="tablekeeper.progress"),
        progress.activate("compact", stream=out) as reporter,
    ):
        assert reporter is None
        with progress.phase("committing") as shown:
            shown.advance()
    assert out.getvalue() == "" and not caplog.records
    with progress.phase("outside any run") as shown:  # a library caller: a no-op
        shown.advance()
    assert progress.active() is None


def test_a_job_run_logs_its_phases_and_keeps_stdout_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from tablekeeper.catalog import catalog_for
    from tablekeeper.catalog.config import parse_catalogs
    from tablekeeper.cli import main
    from tests.support.iceberg_writer import appended_table
    from tests.unit.files.test_journal import SCHEMA

    conf = tmp_path / "catalogs.yaml"
    conf.write_text(f"catalogs:\n  lake:\n    type: filesystem\n    warehouse: {tmp_path / 'wh'}\n")
    appended_table(catalog_for(parse_catalogs(conf.read_text(), tmp_path).get("lake")), "db.t", SCHEMA, 3)
    with caplog.at_level(logging.INFO):  # as --log-level INFO sets it outside pytest
        code = main(
            [
                "--log-level",
                "INFO",
                "expire-snapshots",
                "--table",
                "db.t",
                "--retain-last",
                "1",
                "--older-than",
                "2999-01-01T00:00:00Z",
                "--engine",
                "driver",
                "--conf-file",
                str(conf),
            ]
        )
    captured = capsys.readouterr()
    assert code == 0, captured
    (line,) = captured.out.strip().splitlines()
    result = json.loads(line)
    assert result["status"] == "ok"
    shown = [r.getMessage() for r in caplog.records if r.name == "tablekeeper.progress"]
    assert any(m.startswith("expire-snapshots | committing") for m in shown), shown
    deleted = sum(
        v for k, v in result["metrics"].items() if k.startswith("deleted_") and k.endswith("_count")
    )
    assert deleted > 0
    assert any(
        m.startswith(f"expire-snapshots | deleting files {deleted}/{deleted} files (100%)") for m in shown
    )
