"""Google Cloud Storage (``gs://bucket/key``, and ``gcs://``): settings, filesystem, Hadoop settings.

Settings use Iceberg's FileIO property names (``gcs.project-id``, ``gcs.service.host``,
``gcs.oauth2.token``, ``gcs.no-auth``), so one catalog definition serves tablekeeper, Iceberg
Java's GCSFileIO and PyIceberg alike. With no credentials configured, pyarrow's client walks
Google's default chain (``GOOGLE_APPLICATION_CREDENTIALS`` naming a service-account JSON file, the
gcloud user's, then the metadata server).

A service-account key given inline (``gcs.credentials-json``) is turned into access tokens here:
pyarrow takes a key only as a file named by an environment variable, which is one per process and
read lazily, so two catalogs with two keys could not coexist. A token is minted (the OAuth2
JWT-bearer grant, RFC 7523, signed with the key) on first use and again before it expires, and the
filesystem under a FileIO is swapped for one with the new token, so a job outlives its tokens.

Reads, writes and paged listing go through pyarrow's GCS filesystem (google-cloud-cpp), which
retries 408, 429 and 5xx answers with exponential backoff on its own. Deletes of many objects go
through GCS's JSON batch endpoint (up to 100 per request, ``batch_delete``), which pyarrow does not
speak, so retrying what it throttles (the whole batch, or single answers inside it) is done here.
With Google's default credentials (known only to the C++ client) deletes stay one request each.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from tablekeeper.errors import ConfigError, StorageError
from tablekeeper.io.batch_delete import Answers, delete_with_retries, part_answers
from tablekeeper.io.stores import Store, StoreDeletes, register_store
from tablekeeper.redact import redact, register_secret

log = logging.getLogger(__name__)

PREFIX = "gcs."
# Iceberg FileIO property -> what it sets. Anything else under gcs. is refused: ignoring, say, an
# encryption key or a requester-pays project would read or write differently than configured.
SUPPORTED_PROPERTIES: tuple[str, ...] = (
    "gcs.project-id",
    "gcs.service.host",
    "gcs.oauth2.token",
    "gcs.oauth2.token-expires-at",
    "gcs.no-auth",
    "gcs.credentials-json",
)
# Each a way of authenticating; set at most one (a vended token replaces the entry's: io.stores).
CREDENTIALS = ("gcs.oauth2.token", "gcs.oauth2.token-expires-at", "gcs.credentials-json", "gcs.no-auth")
# A token given without its expiry is taken as good for this long (Google's tokens last an hour).
_TOKEN_LIFETIME = dt.timedelta(hours=1)
# What a minted token may do: read, write and delete objects (the scope of Iceberg's GCSFileIO).
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
_REFRESH_MARGIN_S = 300.0  # a token is renewed this long before it expires
_MINT_ATTEMPTS = 5


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
    credentials_json: str | None = field(default=None, repr=False)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], source: str = "storage") -> GcsSettings:
        given = {k: str(v) for k, v in properties.items() if k.startswith(PREFIX)}
        unknown = sorted(set(given) - set(SUPPORTED_PROPERTIES))
        if unknown:
            raise ConfigError(
                f"unsupported GCS properties {', '.join(unknown)} in {source}: "
                f"supported are {', '.join(SUPPORTED_PROPERTIES)}"
            )
        token = given.get("gcs.oauth2.token") or None
        register_secret(token)
        key = given.get("gcs.credentials-json") or None
        if key is not None:
            _service_account(key, source)  # refused now, with the setting named, if malformed
        anonymous = _flag("gcs.no-auth", given["gcs.no-auth"]) if "gcs.no-auth" in given else False
        if sum((anonymous, token is not None, key is not None)) > 1:
            raise ConfigError(
                f"{source} sets more than one of gcs.no-auth, gcs.oauth2.token and "
                "gcs.credentials-json: set one"
            )
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
            credentials_json=key,
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


def _service_account(text: str, source: str) -> dict[str, Any]:
    """The parsed key, its secrets learnt first; refused unless it is a service account's."""
    register_secret(text)
    try:
        info = json.loads(text)
    except ValueError:
        raise ConfigError(
            f"gcs.credentials-json in {source} is not JSON: paste the key file's text"
        ) from None
    if not isinstance(info, dict):
        raise ConfigError(f"gcs.credentials-json in {source} is not a JSON object")
    register_secret(str(info.get("private_key") or ""))
    register_secret(str(info.get("private_key_id") or ""))
    missing = [k for k in ("client_email", "private_key") if not info.get(k)]
    if info.get("type") != "service_account" or missing:
        raise ConfigError(
            f"gcs.credentials-json in {source} is not a service-account key "
            f"(type {info.get('type')!r}{', missing ' + ', '.join(missing) if missing else ''})"
        )
    return info


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def signed_assertion(info: Mapping[str, Any], now: float) -> str:
    """The JWT a service account presents for a token: RS256-signed with its private key."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    token_uri = str(info.get("token_uri") or "https://oauth2.googleapis.com/token")
    header = {"alg": "RS256", "typ": "JWT", "kid": str(info.get("private_key_id") or "")}
    claims = {
        "iss": info["client_email"],
        "scope": SCOPE,
        "aud": token_uri,
        "iat": int(now),
        "exp": int(now) + 3600,
    }
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    try:
        key = serialization.load_pem_private_key(str(info["private_key"]).encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError("gcs.credentials-json: its private_key is not a PEM RSA key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ConfigError("gcs.credentials-json: its private_key is not an RSA key")
    signature = key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def mint_token(info: Mapping[str, Any]) -> tuple[str, float]:
    """(access token, expiry as epoch seconds) from the key's token endpoint, retrying throttling
    and 5xx answers with backoff."""
    token_uri = str(info.get("token_uri") or "https://oauth2.googleapis.com/token")
    reason = ""
    for attempt in range(_MINT_ATTEMPTS):
        now = time.time()
        body = urllib.parse.urlencode(
            {
                "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "assertion": signed_assertion(info, now),
            }
        ).encode()
        request = urllib.request.Request(
            token_uri, data=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                answer = json.loads(reply.read())
            token = str(answer["access_token"])
            register_secret(token)
            return token, now + float(answer.get("expires_in", 3600))
        except urllib.error.HTTPError as err:
            reason = f"HTTP {err.code}: {err.read()[:200].decode('utf-8', 'replace')}"
            if err.code != 429 and err.code < 500:
                break
        except (OSError, ValueError, KeyError) as err:
            reason = f"{type(err).__name__}: {err}"
        log.info("token endpoint %s: %s (attempt %d)", token_uri, redact(reason), attempt + 1)
        time.sleep(min(8.0, 0.25 * 2**attempt))
    raise StorageError(
        f"cannot get a GCS access token for {info.get('client_email')} from {token_uri} "
        f"({redact(reason)}): check gcs.credentials-json and the account's roles"
    )


class _ServiceAccountHandler(pafs.FileSystemHandler):  # type: ignore[misc]  # pyarrow ships no stubs
    """pyarrow's GCS filesystem with a token minted from a service-account key, replaced by one
    with a fresh token before the token expires (a FileIO lives as long as its job)."""

    def __init__(self, settings: GcsSettings) -> None:
        assert settings.credentials_json is not None
        self._settings = settings
        self._info = _service_account(settings.credentials_json, "the storage settings")
        self._lock = threading.Lock()
        self._current: tuple[pafs.FileSystem, float] | None = None
        self._token: str | None = None

    def token(self) -> str:
        """A current access token (for the requests pyarrow does not make: batch deletes)."""
        self.fs()
        with self._lock:
            assert self._token is not None
            return self._token

    def fs(self) -> pafs.FileSystem:
        with self._lock:
            if self._current is None or self._current[1] - time.time() < _REFRESH_MARGIN_S:
                token, expires = mint_token(self._info)
                self._token = token
                bare = replace(
                    self._settings, credentials_json=None, token=token, token_expires_ms=int(expires * 1000)
                )
                self._current = (gcs_filesystem(bare), expires)
            return self._current[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ServiceAccountHandler) and other._settings == self._settings

    def __hash__(self) -> int:
        return hash(self._settings)

    def get_type_name(self) -> str:
        return "gcs"

    def normalize_path(self, path: str) -> str:
        return str(self.fs().normalize_path(path))

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return list(self.fs().get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return list(self.fs().get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs().create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs().delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs().delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise StorageError("deleting a whole GCS account's contents is refused")

    def delete_file(self, path: str) -> None:
        self.fs().delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.fs().move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs().copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self.fs().open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.fs().open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self.fs().open_output_stream(path, compression=None, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.fs().open_append_stream(path, compression=None, metadata=metadata)


@functools.lru_cache(maxsize=32)
def _service_account_filesystem(settings: GcsSettings) -> pafs.FileSystem:
    """One refreshing filesystem per key and settings: its tokens are shared by every FileIO."""
    return pafs.PyFileSystem(_ServiceAccountHandler(settings))


BATCH_LIMIT = 100  # GCS takes at most 100 calls in one batch request


def _bearer(gcs: GcsSettings) -> str | None:
    """The Authorization header a batch request carries: "" for none (an emulator), None when
    the credentials are Google's default chain, which only pyarrow's client can use."""
    if gcs.anonymous:
        return ""
    if gcs.token:
        return f"Bearer {gcs.token}"
    if gcs.credentials_json is not None:
        handler = _service_account_filesystem(gcs).handler
        assert isinstance(handler, _ServiceAccountHandler)
        return f"Bearer {handler.token()}"
    return None


def _batch_body(boundary: str, paths: Sequence[str], host: str) -> bytes:
    parts = []
    for i, path in enumerate(paths):
        bucket, _, key = path.partition("/")
        target = f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o/{urllib.parse.quote(key, safe='')}"
        parts.append(
            f"--{boundary}\r\nContent-Type: application/http\r\nContent-ID: <{i}>\r\n\r\n"
            f"DELETE {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n\r\n"
        )
    return ("".join(parts) + f"--{boundary}--\r\n").encode()


def _first_body_line(answer: str) -> str:
    body = answer.partition("\r\n\r\n")[2].strip().splitlines()
    return body[0][:200] if body else ""


def batch_delete(_: str | None, settings: Mapping[str, str], paths: Sequence[str]) -> StoreDeletes | None:
    """Delete up to ``BATCH_LIMIT`` objects (``bucket/key``) in one batch request, retrying the
    request, or the calls inside it, that GCS throttles or fails on its side, with backoff."""
    gcs = GcsSettings.from_properties(settings)
    auth = _bearer(gcs)
    if auth is None:
        return None
    base = gcs.service_url or "https://storage.googleapis.com"
    host = urlsplit(base).netloc

    def send(pending: Sequence[str]) -> Answers:
        boundary = "tablekeeper-" + uuid.uuid4().hex
        headers = {"Content-Type": f"multipart/mixed; boundary={boundary}"}
        if auth:
            headers["Authorization"] = auth
        request = urllib.request.Request(
            f"{base}/batch/storage/v1",
            data=_batch_body(boundary, pending, host),
            headers=headers,
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            content_type = reply.headers.get("Content-Type", "")
            return part_answers(content_type, reply.read(), r"<response-(\d+)>", _first_body_line)

    outcome = delete_with_retries(paths, send)
    return None if outcome.refused else outcome


def _open(authority: str, settings: Mapping[str, str]) -> pafs.FileSystem:
    if not authority:
        raise ConfigError("a gs:// location names no bucket: expected gs://bucket/path")
    gcs = GcsSettings.from_properties(settings)
    if gcs.credentials_json is not None:
        return _service_account_filesystem(gcs)
    return gcs_filesystem(gcs)


# Google's own endpoints; any other gcs.service.host is an emulator, a proxy or a private gateway.
_GOOGLE_DOMAIN = "googleapis.com"
# The connector's custom request headers: a vended or configured token rides as one of them.
HADOOP_HEADERS = "fs.gs.storage.http.headers."


def hadoop_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """What Google's Hadoop connector (gcs-connector 3.x) needs for the same store, from the same
    ``gcs.*`` settings: the endpoint, the project, and the credentials it can take from settings.

    An OAuth2 token (``gcs.oauth2.token``, given or vended by a REST catalog) has no plain
    connector setting (the connector takes a token provider class), so it is sent as the
    ``Authorization`` header of every request, with the connector's own authentication off. A
    service-account key (``gcs.credentials-json``) reaches the connector only as a key file on
    every host, which tablekeeper cannot place: the cluster's own credentials (Dataproc's service
    account, ``fs.gs.auth.*``) then stand, as they do with no ``gcs.*`` settings at all.

    An endpoint other than Google's (an emulator, a proxy) gets renames by copy and delete: the
    connector's default, the objects.moveTo call, is newer than what such servers implement."""
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
        host = (gcs.endpoint or "").rpartition(":")[0] or (gcs.endpoint or "")
        if host != _GOOGLE_DOMAIN and not host.endswith("." + _GOOGLE_DOMAIN):
            out["fs.gs.operation.move.enable"] = "false"
    if gcs.anonymous:
        out["fs.gs.auth.type"] = "UNAUTHENTICATED"
    elif gcs.token:
        out["fs.gs.auth.type"] = "UNAUTHENTICATED"
        out[HADOOP_HEADERS + "Authorization"] = f"Bearer {gcs.token}"
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
        # A token a catalog vends replaces the entry's key, or its gcs.no-auth (one of them only).
        credentials=CREDENTIALS,
        batch_delete=batch_delete,
        batch_size=BATCH_LIMIT,
        # pyarrow lists GCS without its prefixes: only "dir/" marker objects come back as
        # directories, and writers other than pyarrow make none.
        lists_prefixes=False,
    )
)
