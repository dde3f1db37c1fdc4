"""The one error hierarchy. Every error carries the one-line message a user sees.

The CLI maps each class to an exit code (see ``exit_code``); nothing else decides exit codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Literal


class ExitCode(IntEnum):
    OK = 0
    UNEXPECTED = 1
    USAGE = 2
    REFUSED = 3
    CONFLICT = 4
    COMMIT_STATE_UNKNOWN = 5


class TablekeeperError(Exception):
    """Base class. ``str(err)`` is a single line naming the problem and the fix."""

    exit_code: ExitCode = ExitCode.UNEXPECTED
    # Figures the job had when it stopped, kept in its result.
    metrics: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, message: str) -> None:
        # Messages are printed as the last line of stderr, so they must stay one line.
        super().__init__(" ".join(message.split()))

    @property
    def message(self) -> str:
        return str(self)

    @property
    def status(self) -> Literal["refused", "failed"]:
        """The status of the job's result when it ends with this error."""
        return "refused" if self.exit_code == ExitCode.REFUSED else "failed"


class ConfigError(TablekeeperError):
    """Bad usage or configuration: wrong option, missing jar, unknown catalog."""

    exit_code = ExitCode.USAGE


class NotATableError(TablekeeperError):
    """The path or identifier does not name a table of the expected format."""

    exit_code = ExitCode.USAGE


class CorruptMetadataError(TablekeeperError):
    """Metadata that cannot be trusted: unreadable, truncated or inconsistent."""

    exit_code = ExitCode.REFUSED


class VerificationFailed(CorruptMetadataError):
    """A converted snapshot does not hold the rows its source version holds (convert-delta --verify)."""


class CountsDiffer(TablekeeperError):
    """Two tables that must hold the same rows do not (validate-conversion): the check failed."""

    exit_code = ExitCode.REFUSED

    def __init__(self, message: str, metrics: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.metrics = MappingProxyType(dict(metrics))

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors travel from Spark tasks to the driver pickled; the default passes only ``args``.
        return (type(self), (self.message, dict(self.metrics)))

    @property
    def status(self) -> Literal["refused", "failed"]:
        # Exit 3 like a refusal, but nothing was refused: the check ran and failed.
        return "failed"


class UnsupportedFeatureError(TablekeeperError):
    """A format version or table feature tablekeeper does not handle."""

    exit_code = ExitCode.REFUSED


class SafetyRefusal(TablekeeperError):
    """A destructive action refused because it could lose live data."""

    exit_code = ExitCode.REFUSED


class OutsideTable(SafetyRefusal):
    """A path to delete or write lies outside the table's locations (or climbs out through ``..``
    or a symbolic link): refused, whatever named it."""


class CommitConflict(TablekeeperError):
    """Concurrent commits kept winning after every retry."""

    exit_code = ExitCode.CONFLICT


class ManifestsChanged(CommitConflict):
    """Manifests a rewrite planned to replace were changed by another commit: plan again."""


class CommitStateUnknown(TablekeeperError):
    """The commit may or may not have happened; nothing was deleted."""

    exit_code = ExitCode.COMMIT_STATE_UNKNOWN


def exit_code(err: BaseException) -> ExitCode:
    if isinstance(err, TablekeeperError):
        return err.exit_code
    return ExitCode.UNEXPECTED


# A typed error raised in a Spark task reaches the driver as Spark's task failure (a
# Py4JJavaError or PythonException), whose text holds the Python worker's traceback ending in
# "tablekeeper.<module>.<Class>: <message>" (messages are one line, see TablekeeperError).
_TASK_ERROR = re.compile(r"(?m)^tablekeeper\.[\w.]*?\.?(\w+): (.*)$")


# Spark's error class for a file its reader could not read, naming the file.
_UNREADABLE_FILE = re.compile(r"\[FAILED_READ_FILE[.\w]*\] Encountered error while reading file (\S+?)\.?\s")


def _subclasses(cls: type[TablekeeperError]) -> Iterator[type[TablekeeperError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def task_error(err: BaseException) -> TablekeeperError | None:
    """The typed error a Spark task raised, rebuilt on the driver as itself (its class, so its
    exit code, and its message naming the file), or None when ``err`` carries none. Every Spark
    job's task failures pass through here, so no task needs to catch and carry its errors."""
    if isinstance(err, TablekeeperError):
        return err
    text = str(err).replace("\r", "")
    found = _TASK_ERROR.findall(text)
    if not found:
        # Spark's own reader (Parquet data and delete files) failing on a file: fail closed,
        # as the driver engine does on a file it cannot read.
        unreadable = _UNREADABLE_FILE.search(text)
        if unreadable is None:
            return None
        return CorruptMetadataError(
            f"Spark could not read {unreadable[1]} (truncated, corrupt or unreachable): "
            "check the file, or rerun with --log-level DEBUG for Spark's reason"
        )
    name, message = found[-1]  # the last raised (a chained traceback lists the cause first)
    known = {c.__name__: c for c in _subclasses(TablekeeperError)}
    cls = known.get(name)
    if cls is None:
        return None
    typed = cls.__new__(cls)
    TablekeeperError.__init__(typed, message)  # subclasses' extra fields keep their defaults
    return typed


class FileNotFound(TablekeeperError):
    """A file that should exist is missing."""

    exit_code = ExitCode.USAGE


class DataFileGone(FileNotFound):
    """A Delta data file whose record count only its footer has is no longer on storage
    (``path``: the file's absolute path)."""

    path: str = ""

    @classmethod
    def at(cls, path: str, message: str) -> DataFileGone:
        err = cls(message)
        err.path = path
        return err


class StorageError(TablekeeperError):
    """An I/O failure other than not-found: permissions, network, unsupported storage."""

    exit_code = ExitCode.UNEXPECTED


class AlreadyExists(TablekeeperError):
    """Create-if-absent lost the race: another writer created the file first."""

    exit_code = ExitCode.CONFLICT


class CommitFailed(TablekeeperError):
    """One attempt lost a compare-and-swap: nothing changed, safe to clean up and retry."""

    exit_code = ExitCode.CONFLICT
