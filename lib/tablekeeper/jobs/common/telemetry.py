"""A run's OpenTelemetry metrics: one OTLP/HTTP export (protobuf) when the run has ended.

A run is a process of its own, so there is no SDK and no periodic reader: the run's figures are
built into one ``ExportMetricsServiceRequest`` (opentelemetry-proto's messages) and POSTed once.
Following OpenTelemetry's semantic conventions, the duration is a histogram in seconds with
explicit bounds (``http.server.request.duration`` and the others are), counts are monotonic sums
with curly-brace units, and bytes are ``By``. Every data point carries the job, the table, the
status and whether it was a dry run; a run's start is each point's start time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper import __version__
from tablekeeper.jobs.common.observe import MetricsTarget, Sender
from tablekeeper.jobs.common.result import JobResult, iso_to_micros, outcome
from tablekeeper.redact import redact

log = logging.getLogger(__name__)

SCOPE = "tablekeeper"
RUNS = "tablekeeper.runs"
DURATION = "tablekeeper.run.duration"
# Seconds: maintenance runs take from under a second (metadata only) to hours (a big compaction).
DURATION_BOUNDS: tuple[float, ...] = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400)
# The ledger's typed outcome columns, as counters: (metric, unit, description, Outcome field).
OUTCOME_COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("tablekeeper.files.rewritten", "{file}", "Data, delete or manifest files rewritten", "files_rewritten"),
    ("tablekeeper.files.added", "{file}", "Data, delete or manifest files added", "files_added"),
    ("tablekeeper.files.deleted", "{file}", "Files deleted from storage", "files_deleted"),
    ("tablekeeper.bytes.freed", "By", "Bytes of the files deleted", "bytes_freed"),
)

Attribute = str | bool


@dataclass(frozen=True)
class Counter:
    name: str
    unit: str
    description: str
    value: int


@dataclass(frozen=True)
class RunMetrics:
    """What one run exports: its attributes, its time span, the counters and the duration."""

    attributes: tuple[tuple[str, Attribute], ...]
    start_ns: int
    end_ns: int
    duration_s: float
    counters: tuple[Counter, ...]


def run_metrics(result: JobResult, end_ns: int | None = None) -> RunMetrics:
    done = outcome(result)
    counters = [Counter(RUNS, "{run}", "Job runs, by job, table and status", 1)]
    for name, unit, description, column in OUTCOME_COUNTERS:
        value = getattr(done, column)
        if value is not None:  # a job that reports no such figure has no point (not a zero)
            counters.append(Counter(name, unit, description, value))
    start_ns = iso_to_micros(result.started_at) * 1000
    return RunMetrics(
        attributes=(
            ("tablekeeper.job", result.job),
            ("tablekeeper.table", redact(result.table)),
            ("tablekeeper.status", result.status),
            ("tablekeeper.dry_run", result.dry_run),
        ),
        start_ns=start_ns,
        end_ns=max(end_ns if end_ns is not None else time.time_ns(), start_ns),
        duration_s=result.duration_ms / 1000,
        counters=tuple(counters),
    )


def _key_values(pairs: Sequence[tuple[str, Attribute]]) -> list[Any]:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    out = []
    for key, value in pairs:
        any_value = AnyValue(bool_value=value) if isinstance(value, bool) else AnyValue(string_value=value)
        out.append(KeyValue(key=key, value=any_value))
    return out


def _bucket_counts(value: float, bounds: Sequence[float]) -> list[int]:
    """One observation's bucket: (-inf, b0], (b0, b1], ..., (b_last, +inf)."""
    index = next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))
    return [1 if i == index else 0 for i in range(len(bounds) + 1)]


def encode(metrics: RunMetrics, resource: Mapping[str, str], *, delta: bool = False) -> bytes:
    """The ExportMetricsServiceRequest of one run, serialized."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    temporality = m.AGGREGATION_TEMPORALITY_DELTA if delta else m.AGGREGATION_TEMPORALITY_CUMULATIVE
    attributes = _key_values(metrics.attributes)
    start, end = metrics.start_ns, metrics.end_ns
    out = [
        m.Metric(
            name=c.name,
            unit=c.unit,
            description=c.description,
            sum=m.Sum(
                data_points=[
                    m.NumberDataPoint(
                        attributes=attributes, as_int=c.value, start_time_unix_nano=start, time_unix_nano=end
                    )
                ],
                aggregation_temporality=temporality,
                is_monotonic=True,
            ),
        )
        for c in metrics.counters
    ]
    seconds = metrics.duration_s
    out.append(
        m.Metric(
            name=DURATION,
            unit="s",
            description="How long job runs took",
            histogram=m.Histogram(
                data_points=[
                    m.HistogramDataPoint(
                        attributes=attributes,
                        count=1,
                        sum=seconds,
                        min=seconds,
                        max=seconds,
                        explicit_bounds=list(DURATION_BOUNDS),
                        bucket_counts=_bucket_counts(seconds, DURATION_BOUNDS),
                        start_time_unix_nano=start,
                        time_unix_nano=end,
                    )
                ],
                aggregation_temporality=temporality,
            ),
        )
    )
    version = str(__version__)
    resource_pairs = [*resource.items()]
    if "service.version" not in resource:
        resource_pairs.append(("service.version", version))
    request = ExportMetricsServiceRequest(
        resource_metrics=[
            m.ResourceMetrics(
                resource=Resource(attributes=_key_values([(k, redact(v)) for k, v in resource_pairs])),
                scope_metrics=[
                    m.ScopeMetrics(scope=InstrumentationScope(name=SCOPE, version=version), metrics=out)
                ],
            )
        ]
    )
    body: bytes = request.SerializeToString()
    return body


def export(result: JobResult, target: MetricsTarget) -> bool:
    """Export ``result``'s metrics once; False (one warning) when they did not land."""
    try:
        body = encode(run_metrics(result), target.resource, delta=target.delta)
    except Exception as err:  # opentelemetry-proto missing or broken: the run's result stands
        log.warning("OTLP metrics not exported: %s", redact(f"{err.__class__.__name__}: {err}")[:300])
        return False
    headers = {**target.headers, "Content-Type": "application/x-protobuf"}
    return Sender("OTLP metrics").send(target.url, body, headers, target.timeout_s, f"{result.job} run")
