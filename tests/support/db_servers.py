"""PostgreSQL and MariaDB servers for the JDBC catalog tests, each started once on loopback in a
throwaway data directory (the Debian packages' binaries; `make setup` installs them).

A missing binary fails the test that asked for the server with the package to install: a JDBC
catalog left untested is not a pass.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

USER = "tablekeeper"
DATABASE = "iceberg_catalog"
_START_TIMEOUT_S = 60


@dataclass(frozen=True)
class DbServer:
    kind: str  # "postgresql" or "mysql"
    port: int
    password: str = field(repr=False)

    def uri(self, user: str = USER, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"{self.kind}://{user}:{secret}@127.0.0.1:{self.port}/{DATABASE}"

    def connect(self):  # type: ignore[no-untyped-def]
        """An admin connection of the test's own (autocommit), to look at or break the rows."""
        if self.kind == "postgresql":
            import psycopg

            return psycopg.connect(
                host="127.0.0.1",
                port=self.port,
                dbname=DATABASE,
                user=USER,
                password=self.password,
                autocommit=True,
            )
        import pymysql

        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            database=DATABASE,
            user=USER,
            password=self.password,
            autocommit=True,
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"database server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    pytest.fail(f"database server did not listen on {port} in {_START_TIMEOUT_S}s: {log.read_text()[-2000:]}")


def _as_user(preferred: str) -> tuple[list[str], Callable[[Path], None]]:
    """Both servers refuse to run as root (CI's user): run them as an unprivileged account then."""
    if os.geteuid() != 0:
        return [], lambda _path: None
    name = preferred if _user_exists(preferred) else "nobody"  # the package's own account, if made
    entry = pwd.getpwnam(name)

    def own(path: Path) -> None:
        for item in (path, *path.rglob("*")):
            os.chown(item, entry.pw_uid, entry.pw_gid)

    return ["runuser", "-u", name, "--"], own


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    # The server's own process group (runuser passes SIGTERM on but not SIGINT, and a server's
    # children must not outlive it holding the port).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _postgres_bin(name: str) -> str:
    # Debian keeps the server's binaries off PATH, one directory per major version.
    versions = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]), reverse=True
    )
    found = shutil.which(name) or (str(versions[0]) if versions else None)
    if found is None:
        pytest.fail(
            f"PostgreSQL's {name} not found: install the server (apt-get install postgresql), "
            "as make setup does"
        )
    return found


@contextlib.contextmanager
def run_postgres(password: str) -> Iterator[DbServer]:
    prefix, own = _as_user("postgres")
    # Outside pytest's private tmp (mode 0700): the server's own user must reach it.
    root = Path(tempfile.mkdtemp(prefix="tk-postgres-"))
    try:
        root.chmod(0o755)
        (root / "pwfile").write_text(password + "\n")
        own(root)
        log = root / "server.log"
        subprocess.run(
            [
                *prefix,
                _postgres_bin("initdb"),
                "-D",
                str(root / "data"),
                "-U",
                USER,
                "--pwfile",
                str(root / "pwfile"),
                "-A",
                "scram-sha-256",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
        )
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    *prefix,
                    _postgres_bin("postgres"),
                    "-D",
                    str(root / "data"),
                    "-p",
                    str(port),
                    "-k",
                    str(root),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=50",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, which _stop signals
            )
        try:
            _wait_for_port(port, proc, log)
            server = DbServer("postgresql", port, password)
            _create_pg_database(server)
            yield server
        finally:
            _stop(proc, signal.SIGINT)  # PostgreSQL's fast shutdown: no waiting for clients
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _create_pg_database(server: DbServer) -> None:
    import psycopg

    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:  # listening comes a little before accepting logins
        try:
            conn = psycopg.connect(
                host="127.0.0.1",
                port=server.port,
                dbname="postgres",
                user=USER,
                password=server.password,
                autocommit=True,
            )
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")


@contextlib.contextmanager
def run_mariadb(password: str) -> Iterator[DbServer]:
    install, server_bin = (
        shutil.which("mariadb-install-db"),
        shutil.which("mariadbd") or ("/usr/sbin/mariadbd" if Path("/usr/sbin/mariadbd").exists() else None),
    )
    if install is None or server_bin is None:
        pytest.fail(
            "MariaDB not found: install the server (apt-get install mariadb-server), as make setup does"
        )
    prefix, own = _as_user("mysql")
    root = Path(tempfile.mkdtemp(prefix="tk-mariadb-"))
    try:
        root.chmod(0o755)
        (root / "init.sql").write_text(
            f"CREATE DATABASE {DATABASE};\n"
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
            f"CREATE USER '{USER}'@'localhost' IDENTIFIED BY '{password}';\n"
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1';\n"
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'localhost';\n"
        )
        own(root)
        log = root / "server.log"
        subprocess.run(
            [
                *prefix,
                install,
                "--no-defaults",
                f"--datadir={root / 'data'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
        )
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    *prefix,
                    server_bin,
                    "--no-defaults",
                    f"--datadir={root / 'data'}",
                    f"--port={port}",
                    "--bind-address=127.0.0.1",
                    f"--socket={root / 'mysqld.sock'}",
                    f"--pid-file={root / 'mysqld.pid'}",
                    f"--init-file={root / 'init.sql'}",
                    "--skip-log-bin",
                    "--innodb-flush-log-at-trx-commit=0",
                    "--innodb-buffer-pool-size=32M",
                    "--innodb-fast-shutdown=2",
                    "--skip-name-resolve",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, which _stop signals
            )
        try:
            _wait_for_port(port, proc, log)
            yield DbServer("mysql", port, password)
        finally:
            _stop(proc, signal.SIGKILL)  # its data is thrown away: no clean InnoDB shutdown needed
    finally:
        shutil.rmtree(root, ignore_errors=True)
