"""The published result schema holds what jobs print and refuses what they must not."""

from __future__ import annotations

import json

import pytest

from tablekeeper.jobs.common.result import JobClock, LedgerNote
from tablekeeper.jobs.common.result_schema import ResultSchemaViolation, check_result, result_schema


def test_every_job_of_the_cli_has_its_metrics_in_the_schema() -> None:
    from tablekeeper.cli import JOBS

    schema = result_schema()
    assert sorted(schema["properties"]["job"]["enum"]) == sorted(JOBS)
    assert all(job in schema["$defs"] for job in JOBS)


def test_a_result_as_jobs_make_it_passes() -> None:
    result = JobClock().result(
        "expire-snapshots", "db.t", dry_run=True, metrics={"expired_snapshots_count": 2, "engine": "driver"}
    )
    check_result(result.to_json())
    from dataclasses import replace

    recorded = replace(result, ledger=LedgerNote("tablekeeper.runs", True, run_id="r1"))
    check_result(recorded.to_json())


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"metrics": {"expired_snapshots_count": "2"}}, "metrics/expired_snapshots_count"),
        ({"metrics": {"expired_snapshot_ids": 3}}, "metrics/expired_snapshot_ids"),
        ({"status": "failed"}, "'error' is a required property"),
        ({"status": "maybe"}, "status"),
        ({"surprise": True}, "'surprise' was unexpected"),
        ({"started_at": "yesterday"}, "started_at"),
    ],
)
def test_a_result_breaking_the_schema_is_named(change: dict[str, object], said: str) -> None:
    body = json.loads(JobClock().result("expire-snapshots", "db.t", dry_run=False, metrics={}).to_json())
    body.update(change)
    with pytest.raises(ResultSchemaViolation, match=said.replace("[", r"\[")):
        check_result(json.dumps(body))
