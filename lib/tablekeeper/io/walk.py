"""Local listings that never follow a symbolic link into a directory.

pyarrow's recursive selector on the local filesystem descends into linked directories, so a link
under a table location made its listing (and so orphan removal, and journal removal) reach files
elsewhere. Here a linked directory is neither descended into nor reported; a link to a file is a
file of its own (its own size and time: deleting it removes the link, never its target).
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

import pyarrow.fs as pafs


class Entry(NamedTuple):
    path: str
    directory: bool
    size: int
    mtime_ns: int


def _entry(item: os.DirEntry[str]) -> Entry | None:
    st = item.stat(follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        return Entry(item.path, True, 0, st.st_mtime_ns)
    if stat.S_ISLNK(st.st_mode):
        if item.is_dir(follow_symlinks=True):
            return None  # a link to a directory: what it reaches is not under this one
        return Entry(item.path, False, st.st_size, st.st_mtime_ns)
    if stat.S_ISREG(st.st_mode):
        return Entry(item.path, False, st.st_size, st.st_mtime_ns)
    return None  # sockets, fifos, devices: no table file is one


def local_entries(base: str, recursive: bool) -> list[Entry]:
    """The files and directories under the local directory ``base`` (one level unless
    ``recursive``); a missing ``base`` holds nothing."""
    out: list[Entry] = []
    stack = [base]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as items:
                found = [e for e in (_entry(i) for i in items) if e is not None]
        except FileNotFoundError:
            if directory == base:
                return []
            continue  # removed while listed
        out.extend(found)
        if recursive:
            stack.extend(e.path for e in found if e.directory)
    return out


def entries(
    filesystem: pafs.FileSystem, base: str, recursive: bool, *, local: bool
) -> list[tuple[str, bool, int, int | None]]:
    """(path, is a directory, size, mtime ns) under ``base``: locally without following a link
    into a directory, elsewhere as the filesystem lists (object stores have no links)."""
    if local:
        return [(e.path, e.directory, e.size, e.mtime_ns) for e in local_entries(base, recursive)]
    selector = pafs.FileSelector(base, recursive=recursive, allow_not_found=True)
    found = [
        (str(i.path), i.type == pafs.FileType.Directory, int(i.size or 0), i.mtime_ns)
        for i in filesystem.get_file_info(selector)
        if i.type in (pafs.FileType.File, pafs.FileType.Directory)
    ]
    return _without_folder_markers(found)


def _without_folder_markers(
    found: list[tuple[str, bool, int, int | None]],
) -> list[tuple[str, bool, int, int | None]]:
    """Hadoop's Azure drivers (WASB, and ABFS on a flat-namespace account) mark a directory with
    an empty blob of the directory's own name, no trailing slash, which a flat listing reports as
    a file beside the directory it marks. Such an entry is the directory: reported as one, once."""
    parents = {path.rpartition("/")[0] for path, _, _, _ in found}
    directories = {path for path, directory, _, _ in found if directory}
    out: list[tuple[str, bool, int, int | None]] = []
    for path, directory, size, mtime_ns in found:
        if not directory and size == 0 and path in parents:
            if path in directories:
                continue  # listed as the directory too
            directories.add(path)
            out.append((path, True, 0, None))
        else:
            out.append((path, directory, size, mtime_ns))
    return out
