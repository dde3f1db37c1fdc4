"""Google Cloud Storage and Azure Blob emulators for tests, on loopback ports.

fake-gcs-server (a Go program, built from the Go module proxy by ``make setup``) serves GCS's JSON
API, which pyarrow's GCS client (google-cloud-cpp) speaks; Azurite (Microsoft's emulator, from
npm) serves the Blob API, which pyarrow's Azure client speaks. Both keep objects in memory.

``ThrottlingProxy`` sits in front of either and answers 503 to one request in ``every``, without
forwarding it: the clients must retry, and nothing may be lost.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow.fs as pafs

from tablekeeper.settings import project_home
from tests.support.object_store import LOOPBACK, free_loopback_port, log_tail, stop_process

TOOLS_ENV = "TABLEKEEPER_TOOLS_DIR"
START_TIMEOUT_S = 60.0
GCS_BUCKET = "warehouse"
AZURE_CONTAINER = "warehouse"
AZURE_ACCOUNT = "analytics"  # the account docs/reference/azure.md's catalogs file names


def tools_dir() -> Path:
    """Where ``make setup`` puts the emulators: ``.tools/`` at the project's root."""
    env = os.environ.get(TOOLS_ENV)
    return Path(env).expanduser().resolve() if env else project_home() / ".tools"


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise RuntimeError(f"{what} missing ({path}): run make setup")
    return path


@dataclass(frozen=True)
class GcsEndpoint:
    """Where the test GCS emulator listens. It takes no credentials."""

    url: str  # "http://127.0.0.1:PORT"

    def properties(self) -> dict[str, str]:
        """Iceberg FileIO properties (GCSFileIO and PyIceberg share these names)."""
        return {"gcs.service.host": self.url, "gcs.no-auth": "true", "gcs.project-id": "test"}

    def filesystem(self) -> pafs.GcsFileSystem:
        scheme, _, host = self.url.partition("://")
        return pafs.GcsFileSystem(
            anonymous=True, scheme=scheme, endpoint_override=host, retry_time_limit=None
        )

    def create_bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)


@dataclass(frozen=True)
class AzureEndpoint:
    """Where Azurite listens, and its one account: a fresh key per run, so a test can scan
    outputs for it."""

    url: str  # "http://127.0.0.1:PORT" (the account is served under /<account>)
    account: str
    key: str

    @property
    def host(self) -> str:
        return f"{self.account}.dfs.core.windows.net"

    def connection_string(self, url: str | None = None) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
            f"BlobEndpoint={url or self.url}/{self.account};"
        )

    def properties(self, url: str | None = None) -> dict[str, str]:
        """Iceberg's ADLSFileIO properties: the account's connection string (its emulator endpoint)."""
        return {f"adls.connection-string.{self.account}": self.connection_string(url)}

    def filesystem(self) -> pafs.AzureFileSystem:
        host = self.url.partition("://")[2]
        return pafs.AzureFileSystem(
            self.account,
            account_key=self.key,
            blob_storage_authority=host,
            dfs_storage_authority=host,
            blob_storage_scheme="http",
            dfs_storage_scheme="http",
        )

    def create_container(self, name: str) -> None:
        self.filesystem().create_dir(name)


def _wait(proc: subprocess.Popen[bytes], ready: Callable[[], bool], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} at start:\n{log_tail(log)}")
        try:
            if ready():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not serving after {START_TIMEOUT_S:.0f} s:\n{log_tail(log)}")
        time.sleep(0.1)


def _start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)


def _answers(url: str, path: str) -> bool:
    host, _, port = url.partition("://")[2].partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status < 500
    finally:
        connection.close()


@contextmanager
def run_fake_gcs(workdir: Path) -> Iterator[GcsEndpoint]:
    binary = _require(tools_dir() / "bin" / "fake-gcs-server", "fake-gcs-server")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_loopback_port()
    url = f"http://{LOOPBACK}:{port}"
    log = workdir / "fake-gcs-server.log"
    proc = _start(
        [
            str(binary),
            "-scheme",
            "http",
            "-host",
            LOOPBACK,
            "-port",
            str(port),
            "-backend",
            "memory",
            "-public-host",
            f"{LOOPBACK}:{port}",
            "-external-url",
            url,
            "-log-level",
            "warn",
        ],
        log,
    )
    try:
        _wait(proc, lambda: _answers(url, "/storage/v1/b"), log, "fake-gcs-server")
        yield GcsEndpoint(url)
    finally:
        stop_process(proc)


@contextmanager
def run_azurite(workdir: Path) -> Iterator[AzureEndpoint]:
    script = _require(tools_dir() / "azurite" / "node_modules" / ".bin" / "azurite-blob", "Azurite")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_loopback_port()
    url = f"http://{LOOPBACK}:{port}"
    endpoint = AzureEndpoint(url, AZURE_ACCOUNT, base64.b64encode(secrets.token_bytes(64)).decode("ascii"))
    log = workdir / "azurite.log"
    env = {**os.environ, "AZURITE_ACCOUNTS": f"{endpoint.account}:{endpoint.key}"}
    proc = _start(
        [
            str(script),
            "--blobHost",
            LOOPBACK,
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--location",
            str(workdir),
            "--silent",
        ],
        log,
        env,
    )
    try:
        _wait(proc, lambda: _answers(url, f"/{endpoint.account}?comp=list"), log, "Azurite")
        yield endpoint
    finally:
        stop_process(proc)


class _Throttler(http.server.BaseHTTPRequestHandler):
    """Forwards each request to ``upstream`` as it came (signatures stay valid), except one in
    ``every``, which gets 503 without reaching it, as a service under load answers."""

    protocol_version = "HTTP/1.1"
    upstream = ""
    every = 10
    counter: ClassVar[list[int]] = [0, 0]  # requests seen, requests refused
    lock: ClassVar[threading.Lock] = threading.Lock()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        body = self._body()
        with self.lock:
            self.counter[0] += 1
            refuse = self.counter[0] % self.every == 0
            if refuse:
                self.counter[1] += 1
        if refuse:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.send_header("Retry-After", "0")
            self.end_headers()
            return
        host, _, port = self.upstream.partition("://")[2].partition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding")
            }
            headers["Content-Length"] = str(len(body))
            connection.request(self.command, self.path, body=body, headers=headers)
            reply = connection.getresponse()
            data = reply.read()
            self.send_response(reply.status, reply.reason)
            for key, value in reply.getheaders():
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            connection.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _handle  # noqa: N815

    def log_message(self, *args: object) -> None:  # keep the test output to failures
        pass


@contextmanager
def throttling_proxy(upstream: str, every: int = 10) -> Iterator[tuple[str, list[int]]]:
    """(the proxy's url, [requests seen, requests refused with 503])."""
    counter = [0, 0]
    handler = type("Handler", (_Throttler,), {"upstream": upstream, "every": every, "counter": counter})
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}", counter
    finally:
        server.shutdown()
        server.server_close()
