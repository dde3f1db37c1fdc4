"""S3-compatible object storage: settings, pyarrow filesystems and batched deletes.

Settings use Iceberg's FileIO property names (``s3.endpoint``, ``s3.access-key-id``, ...), so one
catalog definition serves tablekeeper, Iceberg Java's S3FileIO and PyIceberg alike. With no
credentials configured, both pyarrow and boto3 walk AWS's standard chain (environment, shared
profile, container and instance roles).

Reads, writes and paged listing go through pyarrow's S3 filesystem; deletes go through S3's
``DeleteObjects`` (up to 1,000 keys a request) because pyarrow only deletes one key at a time or a
whole prefix. Both clients retry throttling (SlowDown, 503) with backoff; keys a batch reports as
throttled are retried too.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from tablekeeper.errors import ConfigError

log = logging.getLogger(__name__)

# Iceberg FileIO property -> what it sets. Anything else under s3. is refused: ignoring, say, an
# encryption or a delete-disabled setting would write or delete differently than configured.
SUPPORTED_PROPERTIES: tuple[str, ...] = (
    "s3.endpoint",
    "s3.region",
    "client.region",
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.path-style-access",
    "s3.force-virtual-addressing",
    "s3.connect-timeout",
    "s3.request-timeout",
    "s3.retry.num-retries",
    "s3.delete.batch-size",
)
MAX_DELETE_BATCH = 1000  # S3's own limit per DeleteObjects request
_RETRYABLE_CODES = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling", "503", "500"}
)


def is_storage_property(key: str) -> bool:
    return key.startswith("s3.") or key == "client.region"


def _flag(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"storage property {key}={value!r} must be true or false")
    return text == "true"


def _number(key: str, value: str, low: float, high: float) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not low <= number <= high:
        raise ConfigError(f"storage property {key}={value!r} must be a number from {low:g} to {high:g}")
    return number


@dataclass(frozen=True)
class S3Settings:
    """How to reach one S3-compatible store. Secrets stay out of ``repr``."""

    endpoint: str | None = None  # "https://host:port"; None means AWS itself
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool | None = None  # None: path style exactly when an endpoint is set
    connect_timeout_s: float | None = None
    request_timeout_s: float | None = None
    max_attempts: int = 10
    delete_batch: int = MAX_DELETE_BATCH

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], source: str = "storage") -> S3Settings:
        given = {k: str(v) for k, v in properties.items() if is_storage_property(k)}
        unknown = sorted(set(given) - set(SUPPORTED_PROPERTIES))
        if unknown:
            raise ConfigError(
                f"unsupported S3 properties {', '.join(unknown)} in {source}: "
                f"supported are {', '.join(SUPPORTED_PROPERTIES)}"
            )
        path_style: bool | None = None
        if "s3.path-style-access" in given:
            path_style = _flag("s3.path-style-access", given["s3.path-style-access"])
        if "s3.force-virtual-addressing" in given:
            path_style = not _flag("s3.force-virtual-addressing", given["s3.force-virtual-addressing"])
        if bool(given.get("s3.access-key-id")) != bool(given.get("s3.secret-access-key")):
            raise ConfigError(
                f"{source} sets only one of s3.access-key-id and s3.secret-access-key: set both"
            )
        endpoint = given.get("s3.endpoint") or None
        if endpoint is not None and "://" not in endpoint:
            endpoint = f"https://{endpoint}"
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"s3.endpoint={endpoint!r} in {source}: use http://host:port or https://host")

        def timeout(key: str) -> float | None:
            return _number(key, given[key], 0.001, 3600) if key in given else None

        retries = int(_number("s3.retry.num-retries", given.get("s3.retry.num-retries", "9"), 0, 100))
        batch = int(_number("s3.delete.batch-size", given.get("s3.delete.batch-size", "1000"), 1, 1000))
        return cls(
            endpoint=endpoint.rstrip("/") if endpoint else None,
            region=given.get("s3.region") or given.get("client.region") or None,
            access_key=given.get("s3.access-key-id") or None,
            secret_key=given.get("s3.secret-access-key") or None,
            session_token=given.get("s3.session-token") or None,
            path_style=path_style,
            connect_timeout_s=timeout("s3.connect-timeout"),
            request_timeout_s=timeout("s3.request-timeout"),
            max_attempts=retries + 1,
            delete_batch=batch,
        )

    @property
    def is_default(self) -> bool:
        """Nothing configured: AWS itself, the default credential chain, the bucket's own region."""
        return self == S3Settings()

    @property
    def uses_path_style(self) -> bool:
        return self.path_style if self.path_style is not None else self.endpoint is not None


