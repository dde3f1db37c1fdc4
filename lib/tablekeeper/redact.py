"""Secrets never reach output: results, logs, error messages and ``doctor`` all pass through here.

Secret values are learnt where they enter: catalog properties when a catalog file is parsed, tokens
a REST catalog obtains, credentials it vends. Everything printed or logged is then scrubbed of
those values, whatever line or exception text carries them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

MASK = "***"
# Property names (any catalog or storage property containing one of these) whose values are secret.
_SECRET_NAME_PARTS = ("secret", "token", "credential", "password", "access-key-id", "session")
_MIN_LENGTH = 4  # shorter values would mask ordinary words

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


def redact(text: str) -> str:
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)  # a secret containing another goes first
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


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
        if _secrets:
            try:
                message = record.getMessage()
            except Exception:  # a malformed call: logging reports it when it formats the record
                return record
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, ()
        return record

    logging.setLogRecordFactory(factory)
