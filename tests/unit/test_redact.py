"""Passwords inside catalog URIs never reach output: the failure line at every log level (a DEBUG
traceback included), the ledger row, ``history --json`` and ``doctor`` (no Spark)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest

from tablekeeper.cli import main
from tablekeeper.redact import (
    install_log_redaction,
    is_secret_key,
    redact,
    redacted_properties,
    register_secret,
    register_uri_secrets,
)
from tablekeeper.spark.session import QUERY_CONTEXT_LOGGERS, quiet_query_context_logs

SECRETS = ("PASSWORD1x", "PASSWORD2x", "PASSWORD3x")


def conf(tmp_path: Path) -> Path:
    path = tmp_path / "catalogs.yaml"
    path.write_text(
        f"""
ledger: {{catalog: led}}
catalogs:
  led:
    type: sql
    uri: sqlite:///{tmp_path}/catalog.db
    warehouse: {tmp_path}/sql
  rc:
    type: rest
    uri: http://user:PASSWORD1x@127.0.0.1:9/api
  pg:
    type: sql
    uri: postgresql://admin:PASSWORD2x@127.0.0.1:9/db
    warehouse: {tmp_path}/pg
    jdbc-uri: jdbc:postgresql://127.0.0.1:9/db?user=admin&password=PASSWORD3x
