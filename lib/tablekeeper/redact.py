"""Secrets never reach output: results, logs, error messages and ``doctor`` all pass through here.

Secret values are learnt where they enter: catalog properties when a catalog file is parsed, tokens
a REST catalog obtains, credentials it vends. Everything printed or logged is then scrubbed of
those values, whatever line or exception text carries them.
"""

from __future__ import annotations

import logging
import re
import threading
import traceback
from collections.abc import Mapping
from urllib.parse import unquote

MASK = "***"
# Property names (any catalog or storage property containing one of these) whose values are secret.
# Azure's "connection-string" and "account.key" (adls.auth.shared-key.account.key) hold account keys.
_SECRET_NAME_PARTS = (
    "secret",
    "token",
    "credential",
    "password",
    "access-key-id",
    "session",
    "connection-string",
    "account.key",
)
_MIN_LENGTH = 4  # shorter values would mask ordinary words
# Query parameters (in a URI or a JDBC URL) whose values are secret, matched by name part.
# "sig": an Azure SAS token's signature, the part of a SAS URL that grants access.
_SECRET_PARAM_PARTS = (*_SECRET_NAME_PARTS, "key", "pwd", "auth", "signature", "sig")
# scheme://user:password@host: the password goes whether or not it was ever registered. It runs to
# the authority's last '@' (URI parsers split there): a password with an unescaped '@' is masked whole.
# The pieces are shared with SECRET_IN_URI_PATTERN below, so the two cannot drift apart.
_USER_HEAD = r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@?#]*:"
_USER_SECRET = r"[^/\s?#]+"
_USERINFO = re.compile(rf"(?P<head>{_USER_HEAD})(?P<secret>{_USER_SECRET})(?=@[^@/\s?#]*(?:[/?#\s'\"]|$))")
# name=value after ? & or ; (JDBC drivers use both separators): masked when the name is secret.
_PARAM_NAME = r"[A-Za-z0-9_.\-]"
_PARAM = re.compile(rf"(?P<head>[?&;](?P<name>{_PARAM_NAME}+)=)(?P<value>[^&;\s'\"]*)")

_lock = threading.Lock()
_secrets: set[str] = set()
_installed: list[bool] = []  # non-empty once the log record factory is in place


def is_secret_key(key: str) -> bool:
    name = key.lower()
    return any(part in name for part in _SECRET_NAME_PARTS)


def register_secret(value: str | None) -> None:
    if value and len(value) >= _MIN_LENGTH:
        with _lock:
            _secrets.add(value)
            # OAuth2 "client_id:client_secret": the secret alone must not show either.
            _, sep, tail = value.partition(":")
            if sep and len(tail) >= _MIN_LENGTH and "//" not in value:
                _secrets.add(tail)


def register_secrets(properties: Mapping[str, str]) -> None:
    for key, value in properties.items():
        if is_secret_key(key):
            register_secret(value)
        else:
            register_uri_secrets(value)  # a uri, jdbc-uri or endpoint may carry a password


def _is_secret_param(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in _SECRET_PARAM_PARTS)


def register_uri_secrets(uri: str | None) -> None:
    """Learn the password and secret query values a URI carries, so they are masked wherever
    they appear later, even apart from the URI (a driver's message quoting only the password)."""
    if not uri:
        return
    for match in _USERINFO.finditer(uri):
        register_secret(match["secret"])
        register_secret(unquote(match["secret"]))  # as a driver decodes and may quote it
    for match in _PARAM.finditer(uri):
        if _is_secret_param(match["name"]):
            register_secret(match["value"])


def _mask_uris(text: str) -> str:
    text = _USERINFO.sub(lambda m: m["head"] + MASK, text)
    return _PARAM.sub(
        lambda m: m["head"] + MASK if _is_secret_param(m["name"]) and m["value"] else m[0], text
    )


# For Spark's own redaction (``spark.redaction.regex``, matched against each setting's name and
# its value): a value carrying a URI password or a secret query parameter, such as a JDBC catalog's
# ``uri`` with an ``sslpassword=`` or ``sslkey=``, is hidden whole in the UI and event logs.
# Java's regex dialect reads it as Python's does.
SECRET_IN_URI_PATTERN = (
    f"{_USER_HEAD}{_USER_SECRET}@"
    f"|[?&;]{_PARAM_NAME}*(?:{'|'.join(re.escape(part) for part in _SECRET_PARAM_PARTS)}){_PARAM_NAME}*="
)


def redact(text: str) -> str:
    """Text fit to print: known secrets masked, and any URI's password and secret parameters."""
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)  # a secret containing another goes first
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    return _mask_uris(text) if ("://" in text or "=" in text) else text


def redacted_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Properties fit to print: secret values masked by name, others scrubbed of known secrets."""
    return {k: MASK if is_secret_key(k) and v else redact(v) for k, v in properties.items()}


def install_log_redaction() -> None:
    """Scrub every log record of known secrets, whichever logger or handler it goes to."""
    with _lock:
        if _installed:
            return
        _installed.append(True)
    base = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = base(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: logging reports it when it formats the record
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        # A traceback (--log-level DEBUG) quotes exception messages: formatted here, once,
        # scrubbed, and kept as the text handlers print instead of formatting it again.
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)
