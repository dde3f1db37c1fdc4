"""A real HTTP endpoint on loopback standing in for an OTLP collector and an OpenLineage backend:
every POST is recorded (path, headers, body) and answered with the status the test queued for its
path (200 by default), so a test sees exactly what a run sent and how it met 429, 503 and 500."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

# What configures a run's telemetry: unset by every telemetry test before it sets its own.
TELEMETRY_ENV = (
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    "OPENLINEAGE_URL",
    "OPENLINEAGE_ENDPOINT",
    "OPENLINEAGE_API_KEY",
    "OPENLINEAGE_NAMESPACE",
    "OPENLINEAGE_DISABLED",
    "OPENLINEAGE_PARENT_ID",
)


@pytest.fixture
def no_telemetry_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TELEMETRY_ENV:
        monkeypatch.delenv(name, raising=False)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self._answers: dict[str, list[tuple[int, dict[str, str]]]] = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                status, headers = receiver._record(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _record(self, request: Received) -> tuple[int, dict[str, str]]:
        with self._lock:
            self.received.append(request)
            queued = self._answers.get(request.path)
            return queued.pop(0) if queued else (200, {})

    def answer(self, path: str, *statuses: int, headers: dict[str, str] | None = None) -> None:
        """The next requests to ``path`` get these statuses, in order (then 200 again)."""
        with self._lock:
            self._answers.setdefault(path, []).extend((s, dict(headers or {})) for s in statuses)

    def reset(self) -> None:
        with self._lock:
            self.received.clear()
            self._answers.clear()

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def run_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    try:
        yield receiver
    finally:
        receiver.close()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was just free): connection refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
