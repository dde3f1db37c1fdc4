"""Spark's own redaction (spark.redaction.regex) hides every secret the session's settings carry:
Spark masks a setting when its name or its value matches, in the UI, event logs and conf dumps."""

from __future__ import annotations

import re
from pathlib import Path

from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.spark.session import SPARK_REDACTION, session_conf

SECRETS = ("pw-in-userinfo", "/keys/client.pk8", "oauth-client-secret", "sas-signature")


def _shown(conf: dict[str, str]) -> dict[str, str]:
    """What Spark shows: a setting whose name or value matches the regex is masked."""
    pattern = re.compile(SPARK_REDACTION)
    return {k: v for k, v in conf.items() if not (pattern.search(k) or pattern.search(v))}


def test_no_secret_of_a_catalog_reaches_a_setting_spark_shows(tmp_path: Path) -> None:
    text = (
        "default: pg\ncatalogs:\n"
        # A parameter whose name says nothing Spark's own list knows (a key, a signature), and a
        # password in a REST uri's userinfo.
        "  pg: {type: sql, warehouse: '${warehouse}/wh', uri: 'postgresql://tk@db.internal:5432/"
        "cat?sslmode=verify-full&sslkey=/keys/client.pk8'}\n"
        "  rest: {type: rest, uri: 'http://tk:pw-in-userinfo@127.0.0.1:8181/api?sig=sas-signature', "
        "warehouse: wh, credential: 'client:oauth-client-secret'}\n"
    )
    conf = session_conf(parse_catalogs(text, tmp_path), [])
    uri = conf["spark.sql.catalog.pg.uri"]
    assert "sslkey=/keys/client.pk8" in uri  # the driver still gets its parameter
    shown = "\n".join(f"{k}={v}" for k, v in _shown(conf).items())
    assert not [s for s in SECRETS if s in shown]


def test_plain_settings_stay_readable(tmp_path: Path) -> None:
    text = (
        "default: pg\ncatalogs:\n"
        "  pg: {type: sql, warehouse: '${warehouse}/wh', uri: 'postgresql://db.internal:5432/cat?sslmode=require'}\n"
    )
    conf = session_conf(parse_catalogs(text, tmp_path), [])
    shown = _shown(conf)
    assert shown["spark.sql.catalog.pg.uri"] == "jdbc:postgresql://db.internal:5432/cat?sslmode=require"
    assert shown["spark.sql.catalog.pg.warehouse"].endswith("/wh")
