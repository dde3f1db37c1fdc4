"""What Spark needs to reach a catalog and its storage: the Iceberg catalog settings for a catalog of
the catalogs file, and the Hadoop S3A settings for the store its FileIO settings describe. Pure:
maps in, maps out (the session applies them)."""

from __future__ import annotations

from collections.abc import Mapping

from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.catalog.registry import ICEBERG_SPARK_CATALOG, type_of
from tablekeeper.io.s3 import S3Settings

ICEBERG_CATALOG = ICEBERG_SPARK_CATALOG
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
S3A_PROVIDER = "org.apache.hadoop.fs.s3a."


def iceberg_catalog_conf(catalog: CatalogConfig) -> dict[str, str]:
    """Iceberg's Spark catalog settings for one catalogs-file entry: its type's own (from the
    registry), the warehouse, then the entry's other properties as they are."""
    kind = type_of(catalog)
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {prefix: kind.spark_catalog_class}
    if catalog.warehouse:
        conf[f"{prefix}.warehouse"] = catalog.warehouse
    for key, value in kind.spark(catalog).items():
        conf[f"{prefix}.{key}"] = value
    for key, value in catalog.properties.items():
        conf[f"{prefix}.{key}"] = value
    return conf


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