"""
    )
    return path


def assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://u:pw12@h/api down", "http://u:***@h/api down"),
        ("postgresql://admin:pw34@db:5432/x", "postgresql://admin:***@db:5432/x"),
        (
            "jdbc:postgresql://h/d?user=a&password=pw56&ssl=true",
            "jdbc:postgresql://h/d?user=a&password=***&ssl=true",
        ),
        ("jdbc:sqlserver://h;user=a;password=pw78;db=x", "jdbc:sqlserver://h;user=a;password=***;db=x"),
        (
            "https://h/x?X-Amz-Credential=c1&X-Amz-Signature=s1&n=1",
            "https://h/x?X-Amz-Credential=***&X-Amz-Signature=***&n=1",
        ),
        ("https://h/x?api_key=k1&token=t1", "https://h/x?api_key=***&token=***"),
        # Ordinary paths keep their look: a partition directory is not a query parameter.
        ("s3://bucket/t/key=1/part-0.parquet", "s3://bucket/t/key=1/part-0.parquet"),
        ("http://host:8181/api", "http://host:8181/api"),
    ],
)
def test_uri_passwords_and_secret_parameters_are_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("level", ["DEBUG", "INFO", "WARNING", "ERROR"])
@pytest.mark.parametrize("catalog", ["rc", "pg"])
def test_a_failure_line_never_shows_a_uri_password(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    level: str,
    catalog: str,
) -> None:
    caplog.set_level(getattr(logging, level))
    argv = ["--log-level", level, "expire-snapshots", "--table", "db.x", "--catalog", catalog]
    code = main([*argv, "--conf-file", str(conf(tmp_path))])
    out, err = capsys.readouterr()
    assert code != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("tablekeeper: ") and "***@127.0.0.1" in last
    assert_clean(out + err + caplog.text)
    if level == "DEBUG":
        assert "Traceback" in caplog.text  # the trace is there, scrubbed


def test_the_ledger_and_history_never_show_a_uri_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(conf(tmp_path))
    for catalog in ("rc", "pg"):
        main(["expire-snapshots", "--table", "db.x", "--catalog", catalog, "--conf-file", path])
    capsys.readouterr()
    assert main(["history", "--json", "--conf-file", path]) == 0
    out, err = capsys.readouterr()
    assert '"count":2' in out  # both failed runs are there, with their errors
    assert "***@127.0.0.1" in out
    assert_clean(out + err)


@pytest.mark.parametrize("as_json", [False, True])
def test_doctor_never_shows_a_uri_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    main(["doctor", "--conf-file", str(conf(tmp_path)), *(["--json"] if as_json else [])])
    out, err = capsys.readouterr()
    assert "admin:***@127.0.0.1" in out and "password=***" in out
    assert_clean(out + err)


def test_a_debug_traceback_is_scrubbed_of_registered_secrets(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    register_secret("vended-tok-98765")
    caplog.set_level(logging.DEBUG)
    try:
        raise RuntimeError("denied for vended-tok-98765")
    except RuntimeError:
        logging.getLogger("tablekeeper.test").debug("failed", exc_info=True)
    assert "RuntimeError: denied for ***" in caplog.text
    assert "vended-tok-98765" not in caplog.text


# PySpark 4.0 added these loggers; on Spark 3.5 there is nothing to quiet (quiet_query_context_logs
# returns at once there, and the plain debug-traceback test above covers redaction).
needs_query_context_loggers = pytest.mark.skipif(
    find_spec("pyspark.logger") is None, reason="PySpark before 4.0 has no query-context loggers"
)


@pytest.fixture
def pyspark_query_context_loggers() -> Iterator[None]:
    """The state PySpark leaves after its first exception with a query context: its two loggers
    exist and do not propagate (made in setup, before the test's log capture is attached)."""
    from pyspark.logger import PySparkLogger

    loggers = [PySparkLogger.getLogger(name) for name in QUERY_CONTEXT_LOGGERS]
    for logger in loggers:
        logger.propagate = False
    yield
    for logger in loggers:
        logger.propagate = True


@needs_query_context_loggers
@pytest.mark.usefixtures("pyspark_query_context_loggers")
def test_a_debug_traceback_is_scrubbed_after_pyspark_made_its_query_context_loggers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: PySpark's logger gave the shared capture handler its JSON formatter, which prints the
    # exception's own text (unscrubbed) and no traceback.
    test_a_debug_traceback_is_scrubbed_of_registered_secrets(caplog)


@needs_query_context_loggers
def test_pyspark_query_context_logs_are_quiet_once_a_session_is_made(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pyspark.logger import PySparkLogger

    quiet_query_context_logs()
    for name in QUERY_CONTEXT_LOGGERS:
        try:
            raise RuntimeError("[UNRESOLVED_COLUMN] no column x")
        except RuntimeError:
            PySparkLogger.getLogger(name).exception("no column x", errorClass="UNRESOLVED_COLUMN")
    assert capsys.readouterr().err == ""


def test_a_uri_password_is_masked_whole_however_it_is_written() -> None:
    # An unescaped '@' in the password: URI parsers split at the authority's last '@'.
    raw = "postgresql://alice:p@ss-Rw9x@db.example:5432/iceberg"
    register_uri_secrets(raw)
    for text in (f"catalog c: {raw} did not answer", f"{raw}?sslmode=require", f"'{raw}'"):
        shown = redact(text)
        assert "Rw9x" not in shown and "p@ss" not in shown, shown
        assert "alice:***@db.example" in shown
    # Percent-escaped: the driver decodes it, and its messages quote the decoded form.
    register_uri_secrets("mysql://bob:pw%23Qz7%3Ak@db.example/iceberg")
    assert "Qz7" not in redact("Access denied for bob using password pw#Qz7:k")


def test_azure_account_keys_and_sas_signatures_are_secret_by_name() -> None:
    assert is_secret_key("adls.connection-string.acct.dfs.core.windows.net")
    assert is_secret_key("adls.auth.shared-key.account.key")
    assert is_secret_key("adls.sas-token.acct") and is_secret_key("gcs.oauth2.token")
    assert not is_secret_key("adls.auth.shared-key.account.name")
    shown = redacted_properties({"adls.auth.shared-key.account.key": "a2V5", "gcs.project-id": "p"})
    assert shown == {"adls.auth.shared-key.account.key": "***", "gcs.project-id": "p"}
    # A SAS URL's signature never seen before is masked all the same.
    assert (
        redact("GET http://h/acct/c/x?sv=2023&sig=Zm9vYmFy%3D 403")
        == "GET http://h/acct/c/x?sv=2023&sig=*** 403"
    )
