"""Where a run reports itself beyond its result: OpenTelemetry metrics (OTLP over HTTP) and
OpenLineage run events, configured by the standard environment variables or the catalog file's
``telemetry:`` block (the environment wins, key by key); and the one HTTP POST both use.

Only the standard library is imported here: a run with neither configured pays for reading a few
environment variables. ``jobs.common.telemetry`` (protobuf) and ``jobs.common.lineage`` (a metadata
load) are imported only for what is configured.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from tablekeeper.catalog.config import TelemetryConfig
from tablekeeper.clock import now_ms
from tablekeeper.redact import redact, register_secret, register_uri_secrets

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "tablekeeper"
DEFAULT_LINEAGE_NAMESPACE = "tablekeeper"
LINEAGE_PATH = "api/v1/lineage"
METRICS_PATH = "v1/metrics"
# Exports happen once a run has ended (lineage: also before it starts): a collector that does not
# answer must not hold a finished job for long. OTEL_EXPORTER_OTLP_TIMEOUT overrides it for metrics.
DEFAULT_TIMEOUT_S = 5.0
# A 429 or 503 is retried once, after its Retry-After but never longer than this.
MAX_RETRY_WAIT_S = 2.0
DEFAULT_RETRY_WAIT_S = 0.5
_TRUE = ("true", "1", "yes")


@dataclass(frozen=True)
class Parent:
    """The run this one belongs to (an Airflow DAG run or task): OpenLineage's parent facet."""

    namespace: str
    name: str
    run_id: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}/{self.run_id}"


def parse_parent(text: str) -> Parent:
    """``<namespace>/<job name>/<run id>`` (OpenLineage's OPENLINEAGE_PARENT_ID form); the job name
    may hold slashes, the namespace not. ValueError naming the form when it is not that."""
    namespace, _, rest = text.strip().partition("/")
    name, _, run_id = rest.rpartition("/")
    try:
        canonical = str(uuid.UUID(run_id))
    except ValueError:
        canonical = ""
    if not namespace or not name or not canonical:
        raise ValueError(f"{text!r} is not <namespace>/<job name>/<run id (a UUID)>")
    return Parent(namespace, name, canonical)


@dataclass(frozen=True)
class MetricsTarget:
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    # OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE delta or lowmemory: counters and the
    # histogram as deltas; else cumulative (what Prometheus takes).
    delta: bool = False
    resource: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class LineageTarget:
    url: str
    namespace: str = DEFAULT_LINEAGE_NAMESPACE
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    parent: Parent | None = None


@dataclass(frozen=True)
class Targets:
    metrics: MetricsTarget | None = None
    lineage: LineageTarget | None = None
    # What the configuration got wrong (a malformed value): warned once, the rest still used.
    problems: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return self.metrics is not None or self.lineage is not None


