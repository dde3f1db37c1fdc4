"""An S3-compatible object store for tests: S3Proxy (in-memory backend) on a loopback port.

Also the process plumbing the test servers share: a free port, the tail of a server's log for
error messages, and a stop that cannot hang a test session.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from tablekeeper.settings import role_jar_paths

LOOPBACK = "127.0.0.1"
# The bucket the session's S3 server is created with (tests/conftest.py).
S3_BUCKET = "warehouse"
# Small heap, serial GC and C1 only: these servers handle a few requests per test, and on a
# 2-core runner a JVM tuned for throughput spends its start-up compiling rather than serving.
JVM_FLAGS = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
S3_START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 20


@dataclass(frozen=True)
class S3Endpoint:
    """Where a test S3 store listens and the one identity it accepts."""

    endpoint: str  # "http://127.0.0.1:PORT"
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def properties(self) -> dict[str, str]:
        """Iceberg FileIO properties (Java S3FileIO and PyIceberg share these names)."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
            # Bucket names are not resolvable hosts on loopback: address buckets in the path.
            "s3.path-style-access": "true",
        }

    def filesystem(self, *, allow_delayed_open: bool = False) -> pafs.S3FileSystem:
        """pyarrow's S3 filesystem on this store. ``allow_delayed_open`` writes a small file as one
        PutObject instead of a three-request multipart upload (about twice as fast for many small
        objects), at the price of reporting open errors only when the stream closes."""
        scheme, _, host_port = self.endpoint.partition("://")
        return pafs.S3FileSystem(
            endpoint_override=host_port,
            scheme=scheme,
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
            allow_delayed_open=allow_delayed_open,
        )

    def create_bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)


def free_loopback_port() -> int:
    """A port free right now. The server binds it a moment later; on a test runner nothing else
    competes for ephemeral ports in that window often enough to matter."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def require_jars(paths: Sequence[Path]) -> list[Path]:
    missing = [str(p) for p in paths if not p.is_file()]
    if not paths or missing:
        raise RuntimeError(
            f"test server jars missing ({', '.join(missing) or 'none listed'}): run make setup"
        )
    return list(paths)


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not log.is_file():
        return "(no log written)"
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def start_java(args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``java`` with the shared JVM flags, all output into ``log`` (a pipe nobody drains would
    block the server once its buffer fills)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            ["java", *JVM_FLAGS, *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def port_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _lists_buckets(s3: S3Endpoint) -> bool:
    try:
        s3.filesystem().get_file_info(pafs.FileSelector("", recursive=False))
    except OSError:
        return False
    return True


@contextmanager
def run_s3proxy(workdir: Path, basedir: Path | None = None) -> Iterator[S3Endpoint]:
    """S3Proxy with its in-memory backend (or, with ``basedir``, objects kept as files there, for
    benchmarks larger than memory), answering one random identity (AWS signature v2 or v4).

    The credentials are fresh per run so a test can scan logs and outputs for them.
    """
    (jar,) = require_jars(role_jar_paths("test-s3-server"))
    port = free_loopback_port()
    s3 = S3Endpoint(
        endpoint=f"http://{LOOPBACK}:{port}",
        access_key="tk" + secrets.token_hex(6),
        secret_key=secrets.token_hex(20),
    )
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "s3proxy.properties"
    props.write_text(
        "\n".join(
            [
                f"s3proxy.endpoint={s3.endpoint}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={s3.access_key}",
                f"s3proxy.credential={s3.secret_key}",
                # S3Proxy still takes the backend's settings under the jclouds.* names.
                "jclouds.provider=transient-nio2" if basedir is None else "jclouds.provider=filesystem-nio2",
                "" if basedir is None else f"jclouds.filesystem.basedir={basedir}",
                f"jclouds.identity={s3.access_key}",
                f"jclouds.credential={s3.secret_key}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    log = workdir / "s3proxy.log"
    proc = start_java(["-jar", str(jar), "--properties", str(props)], log)
    try:
        deadline = time.monotonic() + S3_START_TIMEOUT_S
        while not (port_open(port) and _lists_buckets(s3)):
            if proc.poll() is not None:
                raise RuntimeError(f"S3Proxy exited with {proc.returncode} at start:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"S3Proxy not serving after {S3_START_TIMEOUT_S:.0f} s:\n{log_tail(log)}")
            time.sleep(0.1)
        yield s3
    finally:
        stop_process(proc)
