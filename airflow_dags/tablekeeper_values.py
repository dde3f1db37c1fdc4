"""Values of the tables file checked one by one: each mistake is a ``TablesFileError`` naming the
file's key and the fix (plain Python and PyYAML only, like the module that reads the file)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
_VARIABLE = re.compile(r"\$\{(\w+)\}")


class TablesFileError(ValueError):
    """The tables file is wrong; the message names the file and the key."""


def start_date(value: Any, where: str) -> dt.datetime:
    if value is None:
        return DEFAULT_START
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise TablesFileError(f"{where}: start_date {value!r} is not a date (2024-01-01)") from None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc)
    raise TablesFileError(f"{where}: start_date {value!r} is not a date (2024-01-01)")


def expand(value: Any, variables: Mapping[str, str]) -> Any:
    """``${home}`` in any string becomes the tablekeeper checkout (as ``${warehouse}`` in catalogs.yaml)."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [expand(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, variables) for k, v in value.items()}
    return value


def mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TablesFileError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def sequence(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise TablesFileError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def known(entry: Mapping[str, Any], keys: frozenset[str] | set[str], where: str) -> None:
    unknown = sorted(str(k) for k in entry if k not in keys)
    if unknown:
        raise TablesFileError(f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(keys))})")


def required_str(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise TablesFileError(f"{where}: '{key}' is required")
    return value


def optional_str(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TablesFileError(f"{where}: '{key}' must be a string")
    return value


def optional_int(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TablesFileError(f"{where}: '{key}' must be a whole number >= 0")
    return value


def option_args(options: Mapping[str, Any]) -> list[str]:
    """Job options as argv: ``key: value`` -> ``--key value``, ``true`` -> ``--key``, lists repeat."""
    args: list[str] = []
    for key, value in options.items():
        flag = f"--{key}"
        if value is True:
            args.append(flag)
        elif value is None or value is False:
            continue
        elif isinstance(value, list):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return args


def slug(text: str) -> str:
    """A DAG-id-safe form of a table name or path: ``db.events`` -> ``db_events``."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
