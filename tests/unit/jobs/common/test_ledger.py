"""The ledger of runs: rows from results, the table it creates, appends that never fail a job,
and ``history`` reading it back (sqlite catalogs and files in tmp_path; no Spark)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tablekeeper.catalog import Catalog, LoadedTable
from tablekeeper.catalog.config import CatalogsConfig, parse_catalogs
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.cli import main
from tablekeeper.cli.history import render, since_micros
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import CommitConflict, ConfigError, CorruptMetadataError
from tablekeeper.iceberg.types import LONG, STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.io import FileIO
from tablekeeper.jobs.common import ledger
from tablekeeper.jobs.common.ledger import (
    HistoryQuery,
    LedgerRow,
    LedgerTarget,
    append_rows,
    ensure_ledger,
    history_target,
    ledger_target,
    read_runs,
    record_run,
)
from tablekeeper.jobs.common.result import JobClock, JobResult, LedgerNote
from tablekeeper.redact import register_secret
from tablekeeper.tables.iceberg import live_files, load_manifests
from tests.support.iceberg_writer import write_rows

DAY_US = 86_400_000_000
NOW_US = int(time.time() * 1_000_000)
CATALOG = "tk"
LEDGER = "tablekeeper.runs"


def conf_text(ledger_block: str = "") -> str:
    return f"""
