"""What a listing of a table location keeps: the rules, without the engine that lists.

Hidden paths (``.x`` and ``_x``) are skipped unless ``_x`` is a partition directory (``_p=1``
where ``_p`` is a partition field), and so are the trees of other tables nested under the location
(their own ``metadata/*.metadata.json`` or ``_delta_log``): their files are not this table's to
judge. Rows are classified where they are listed, one decision per directory: the comparison key
of a file is its directory's key plus its name, and a directory is hidden or a table's log once
for all its files. Nested tables are found from marker rows across the whole listing (a table's
``metadata`` directory may be listed by another task than its data).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper.files.rules import PathRules
from tablekeeper.io.fileio import FileInfo

_METADATA_JSON = (".metadata.json", ".metadata.json.gz")


# What a table's metadata directory holds; with gc.enabled=false nothing else there is deleted.
_METADATA_NAMES = (".metadata.json", ".metadata.json.gz", ".avro", ".puffin", ".stats", "version-hint.text")


def is_metadata_file(location: str) -> bool:
    """Whether a file is Iceberg metadata by its name (metadata JSON, manifest or list, Puffin or
    statistics file, partition statistics, the version hint), never a data file."""
    name = location.rsplit("/", 1)[-1]
    return name.endswith(_METADATA_NAMES) or (
        name.startswith("partition-stats-") and name.endswith(".parquet")
    )


def is_hidden(relative: str, partition_names: frozenset[str]) -> bool:
    """Whether a path relative to the table location is hidden (Iceberg's rule: a segment
    starting with ``.`` or ``_``, unless it is a ``_field=value`` partition directory)."""
    for segment in relative.split("/")[:-1]:  # directories only: a file's own name may start with _
        if segment.startswith("."):
            return True
        if segment.startswith("_") and not ("=" in segment and segment.split("=", 1)[0] in partition_names):
            return True
    name = relative.rsplit("/", 1)[-1]
    return name.startswith((".", "_"))


@dataclass(frozen=True)
class Classifier:
    """Turns listed files into rows (pickled to executors)."""

    stem: str  # the listed location without its trailing slash, as every listed path starts
    rules: PathRules
    partition_names: frozenset[str]

    def rows(self, infos: Iterable[FileInfo]) -> Iterator[tuple[Any, ...]]:
        """(path, key, size, mtime_ms, hidden, root of the table the file marks or None)."""
        dirs: dict[str, tuple[str, bool, str | None, str | None]] = {}
        for info in infos:
            location = info.location
            slash = location.rfind("/")
            parent, name = location[:slash], location[slash + 1 :]
            state = dirs.get(parent)
            if state is None:
                state = dirs[parent] = self._directory(parent)
            prefix, hidden_dir, log_root, metadata_root = state
            root = log_root or (metadata_root if name.endswith(_METADATA_JSON) else None)
            hidden = hidden_dir or name.startswith((".", "_"))
            if hidden and root is None:
                continue  # markers are kept even when hidden: they reveal nested tables
            yield (location, prefix + name, info.size, info.mtime_ms, hidden, root)

    def _directory(self, parent: str) -> tuple[str, bool, str | None, str | None]:
        """(key prefix of its files, hidden, root of the Delta table whose log it is in, root of
        the Iceberg table whose metadata directory it is)."""
        relative = parent[len(self.stem) + 1 :] if parent.startswith(self.stem + "/") else ""
        prefix = self.rules.prefix(parent)
        directory = prefix.rstrip("/")
        cut = (directory + "/").rfind("/_delta_log/")
        log_root = directory[:cut] if cut >= 0 else None
        metadata_root = directory[: -len("/metadata")] if directory.endswith("/metadata") else None
        hidden = is_hidden(relative + "/x", self.partition_names) if relative else False
        return prefix, hidden, log_root, metadata_root


def nested(roots: Iterable[str], own_key: str) -> list[str]:
    """Roots of other tables strictly under the location; a table nested inside a nested table
    is covered by the outer one."""
    inside = {r for r in roots if r.startswith(own_key + "/")}
    return sorted(r for r in inside if not any(r != o and r.startswith(o + "/") for o in inside))


def nested_prefixes(rows: Iterable[tuple[Any, ...]], own_key: str) -> tuple[str, ...]:
    """Key prefixes (each ending ``/``) of the tables that ``Classifier.rows`` rows mark, nested
    under the location whose key is ``own_key``."""
    return tuple(root + "/" for root in nested({r[5] for r in rows if r[5] is not None}, own_key))


def table_rows(rows: Sequence[tuple[Any, ...]], own_key: str) -> list[tuple[str, str, int, int]]:
    """(path, key, size, mtime_ms) of the rows neither hidden nor in a nested table they mark."""
    inner = nested_prefixes(rows, own_key)
    return [(r[0], r[1], r[2], r[3]) for r in rows if not r[4] and not (inner and r[1].startswith(inner))]
