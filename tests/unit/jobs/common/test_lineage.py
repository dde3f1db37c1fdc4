"""A run's OpenLineage events, as a backend receives them: jobs run on small tables on the driver
(no Spark), a real HTTP endpoint on loopback records every event, and each one is built into
openlineage-python's generated models by a strict structurer (tests/support/openlineage_check.py)
before anything else is asserted."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from openlineage.client.generated.base import RunEvent

from tablekeeper import __version__
from tablekeeper.catalog.registry import CatalogConfig
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.cli import main
from tablekeeper.jobs.common.ledger import HistoryQuery, read_runs
from tablekeeper.jobs.common.lineage import catalog_identity, dataset_name
from tests.conftest import REPO_ROOT
from tests.support.observe_receiver import TELEMETRY_ENV, Receiver, closed_port_url, no_telemetry_env
from tests.support.openlineage_check import InvalidEvent, validate_event
from tests.support.small_tables import sql_table

pytestmark = pytest.mark.usefixtures(no_telemetry_env.__name__)
LINEAGE = "/api/v1/lineage"
PARENT_RUN = "0191e7a6-0b52-7c4e-9f2a-5d6b0c1e2f30"


def small_table(root: Path, extra: str = "") -> tuple[list[str], str]:
    """db.t with three appends in the sqlite catalog ``c``; the job options reaching it and the
    catalog file's ``extra`` blocks."""
    conf, location = sql_table(
        root, [(f"{n}.parquet", 1, 10) for n in "abc"], format_version=2, write_files=True
    )
    conf.write_text(conf.read_text() + extra)
    return [
        "--table",
        "db.t",
        "--conf-file",
        str(conf),
        "--warehouse",
        str(root),
        "--engine",
        "driver",
    ], location


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out.strip().splitlines()[-1])


def events(receiver: Receiver) -> list[tuple[RunEvent, dict[str, Any]]]:
    return [validate_event(r.body) for r in receiver.at(LINEAGE)]


def snapshot_id(root: Path) -> int | None:
    return (
        SqlCatalog("c", f"sqlite:///{root}/c.db", str(root)).load_table("db.t").metadata.current_snapshot_id
    )


def facet_names(event: RunEvent) -> set[str]:
    return set(event.run.facets or {})