default: {CATALOG}
catalogs:
  {CATALOG}:
    type: sql
    uri: sqlite:///${{warehouse}}/catalog.db
    warehouse: ${{warehouse}}/sql
{ledger_block}"""


def write_conf(tmp_path: Path, ledger_block: str = "") -> Path:
    path = tmp_path / "catalogs.yaml"
    path.write_text(conf_text(ledger_block))
    return path


def catalogs_of(tmp_path: Path, ledger_block: str = "") -> CatalogsConfig:
    return parse_catalogs(conf_text(ledger_block), tmp_path)


def sql_catalog(tmp_path: Path) -> SqlCatalog:
    return SqlCatalog(CATALOG, f"sqlite:///{tmp_path}/catalog.db", str(tmp_path / "sql"))


def result(job: str = "compact", table: str = "db.events", **metrics: object) -> JobResult:
    return JobClock().result(job, table, dry_run=False, metrics=metrics)


def row(job: str, table: str, started_us: int, run_id: str, status: str = "ok") -> LedgerRow:
    return LedgerRow(
        run_id=run_id,
        job=job,
        table_name=table,
        status=status,
        dry_run=False,
        started_at=started_us,
        duration_ms=5,
        exit_code=0,
    )


# -- rows from results ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics", "typed"),
    [
        # compact
        (
            {"rewritten_data_files_count": 7, "added_data_files_count": 2, "rewritten_bytes_count": 900},
            (7, 2, None, None),
        ),
        # rewrite-manifests
        ({"rewritten_manifests_count": 4, "added_manifests_count": 1}, (4, 1, None, None)),
        # rewrite-position-deletes
        ({"rewritten_delete_files_count": 6, "added_delete_files_count": 2}, (6, 2, None, None)),
        # remove-orphans: the total wins over anything per kind
        (
            {"orphan_file_count": 5, "deleted_files_count": 3, "bytes_freed": 4096},
            (None, None, 3, 4096),
        ),
        # expire-snapshots: deletions per kind add up
        (
            {
                "deleted_data_files_count": 2,
                "deleted_manifest_files_count": 3,
                "deleted_manifest_lists_count": 4,
                "deleted_metadata_files_count": 1,
                "expired_snapshots_count": 9,
                "bytes_freed": 123,
            },
            (None, None, 10, 123),
        ),
        # figures that are not whole numbers are not counts
        ({"bytes_freed": True, "added_data_files_count": "3"}, (None, None, None, None)),
    ],
)
def test_typed_columns_come_from_the_jobs_metric_names(
    metrics: dict[str, object], typed: tuple[int | None, ...]
) -> None:
    r = LedgerRow.from_result(result(**metrics), exit_code=0)
    assert (r.files_rewritten, r.files_added, r.files_deleted, r.bytes_freed) == typed


def test_a_row_carries_the_whole_result_without_its_ledger_note() -> None:
    done = replace(
        result(rewritten_data_files_count=1),
        ledger=LedgerNote(table="tk.tablekeeper.runs", written=True, run_id="x"),
    )
    r = LedgerRow.from_result(done, exit_code=0, run_id="r1", host="h1")
    assert (r.run_id, r.job, r.table_name, r.status, r.dry_run, r.exit_code, r.host) == (
        "r1",
        "compact",
        "db.events",
        "ok",
        False,
        0,
        "h1",
    )
    assert r.result_json is not None
    assert json.loads(r.result_json) == json.loads(replace(done, ledger=None).to_json())
    assert r.to_obj()["started_at"] == done.started_at  # the same instant, the same text


def test_a_dry_run_records_its_plan_but_no_typed_figures() -> None:
    planned = JobClock().result(
        "expire-snapshots", "db.t", dry_run=True, metrics={"deleted_data_files_count": 4}
    )
    r = LedgerRow.from_result(planned, exit_code=0)
    assert (r.status, r.dry_run, r.files_deleted) == ("dry_run", True, None)
    assert json.loads(r.result_json or "")["metrics"] == {"deleted_data_files_count": 4}


def test_secrets_are_masked_in_the_row() -> None:
    register_secret("s3cr3t-token-in-ledger")
    failed = replace(result(), status="failed", error="denied for s3cr3t-token-in-ledger")
    r = LedgerRow.from_result(failed, exit_code=1)
    assert "s3cr3t-token-in-ledger" not in (r.error or "")
    assert "s3cr3t-token-in-ledger" not in (r.result_json or "")


def test_the_ledger_note_is_the_last_key_of_the_result() -> None:
    noted = replace(result(), ledger=LedgerNote(table=None, written=False, error="no catalog"))
    body = json.loads(noted.to_json())
    assert list(body)[-1] == "ledger"
    assert body["ledger"] == {"table": None, "written": False, "error": "no catalog"}
    assert "ledger" not in json.loads(result().to_json())


# -- where the ledger is ---------------------------------------------------------------------------


def test_the_command_line_wins_over_the_catalog_file_key_by_key(tmp_path: Path) -> None:
    assert ledger_target(catalogs_of(tmp_path)) is None
    configured = catalogs_of(tmp_path, f"ledger: {{catalog: {CATALOG}, table: ops.runs}}")
    assert ledger_target(configured) == LedgerTarget(CATALOG, "ops.runs")
    assert ledger_target(configured, table="ops.other") == LedgerTarget(CATALOG, "ops.other")
    assert ledger_target(configured, catalog="elsewhere") == LedgerTarget("elsewhere", "ops.runs")
    assert ledger_target(catalogs_of(tmp_path), catalog=CATALOG) == LedgerTarget(CATALOG, LEDGER)
    assert str(LedgerTarget(CATALOG, LEDGER)) == "tk.tablekeeper.runs"


def test_a_ledger_table_without_a_catalog_is_reported_not_guessed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--ledger-table names no catalog"):
        ledger_target(catalogs_of(tmp_path), table="ops.runs")


def test_a_malformed_ledger_block_does_not_break_the_catalog_file(tmp_path: Path) -> None:
    bad = catalogs_of(tmp_path, "ledger: {catalog: tk, tabel: x.y}")
    assert bad.catalogs[CATALOG].type == "sql"
    assert bad.ledger is None
    with pytest.raises(ConfigError, match=r"unknown key\(s\) tabel"):
        ledger_target(bad)
    assert ledger_target(bad, catalog=CATALOG) == LedgerTarget(CATALOG, LEDGER)


def test_history_falls_back_to_the_default_catalog(tmp_path: Path) -> None:
    assert history_target(catalogs_of(tmp_path), None, None) == LedgerTarget(CATALOG, LEDGER)
    assert history_target(catalogs_of(tmp_path), None, "ops.runs") == LedgerTarget(CATALOG, "ops.runs")


# -- writing ---------------------------------------------------------------------------------------


def test_the_first_append_creates_a_day_partitioned_v2_table(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    rows = [row("compact", "db.a", NOW_US - 2 * DAY_US, "r1"), row("compact", "db.b", NOW_US, "r2")]
    committed = append_rows(catalog, LEDGER, rows)
    loaded = catalog.load_table(LEDGER)
    meta = loaded.metadata
    assert meta.format_version == 2
    assert [(f.id, f.name, str(f.type), f.required) for f in meta.schema().fields][:7] == [
        (1, "run_id", "string", True),
        (2, "job", "string", True),
        (3, "table_name", "string", True),
        (4, "status", "string", True),
        (5, "dry_run", "boolean", True),
        (6, "started_at", "timestamptz", True),
        (7, "duration_ms", "long", True),
    ]
    assert [(f.source_id, f.transform) for f in meta.spec().fields] == [(6, "day")]
    assert meta.properties["commit.retry.num-retries"] == "20"
    # One commit; one file per day.
    assert committed.snapshot is not None
    assert committed.snapshot.summary["added-data-files"] == "2"
    assert len(meta.snapshots) == 1
    live = live_files(loaded.io, meta, meta.current_snapshot())
    partitions = sorted(e.data_file.partition for e in live.data)
    assert partitions == [((NOW_US - 2 * DAY_US) // DAY_US,), (NOW_US // DAY_US,)]
    assert all("/started_at_day=" in e.data_file.file_path for e in live.data)
    assert all(e.data_file.lower_bounds and 6 in e.data_file.lower_bounds for e in live.data)
    assert [r.run_id for r in read_runs(loaded, HistoryQuery(limit=None))] == ["r2", "r1"]


def test_a_table_created_meanwhile_by_another_run_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = sql_catalog(tmp_path)
    theirs = ensure_ledger(catalog, LEDGER)
    calls = []
    real = Catalog.load_if_exists

    def first_miss(self: Catalog, identifier: str) -> LoadedTable | None:
        calls.append(identifier)
        return None if len(calls) == 1 else real(self, identifier)

    monkeypatch.setattr(SqlCatalog, "load_if_exists", first_miss)
    ours = ensure_ledger(catalog, LEDGER)
    assert ours.metadata_location == theirs.metadata_location
    assert len(calls) == 2


def test_a_ledger_whose_columns_do_not_fit_is_refused(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    schema = Schema(0, (NestedField(1, "run_id", STRING, True), NestedField(2, "job", LONG, True)))
    meta = new_table_metadata(
        schema=schema,
        location=catalog.default_table_location(LEDGER),
        timestamp_ms=NOW_US // 1000,
        properties={ledger.LEDGER_MARKER: "true"},
    )
    catalog.create_table(LEDGER, meta)
    with pytest.raises(ConfigError, match="ledger column job is long, not string"):
        append_rows(catalog, LEDGER, [row("compact", "db.a", NOW_US, "r1")])


def test_a_new_ledger_is_marked_and_an_unmarked_one_of_the_exact_schema_is_still_a_ledger(
    tmp_path: Path,
) -> None:
    catalog = sql_catalog(tmp_path)
    assert ensure_ledger(catalog, LEDGER).metadata.properties[ledger.LEDGER_MARKER] == "true"
    # A ledger created before the marker existed: recognised by its exact schema.
    older = new_table_metadata(
        schema=ledger.SCHEMA,
        spec=ledger.SPEC,
        location=catalog.default_table_location("tablekeeper.old_runs"),
        timestamp_ms=NOW_US // 1000,
    )
    catalog.create_table("tablekeeper.old_runs", older)
    append_rows(catalog, "tablekeeper.old_runs", [row("compact", "db.a", NOW_US, "r1")])
    assert [r.run_id for r in read_runs(catalog.load_table("tablekeeper.old_runs"), HistoryQuery())] == ["r1"]


def test_an_ordinary_table_is_never_written_as_the_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small_table(tmp_path)  # db.src: id long, name string, three snapshots
    catalog = sql_catalog(tmp_path)
    # A table with only optional columns of the ledger's names and types: still not a ledger.
    lookalike = Schema(0, (NestedField(1, "run_id", STRING), NestedField(2, "job", STRING)))
    catalog.create_table(
        "db.other",
        new_table_metadata(
            schema=lookalike, location=catalog.default_table_location("db.other"), timestamp_ms=NOW_US // 1000
        ),
    )
    before = {t: catalog.load_table(t).metadata_location for t in ("db.src", "db.other")}
    conf = write_conf(tmp_path)
    common = ["--conf-file", str(conf), "--warehouse", str(tmp_path), "--ledger-catalog", CATALOG]
    for target in ("db.src", "db.other"):
        argv = ["expire-snapshots", "--table", "db.src", "--retain-last", "1", "--older-than", "0s"]
        code, out, err = run_cli(capsys, *argv, "--ledger-table", target, *common)
        assert code == 2
        assert f"{target} is not a tablekeeper ledger" in err.strip().splitlines()[-1]
        printed = last_json(out)
        assert printed["status"] == "failed"
        assert isinstance(printed["ledger"], dict) and printed["ledger"]["written"] is False
        with pytest.raises(ConfigError, match="is not a tablekeeper ledger"):
            append_rows(catalog, target, [row("compact", "db.a", NOW_US, "r1")])
    # Nothing written: neither table has a new snapshot, and the job itself did not run.
    assert {t: catalog.load_table(t).metadata_location for t in before} == before


def test_a_failed_commit_leaves_no_data_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = sql_catalog(tmp_path)
    ensure_ledger(catalog, LEDGER)

    def conflict(self: Committer, change: SnapshotChange, snapshot_id: int | None = None) -> None:
        raise CommitConflict("commit to tablekeeper.runs still conflicting after 21 attempts")

    monkeypatch.setattr(Committer, "commit_snapshot", conflict)
    with pytest.raises(CommitConflict):
        append_rows(catalog, LEDGER, [row("compact", "db.a", NOW_US, "r1")])
    data_dir = Path(catalog.default_table_location(LEDGER)) / "data"
    assert not any(p.is_file() for p in data_dir.rglob("*")) if data_dir.exists() else True


# -- a ledger write never fails the job -------------------------------------------------------------


def test_record_run_appends_and_says_where(tmp_path: Path) -> None:
    catalogs = catalogs_of(tmp_path, f"ledger: {{catalog: {CATALOG}}}")
    note = record_run(result(rewritten_data_files_count=3), exit_code=0, catalogs=lambda: catalogs)
    assert note is not None
    assert (note.table, note.written, note.error) == ("tk.tablekeeper.runs", True, None)
    runs = read_runs(sql_catalog(tmp_path).load_table(LEDGER), HistoryQuery())
    assert [(r.run_id, r.files_rewritten) for r in runs] == [(note.run_id, 3)]


def test_no_ledger_configured_means_no_note(tmp_path: Path) -> None:
    assert record_run(result(), exit_code=0, catalogs=lambda: catalogs_of(tmp_path)) is None

    def unreadable() -> CatalogsConfig:
        raise ConfigError("cannot read catalog file")

    # The job reports the unreadable file itself; whether a ledger was meant is unknown.
    assert record_run(result(), exit_code=2, catalogs=unreadable) is None
    note = record_run(result(), exit_code=2, catalogs=unreadable, catalog=CATALOG)
    assert note == LedgerNote(table=None, written=False, error="cannot read catalog file")


def test_a_failing_ledger_is_a_warning_and_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(self: Committer, change: SnapshotChange, snapshot_id: int | None = None) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(Committer, "commit_snapshot", boom)
    with caplog.at_level(logging.WARNING, logger="tablekeeper.jobs.common.ledger"):
        note = record_run(result(), exit_code=0, catalogs=lambda: catalogs_of(tmp_path), catalog=CATALOG)
    assert note == LedgerNote(table="tk.tablekeeper.runs", written=False, error="OSError: disk full")
    assert "not recorded in the ledger tk.tablekeeper.runs: OSError: disk full" in caplog.text


def small_table(tmp_path: Path, snapshots: int = 3) -> None:
    catalog = sql_catalog(tmp_path)
    meta = new_table_metadata(
        schema=Schema(0, (NestedField(1, "id", LONG, True),)),
        location=catalog.default_table_location("db.src"),
        timestamp_ms=NOW_US // 1000,
    )
    catalog.create_table("db.src", meta)
    for i in range(snapshots):
        files = write_rows(catalog.load_table("db.src").metadata, [{"id": i}])
        Committer(catalog, "db.src").commit_snapshot(SnapshotChange("append", added_files=tuple(files)))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def last_json(out: str) -> dict[str, object]:
    body: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return body


def test_a_job_run_lands_in_the_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small_table(tmp_path)
    conf = write_conf(tmp_path, f"ledger: {{catalog: {CATALOG}}}")
    common = ["--conf-file", str(conf), "--warehouse", str(tmp_path)]
    argv = ["expire-snapshots", "--table", "db.src", "--retain-last", "1", "--older-than", "0s", *common]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    printed = last_json(out)
    note = printed["ledger"]
    assert isinstance(note, dict)
    assert note["written"] is True
    assert note["table"] == "tk.tablekeeper.runs"
    # A failing job is recorded too, with its exit code, and still fails the same way.
    code, out, err = run_cli(capsys, "expire-snapshots", "--table", "db.missing", *common)
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("tablekeeper: table db.missing not found")
    assert last_json(out)["status"] == "failed"
    runs = read_runs(sql_catalog(tmp_path).load_table(LEDGER), HistoryQuery())
    assert [(r.job, r.table_name, r.status, r.exit_code) for r in runs] == [
        ("expire-snapshots", "db.missing", "failed", 2),
        ("expire-snapshots", "db.src", "ok", 0),
    ]
    ok = runs[1]
    assert ok.run_id == note["run_id"]
    assert ok.files_deleted == 2  # the two expired manifest lists
    metrics = printed["metrics"]
    assert isinstance(metrics, dict)
    assert ok.bytes_freed == metrics["bytes_freed"]
    assert json.loads(ok.result_json or "") == {k: v for k, v in printed.items() if k != "ledger"}


def test_a_broken_ledger_changes_neither_status_nor_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    small_table(tmp_path)
    conf = write_conf(tmp_path)
    argv = ["expire-snapshots", "--table", "db.src", "--dry-run", "--conf-file", str(conf)]
    code, out, _ = run_cli(capsys, *argv, "--warehouse", str(tmp_path), "--ledger-catalog", "nowhere")
    assert code == 0
    printed = last_json(out)
    assert printed["status"] == "dry_run"
    assert printed["ledger"] == {
        "table": "nowhere.tablekeeper.runs",
        "written": False,
        "error": f"unknown catalog 'nowhere' (known: {CATALOG}): define it in conf/catalogs.yaml",
    }
    assert "not recorded in the ledger nowhere.tablekeeper.runs" in caplog.text
    # Without a ledger the result is as it always was.
    code, out, _ = run_cli(capsys, *argv, "--warehouse", str(tmp_path))
    assert code == 0
    assert "ledger" not in last_json(out)


# -- reading: history ------------------------------------------------------------------------------


def history_ledger(tmp_path: Path) -> LoadedTable:
    """Four runs on four days, each appended in its own commit (its own manifest)."""
    catalog = sql_catalog(tmp_path)
    for days_ago, job, table, run_id in [
        (10, "expire-snapshots", "db.a", "old"),
        (3, "compact", "db.a", "mid"),
        (1, "compact", "db.b", "recent"),
        (0, "remove-orphans", "db.a", "new"),
    ]:
        append_rows(catalog, LEDGER, [row(job, table, NOW_US - days_ago * DAY_US, run_id)])
    return catalog.load_table(LEDGER)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (HistoryQuery(), ["new", "recent", "mid", "old"]),
        (HistoryQuery(limit=2), ["new", "recent"]),
        (HistoryQuery(job="compact"), ["recent", "mid"]),
        (HistoryQuery(table="db.a"), ["new", "mid", "old"]),
        (HistoryQuery(table="db.a", job="compact"), ["mid"]),
        (HistoryQuery(since_us=NOW_US - 5 * DAY_US), ["new", "recent", "mid"]),
        (HistoryQuery(job="vacuum"), []),
    ],
)
def test_history_filters_newest_first(tmp_path: Path, query: HistoryQuery, expected: list[str]) -> None:
    assert [r.run_id for r in read_runs(history_ledger(tmp_path), query)] == expected


def test_since_skips_older_manifests_unopened(tmp_path: Path) -> None:
    loaded = history_ledger(tmp_path)
    # Remove the first run's manifest: a read that opened it would fail.
    first = load_manifests(loaded.io, loaded.metadata.snapshots[0])
    assert len(first) == 1
    FileIO.for_location(first[0].manifest_path).delete(first[0].manifest_path)
    since = NOW_US - 5 * DAY_US
    assert [r.run_id for r in read_runs(loaded, HistoryQuery(since_us=since))] == ["new", "recent", "mid"]
    with pytest.raises(CorruptMetadataError, match="is missing"):
        read_runs(loaded, HistoryQuery())


def test_a_limit_stops_reading_once_no_older_file_can_matter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "_READ_THREADS", 1)  # files are read four at a time
    catalog = sql_catalog(tmp_path)
    for i in range(6):
        append_rows(catalog, LEDGER, [row("compact", "db.a", NOW_US - (6 - i) * 60_000_000, f"r{i}")])
    loaded = catalog.load_table(LEDGER)
    live = sorted(
        live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot()).data,
        key=lambda e: e.sequence_number or 0,
    )
    for oldest in live[:2]:
        Path(oldest.data_file.file_path).unlink()
    assert [r.run_id for r in read_runs(loaded, HistoryQuery(limit=3))] == ["r5", "r4", "r3"]


def test_history_prints_json_when_not_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history_ledger(tmp_path)
    conf = write_conf(tmp_path)
    common = ["--conf-file", str(conf), "--warehouse", str(tmp_path)]
    code, out, _ = run_cli(capsys, "history", "--job", "compact", "--since", "5d", *common)
    assert code == 0
    body = json.loads(out)
    assert (body["ledger"], body["count"]) == ("tk.tablekeeper.runs", 2)
    assert [r["run_id"] for r in body["runs"]] == ["recent", "mid"]
    assert body["runs"][0]["started_at"].endswith("Z")
    code, out, _ = run_cli(capsys, "history", "--limit", "0", "--table", "db.a", "--json", *common)
    assert [r["run_id"] for r in json.loads(out)["runs"]] == ["new", "mid", "old"]


def test_history_without_a_ledger_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = write_conf(tmp_path)
    code, out, err = run_cli(capsys, "history", "--conf-file", str(conf), "--warehouse", str(tmp_path))
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "tablekeeper: no ledger tk.tablekeeper.runs yet: run jobs with --ledger-catalog tk (or a ledger "
        "block in the catalog file) to record them, or name the ledger with --ledger-catalog/--ledger-table"
    )
    code, _, err = run_cli(
        capsys, "history", "--since", "last week", "--conf-file", str(conf), "--warehouse", str(tmp_path)
    )
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("tablekeeper: --since 'last week' is not a duration")


def test_since_takes_durations_and_times() -> None:
    now_ms = 1_780_000_000_000
    assert since_micros("7d", now_ms) == (now_ms - 7 * 86_400_000) * 1000
    assert since_micros("12h", now_ms) == (now_ms - 12 * 3_600_000) * 1000
    assert since_micros("2026-05-01T00:00:00Z", now_ms) == 1_777_593_600_000_000
    assert since_micros(None) is None


def test_the_terminal_table_has_a_line_per_run() -> None:
    runs = [
        replace(
            row("remove-orphans", "db.a", 1_777_593_600_000_000, "a"), files_deleted=3, bytes_freed=3 << 20
        ),
        replace(
            row("compact", "db.b", 1_777_593_000_000_000, "b", status="failed"),
            exit_code=4,
            duration_ms=185_000,
            error="commit to db.b still conflicting after 5 attempts: " + "x" * 80,
        ),
    ]
    text = render(runs, "tk.tablekeeper.runs").splitlines()
    assert text[0] == "2 run(s) in tk.tablekeeper.runs, newest first"
    assert text[1].split() == [
        "STARTED", "(UTC)", "JOB", "TABLE", "STATUS", "TOOK",
        "REWRITTEN", "ADDED", "DELETED", "FREED", "ERROR",
    ]  # fmt: skip
    assert text[2].split()[:10] == [
        "2026-05-01", "00:00:00", "remove-orphans", "db.a", "ok", "0.0s", "-", "-", "3", "3.0"
    ]  # fmt: skip
    assert "failed (4)" in text[3]
    assert "3m05s" in text[3]
    assert text[3].endswith("...")
    assert render([], "tk.tablekeeper.runs") == "no runs in tk.tablekeeper.runs match"
