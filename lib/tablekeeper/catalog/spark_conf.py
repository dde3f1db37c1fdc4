"""What Spark needs to reach a catalog and its storage: the Iceberg catalog settings for a catalog of
the catalogs file, and the Hadoop S3A settings for the store its FileIO settings describe. Pure:
maps in, maps out (the session applies them)."""

from __future__ import annotations

from collections.abc import Mapping

from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.errors import ConfigError
from tablekeeper.io.s3 import S3Settings

ICEBERG_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
S3A_PROVIDER = "org.apache.hadoop.fs.s3a."


def iceberg_catalog_conf(catalog: CatalogConfig) -> dict[str, str]:
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {prefix: ICEBERG_CATALOG}
    if catalog.warehouse:
        conf[f"{prefix}.warehouse"] = catalog.warehouse
    if catalog.type == "filesystem":
        conf[f"{prefix}.type"] = "hadoop"
    elif catalog.type == "rest":
        assert catalog.uri is not None
        conf[f"{prefix}.type"] = "rest"
        conf[f"{prefix}.uri"] = catalog.uri
    else:
        conf[f"{prefix}.type"] = "jdbc"
        conf[f"{prefix}.uri"] = jdbc_uri(catalog)
        # V1 is the schema that also records views; Iceberg Java reads rows PyIceberg wrote either way.
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
    for key, value in catalog.properties.items():
        conf[f"{prefix}.{key}"] = value
    return conf


def jdbc_uri(catalog: CatalogConfig) -> str:
    explicit = catalog.properties.get("jdbc-uri")
    if explicit:
        return explicit
    path = catalog.sqlite_path
    if path is None:
        raise ConfigError(
            f"catalog {catalog.name!r}: only sqlite:/// URIs map to JDBC automatically; set 'jdbc-uri'"
        )
    return f"jdbc:sqlite:{path}"


def s3a_conf(properties: Mapping[str, str]) -> dict[str, str]:
    """Hadoop S3A settings for the same store the FileIO settings describe, so Spark's own data
    reads and writes (s3://, s3a://, s3n:// alike) reach what tablekeeper's FileIO reaches."""
    settings = S3Settings.from_properties(properties)
    conf = {f"fs.{scheme}.impl": S3A_FILESYSTEM for scheme in ("s3", "s3n")}
    if settings.endpoint is not None:
        conf["fs.s3a.endpoint"] = settings.endpoint
        conf["fs.s3a.connection.ssl.enabled"] = str(settings.endpoint.startswith("https://")).lower()
    if settings.region:
        conf["fs.s3a.endpoint.region"] = settings.region
    conf["fs.s3a.path.style.access"] = str(settings.uses_path_style).lower()
    if settings.access_key and settings.secret_key:
        conf["fs.s3a.access.key"] = settings.access_key
        conf["fs.s3a.secret.key"] = settings.secret_key
        if settings.session_token:
            conf["fs.s3a.session.token"] = settings.session_token
            conf["fs.s3a.aws.credentials.provider"] = S3A_PROVIDER + "TemporaryAWSCredentialsProvider"
        else:
            conf["fs.s3a.aws.credentials.provider"] = S3A_PROVIDER + "SimpleAWSCredentialsProvider"
    conf["fs.s3a.attempts.maximum"] = str(settings.max_attempts)
    conf["fs.s3a.retry.limit"] = str(settings.max_attempts)
    return conf