def test_an_ok_run_sends_start_then_complete_with_the_ledger_run_id(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENLINEAGE_API_KEY", "ol-key-P4ssW0rdish")
    telemetry = f"telemetry:\n  openlineage-url: {receiver.url}\n  openlineage-namespace: lakehouse\n"
    table, location = small_table(tmp_path, f"ledger: {{catalog: c}}\n{telemetry}")
    before = snapshot_id(tmp_path)

    code, result = run(capsys, "rewrite-manifests", *table)

    assert code == 0 and result["status"] == "ok"
    after = result["metrics"]["snapshot_id"]
    assert after != before
    [start, complete] = events(receiver)
    start_event, _ = start
    event, custom = complete
    assert [start_event.eventType.value, event.eventType.value] == ["START", "COMPLETE"]
    for sent in receiver.at(LINEAGE):
        assert sent.headers["authorization"] == "Bearer ol-key-P4ssW0rdish"
        assert sent.headers["content-type"] == "application/json"
    # One run: the ledger row, the result's note and both events share its id.
    [row] = read_runs(
        SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", str(tmp_path)).load_table("tablekeeper.runs"),
        HistoryQuery(),
    )
    assert start_event.run.runId == event.run.runId == result["ledger"]["run_id"] == row.run_id
    for e in (start_event, event):
        assert (e.job.namespace, e.job.name) == ("lakehouse", "rewrite-manifests.db.t")
        job_type = e.job.facets["jobType"]  # type: ignore[index]
        assert (job_type.processingType, job_type.integration, job_type.jobType) == (
            "BATCH",
            "TABLEKEEPER",
            "rewrite-manifests",
        )
        engine = e.run.facets["processing_engine"]  # type: ignore[index]
        assert (engine.name, engine.version) == ("tablekeeper", __version__)
        assert "parent" not in facet_names(e) and "errorMessage" not in facet_names(e)
    # The table, read and rewritten: named by its location, with its catalog identifier.
    path = location.removeprefix("file://")
    symlink = (f"sqlite:///{tmp_path}/c.db", "db.t", "TABLE")
    for datasets, version in (
        (start_event.inputs, before),
        (start_event.outputs, before),
        (event.inputs, before),
        (event.outputs, after),
    ):
        [d] = datasets  # type: ignore[misc]
        assert (d.namespace, d.name) == ("file", path)
        facets = d.facets
        assert (facets["storage"].storageLayer, facets["storage"].fileFormat) == ("iceberg", "parquet")
        [identifier] = facets["symlinks"].identifiers
        assert (identifier.namespace, identifier.name, identifier.type) == symlink
        assert facets["version"].datasetVersion == str(version)
    assert custom["result"] == result
    assert "tablekeeper_result" not in facet_names(start_event)


def test_a_refused_run_sends_start_then_fail_with_its_reason(
    tmp_path: Path,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OPENLINEAGE_URL", receiver.url)
    table, _ = small_table(tmp_path)

    code, result = run(capsys, "remove-orphans", "--older-than", "1h", *table)

    assert (code, result["status"]) == (3, "refused")
    [(start, _), (failed, custom)] = events(receiver)
    assert [start.eventType.value, failed.eventType.value] == ["START", "FAIL"]
    assert start.run.runId == failed.run.runId
    assert failed.job.namespace == "tablekeeper"
    error = failed.run.facets["errorMessage"]  # type: ignore[index]
    assert (error.message, error.programmingLanguage, error.stackTrace) == (result["error"], "PYTHON", None)
    assert custom["result"]["status"] == "refused"
    # A refusal changes nothing: the output is the version it was.
    [before] = start.inputs  # type: ignore[misc]
    [after] = failed.outputs  # type: ignore[misc]
    assert before.facets["version"].datasetVersion == after.facets["version"].datasetVersion

    # With DEBUG logging the facet carries the trace too (scrubbed like every log line).
    receiver.reset()
    caplog.set_level(logging.DEBUG, logger="tablekeeper")
    run(capsys, "remove-orphans", "--older-than", "1h", *table)
    [_, (failed, _)] = events(receiver)
    trace = failed.run.facets["errorMessage"].stackTrace  # type: ignore[index]
    assert trace is not None and "SafetyRefusal" in trace and "Traceback" in trace


def test_the_parent_run_from_the_environment_or_the_option(
    tmp_path: Path,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OPENLINEAGE_URL", receiver.url)
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"airflow-prod/maintenance.nightly/{PARENT_RUN}")
    table, _ = small_table(tmp_path)
    expire = ["expire-snapshots", "--older-than", "0s", "--retain-last", "1", *table]

    assert run(capsys, *expire)[0] == 0
    for event, _ in events(receiver):
        parent = event.run.facets["parent"]  # type: ignore[index]
        assert (parent.job.namespace, parent.job.name, parent.run.runId) == (
            "airflow-prod",
            "maintenance.nightly",
            PARENT_RUN,
        )
    # --lineage-parent wins over the environment; a job name may hold slashes.
    receiver.reset()
    other = "0191e7a6-0b52-7c4e-9f2a-000000000001"
    assert run(capsys, *expire, "--lineage-parent", f"ns/dag/with/slash/{other}")[0] == 0
    parents = {
        (p.job.namespace, p.job.name, p.run.runId)
        for p in (e.run.facets["parent"] for e, _ in events(receiver))
    }  # type: ignore[index]
    assert parents == {("ns", "dag/with/slash", other)}
    # A malformed OPENLINEAGE_PARENT_ID: a warning, events without a parent; the job runs.
    receiver.reset()
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", "not-a-parent")
    caplog.clear()
    assert run(capsys, *expire)[0] == 0
    assert all("parent" not in facet_names(e) for e, _ in events(receiver)) and len(events(receiver)) == 2
    assert "OPENLINEAGE_PARENT_ID: 'not-a-parent' is not <namespace>/<job name>/<run id" in caplog.text
    # A malformed option is a usage error, before anything runs.
    receiver.reset()
    with pytest.raises(SystemExit) as stopped:
        main([*expire, "--lineage-parent", "ns/dag/not-a-uuid"])
    assert stopped.value.code == 2 and receiver.received == []


def test_a_delta_table_is_named_by_its_path_with_its_version(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENLINEAGE_URL", receiver.url)
    root = tmp_path / "delta" / "events"
    write_deltalake(str(root), pa.table({"id": [1, 2]}))
    write_deltalake(str(root), pa.table({"id": [3]}), mode="append")
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {tmp_path}/wh\n")

    code, _ = run(capsys, "health", "--table", str(root), "--conf-file", str(conf))

    assert code == 0
    for event, _ in events(receiver):  # health only reads: no output
        [d] = event.inputs  # type: ignore[misc]
        assert (d.namespace, d.name) == ("file", str(root))
        assert (d.facets["storage"].storageLayer, d.facets["version"].datasetVersion) == ("delta", "1")
        assert "symlinks" not in d.facets and event.outputs == []
        assert event.job.name == f"health.{root}"


@pytest.mark.parametrize("where", ["down", "500"])
def test_an_endpoint_that_fails_changes_nothing_but_warns_once(
    where: str,
    tmp_path: Path,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    table, _ = small_table(tmp_path)
    argv = ["remove-orphans", "--older-than", "1h", *table]
    baseline_code, baseline = run(capsys, *argv)
    url = closed_port_url() if where == "down" else receiver.url
    monkeypatch.setenv("OPENLINEAGE_URL", url)
    if where == "500":
        receiver.answer(LINEAGE, 500, 500)
    caplog.clear()

    code, result = run(capsys, *argv)

    assert code == baseline_code == 3
    for body in (result, baseline):
        del body["started_at"], body["duration_ms"]
    assert result == baseline
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"OpenLineage: START event not sent to {url}{LINEAGE}: ")
    # Refused: the run's later events are skipped; a 500: each is tried, the warning said once.
    assert len(receiver.at(LINEAGE)) == {"down": 0, "500": 2}[where]


PW = "S3cr3t-Catalog-Pw"
API_KEY = "ol-key-9f8e7d6c5b"
OTLP_TOKEN = "otlp-token-1a2b3c4d"


def test_no_secret_reaches_an_event_a_metric_or_stderr(tmp_path: Path, receiver: Receiver) -> None:
    """A catalog whose URI carries a password (unreachable, so the run fails and says why), an
    OpenLineage API key, an OTLP endpoint with a token parameter and a header; DEBUG logging in a
    process of its own, the metrics export failing so that it warns."""
    table, _ = small_table(tmp_path)
    conf = Path(table[table.index("--conf-file") + 1])
    leaky = f"http://tk:{PW}@127.0.0.1:{closed_port_url().rsplit(':', 1)[1]}/api/catalog"
    conf.write_text(
        conf.read_text()
        + f"  leaky:\n    type: rest\n    uri: {leaky}\n"
        + f"telemetry:\n  otlp-endpoint: {receiver.url}/otlp?token={OTLP_TOKEN}\n"
    )
    receiver.answer(f"/otlp/v1/metrics?token={OTLP_TOKEN}", 500, 500)
    env = {k: v for k, v in os.environ.items() if k not in TELEMETRY_ENV}
    env.update(
        OPENLINEAGE_URL=receiver.url,
        OPENLINEAGE_API_KEY=API_KEY,
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer%20{API_KEY}-otlp",
    )
    runs = [
        ["expire-snapshots", *table, "--catalog", "leaky", "--older-than", "0s"],
        ["expire-snapshots", *table, "--older-than", "0s", "--retain-last", "1"],
    ]
    outputs = []
    for argv in runs:
        proc = subprocess.run(
            [sys.executable, "-m", "tablekeeper", "--log-level", "DEBUG", *argv],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env=env,
            timeout=120,
            check=False,
        )
        outputs.append(proc.stdout + proc.stderr)
    assert json.loads(_last_json(outputs[0]))["status"] == "failed"
    for text in outputs:  # the metrics warning is there, scrubbed
        assert (
            f"OTLP metrics: expire-snapshots run not sent to {receiver.url}/otlp/v1/metrics: HTTP 500" in text
        )
    sent = receiver.received
    lineage = [r for r in sent if r.path == LINEAGE]
    metrics = [r for r in sent if r.path.startswith("/otlp/")]
    assert len(lineage) == 4 and len(metrics) == 2
    for r in lineage:
        validate_event(r.body)
    # The unreachable catalog's table: named by the catalog, without its password.
    start, _ = validate_event(lineage[0].body)
    [d] = start.inputs  # type: ignore[misc]
    assert (d.namespace, d.name) == (leaky.replace(f"tk:{PW}@", ""), "db.t")
    for secret in (PW, API_KEY, OTLP_TOKEN):
        for r in sent:
            assert secret.encode() not in r.body
        for text in outputs:
            assert secret not in text


def _last_json(text: str) -> str:
    return next(line for line in reversed(text.splitlines()) if line.startswith("{"))


def test_dataset_names_follow_the_naming_spec() -> None:
    cases = {
        "s3://bucket/wh/db/t/": ("s3://bucket", "wh/db/t"),
        "s3a://bucket/wh/t": ("s3://bucket", "wh/t"),
        "s3://AKIAEXAMPLE:secret-key@bucket/wh/t": ("s3://bucket", "wh/t"),
        "gs://bucket/wh/t": ("gs://bucket", "wh/t"),
        "abfss://lake@acct.dfs.core.windows.net/wh/t": ("abfss://lake@acct.dfs.core.windows.net", "wh/t"),
        "wasbs://lake@acct.blob.core.windows.net/wh/t": ("wasbs://lake@acct.blob.core.windows.net", "wh/t"),
        "hdfs://namenode:8020/wh/t": ("hdfs://namenode:8020", "/wh/t"),
        "file:///data/wh/t": ("file", "/data/wh/t"),
        "file:/data/wh/t": ("file", "/data/wh/t"),
        "/data/wh/t": ("file", "/data/wh/t"),
    }
    for location, expected in cases.items():
        assert dataset_name(location) == expected, location


def test_catalog_identifiers_carry_no_credentials() -> None:
    def config(kind: str, uri: str | None, **props: str) -> CatalogConfig:
        return CatalogConfig(name="c", type=kind, warehouse="s3://bucket/wh", uri=uri, properties=props)

    assert catalog_identity(config("hive", "thrift://u:pw1234@meta:9083"), "db.t") == (
        "hive://meta:9083",
        "db.t",
    )
    glue = config("glue", None, **{"glue.region": "eu-west-1", "glue.id": "123456789012"})
    assert catalog_identity(glue, "db.t") == ("arn:aws:glue:eu-west-1:123456789012", "table/db/t")
    rest = config("rest", "https://user:pw5678@lake.example/api/catalog/?credential=x")
    assert catalog_identity(rest, "db.t") == ("https://lake.example/api/catalog", "db.t")
    assert catalog_identity(config("filesystem", None), "db.t") == ("s3://bucket/wh", "db.t")


def test_the_checker_refuses_what_the_spec_does_not_allow() -> None:
    """The validation itself can fail: an unknown key, a missing required one, a bad runId."""
    good = {
        "eventType": "START",
        "eventTime": "2026-01-02T03:04:05.678Z",
        "producer": "urn:tablekeeper:test",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": PARENT_RUN, "facets": {}},
        "job": {"namespace": "n", "name": "j", "facets": {}},
        "inputs": [],
        "outputs": [],
    }
    validate_event(json.dumps(good).encode())
    for bad in (
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "eventTime"},
        {**good, "run": {"runId": "not-a-uuid", "facets": {}}},
        {**good, "eventTime": "2026-01-02"},
        {**good, "schemaURL": "https://openlineage.io/spec/1-0-0/OpenLineage.json#/$defs/RunEvent"},
        {**good, "job": {"namespace": "n", "name": "j", "facets": {"jobType": {"processingType": "BATCH"}}}},
    ):
        with pytest.raises((InvalidEvent, ValueError)):
            validate_event(json.dumps(bad).encode())
