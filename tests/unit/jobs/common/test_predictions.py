"""health's predictions recorded beside the jobs' outcomes, and ``history --accuracy`` (a sqlite
catalog with a ledger, tables made by tablekeeper's committer, every job on the driver)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.jobs.common import predictions
from tablekeeper.jobs.common.accuracy import (
    PastRun,
    files_removed,
    measure_accuracy,
    relative_error,
    table_key,
)
from tablekeeper.jobs.common.ledger import HistoryQuery, LedgerRow, read_runs
from tablekeeper.jobs.common.predictions import recommendation_in
from tablekeeper.tables.iceberg import load_manifests
from tests.support.health_fleet import append, build, cli, sql_catalog, write_conf

LEDGER = "tablekeeper.runs"


def recommendation(health: dict[str, Any], table: str, job: str) -> dict[str, Any]:
    entry = next(t for t in health["tables"] if t["table"] == table)
    found: dict[str, Any] = next(r for r in entry["recommendations"] if r["job"] == job)
    return found


def ledger_row(root: Path, run_id: str) -> LedgerRow:
    runs = read_runs(sql_catalog(root).load_table(LEDGER), HistoryQuery(limit=None))
    return next(r for r in runs if r.run_id == run_id)


def test_health_then_the_job_then_history_accuracy(tmp_path: Path) -> None:
    conf = build(tmp_path)
    run = ("--engine", "driver")
    health = cli(conf, tmp_path, "health", "--catalog", "tk", *run)
    assert health["metrics"]["catalog"] == "tk"
    first = recommendation(health, "db.orders", "expire-snapshots")
    # No past runs yet: nothing to estimate a duration or an error from.
    assert "expected_duration_ms" not in first and "error" not in first

    done = cli(conf, tmp_path, "expire-snapshots", "--table", "db.orders", *run)
    prediction = done["prediction"]
    assert prediction == {
        "health_run_id": health["ledger"]["run_id"],
        "health_started_at": health["started_at"],
        "catalog": "tk",
        "table": "db.orders",
        "predicted": {
            "bytes_freed": first["bytes_freed"],
            "files_removed": first["files_removed"],
            "duration_ms": None,
        },
        "actual": {
            "bytes_freed": done["metrics"]["bytes_freed"],
            "files_removed": done["metrics"]["deleted_manifest_lists_count"],
            "duration_ms": done["duration_ms"],
        },
    }
    assert first["files_removed"] == 2 and prediction["actual"]["files_removed"] == 2
    # The ledger row holds it too (SQL reaches it in result_json).
    assert (
        json.loads(ledger_row(tmp_path, done["ledger"]["run_id"]).result_json or "")["prediction"]
        == prediction
    )

    # A second round: health now estimates the duration from that run, and shows its own error.
    append(tmp_path, "db.orders", 2)
    again = cli(conf, tmp_path, "health", "--catalog", "tk", *run)
    second = recommendation(again, "db.orders", "expire-snapshots")
    assert second["expected_duration_ms"] == done["duration_ms"]
    assert second["duration_basis"] == "table"
    assert second["error"] == {"runs": 1, "bytes_freed": 0.0, "files_removed": 0.0, "duration_ms": None}
    # compact was never run anywhere: no duration for it.
    assert "expected_duration_ms" not in recommendation(again, "db.events", "compact")

    later = cli(conf, tmp_path, "expire-snapshots", "--table", "db.orders", *run)
    assert later["prediction"]["health_run_id"] == again["ledger"]["run_id"]
    assert later["prediction"]["predicted"]["duration_ms"] == done["duration_ms"]

    body = cli(conf, tmp_path, "history", "--accuracy")
    assert (body["ledger"], body["count"]) == ("tk.tablekeeper.runs", 1)
    (row,) = body["accuracy"]
    assert (row["job"], row["table"], row["catalog"], row["runs"]) == (
        "expire-snapshots",
        "db.orders",
        "tk",
        2,
    )
    assert row["files_removed"]["compared"] == 2
    assert row["files_removed"]["median_relative_error"] == 0.0
    assert row["bytes_freed"]["predicted_median"] == row["bytes_freed"]["actual_median"]
    timed = row["duration_ms"]
    assert timed["compared"] == 1
    assert timed["predicted_median"] == done["duration_ms"]
    assert timed["actual_median"] == later["duration_ms"]
    expected = abs(done["duration_ms"] - later["duration_ms"]) / later["duration_ms"]
    assert timed["median_relative_error"] == round(expected, 4)
    # The filters combine with it.
    assert cli(conf, tmp_path, "history", "--accuracy", "--job", "compact")["count"] == 0
    assert cli(conf, tmp_path, "history", "--accuracy", "--table", "db.events")["count"] == 0
    assert cli(conf, tmp_path, "history", "--accuracy", "--table", "db.orders", "--since", "1h")["count"] == 1
    assert cli(conf, tmp_path, "history", "--accuracy", "--limit", "1")["accuracy"][0]["runs"] == 1


def test_no_prediction_without_a_health_run_that_recommended_the_job(tmp_path: Path) -> None:
    conf = build(tmp_path)
    run = ("--engine", "driver")
    # No health run in the ledger at all.
    assert "prediction" not in cli(conf, tmp_path, "expire-snapshots", "--table", "db.orders", *run)
    append(tmp_path, "db.orders", 2)
    cli(conf, tmp_path, "health", "--catalog", "tk", *run)
    # A dry run did nothing: nothing to compare.
    dry = cli(conf, tmp_path, "expire-snapshots", "--table", "db.orders", "--dry-run", *run)
    assert dry["status"] == "dry_run" and "prediction" not in dry
    # health recommended nothing for db.fresh; and nothing in another catalog's db.orders.
    assert "prediction" not in cli(conf, tmp_path, "expire-snapshots", "--table", "db.fresh", *run)
    # Outside the window (0 days: only runs started at the job's own start) nothing matches.
    write_conf(tmp_path, "ledger: {catalog: tk, prediction_window_days: 0}")
    assert "prediction" not in cli(conf, tmp_path, "expire-snapshots", "--table", "db.orders", *run)
    # No ledger configured: no lookup, no prediction.
    write_conf(tmp_path, "")
    assert "prediction" not in cli(conf, tmp_path, "expire-snapshots", "--table", "db.orders", *run)


def test_an_unreadable_or_slow_ledger_never_fails_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    conf = build(tmp_path)
    run = ("--engine", "driver")
    cli(conf, tmp_path, "health", "--catalog", "tk", *run)
    # Break the ledger: its manifests are gone, so reading it fails.
    ledger = sql_catalog(tmp_path).load_table(LEDGER)
    for manifest in load_manifests(ledger.io, ledger.metadata.current_snapshot()):
        Path(manifest.manifest_path).unlink()
    with caplog.at_level(logging.WARNING):
        done = cli(conf, tmp_path, "expire-snapshots", "--table", "db.orders", *run)
        health = cli(conf, tmp_path, "health", "--catalog", "tk", *run)
    assert done["status"] == "ok" and done["metrics"]["deleted_manifest_lists_count"] == 2
    assert "prediction" not in done
    assert health["status"] == "ok"
    assert "the ledger could not be read, going on without it" in caplog.text

    # A ledger that answers too slowly is abandoned after the budget, by health and by the job.
    monkeypatch.setattr(predictions, "PREDICTION_BUDGET_S", 0.2)
    monkeypatch.setattr(predictions, "HISTORY_BUDGET_S", 0.2)
    monkeypatch.setattr(predictions, "read_runs", lambda *a, **k: time.sleep(30))
    fresh = tmp_path / "slow"
    fresh.mkdir()
    conf = build(fresh)
    cli(conf, fresh, "health", "--catalog", "tk", *run)  # creates the ledger
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        started = time.monotonic()
        health = cli(conf, fresh, "health", "--catalog", "tk", *run)
        done = cli(conf, fresh, "expire-snapshots", "--table", "db.orders", *run)
        took = time.monotonic() - started
    assert took < 10
    assert health["status"] == "ok" and done["status"] == "ok" and "prediction" not in done
    assert caplog.text.count("reading the ledger took over 0.2 s, going on without it") == 2


# -- the arithmetic ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicted", "actual", "error"),
    [(10, 8, 0.25), (8, 10, 0.2), (0, 0, None), (5, 0, 1.0), (None, 3, None), (3, None, None)],
)
def test_relative_error(predicted: int | None, actual: int | None, error: float | None) -> None:
    assert relative_error(predicted, actual) == error


def test_accuracy_of_a_measure_counts_only_comparable_runs() -> None:
    found = measure_accuracy([(10, 8), (0, 0), (4, 4), (None, 2)])
    assert found.compared == 2
    assert (found.predicted_median, found.actual_median) == (7.0, 6.0)
    assert found.median_relative_error == 0.125
    assert found.mean_relative_error == 0.125


@pytest.mark.parametrize(
    ("name", "catalog", "key"),
    [
        ("db.t", "tk", ("tk", "db.t")),
        (" db.t ", "tk", ("tk", "db.t")),
        ("file:///data/t/", "tk", ("", "/data/t")),
        ("file:/data/t", None, ("", "/data/t")),
        ("/data/t", None, ("", "/data/t")),
        ("s3://b/t/", "tk", ("", "s3://b/t")),
    ],
)
def test_tables_match_as_health_and_the_jobs_name_them(
    name: str, catalog: str | None, key: tuple[str, str]
) -> None:
    found = table_key(name, catalog)
    assert (found.catalog, found.name) == key


@pytest.mark.parametrize(
    ("job", "metrics", "removed"),
    [
        ("compact", {"rewritten_data_files_count": 7, "added_data_files_count": 2}, 5),
        ("rewrite-manifests", {"rewritten_manifests_count": 9, "added_manifests_count": 1}, 8),
        ("rewrite-position-deletes", {"rewritten_delete_files_count": 6, "added_delete_files_count": 2}, 4),
        ("rewrite-equality-deletes", {"removed_equality_delete_files_count": 3}, 3),
        ("expire-snapshots", {"deleted_manifest_lists_count": 2, "deleted_data_files_count": 1}, 3),
        ("remove-orphans", {"deleted_files_count": 4, "quarantined_files_count": 0}, 4),
        ("remove-orphans", {"deleted_files_count": 0, "quarantined_files_count": 4}, 4),
        ("compact", {}, None),
    ],
)
def test_files_removed_counts_as_health_counts(
    job: str, metrics: dict[str, int], removed: int | None
) -> None:
    assert files_removed(job, metrics) == removed


def health_row(tables: list[dict[str, Any]], catalog: str | None) -> LedgerRow:
    metrics = {} if catalog is None else {"catalog": catalog}
    body = {"job": "health", "metrics": metrics, "tables": tables}
    return LedgerRow("h1", "health", "x", "ok", False, 0, 1, result_json=json.dumps(body))


def test_a_health_run_matches_by_catalog_and_name_and_older_runs_by_name() -> None:
    entry = {"table": "db.t", "recommendations": [{"job": "compact", "bytes_freed": 0, "files_removed": 3}]}
    key = table_key("db.t", "tk")
    assert recommendation_in(health_row([entry], "tk"), "compact", key) is not None
    assert recommendation_in(health_row([entry], "other"), "compact", key) is None
    assert recommendation_in(health_row([entry], "tk"), "expire-snapshots", key) is None
    # A health run of a version that did not say its catalog: matched by name.
    assert recommendation_in(health_row([entry], None), "compact", key) is not None
    delta = {"table": "file:/lake/t/", "recommendations": [{"job": "compact"}]}
    assert recommendation_in(health_row([delta], None), "compact", table_key("/lake/t", "tk")) is not None


def test_past_runs_tolerate_any_result_json() -> None:
    row = LedgerRow("r", "compact", "db.t", "ok", False, 0, 5, result_json="not json")
    assert PastRun.from_row(row).predicted is None


@pytest.mark.parametrize(("value", "days"), [("", 7), (", prediction_window_days: 3", 3)])
def test_the_prediction_window_is_the_ledger_blocks(value: str, days: int) -> None:
    catalogs = "catalogs: {a: {type: sql, uri: 'sqlite://', warehouse: /w}}"
    text = f"default: a\n{catalogs}\nledger: {{catalog: a{value}}}\n"
    ledger = parse_catalogs(text, Path("/")).ledger
    assert ledger is not None and ledger.prediction_window_days == days
    bad = parse_catalogs(
        text.replace(f"catalog: a{value}", "catalog: a, prediction_window_days: soon"), Path("/")
    )
    assert bad.ledger is None and "prediction_window_days must be a whole number" in (bad.ledger_error or "")


def test_the_accuracy_table_for_a_terminal() -> None:
    from tablekeeper.cli.history import render_accuracy
    from tablekeeper.jobs.common.accuracy import Outcome, accuracy_rows

    def run(run_id: str, predicted: Outcome, actual: Outcome) -> PastRun:
        return PastRun(run_id, "compact", "db.t", "tk", 1, True, 1, 1, "h", predicted, actual)

    rows = accuracy_rows([
        run("a", Outcome(0, 10, 4000), Outcome(0, 8, 5000)),
        run("b", Outcome(0, 6, None), Outcome(0, 6, 3000)),
    ])  # fmt: skip
    lines = render_accuracy(rows, "tk.tablekeeper.runs").splitlines()
    assert lines[1].split()[:6] == ["JOB", "TABLE", "RUNS", "BYTES", "PRED", "BYTES"]
    # bytes: nothing comparable; files: medians 8 and 7, errors 25% and 0%; time: one run, 20% off.
    assert lines[2].split() == ["compact", "db.t", "2", "-", "-", "-", "8", "7", "12%", "4.0s", "5.0s", "20%"]
    assert render_accuracy([], "x") == "no runs with a prediction of health in x match"
