"""Google Cloud Storage (``gs://bucket/key``, and ``gcs://``): settings, filesystem, Hadoop settings.

Settings use Iceberg's FileIO property names (``gcs.project-id``, ``gcs.service.host``,
``gcs.oauth2.token``, ``gcs.no-auth``), so one catalog definition serves tablekeeper, Iceberg
Java's GCSFileIO and PyIceberg alike. With no credentials configured, pyarrow's client walks
Google's default chain (``GOOGLE_APPLICATION_CREDENTIALS`` naming a service-account JSON file, the
gcloud user's, then the metadata server).

Reads, writes, paged listing and deletes go through pyarrow's GCS filesystem (google-cloud-cpp),
which retries 408, 429 and 5xx answers with exponential backoff on its own. Deletes are one request
per object, sent concurrently by ``FileIO.delete_many``: GCS has no multi-object delete, only the
generic JSON batch endpoint, which pyarrow does not speak and the emulators implement unevenly.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from tablekeeper.errors import ConfigError
from tablekeeper.io.stores import Store, register_store
from tablekeeper.redact import register_secret

PREFIX = "gcs."
# Iceberg FileIO property -> what it sets. Anything else under gcs. is refused: ignoring, say, an
# encryption key or a requester-pays project would read or write differently than configured.
SUPPORTED_PROPERTIES: tuple[str, ...] = (
    "gcs.project-id",
    "gcs.service.host",
    "gcs.oauth2.token",
    "gcs.oauth2.token-expires-at",
    "gcs.no-auth",
)
# A token given without its expiry is taken as good for this long (Google's tokens last an hour).
_TOKEN_LIFETIME = dt.timedelta(hours=1)


def _flag(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"storage property {key}={value!r} must be true or false")
    return text == "true"


@dataclass(frozen=True)
class GcsSettings:
    """How to reach Google Cloud Storage (or an emulator). The token stays out of ``repr``."""

    project_id: str | None = None
    scheme: str | None = None  # "http" for an emulator; None: https
    endpoint: str | None = None  # "host:port"; None: Google's own
    token: str | None = field(default=None, repr=False)
    token_expires_ms: int | None = None
    anonymous: bool = False

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], source: str = "storage") -> GcsSettings:
        given = {k: str(v) for k, v in properties.items() if k.startswith(PREFIX)}
        unknown = sorted(set(given) - set(SUPPORTED_PROPERTIES))
        if unknown:
            raise ConfigError(
                f"unsupported GCS properties {', '.join(unknown)} in {source}: "
                f"supported are {', '.join(SUPPORTED_PROPERTIES)} (a service-account JSON key: "
                "point GOOGLE_APPLICATION_CREDENTIALS at its file)"
            )
        token = given.get("gcs.oauth2.token") or None
        register_secret(token)
        anonymous = _flag("gcs.no-auth", given["gcs.no-auth"]) if "gcs.no-auth" in given else False
        if anonymous and token:
            raise ConfigError(f"{source} sets both gcs.no-auth and gcs.oauth2.token: set one")
        expires: int | None = None
        if "gcs.oauth2.token-expires-at" in given:
            try:
                expires = int(given["gcs.oauth2.token-expires-at"])
            except ValueError:
                raise ConfigError(
                    f"gcs.oauth2.token-expires-at in {source} must be epoch milliseconds"
                ) from None
        scheme = endpoint = None
        host = given.get("gcs.service.host") or None
        if host is not None:
            parts = urlsplit(host if "://" in host else f"https://{host}")
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
                raise ConfigError(
                    f"gcs.service.host={host!r} in {source}: use http://host:port or https://host"
                )
            scheme, endpoint = parts.scheme, parts.netloc
        return cls(
            project_id=given.get("gcs.project-id") or None,
            scheme=scheme,
            endpoint=endpoint,
            token=token,
            token_expires_ms=expires,
            anonymous=anonymous,
        )

    @property
    def service_url(self) -> str | None:
        return None if self.endpoint is None else f"{self.scheme}://{self.endpoint}"


@functools.lru_cache(maxsize=32)
def gcs_filesystem(settings: GcsSettings) -> pafs.GcsFileSystem:
    """One pyarrow filesystem per distinct settings (it holds a connection pool)."""
    expires: dt.datetime | None = None
    if settings.token:
        if settings.token_expires_ms is not None:
            expires = dt.datetime.fromtimestamp(settings.token_expires_ms / 1000, dt.timezone.utc)
        else:
            expires = dt.datetime.now(dt.timezone.utc) + _TOKEN_LIFETIME
    return pafs.GcsFileSystem(
        anonymous=settings.anonymous,
        access_token=settings.token,
        credential_token_expiration=expires,
        scheme=settings.scheme,
        endpoint_override=settings.endpoint,
        project_id=settings.project_id,
    )


def _open(authority: str, settings: Mapping[str, str]) -> pafs.FileSystem:
    if not authority:
        raise ConfigError("a gs:// location names no bucket: expected gs://bucket/path")
    return gcs_filesystem(GcsSettings.from_properties(settings))


def hadoop_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """What Google's Hadoop connector (gcs-connector) needs for the same store. An OAuth2 token has
    no plain Hadoop setting (the connector takes a token provider class): Iceberg's GCSFileIO reads
    ``gcs.oauth2.token`` itself from the catalog's properties. Nothing without settings of ours:
    the cluster's own (Dataproc's, say) then stand."""
    if not any(key.startswith(PREFIX) for key in settings):
        return {}
    gcs = GcsSettings.from_properties(settings)
    out = {
        "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
    }
    if gcs.project_id:
        out["fs.gs.project.id"] = gcs.project_id
    if gcs.service_url:
        out["fs.gs.storage.root.url"] = gcs.service_url + "/"
    if gcs.anonymous:
        out["fs.gs.auth.type"] = "UNAUTHENTICATED"
    return out


STORE = register_store(
    Store(
        "gcs",
        frozenset({"gs", "gcs"}),
        _open,
        layout="bucket",
        prefixes=(PREFIX,),
        hadoop=hadoop_settings,
        directories=False,
    )
)
