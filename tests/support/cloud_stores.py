"""Google Cloud Storage and Azure Blob emulators for tests, on loopback ports.

fake-gcs-server (a Go program, built from the Go module proxy by ``make setup``) serves GCS's JSON
API, which pyarrow's GCS client (google-cloud-cpp) speaks; Azurite (Microsoft's emulator, from
npm) serves the Blob API, which pyarrow's Azure client speaks. Both keep objects in memory.

``throttling_proxy`` sits in front of either and answers 503 to one request in ``every``, without
forwarding it: the clients must retry, and nothing may be lost.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import http.server
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode

import pyarrow.fs as pafs

from tablekeeper.settings import project_home
from tests.support.object_store import LOOPBACK, free_loopback_port, log_tail, stop_process
from tests.support.store_proxy import STATS_PATH

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
        host, _, port = self.url.partition("://")[2].partition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            body = json.dumps({"name": name})
            connection.request(
                "POST", "/storage/v1/b?project=test", body, {"Content-Type": "application/json"}
            )
            reply = connection.getresponse()
            if reply.status != 200:
                raise RuntimeError(
                    f"fake-gcs-server refused bucket {name}: {reply.status} {reply.read()[:200]!r}"
                )
        finally:
            connection.close()


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

    def account_sas(self, hours: int = 24) -> str:
        """An account SAS for the Blob service (read, add, create, write, delete, list on
        containers and blobs), signed with the account's key, as a catalog would vend it."""
        expiry = (datetime.now(timezone.utc) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
        fields = {
            "sv": "2021-08-06",
            "ss": "b",
            "srt": "sco",
            "sp": "racwdl",
            "se": expiry,
            "spr": "https,http",
        }
        # The account SAS string-to-sign of versions 2020-12-06 and later (empty: start, IP, scope).
        signed = "\n".join(
            [
                self.account,
                fields["sp"],
                fields["ss"],
                fields["srt"],
                "",
                expiry,
                "",
                fields["spr"],
                fields["sv"],
                "",
                "",
            ]
        )
        digest = hmac.new(base64.b64decode(self.key), signed.encode(), hashlib.sha256).digest()
        return urlencode({**fields, "sig": base64.b64encode(digest).decode()})

    def container_sas(self, container: str, hours: int = 24) -> str:
        """A service SAS for one container (read, add, create, write, delete, list), signed with
        the account's key: it may delete the container's blobs, not send the account's batch."""
        expiry = (datetime.now(timezone.utc) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
        fields = {"sv": "2021-08-06", "sr": "c", "sp": "racwdl", "se": expiry, "spr": "https,http"}
        # The Blob service SAS string-to-sign of versions 2020-12-06 and later.
        resource = f"/blob/{self.account}/{container}"
        signed = "\n".join(
            [fields["sp"], "", expiry, resource, "", "", fields["spr"], fields["sv"], "c", *[""] * 7]
        )
        digest = hmac.new(base64.b64decode(self.key), signed.encode(), hashlib.sha256).digest()
        return urlencode({**fields, "sig": base64.b64encode(digest).decode()})


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


def _start(
    args: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd
        )


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
            "--disableTelemetry",  # it would call out to Microsoft (no network here, and none wanted)
            "--silent",
        ],
        log,
        env,
        cwd=workdir,  # anything it writes besides the objects (kept in memory) stays there
    )
    try:
        _wait(proc, lambda: _answers(url, f"/{endpoint.account}?comp=list"), log, "Azurite")
        yield endpoint
    finally:
        stop_process(proc)


@dataclass(frozen=True)
class Proxy:
    """A store proxy running in its own process (tests/support/store_proxy.py)."""

    url: str

    def stats(self) -> dict[str, Any]:
        host, _, port = self.url.partition("://")[2].partition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request("GET", STATS_PATH)
            stats: dict[str, Any] = json.loads(connection.getresponse().read())
            return stats
        finally:
            connection.close()

    def counts(self) -> tuple[int, int]:
        """(requests seen, requests refused with 503)."""
        stats = self.stats()
        return len(stats["seen"]), int(stats["refused"])


@contextmanager
def throttling_proxy(upstream: str, every: int = 10) -> Iterator[Proxy]:
    """A proxy in front of ``upstream`` answering 503 to every ``every``-th request (0: none, a
    recording proxy), in a process of its own (store_proxy says why)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_proxy", upstream, str(every)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline() or b"0")
        if not port:
            raise RuntimeError(f"the store proxy exited with {proc.wait()} at start")
        yield Proxy(f"http://{LOOPBACK}:{port}")
    finally:
        stop_process(proc)


class _TokenEndpoint(http.server.BaseHTTPRequestHandler):
    """Google's OAuth2 token endpoint for one service account: a JWT-bearer grant whose assertion
    that account's key signed (checked with its public key) gets ``minted-<n>``, good for
    ``lifetime_s``; anything else gets 400, as Google answers a bad signature."""

    public_key: Any = None
    audience = ""
    lifetime_s = 3600
    minted: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        form = dict(parse_qsl(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()))
        status, answer = 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        head, _, signature = form.get("assertion", "").rpartition(".")
        try:
            pad = "=" * (-len(signature) % 4)
            self.public_key.verify(
                base64.urlsafe_b64decode(signature + pad), head.encode(), padding.PKCS1v15(), hashes.SHA256()
            )
            claims_part = head.partition(".")[2]
            claims = json.loads(base64.urlsafe_b64decode(claims_part + "=" * (-len(claims_part) % 4)))
            if claims["aud"] == self.audience and "devstorage" in claims["scope"]:
                self.minted.append(f"minted-{len(self.minted) + 1}")
                status, answer = 200, {"access_token": self.minted[-1], "expires_in": self.lifetime_s}
        except (InvalidSignature, ValueError, KeyError):
            pass
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def service_account(lifetime_s: int = 3600) -> Iterator[tuple[str, list[str]]]:
    """(a service-account key's JSON, whose token_uri is a loopback token endpoint for it; the
    tokens that endpoint minted so far)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    minted: list[str] = []
    fields = {"public_key": key.public_key(), "lifetime_s": lifetime_s, "minted": minted}
    handler = type("Handler", (_TokenEndpoint,), fields)
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), handler)
    handler.audience = f"http://{LOOPBACK}:{server.server_address[1]}/token"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "test",
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": "tablekeeper@test.iam.gserviceaccount.com",
        "token_uri": handler.audience,
    }
    try:
        yield json.dumps(info), minted
    finally:
        server.shutdown()
        server.server_close()