def _set(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _pairs(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` with percent-encoded values (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return out


def _join(base: str, path: str) -> str:
    """``path`` appended to ``base``'s path; its query (a token parameter, say) kept at the end."""
    parts = urllib.parse.urlsplit(base)
    joined = f"{parts.path.rstrip('/')}/{path.lstrip('/')}"
    return urllib.parse.urlunsplit(parts._replace(path=joined))


def _metrics(env: Mapping[str, str], file: TelemetryConfig, problems: list[str]) -> MetricsTarget | None:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return None
    exact = _set(env, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    base = _set(env, "OTEL_EXPORTER_OTLP_ENDPOINT") or file.otlp_endpoint
    if exact is None and base is None:
        return None
    protocol = _set(env, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol not in (None, "http/protobuf"):
        problems.append(f"OTLP protocol {protocol} is not supported (http/protobuf only): no metrics sent")
        return None
    url = exact or _join(base or "", METRICS_PATH)
    register_uri_secrets(url)
    headers = _pairs(_set(env, "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS") or "")
    for value in headers.values():
        register_secret(value)  # API keys: masked wherever they might be quoted
    timeout_s = DEFAULT_TIMEOUT_S
    raw_timeout = _set(env, "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
    if raw_timeout is not None:
        try:
            timeout_s = max(float(raw_timeout) / 1000, 0.001)  # milliseconds, as the spec has it
        except ValueError:
            problems.append(f"OTEL_EXPORTER_OTLP_TIMEOUT {raw_timeout!r} is not milliseconds: using 5000")
    preference = (_set(env, "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE") or "cumulative").lower()
    resource = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    resource["service.name"] = (
        _set(env, "OTEL_SERVICE_NAME") or resource.get("service.name") or DEFAULT_SERVICE_NAME
    )
    return MetricsTarget(
        url=url,
        headers=headers,
        timeout_s=timeout_s,
        delta=preference in ("delta", "lowmemory"),
        resource=resource,
    )


def _lineage(
    env: Mapping[str, str], file: TelemetryConfig, parent: Parent | None, problems: list[str]
) -> LineageTarget | None:
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() in _TRUE:
        return None
    base = _set(env, "OPENLINEAGE_URL") or file.openlineage_url
    if base is None:
        return None
    url = _join(base, _set(env, "OPENLINEAGE_ENDPOINT") or LINEAGE_PATH)
    register_uri_secrets(url)
    api_key = _set(env, "OPENLINEAGE_API_KEY")
    register_secret(api_key)
    if parent is None and (given := _set(env, "OPENLINEAGE_PARENT_ID")) is not None:
        try:
            parent = parse_parent(given)
        except ValueError as err:
            problems.append(f"OPENLINEAGE_PARENT_ID: {err}: events carry no parent")
    namespace = _set(env, "OPENLINEAGE_NAMESPACE") or file.openlineage_namespace or DEFAULT_LINEAGE_NAMESPACE
    return LineageTarget(url=url, namespace=namespace, api_key=api_key, parent=parent)


def targets(env: Mapping[str, str], file: TelemetryConfig | None, parent: Parent | None = None) -> Targets:
    """What this run reports to: the environment over the file's block; ``parent`` (the
    ``--lineage-parent`` option) over OPENLINEAGE_PARENT_ID."""
    problems: list[str] = []
    file = file or TelemetryConfig()
    return Targets(_metrics(env, file, problems), _lineage(env, file, parent, problems), tuple(problems))


def shown(url: str) -> str:
    """A URL fit for a log line: no user, password or query."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return redact(urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")))


def _retry_wait(value: str | None) -> float:
    if not value:
        return DEFAULT_RETRY_WAIT_S
    try:
        seconds = float(value)
    except ValueError:
        import email.utils

        when = email.utils.parsedate_to_datetime(value) if value.strip() else None
        seconds = when.timestamp() - now_ms() / 1000 if when is not None else DEFAULT_RETRY_WAIT_S
    return min(max(seconds, 0.0), MAX_RETRY_WAIT_S)


class Unreachable(Exception):
    """No answer at all (refused, timed out): later sends of the run to the same place are skipped."""


def post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> None:
    """POST ``body``; once more after a 429 or 503, waiting its Retry-After (at most 2 s). Raises
    Unreachable without an answer, OSError naming the status for any other non-2xx."""
    import urllib.error  # only a run that sends something pays for the HTTP client
    import urllib.request

    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    for attempt in (1, 2):
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                response.read()
            return
        except urllib.error.HTTPError as err:
            err.close()
            if attempt == 1 and err.code in (429, 503):
                time.sleep(_retry_wait(err.headers.get("Retry-After")))
                continue
            raise OSError(f"HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            reason = getattr(err, "reason", err)
            raise Unreachable(f"{reason.__class__.__name__}: {reason}") from None
    raise AssertionError("unreachable")


@dataclass
class Sender:
    """Sends to one place for one run: the first failure is one warning (reason redacted), and
    once the place has not answered at all, the run's later sends there are skipped."""

    what: str
    warned: bool = False
    gone: bool = False

    def send(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float, item: str) -> bool:
        if self.gone:
            return False
        try:
            post(url, body, headers, timeout_s)
            return True
        except Exception as err:  # never the job's failure: a warning, the result stands
            self.gone = isinstance(err, Unreachable)
            reason = " ".join(str(err).split())[:300] or err.__class__.__name__
            level = logging.DEBUG if self.warned else logging.WARNING
            log.log(level, "%s: %s not sent to %s: %s", self.what, item, shown(url), redact(reason))
            self.warned = True
            return False
