"""The local filesystem's atomic primitives FileIO builds ``create_if_absent`` and
``rename_if_absent`` on: a hidden fsynced temporary file, then its final name by a hard link (which
the kernel refuses if the name exists) or, where hard links are unsupported, Linux's
``renameat2(RENAME_NOREPLACE)``; with neither, ``NoAtomicPrimitive`` and the caller refuses."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

# errno values meaning "this filesystem cannot hard-link", as opposed to a real failure.
_LINK_UNSUPPORTED = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EXDEV})
_RENAME_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


class NoAtomicPrimitive(Exception):
    """The filesystem offers neither hard links nor rename-without-replace."""


@functools.lru_cache(maxsize=1)
def _renameat2() -> Callable[..., int] | None:
    try:
        func = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def rename_noreplace(src: str, dst: str) -> None:
    func = _renameat2()
    if func is None:
        raise NoAtomicPrimitive("renameat2 is not available")
    if func(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) != 0:
        code = ctypes.get_errno()
        if code in _RENAME_UNSUPPORTED:
            raise NoAtomicPrimitive(os.strerror(code))
        raise OSError(code, os.strerror(code), dst)  # EEXIST becomes FileExistsError


def link_noreplace(src: str, dst: str) -> None:
    """Make ``dst`` name ``src``'s file, failing with FileExistsError if ``dst`` exists.

    ``src`` may or may not still exist afterwards; callers remove it with ``missing_ok``.
    """
    try:
        Path(dst).hardlink_to(src)
        return
    except FileExistsError:
        raise
    except OSError as err:
        if err.errno not in _LINK_UNSUPPORTED:
            raise
        logger.debug("hard link %s -> %s unsupported (%s); trying renameat2", src, dst, err)
    rename_noreplace(src, dst)


def write_temp(directory: Path, name: str, data: bytes) -> Path:
    # The leading dot hides a temp file left by a crash from Spark/Hadoop readers; the uuid keeps
    # concurrent writers apart. Mode 0o666 lets the umask decide, as for any new file (mkstemp's
    # 0o600 would make committed metadata unreadable to other users).
    tmp = directory / f".{name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def fsync_dir(directory: Path) -> None:
    # Makes the new name durable. Some filesystems refuse fsync on directories; the name change
    # itself is still atomic there, so that is not an error.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
