"""S3 settings as Iceberg names them, their S3A twins, and the redaction of secrets in output."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf, s3a_conf
from tablekeeper.errors import ConfigError
from tablekeeper.io import storage
from tablekeeper.io.s3 import S3Settings
from tablekeeper.redact import install_log_redaction, redact, redacted_properties, register_secret

ENDPOINT = {"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "us-east-1"}


def test_an_endpoint_means_path_style_unless_told_otherwise() -> None:
    settings = S3Settings.from_properties(ENDPOINT)
    assert settings.endpoint == "http://127.0.0.1:9000" and settings.uses_path_style
    virtual = S3Settings.from_properties({**ENDPOINT, "s3.path-style-access": "false"})
    assert not virtual.uses_path_style
    assert not S3Settings.from_properties({**ENDPOINT, "s3.force-virtual-addressing": "true"}).uses_path_style
    assert S3Settings.from_properties({"s3.endpoint": "minio:9000"}).endpoint == "https://minio:9000"
    assert S3Settings.from_properties({}).is_default


def test_s3_settings_refuse_what_they_cannot_honour() -> None:
    with pytest.raises(ConfigError, match=r"unsupported S3 properties s3\.sse\.type"):
        S3Settings.from_properties({"s3.sse.type": "kms"})
    with pytest.raises(ConfigError, match=r"only one of s3\.access-key-id and s3\.secret-access-key"):
        S3Settings.from_properties({"s3.access-key-id": "AKIA0000"})
    with pytest.raises(ConfigError, match="must be true or false"):
        S3Settings.from_properties({"s3.path-style-access": "yes"})
    with pytest.raises(ConfigError, match="from 1 to 1000"):
        S3Settings.from_properties({"s3.delete.batch-size": "5000"})
    with pytest.raises(ConfigError, match="use http://host:port"):
        S3Settings.from_properties({"s3.endpoint": "ftp://host"})


def test_secrets_stay_out_of_the_settings_repr() -> None:
    settings = S3Settings.from_properties(
        {"s3.access-key-id": "AKIA0000", "s3.secret-access-key": "hush-1234"}
    )
    assert "hush-1234" not in repr(settings) and settings.max_attempts == 10


def test_s3a_gets_the_same_store_and_s3_schemes() -> None:
    conf = s3a_conf(
        {
            **ENDPOINT,
            "s3.access-key-id": "AKIA0000",
            "s3.secret-access-key": "hush",
            "s3.retry.num-retries": "4",
        }
    )
    assert conf["fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.endpoint.region"] == "us-east-1"
    assert (conf["fs.s3a.access.key"], conf["fs.s3a.secret.key"]) == ("AKIA0000", "hush")
    assert conf["fs.s3a.aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")
    assert conf["fs.s3.impl"] == conf["fs.s3n.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["fs.s3a.attempts.maximum"] == "5"
    temporary = s3a_conf({"s3.access-key-id": "A", "s3.secret-access-key": "B", "s3.session-token": "C"})
    assert temporary["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")


def test_rest_catalogs_parse_and_map_to_iceberg_spark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = parse_catalogs(
        "catalogs:\n  lake:\n    type: rest\n    uri: https://cat.example/api\n"
        "    credential: client:sup3r-secret\n    s3.region: eu-west-1\n",
        tmp_path,
    ).get("lake")
    assert config.warehouse == "" and config.storage == {"s3.region": "eu-west-1"}
    conf = iceberg_catalog_conf(config)
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert conf["spark.sql.catalog.lake.uri"] == "https://cat.example/api"
    assert "spark.sql.catalog.lake.warehouse" not in conf
    assert "sup3r-secret" not in repr(config)
    # Parsing learnt the secret: it is masked wherever it shows up, whole or after client:.
    assert redact("token request with client:sup3r-secret failed") == "token request with *** failed"
    assert redact("secret sup3r-secret") == "secret ***"
    with pytest.raises(ConfigError, match="needs a 'uri'"):
        parse_catalogs("catalogs:\n  lake:\n    type: rest\n", tmp_path)


def test_log_records_and_printed_properties_are_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    register_secret("tok-ABCDEFGH")
    install_log_redaction()
    with caplog.at_level(logging.INFO):
        logging.getLogger("tablekeeper.test").info("bearer %s sent", "tok-ABCDEFGH")
    assert "tok-ABCDEFGH" not in caplog.text and "bearer *** sent" in caplog.text
    shown = redacted_properties({"token": "x1234", "s3.endpoint": "http://h", "note": "uses tok-ABCDEFGH"})
    assert shown == {"token": "***", "s3.endpoint": "http://h", "note": "uses ***"}


def test_executors_take_the_driver_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "_state", {})
    monkeypatch.setenv(storage.STORAGE_ENV, json.dumps(ENDPOINT))
    assert dict(storage.storage_properties()) == ENDPOINT
    seen: list[dict[str, str]] = []
    monkeypatch.setattr(storage, "_listeners", [])
    storage.on_storage_change(lambda p: seen.append(dict(p)))
    storage.configure_storage({**ENDPOINT, "uri": "not storage"})
    assert seen == [ENDPOINT] and dict(storage.storage_properties()) == ENDPOINT
    monkeypatch.setenv(storage.STORAGE_ENV, "[1]")
    monkeypatch.setattr(storage, "_state", {})
    with pytest.raises(ConfigError, match="not a JSON object"):
        storage.storage_properties()


def test_catalog_values_take_secrets_from_the_environment(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TK_TEST_SECRET", "from-env-5678")
    text = "catalogs:\n  lake:\n    type: rest\n    uri: http://h\n    credential: id:${TK_TEST_SECRET}\n"
    config = parse_catalogs(text, tmp_path).get("lake")
    assert config.properties["credential"] == "id:from-env-5678"
    assert redact("from-env-5678") == "***"
    # An unset variable spoils only its own catalog, and only for the jobs that use it.
    both = text + "  local:\n    type: filesystem\n    warehouse: /data/warehouse\n"
    config = parse_catalogs(both.replace("TK_TEST_SECRET", "TK_TEST_UNSET"), tmp_path)
    assert config.get("local").type == "filesystem"
    with pytest.raises(
        ConfigError, match=r"catalog 'lake': \$\{TK_TEST_UNSET\} is not set: export TK_TEST_UNSET"
    ):
        config.get("lake")


def test_rest_tables_go_where_the_server_says_unless_the_warehouse_is_a_location() -> None:
    from tablekeeper.catalog.rest import RestCatalog

    assert RestCatalog("c", "http://h", "analytics").default_table_location("db.t") == ""
    assert RestCatalog("c", "http://h", "s3://b/wh/").default_table_location("db.t") == "s3://b/wh/db/t"


def test_only_the_catalog_a_job_uses_must_map_to_spark(tmp_path: Path) -> None:
    from tablekeeper.spark.session import session_conf

    catalogs = parse_catalogs(
        """
