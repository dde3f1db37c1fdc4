"""The databases the sql catalog keeps Iceberg's JDBC tables in: a sqlite file, PostgreSQL, or
MySQL/MariaDB, each reached from Python (DB-API) and from Iceberg Java (a JDBC URL).

What differs between them lives here: the URI forms, connecting, the parameter style, the upsert
that ignores a present row, and what a failed statement means for a commit (``Outcome``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from tablekeeper.errors import ConfigError, StorageError
from tablekeeper.redact import redact, register_secret

Kind = Literal["sqlite", "postgresql", "mysql"]
# The schemes a catalogs file may name (PyIceberg's SQLAlchemy forms with the driver used here too).
_SCHEMES: dict[str, Kind] = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "postgresql+psycopg": "postgresql",
    "mysql": "mysql",
    "mysql+pymysql": "mysql",
    "mariadb": "mysql",
    "mariadb+pymysql": "mysql",
}
SUPPORTED = "sqlite:///path, postgresql://user:password@host:port/db or mysql://user:password@host:port/db"
_CONNECT_TIMEOUT_S = 10
# A statement the server still runs after its client died (queued behind a lock) could land after
# a later run cleaned the dead run's files: the server ends each statement within these bounds
# (PostgreSQL's statement and lock timeouts, MySQL's lock wait and the client's socket timeouts),
# and a dead run's journals are finished only after SETTLE_MS (tablekeeper.catalog.sql).
STATEMENT_TIMEOUT_S = 60
LOCK_TIMEOUT_S = 30
SETTLE_MS = 4 * STATEMENT_TIMEOUT_S * 1000


class Outcome(Enum):
    """What a failed statement left behind."""

    REFUSED = "the server refused it: the statement was rolled back"
    DUPLICATE = "the key is present: nothing was written"
    LOST = "the connection broke after sending: it may or may not have been applied"


@dataclass(frozen=True)
class Database:
    """One database, parsed from a catalog's ``uri`` (user and password may instead come from the
    ``jdbc.user`` / ``jdbc.password`` properties, the names Iceberg Java reads)."""

    kind: Kind
    shown: str  # the uri fit to print: its password masked
    path: Path | None = None  # sqlite
    host: str = ""
    port: int = 0
    dbname: str = ""
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    query: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def parse(catalog: str, uri: str, properties: dict[str, str] | None = None) -> Database:
        props = properties or {}
        if uri.startswith("sqlite:///"):
            return Database("sqlite", uri, path=Path(uri[len("sqlite:///") :]))
        scheme = uri.partition("://")[0].lower()
        kind = _SCHEMES.get(scheme) if "://" in uri else None
        if kind is None:
            raise ConfigError(f"catalog {catalog!r}: unsupported uri {redact(uri)!r}: use {SUPPORTED}")
        parts = urlsplit(uri)
        try:
            port = parts.port or (5432 if kind == "postgresql" else 3306)
        except ValueError:
            raise ConfigError(f"catalog {catalog!r}: uri {redact(uri)!r} has a bad port") from None
        dbname = unquote(parts.path.lstrip("/"))
        if not parts.hostname or not dbname or "/" in dbname:
            raise ConfigError(
                f"catalog {catalog!r}: uri {redact(uri)!r} needs a host and a database: "
                f"{kind}://user:password@host:port/database"
            )
        query = tuple(parse_qsl(parts.query, keep_blank_values=True))
        if kind == "mysql" and query:
            names = ", ".join(sorted({k for k, _ in query}))
            raise ConfigError(
                f"catalog {catalog!r}: {kind} uri parameters ({names}) are not supported: remove them"
            )
        for name, _ in query:
            if name in ("user", "password"):
                raise ConfigError(
                    f"catalog {catalog!r}: put the {name} in the uri's user:password@ or in jdbc.{name}"
                )
        user = unquote(parts.username) if parts.username else props.get("jdbc.user")
        password = unquote(parts.password) if parts.password is not None else props.get("jdbc.password")
        register_secret(password)  # the decoded form too: a driver may quote it
        return Database(kind, redact(uri), None, parts.hostname, port, dbname, user, password, query)

    def connect(self, catalog: str) -> Any:
        """A DB-API connection in autocommit mode: each statement is its own transaction."""
        try:
            if self.kind == "sqlite":
                assert self.path is not None
                # A generous busy timeout: Spark's JDBC catalog and other processes share the file.
                return sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            if self.kind == "postgresql":
                import psycopg
                from psycopg.conninfo import make_conninfo

                query = dict(self.query)
                bounds = f"-c statement_timeout={STATEMENT_TIMEOUT_S}s -c lock_timeout={LOCK_TIMEOUT_S}s"
                query["options"] = f"{bounds} {query['options']}" if query.get("options") else bounds
                conninfo = make_conninfo(
                    "",
                    host=self.host,
                    port=self.port,
                    dbname=self.dbname,
                    user=self.user,
                    password=self.password,
                    connect_timeout=_CONNECT_TIMEOUT_S,
                    **query,
                )
                return psycopg.connect(conninfo, autocommit=True)
            import pymysql

            return pymysql.connect(
                host=self.host,
                port=self.port,
                database=self.dbname,
                user=self.user,
                password=self.password or "",
                connect_timeout=_CONNECT_TIMEOUT_S,
                read_timeout=STATEMENT_TIMEOUT_S,
                write_timeout=STATEMENT_TIMEOUT_S,
                init_command=f"SET SESSION innodb_lock_wait_timeout = {LOCK_TIMEOUT_S}",
                autocommit=True,
                charset="utf8mb4",
            )
        except ImportError as err:
            package = "psycopg[binary]" if self.kind == "postgresql" else "PyMySQL"
            raise ConfigError(
                f"catalog {catalog!r}: the {self.kind} driver is missing ({err}): pip install '{package}'"
            ) from None
        except Exception as err:
            raise StorageError(
                f"catalog {catalog}: {self.shown} did not answer ({_reason(err)}): check the catalog uri, "
                "its user and password, and that the database is up"
            ) from None

    def sql(self, statement: str) -> str:
        """``statement`` written with ``?`` placeholders, in this driver's parameter style."""
        return statement if self.kind == "sqlite" else statement.replace("?", "%s")

    def insert_ignoring_present(self, table: str, values: str) -> str:
        if self.kind == "sqlite":
            return f"INSERT OR IGNORE INTO {table} VALUES ({values})"
        if self.kind == "mysql":
            # Not INSERT IGNORE, which would also turn a too-long value into a truncated row.
            return (
                f"INSERT INTO {table} VALUES ({values}) ON DUPLICATE KEY UPDATE catalog_name = catalog_name"
            )
        return f"INSERT INTO {table} VALUES ({values}) ON CONFLICT DO NOTHING"

    def errors(self) -> tuple[type[BaseException], ...]:
        """The driver's exception classes (a statement's failure is one of these)."""
        if self.kind == "sqlite":
            return (sqlite3.Error,)
        if self.kind == "postgresql":
            import psycopg

            return (psycopg.Error,)
        import pymysql

        return (pymysql.err.MySQLError,)

    def outcome(self, err: BaseException) -> Outcome:
        """What ``err``, raised by a statement on an open connection, left behind."""
        if self.kind == "sqlite":
            if isinstance(err, sqlite3.IntegrityError):
                return Outcome.DUPLICATE
            # sqlite rolls a failed statement back (busy, locked); anything else is a broken file.
            return Outcome.REFUSED if isinstance(err, sqlite3.OperationalError) else Outcome.LOST
        if self.kind == "postgresql":
            import psycopg

            if isinstance(err, psycopg.errors.UniqueViolation):
                return Outcome.DUPLICATE
            # An error the server sent carries its SQLSTATE (the transaction was rolled back); a
            # client-side one (connection closed, timeout) has none.
            return Outcome.REFUSED if getattr(err, "sqlstate", None) else Outcome.LOST
        code = err.args[0] if err.args and isinstance(err.args[0], int) else None
        if code == 1062:  # ER_DUP_ENTRY
            return Outcome.DUPLICATE
        # Server errors (1000-1999) roll the statement back; a client one (lost connection, gone
        # away, a closed socket's 0) may follow a statement the server has applied.
        return Outcome.REFUSED if code is not None and 1000 <= code < 2000 else Outcome.LOST

    def columns(self, conn: Any, table: str) -> set[str]:
        cursor = conn.cursor()
        try:
            cursor.execute(f"SELECT * FROM {table} WHERE 1 = 0")
            return {str(d[0]).lower() for d in cursor.description}
        finally:
            cursor.close()

    def jdbc(self) -> dict[str, str]:
        """Iceberg Java's JDBC catalog settings for this database (``uri``, ``jdbc.user``,
        ``jdbc.password``); the password goes in a setting Spark redacts, never in the URL."""
        if self.kind == "sqlite":
            return {"uri": f"jdbc:sqlite:{self.path}"}
        host = f"[{self.host}]" if ":" in self.host else self.host
        # MariaDB's driver (conf/jars.txt) serves MySQL servers too; it takes only its own scheme.
        scheme = "postgresql" if self.kind == "postgresql" else "mariadb"
        url = f"jdbc:{scheme}://{host}:{self.port}/{self.dbname}"
        if self.query:
            url += "?" + "&".join(f"{k}={v}" for k, v in self.query)
        conf = {"uri": url}
        if self.user is not None:
            conf["jdbc.user"] = self.user
        if self.password is not None:
            conf["jdbc.password"] = self.password
        return conf


def _reason(err: BaseException) -> str:
    # Drivers' messages can run to several lines (libpq's per-address attempts): the first says it.
    text = str(err).strip().splitlines()
    return redact(text[0] if text else type(err).__name__)