@functools.lru_cache(maxsize=32)
def s3_filesystem(settings: S3Settings) -> pafs.S3FileSystem:
    """One pyarrow filesystem per distinct settings (it holds a connection pool)."""
    kwargs: dict[str, Any] = {
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=settings.max_attempts),
        "force_virtual_addressing": settings.path_style is False,
    }
    if settings.endpoint is not None:
        scheme, _, host = settings.endpoint.partition("://")
        kwargs.update(endpoint_override=host, scheme=scheme)
    if settings.region:
        kwargs["region"] = settings.region
    if settings.access_key:
        kwargs.update(access_key=settings.access_key, secret_key=settings.secret_key)
        if settings.session_token:
            kwargs["session_token"] = settings.session_token
    if settings.connect_timeout_s is not None:
        kwargs["connect_timeout"] = settings.connect_timeout_s
    if settings.request_timeout_s is not None:
        kwargs["request_timeout"] = settings.request_timeout_s
    return pafs.S3FileSystem(**kwargs)


@functools.lru_cache(maxsize=64)
def bucket_filesystem(bucket: str) -> pafs.FileSystem:
    """Nothing configured: let pyarrow find the bucket's region (one request) and use AWS's default
    credential chain."""
    filesystem, _ = pafs.FileSystem.from_uri(f"s3://{bucket}/")
    return filesystem


@functools.lru_cache(maxsize=32)
def _client(settings: S3Settings) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "max_attempts": settings.max_attempts},
        s3={"addressing_style": "path" if settings.uses_path_style else "virtual"},
        connect_timeout=settings.connect_timeout_s or 60,
        read_timeout=settings.request_timeout_s or 60,
        max_pool_connections=16,
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.endpoint,
        region_name=settings.region,
        aws_access_key_id=settings.access_key,
        aws_secret_access_key=settings.secret_key,
        aws_session_token=settings.session_token,
        config=config,
    )


@dataclass(frozen=True)
class BatchOutcome:
    deleted: tuple[str, ...]
    failures: tuple[tuple[str, str], ...]  # (key, reason)


def delete_keys(settings: S3Settings, bucket: str, keys: Sequence[str]) -> BatchOutcome:
    """Delete ``keys`` (at most ``settings.delete_batch``) from ``bucket`` with one DeleteObjects
    request, retrying keys the store reports as throttled or failed on its side.

    S3 reports a key that did not exist as deleted, so a missing file counts as deleted here.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    client = _client(settings)
    pending = list(keys)
    deleted: list[str] = []
    failures: list[tuple[str, str]] = []
    for attempt in range(settings.max_attempts):
        if not pending:
            break
        try:
            reply = client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in pending], "Quiet": False}
            )
        except (BotoCoreError, ClientError) as err:
            # boto3 has already retried throttling and 5xx answers for the whole request.
            reason = str(err).splitlines()[0][:200]
            return BatchOutcome(tuple(deleted), (*failures, *((k, reason) for k in pending)))
        gone = {str(d["Key"]) for d in reply.get("Deleted", ())}
        retry: list[str] = []
        failed: dict[str, str] = {}
        for error in reply.get("Errors", ()):
            key, code = str(error.get("Key")), str(error.get("Code"))
            if code == "NoSuchKey":  # some stores say so where S3 says deleted: gone either way
                gone.add(key)
            elif code in _RETRYABLE_CODES and attempt + 1 < settings.max_attempts:
                retry.append(key)
            else:
                failed[key] = f"{code}: {error.get('Message', '')}".strip()
        waiting = set(retry)
        for key in pending:
            if key in gone:
                deleted.append(key)
            elif key in failed:
                failures.append((key, failed[key]))
            elif key not in waiting:  # not mentioned: not confirmed deleted
                failures.append((key, "not in the DeleteObjects answer"))
        if retry:
            log.info("s3://%s: %d keys throttled, retrying (attempt %d)", bucket, len(retry), attempt + 2)
            time.sleep(min(20.0, 0.1 * 2**attempt) * (0.5 + random.random()))
        pending = retry
    return BatchOutcome(tuple(deleted), tuple(failures))
