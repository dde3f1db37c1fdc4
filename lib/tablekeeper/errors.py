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


class NotOnThisSparkLine(UnsupportedFeatureError):
    """A capability the running Spark line lacks (the variant type on Spark 3.5, say): refused by
    name on that line, never done differently."""


class UnsupportedRuntime(ConfigError):
    """The session's Spark, Delta and Iceberg versions are not a combination tablekeeper supports."""


class SafetyRefusal(TablekeeperError):
    """A destructive action refused because it could lose live data."""

    exit_code = ExitCode.REFUSED


class OutsideTable(SafetyRefusal):
    """A path to delete or write lies outside the table's locations (or climbs out through ``..``
    or a symbolic link): refused, whatever named it."""


class UnusableInventory(SafetyRefusal):
    """An inventory report that cannot stand for a listing: unfinished, partial, too old, or not
    covering the location."""


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

# Java exceptions (thrown by Iceberg's, Avro's, Parquet's or Hadoop's readers in a task or on the
# driver) that mean an input file is truncated, corrupt or missing: the driver engine refuses the
# same files with CorruptMetadataError, so the Spark engine must too.
_JAVA_READ_FAILURE = re.compile(
    r"\b(?:[a-z]\w*\.)+(?:RuntimeIOException|AvroRuntimeException|InvalidAvroMagicException"
    r"|EOFException|ParquetDecodingException|ChecksumException|FileNotFoundException"
    r"|NotFoundException)\b"
    r"|is not a Parquet file|[Mm]agic bytes not found|Not an Avro data file|CRC-?32 mismatch"
)
# ...unless the failure is one of storage or of writing, not of the file's bytes: then the file
# may be sound, and the failure is no refusal (exit 1, its cause first, see ``java_cause``).
_NOT_THE_FILE = re.compile(
    r"Failed to (?:create|write|close|flush|rename)|FileAlreadyExists|[Pp]ermission denied|No space left"
    r"|Access ?Denied|Forbidden|Connection (?:refused|reset)|[Tt]imed? ?out|SlowDown|Throttl"
)
# A data, delete or metadata file a message names (a URI or an absolute path); never a source
# file of a stack trace.
_FILE = re.compile(
    r"(?:\b[a-z][a-z0-9+.-]*:/|(?<![\w.:/])/)[^\s'\"`,;()\[\]]+?\.(?:parquet|avro|orc|puffin|json)\b"
)
# The exception a Spark task died of ("Lost task ... (TID n) (host executor id): Class: message"),
# and each cause Java chains to it.
_JAVA_CAUSE = re.compile(
    r"(?:\(TID \d+\) \([^)]*\): |Caused by: )((?:[a-z]\w*\.)+[A-Z][\w$]*)"
    r"(?::\s*(.*?))?(?=\s+at [\w.$]+[.(<]|\s+Caused by: |$)",
    re.M,
)


def _root_cause(text: str) -> tuple[str, str | None, str] | None:
    """The root Java exception in a failure's text: its short class, the file it (or else the
    text) names, and its message with that file left out."""
    found = _JAVA_CAUSE.findall(text)
    if not found:
        return None
    cls, message = found[-1]
    named = _FILE.search(message) or _FILE.search(text)
    path = named[0] if named else None
    if path is not None:
        message = message.replace(path, "it")
    return cls.rsplit(".", 1)[-1], path, message[:200]


def java_cause(text: str) -> str | None:
    """The root Java exception in a Spark or py4j failure's text as ``Class reading file:
    message``, short, the class and the file first so no cut of the line can lose them; None
    when the text holds no Java exception."""
    root = _root_cause(" ".join(text.split()))
    if root is None:
        return None
    cls, path, message = root
    return f"{cls}{f' reading {path}' if path else ''}: {message}".rstrip(": ")


def unreadable_input(text: str) -> CorruptMetadataError | None:
    """A Java reader's failure on an input file it names, as the refusal the driver engine gives
    for the same file; None when ``text`` is no such failure or names no file."""
    text = " ".join(text.split())
    unreadable = _UNREADABLE_FILE.search(text)
    if unreadable is not None:
        path = unreadable[1]
    elif (
        _JAVA_READ_FAILURE.search(text) is not None
        and _NOT_THE_FILE.search(text) is None
        and (named := _FILE.search(text)) is not None
    ):
        path = named[0]
    else:
        return None
    root = _root_cause(text)
    reason = f" ({root[0]}: {root[2][:160]})".replace(": )", ")") if root else ""
    return CorruptMetadataError(
        f"could not read {path}{reason}: truncated, corrupt or missing; restore the file, "
        "or rerun with --log-level DEBUG for the reader's trace"
    )


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
        # A Java reader (Spark's, Iceberg's) failing on a file: fail closed, as the driver engine
        # does on a file it cannot read.
        return unreadable_input(text)
    name, message = found[-1]  # the last raised (a chained traceback lists the cause first)
    known = {c.__name__: c for c in _subclasses(TablekeeperError)}
    cls = known.get(name)
    if cls is None:
        return None
    return as_error(cls, message)


def as_error(cls: type[TablekeeperError], message: str) -> TablekeeperError:
    """An error of ``cls`` saying ``message``, whatever else its constructor takes (its extra
    fields keep their defaults): a task's error rebuilt, or one given what it meant to the run."""
    typed = cls.__new__(cls)
    TablekeeperError.__init__(typed, message)
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