default: local
catalogs:
  local:
    type: sql
    uri: sqlite:///${warehouse}/catalog.db
    warehouse: ${warehouse}/sql
  other:
    type: sql
    uri: mssql://db.example/iceberg
    warehouse: ${warehouse}/other
""",
        tmp_path,
    )
    for used in (None, "local"):
        conf = session_conf(catalogs, [], used=used)
        assert conf["spark.sql.catalog.local.type"] == "jdbc"
        assert not any(key.startswith("spark.sql.catalog.other") for key in conf)
    with pytest.raises(ConfigError, match=r"catalog 'other': unsupported uri 'mssql://db\.example/iceberg'"):
        session_conf(catalogs, [], used="other")


def test_database_catalogs_map_to_iceberg_jdbc_with_the_password_in_a_redacted_setting(
    tmp_path: Path,
) -> None:
    catalogs = parse_catalogs(
        """
catalogs:
  pg:
    type: sql
    uri: postgresql://alice:p%40ss%2Fw0rd@db.example:6543/iceberg?sslmode=require
    warehouse: s3://bucket/pg
  my:
    type: sql
    uri: mysql://bob@db.example/iceberg
    jdbc.password: s3cret-pw
    warehouse: s3://bucket/my
""",
        tmp_path,
    )
    pg = iceberg_catalog_conf(catalogs.get("pg"))
    assert pg["spark.sql.catalog.pg.type"] == "jdbc"
    assert pg["spark.sql.catalog.pg.uri"] == "jdbc:postgresql://db.example:6543/iceberg?sslmode=require"
    assert pg["spark.sql.catalog.pg.jdbc.user"] == "alice"
    assert pg["spark.sql.catalog.pg.jdbc.password"] == "p@ss/w0rd"  # decoded, as the driver wants it
    assert pg["spark.sql.catalog.pg.jdbc.schema-version"] == "V1"
    my = iceberg_catalog_conf(catalogs.get("my"))
    # MariaDB's driver (the one pinned) serves MySQL servers too, under its own scheme.
    assert my["spark.sql.catalog.my.uri"] == "jdbc:mariadb://db.example:3306/iceberg"
    assert my["spark.sql.catalog.my.jdbc.user"] == "bob"
    assert my["spark.sql.catalog.my.jdbc.password"] == "s3cret-pw"
    # The decoded password is a secret too: a driver's message may quote it.
    assert "p@ss/w0rd" not in redact("auth failed for p@ss/w0rd")


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("oracle://u:p@h/db", "unsupported uri 'oracle://u:\\*\\*\\*@h/db'"),
        ("postgresql://u:pw@h", "needs a host and a database"),
        ("mysql://u@h/db?ssl=1", "uri parameters \\(ssl\\) are not supported"),
        ("postgresql://h/db?password=x", "put the password in the uri's user:password@"),
    ],
)
def test_database_uris_refused_by_name(tmp_path: Path, uri: str, message: str) -> None:
    from tablekeeper.catalog.sql_db import Database

    with pytest.raises(ConfigError, match=message):
        Database.parse("c", uri)


def test_hive_catalogs_map_to_iceberg_hive_catalog(tmp_path: Path) -> None:
    catalogs = parse_catalogs(
        "catalogs:\n  hms:\n    type: hive\n    uri: thrift://meta.example:9083\n"
        "    warehouse: s3://bucket/hive\n    lock-timeout-ms: '60000'\n",
        tmp_path,
    )
    assert iceberg_catalog_conf(catalogs.get("hms")) == {
        "spark.sql.catalog.hms": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.hms.type": "hive",
        "spark.sql.catalog.hms.uri": "thrift://meta.example:9083",
        "spark.sql.catalog.hms.warehouse": "s3://bucket/hive",
        "spark.sql.catalog.hms.lock-timeout-ms": "60000",
    }
    with pytest.raises(ConfigError, match="hive catalog 'hms' needs a 'uri' such as thrift://host:9083"):
        parse_catalogs("catalogs:\n  hms:\n    type: hive\n    warehouse: s3://bucket/hive\n", tmp_path)
