"""Nothing outside the table, ever: the one check every path passes before it is deleted.

Every path a destructive run deletes comes from something it read (journal rows, the locations a
staging journal names, metadata and manifests, a listing), and any of them may be hostile or
stale. ``Containment`` is the check they all pass in ``files.deletes.delete_rows``, which the
driver engine's and the Spark engine's deletes run through, and in journal removal:

- the path is absolute and has no ``.`` or ``..`` segment (object stores keep ``..`` literally,
  local disks climb out with it: neither is a table's file);
- it lies under one of the table's own locations (its location, ``write.metadata.path``,
  ``write.data.path``) on the same store. Scheme aliases fold as always (s3a is s3); a user's
  ``--equal-authorities`` never widens this check, since a journal carries its own rules;
- a local path's directory, its symbolic links resolved, lies under one of those locations
  resolved the same way (deleting a link itself only unlinks it, inside the table).

Keys are derived from the path (``rekey``), never taken from a row: a row whose key names a
referenced file while its path names another would otherwise pass the keep filter.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from tablekeeper.catalog.base import LoadedTable
from tablekeeper.errors import OutsideTable, SafetyRefusal
from tablekeeper.files.manifests import FileRow
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io.uri import is_under, join_location, location_to_path
from tablekeeper.tables.iceberg import metadata_directory

# Compares stores strictly (only the default scheme aliases), whatever rules a run keys by.
_STRICT = PathRules()


def table_roots(meta: TableMetadata) -> tuple[str, ...]:
    """The locations a table's files may lie under: its location, and where it writes metadata
    and data when those are set elsewhere."""
    roots = [meta.location, metadata_directory(meta), meta.data_location]
    return tuple(dict.fromkeys(r for r in roots if r))


def _local(location: str) -> str | None:
    parts = location_to_path(location)
    return parts.path if parts.scheme == "file" and not parts.authority else None


@dataclass(frozen=True)
class Containment:
    """The table locations deletes are confined to (pickled to executors), and the rules keys
    are derived by (those of the set of files to keep)."""

    roots: tuple[str, ...]
    rules: PathRules
    resolved: tuple[str, ...]  # local roots with their links resolved, on the driver

    @classmethod
    def of(cls, roots: Iterable[str], rules: PathRules | None = None) -> Containment:
        found = tuple(dict.fromkeys(roots))
        for root in found:
            path = location_to_path(root).path
            # A root of a whole disk or bucket would let a table's deletes reach everything.
            if _bad_segment(root) or not path.startswith("/") or not path.strip("/"):
                raise SafetyRefusal(
                    f"table location {root} is not a plain absolute location below a root: nothing deleted"
                )
        local = [p for p in (_local(r) for r in found) if p is not None]
        resolved = tuple(os.path.realpath(p) for p in local)
        return cls(found, rules or PathRules(), resolved)

    @classmethod
    def for_table(cls, meta: TableMetadata, rules: PathRules | None = None) -> Containment:
        return cls.of(table_roots(meta), rules)

    def _prefixes(self) -> tuple[str, ...]:
        cached: tuple[str, ...] | None = self.__dict__.get("_keys")
        if cached is None:
            cached = tuple(_STRICT.prefix(r.rstrip("/") or "/") for r in self.roots)
            object.__setattr__(self, "_keys", cached)
        return cached

    def refusal(self, location: str, seen: dict[str, str | None] | None = None) -> str | None:
        """None when ``location`` may be deleted as the table's; else why not, in a few words.
        ``seen`` caches the verdict on each directory over one batch (most files share one; links
        may change between runs, so never longer)."""
        slash = location.rfind("/")
        if slash < 0 or location[slash + 1 :] in ("", ".", ".."):
            return "it does not name a file"
        directory = location[:slash]
        if seen is None:
            return self._directory_refusal(directory)
        if directory not in seen:
            seen[directory] = self._directory_refusal(directory)
        return seen[directory]

    def _directory_refusal(self, directory: str) -> str | None:
        """Why nothing directly in ``directory`` may be deleted (None: its files may)."""
        probe = directory + "/x"
        if _bad_segment(probe):
            return "it has a '.' or '..' segment"
        if not location_to_path(probe).path.startswith("/"):
            return "it is not an absolute location"
        if not _STRICT.key(probe).startswith(self._prefixes()):
            return f"it is outside the table location {self.roots[0]}"
        local = _local(probe)
        if local is not None:
            real = os.path.realpath(local[:-2] or "/")
            if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in self.resolved):
                return f"its directory resolves to {real}, outside the table location {self.roots[0]}"
        return None

    def check(self, location: str, what: str) -> None:
        why = self.refusal(location)
        if why is not None:
            raise OutsideTable(f"{what} {location} is refused: {why}; nothing there is deleted")

    def check_directory(self, location: str, what: str) -> None:
        """A directory to list or clean: itself inside, links resolved (not only its parent)."""
        self.check(join_location(location, "x"), what)

    def rekey(self, row: FileRow) -> FileRow:
        """The row with its key derived from its path."""
        return row[0], self.rules.key(row[0]), row[2], row[3]


def _bad_segment(location: str) -> bool:
    path = location_to_path(location).path
    return any(s in (".", "..") for s in path.split("/"))


def require_home(table: LoadedTable, identifier: str, job: str) -> None:
    """Refuse a table whose metadata file is not under its own metadata location: a table copied
    or moved as files keeps its old location, so whatever a job writes or deletes there lands in
    another table (or the live original)."""
    meta = table.metadata
    homes = (metadata_directory(meta), join_location(meta.location, "metadata"))
    if table.metadata_location.startswith("staged:"):
        return  # a staged table's versions are never written
    if any(is_under(table.metadata_location, d) for d in homes):
        return
    raise SafetyRefusal(
        f"{job}: {identifier}'s metadata file {table.metadata_location} is not under its metadata "
        f"location {homes[0]}: the table was copied or moved without its location being rewritten, "
        f"so {meta.location} may be another table's; register the table where its metadata says it "
        "lives, or rewrite its location, before running maintenance on it"
    )
