"""A run's OTLP metrics, as a collector receives them: jobs run on a small sqlite-catalog table on the
driver (no Spark), a real HTTP endpoint on loopback (tests/support/observe_receiver.py) decodes
each payload with opentelemetry-proto's ExportMetricsServiceRequest, and an endpoint that is down,
failing or throttling never changes the job's result or exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tablekeeper import __version__
from tablekeeper.cli import main
from tablekeeper.jobs.common.observe import targets
from tablekeeper.jobs.common.telemetry import DURATION_BOUNDS, _bucket_counts
from tests.conftest import REPO_ROOT
from tests.support.observe_receiver import TELEMETRY_ENV, Receiver, closed_port_url, no_telemetry_env
from tests.support.small_tables import sql_table

API_KEY = "otlp-key-Zq81xVw3"
pytestmark = pytest.mark.usefixtures(no_telemetry_env.__name__)


def small_table(root: Path) -> list[str]:
    """db.t with three appends (three snapshots); the job options reaching it."""
    files = [(f"{name}.parquet", 1, 10) for name in "abc"]
    conf, _ = sql_table(root, files, format_version=2, write_files=True)
    return ["--table", "db.t", "--conf-file", str(conf), "--warehouse", str(root), "--engine", "driver"]


EXPIRE = ["expire-snapshots", "--retain-last", "1", "--older-than", "0s"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out.strip().splitlines()[-1])


def attributes(pairs: Any) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in pairs:
        assert isinstance(kv, KeyValue)
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


def decode(body: bytes) -> tuple[dict[str, object], dict[str, metrics_pb2.Metric]]:
    request = ExportMetricsServiceRequest.FromString(body)
    [resource_metrics] = request.resource_metrics
    [scope] = resource_metrics.scope_metrics
    assert (scope.scope.name, scope.scope.version) == ("tablekeeper", __version__)
    by_name = {m.name: m for m in scope.metrics}
    assert len(by_name) == len(scope.metrics)
    return attributes(resource_metrics.resource.attributes), by_name


def test_a_run_exports_its_metrics_once(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{receiver.url}/otlp/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-api-key={API_KEY},x-tenant=lake%20ops")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,service.name=ignored")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tablekeeper-nightly")
    table = small_table(tmp_path)

    code, result = run(capsys, *EXPIRE, *table)

    assert code == 0 and result["status"] == "ok"
    [sent] = receiver.received
    assert sent.path == "/otlp/v1/metrics"
    assert sent.headers["content-type"] == "application/x-protobuf"
    assert (sent.headers["x-api-key"], sent.headers["x-tenant"]) == (API_KEY, "lake ops")
    resource, metrics = decode(sent.body)
    assert resource == {
        "deployment.environment": "test",
        "service.name": "tablekeeper-nightly",
        "service.version": __version__,
    }
    deleted = sum(
        v for k, v in result["metrics"].items() if k.startswith("deleted_") and k.endswith("_count")
    )
    assert deleted > 0
    assert sorted(metrics) == [
        "tablekeeper.bytes.freed",
        "tablekeeper.files.deleted",
        "tablekeeper.run.duration",
        "tablekeeper.runs",
    ]
    expected_points = {
        "tablekeeper.runs": ("{run}", 1),
        "tablekeeper.files.deleted": ("{file}", deleted),
        "tablekeeper.bytes.freed": ("By", result["metrics"]["bytes_freed"]),
    }
    labels = {
        "tablekeeper.job": "expire-snapshots",
        "tablekeeper.table": "db.t",
        "tablekeeper.status": "ok",
        "tablekeeper.dry_run": False,
    }
    for name, (unit, value) in expected_points.items():
        metric = metrics[name]
        assert metric.unit == unit and metric.WhichOneof("data") == "sum"
        assert metric.sum.is_monotonic
        assert metric.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
        [point] = metric.sum.data_points
        assert (point.as_int, attributes(point.attributes)) == (value, labels)
        assert 0 < point.start_time_unix_nano <= point.time_unix_nano
    duration = metrics["tablekeeper.run.duration"]
    assert duration.unit == "s" and duration.WhichOneof("data") == "histogram"
    [point] = duration.histogram.data_points
    assert attributes(point.attributes) == labels
    assert point.count == 1 and point.sum == pytest.approx(result["duration_ms"] / 1000)
    assert list(point.explicit_bounds) == list(DURATION_BOUNDS)
    assert list(point.bucket_counts) == _bucket_counts(point.sum, DURATION_BOUNDS)
    assert sum(point.bucket_counts) == 1


def test_the_metrics_url_a_dry_run_and_delta_temporality(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is the exact URL; a dry run reports no outcome counts."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9/never-used")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{receiver.url}/collector/metrics")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta")

    code, result = run(capsys, *EXPIRE, *small_table(tmp_path), "--dry-run")

    assert code == 0 and result["status"] == "dry_run"
    [sent] = receiver.received
    assert sent.path == "/collector/metrics"
    resource, metrics = decode(sent.body)
    assert resource["service.name"] == "tablekeeper"
    assert sorted(metrics) == ["tablekeeper.run.duration", "tablekeeper.runs"]
    [point] = metrics["tablekeeper.runs"].sum.data_points
    assert attributes(point.attributes)["tablekeeper.dry_run"] is True
    assert attributes(point.attributes)["tablekeeper.status"] == "dry_run"
    assert (
        metrics["tablekeeper.runs"].sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    )


def test_a_refused_run_is_counted_with_its_status(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    code, result = run(capsys, "remove-orphans", "--older-than", "1h", *small_table(tmp_path))
    assert (code, result["status"]) == (3, "refused")
    [sent] = receiver.received
    _, metrics = decode(sent.body)
    [point] = metrics["tablekeeper.runs"].sum.data_points
    assert attributes(point.attributes)["tablekeeper.status"] == "refused"
    assert point.as_int == 1


def test_a_throttled_export_is_retried_once(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    receiver.answer("/v1/metrics", 429, headers={"Retry-After": "0"})
    code, _ = run(capsys, *EXPIRE, *small_table(tmp_path))
    assert code == 0
    first, second = receiver.at("/v1/metrics")
    assert first.body == second.body  # the same export, sent again
    assert "OTLP" not in capsys.readouterr().err


@pytest.mark.parametrize("where", ["down", "500", "503 twice"])
def test_an_endpoint_that_fails_changes_nothing_but_warns_once(
    where: str,
    tmp_path: Path,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = small_table(tmp_path)
    baseline_code, baseline = run(capsys, *EXPIRE, *table, "--dry-run")
    url = closed_port_url() if where == "down" else receiver.url
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-api-key={API_KEY}")
    if where == "500":
        receiver.answer("/v1/metrics", 500)
    elif where == "503 twice":
        receiver.answer("/v1/metrics", 503, 503, headers={"Retry-After": "0"})
    caplog.clear()

    code, result = run(capsys, *EXPIRE, *table, "--dry-run")

    assert code == baseline_code == 0
    for body in (result, baseline):  # what depends on the clock
        del body["started_at"], body["duration_ms"], body["metrics"]["expire_older_than_ms"]
    assert result == baseline
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    [warning] = warnings
    assert warning.startswith(f"OTLP metrics: expire-snapshots run not sent to {url}/v1/metrics: ")
    reason = {"down": "ConnectionRefusedError", "500": "HTTP 500", "503 twice": "HTTP 503"}[where]
    assert reason in warning and API_KEY not in caplog.text
    assert len(receiver.at("/v1/metrics")) == {"down": 0, "500": 1, "503 twice": 2}[where]


def test_the_environment_and_the_catalog_file() -> None:
    """The file's otlp-endpoint is a base URL; the environment wins; OTEL_SDK_DISABLED and an
    unsupported protocol export nothing."""
    from tablekeeper.catalog.config import TelemetryConfig

    file = TelemetryConfig(otlp_endpoint="http://collector:4318")
    assert targets({}, file).metrics is not None
    assert targets({}, file).metrics.url == "http://collector:4318/v1/metrics"  # type: ignore[union-attr]
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318/base"}
    assert targets(env, file).metrics.url == "http://other:4318/base/v1/metrics"  # type: ignore[union-attr]
    assert targets({**env, "OTEL_SDK_DISABLED": "true"}, file).metrics is None
    grpc = targets({**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, file)
    assert grpc.metrics is None and "grpc is not supported" in grpc.problems[0]
    timed = targets({**env, "OTEL_EXPORTER_OTLP_TIMEOUT": "250"}, None).metrics
    assert timed is not None and timed.timeout_s == 0.25
    assert not targets({}, None).any


def test_the_catalog_files_telemetry_block(tmp_path: Path) -> None:
    from tablekeeper.catalog.config import TelemetryConfig, parse_catalogs

    head = "catalogs: {}\n"
    parsed = parse_catalogs(
        head + "telemetry:\n  otlp-endpoint: http://c:4318\n  openlineage-url: ${warehouse}/x\n", tmp_path
    )
    assert parsed.telemetry == TelemetryConfig(otlp_endpoint="http://c:4318", openlineage_url=f"{tmp_path}/x")
    assert parsed.telemetry_error is None
    # A malformed block is reported (a warning when a job starts), never the file's failure.
    for block, says in (
        ("telemetry: [1]", "'telemetry' must be a mapping"),
        ("telemetry: {otlp-url: x}", "unknown key(s) otlp-url"),
        ("telemetry: {openlineage-url: '${NOT_SET_ANYWHERE_4711}'}", "NOT_SET_ANYWHERE_4711"),
    ):
        broken = parse_catalogs(head + block + "\n", tmp_path)
        assert broken.telemetry == TelemetryConfig() and says in (broken.telemetry_error or ""), block


PROBE = """
import json, sys
from tablekeeper.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "google.protobuf"))
    or m in ("tablekeeper.jobs.common.telemetry", "tablekeeper.jobs.common.lineage"))
sys.stderr.write("probe " + json.dumps({"code": code, "imported": heavy}) + "\\n")
"""


def test_nothing_configured_imports_nothing_and_sends_nothing(tmp_path: Path, receiver: Receiver) -> None:
    """The no-telemetry path in its own interpreter: no protobuf, no lineage module, no request."""
    env = {k: v for k, v in os.environ.items() if k not in TELEMETRY_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *EXPIRE, *small_table(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("probe "), proc.stderr[-2000:]
    assert json.loads(last.removeprefix("probe ")) == {"code": 0, "imported": []}
    assert receiver.received == []
