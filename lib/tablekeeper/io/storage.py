"""The storage settings a process uses when a caller names only a location.

Most code opens files with ``FileIO.for_location(location)``: on the driver and, through Spark, in
executor tasks that only carry locations. The settings (endpoint, credentials, ...) come from the
catalog a job runs against, or from what a REST catalog vends for the table. The driver sets them
here once; listeners (the Spark layer) hand them to executors, which find them in the environment
variable below. An unset process uses nothing: AWS's default chain for S3.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping

from tablekeeper.errors import ConfigError
from tablekeeper.io.s3 import is_storage_property
from tablekeeper.io.stores import store_prefixes

# Executors inherit the driver's settings through this variable (it holds secrets: the Spark layer
# passes it to Python workers directly, never through SparkConf, which the UI shows).
STORAGE_ENV = "TABLEKEEPER_STORAGE_PROPERTIES"

_lock = threading.Lock()
_state: dict[str, dict[str, str]] = {}  # "current": the settings configure_storage set
_listeners: list[Callable[[Mapping[str, str]], None]] = []


def storage_subset(properties: Mapping[str, str]) -> dict[str, str]:
    """The storage (FileIO) settings among catalog or table properties: S3's, and those of the
    stores registered or named there (``io.stores``)."""
    prefixes = store_prefixes(properties)
    return {
        str(k): str(v)
        for k, v in properties.items()
        if is_storage_property(str(k)) or str(k).startswith(prefixes)
    }


def configure_storage(properties: Mapping[str, str]) -> None:
    """Make ``properties``' storage settings this process's default and tell the listeners."""
    settings = storage_subset(properties)
    with _lock:
        _state["current"] = settings
        listeners = list(_listeners)
    for listener in listeners:
        listener(settings)


def storage_properties() -> Mapping[str, str]:
    """The settings ``configure_storage`` set, else the driver's (in an executor), else none."""
    with _lock:
        if "current" in _state:
            return dict(_state["current"])
    text = os.environ.get(STORAGE_ENV)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise ConfigError(f"{STORAGE_ENV} is not a JSON object: unset it or fix it") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{STORAGE_ENV} is not a JSON object: unset it or fix it")
    return {str(k): str(v) for k, v in value.items()}


def on_storage_change(listener: Callable[[Mapping[str, str]], None]) -> None:
    """Call ``listener`` with the settings now (if any were set) and on every later change."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)
        current = dict(_state["current"]) if "current" in _state else None
    if current is not None:
        listener(current)
