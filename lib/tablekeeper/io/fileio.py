"""FileIO: read, write, create-if-absent, list and delete files over ``pyarrow.fs``.

Every method takes a *location* exactly as table metadata stores it and never rewrites it; the
path handed to pyarrow is derived on each call (``fs_path``). Locations are used literally: no
percent-decoding happens here (see ``tablekeeper.io.uri``).

Atomicity. ``create_if_absent`` and ``rename_if_absent`` are atomic only on the local filesystem
(``atomic_create`` says which): the bytes go to a hidden temporary file in the target directory,
are fsynced, and then get the target name by a hard link, which the kernel refuses if the name
exists. Readers therefore see either no file or the complete file, never a partial one (as they
would with ``O_CREAT | O_EXCL`` followed by writes). Where hard links are unsupported, Linux's
``renameat2(RENAME_NOREPLACE)`` gives the same guarantee; with neither, these methods refuse rather
than degrade. On object stores and HDFS they are best effort (check, then write) and catalogs must
not build commits on them there.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from tablekeeper.errors import AlreadyExists, ConfigError, FileNotFound, StorageError, TablekeeperError
from tablekeeper.io.local_atomic import NoAtomicPrimitive, fsync_dir, link_noreplace, write_temp
from tablekeeper.io.s3 import S3Settings, bucket_filesystem, delete_keys, s3_filesystem
from tablekeeper.io.storage import storage_properties
from tablekeeper.io.stores import Store, StoreDeletes, store_for
from tablekeeper.io.uri import location_to_path, strip_trailing_slash
from tablekeeper.io.walk import entries
from tablekeeper.redact import redact

__all__ = ["DeleteReport", "FileIO", "FileInfo", "InputStream"]

logger = logging.getLogger(__name__)

_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})

# pyarrow filesystem type -> (location schemes it serves, how a location becomes its path).
# "bucket": authority + path (one filesystem serves every bucket); "container": abfs's
# container@account authority keeps only the container (the filesystem is bound to the account);
# "path": the filesystem is bound to one authority (an HDFS name node) and takes the bare path.
_KINDS: Mapping[str, tuple[frozenset[str], str]] = {
    "local": (frozenset({"file"}), "local"),
    "s3": (_S3_SCHEMES, "bucket"),
    "gcs": (frozenset({"gs", "gcs"}), "bucket"),
    "abfs": (frozenset({"abfs", "abfss"}), "container"),
    "hdfs": (frozenset({"hdfs", "viewfs"}), "path"),
}
# Object stores have no directories; creating "directory" marker objects only clutters listings.
_NO_DIRECTORIES = frozenset({"s3", "gcs"})


@dataclass(frozen=True)
class FileInfo:
    """One listed file. ``location`` is spelled like the prefix that was listed."""

    location: str
    size: int
    mtime_ms: int


@dataclass(frozen=True)
class DeleteReport:
    """Outcome of ``delete_many``. Files already gone count as ``missing``, not as failures."""

    deleted: int
    missing: int
    failures: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures


class InputStream(Protocol):
    """The part of pyarrow's ``RandomAccessFile`` that callers may rely on."""

    def read(self, nbytes: int | None = None) -> bytes: ...

    def read_at(self, nbytes: int, offset: int) -> bytes: ...

    def seek(self, position: int, whence: int = 0) -> int: ...

    def tell(self) -> int: ...

    def size(self) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> InputStream: ...

    def __exit__(self, *exc_info: object) -> Any: ...


def _reason_text(text: str) -> str:
    first = (redact(text).strip().splitlines() or ["failed"])[0]
    return first if len(first) <= 200 else first[:197] + "..."


def _reason(err: BaseException) -> str:
    # pyarrow messages can run to dozens of lines (libjvm search paths); the first says what failed.
    # A store's message may quote the request's URL, a SAS token's signature in its query string.
    text = redact(str(err)).strip().splitlines()
    first = text[0] if text else type(err).__name__
    return first if len(first) <= 200 else first[:197] + "..."


@contextlib.contextmanager
def _translate(location: str, action: str) -> Iterator[None]:
    try:
        yield
    except TablekeeperError:
        raise
    except FileNotFoundError as err:
        raise _not_found(location) from err
    except (OSError, pa.ArrowException) as err:
        raise StorageError(
            f"cannot {action} {location}: {_reason(err)} (check access to the storage and retry)"
        ) from err


class FileIO:
    """Files at locations served by one pyarrow filesystem.

    One instance serves every location whose scheme its filesystem handles (for S3: every bucket);
    a location of another scheme is refused rather than mapped onto the wrong storage.
    """

    def __init__(
        self,
        filesystem: pafs.FileSystem,
        *,
        authority: str | None = None,
        s3: S3Settings | None = None,
        store: Store | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """``authority``: the name node (HDFS) or ``container@account`` (ABFS) the filesystem is
        bound to; locations elsewhere are then refused. ``s3``: the settings an S3 filesystem was
        made with, so deletes reach the same store in batches. ``store``: a registered store
        (``io.stores``) the filesystem serves, made with ``settings``. ``for_location`` sets them."""
        self._fs = filesystem
        self._s3 = s3
        self._store = store
        self._settings = dict(settings or {})
        self._type = str(filesystem.type_name)
        schemes, kind = _KINDS.get(self._type, (None, "generic"))
        if store is not None:
            schemes, kind = store.schemes, store.layout
        self._schemes = schemes
        self._kind = kind
        self._authority = authority
        self._flat = self._type in _NO_DIRECTORIES if store is None else not store.directories
        self._one_level = store is None or store.lists_prefixes

    @classmethod
    def for_location(cls, location: str, properties: Mapping[str, str] | None = None) -> FileIO:
        """The FileIO for ``location``'s storage: local for paths and ``file:`` URIs, else by scheme.

        ``properties`` are Iceberg FileIO settings (``s3.endpoint``, ...); without them, the
        process's storage settings apply (``tablekeeper.io.storage``).
        """
        scheme, authority, _ = location_to_path(location)
        if scheme == "file":
            if authority:
                raise ConfigError(f"{location} names host {authority!r}: only local file: locations work")
            return cls(pafs.LocalFileSystem())
        # Looked up only here: local paths, the common case on hot paths, need no settings.
        props = storage_properties() if properties is None else properties
        with _connect(location, scheme):
            if (store := store_for(scheme, props)) is not None:  # a registered store goes first
                node = authority if store.layout in ("path", "container") else None
                return cls(store.open(authority, props), authority=node, store=store, settings=props)
            if scheme in _S3_SCHEMES:
                settings = S3Settings.from_properties(props, f"the storage settings for {location}")
                if not settings.is_default:
                    return cls(s3_filesystem(settings), s3=settings)
                if not authority:
                    raise ConfigError(f"{location} names no bucket: expected s3://bucket/path")
                return cls(bucket_filesystem(authority), s3=settings)
            root = f"{scheme}://{authority}/"
            filesystem, root_path = pafs.FileSystem.from_uri(root)
        bound = str(filesystem.type_name) in ("hdfs", "abfs")
        io = cls(filesystem, authority=authority if bound else None)
        if io.fs_path(root).rstrip("/") != str(root_path).rstrip("/"):
            raise ConfigError(f"unsupported storage for {location}: pyarrow maps it unexpectedly")
        return io

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    @property
    def atomic_create(self) -> bool:
        """Whether ``create_if_absent``/``rename_if_absent`` are atomic (safe to commit with)."""
        return self._kind == "local"

    def __repr__(self) -> str:
        return f"FileIO({self._type})"

    def fs_path(self, location: str) -> str:
        """The path pyarrow uses for ``location``. Never store it: it is not a location."""
        scheme, authority, path = location_to_path(location)
        if self._schemes is not None and scheme not in self._schemes:
            raise StorageError(
                f"{location} is not on this FileIO's {self._type} storage; open it with FileIO.for_location"
            )
        if self._kind == "local" or (self._kind == "generic" and scheme == "file"):
            if authority:
                raise StorageError(f"{location} names host {authority!r}: only local file: locations work")
            if not path.startswith("/"):
                raise ConfigError(f"relative location {location!r}: use an absolute path or URI")
            return path
        if self._kind == "path":
            if self._authority is not None and authority.lower() != self._authority.lower():
                raise StorageError(
                    f"{location} is not on {self._authority!r}; open it with FileIO.for_location"
                )
            return path or "/"
        if not authority:
            if self._kind == "generic":
                return path
            raise ConfigError(f"{location} names no bucket: expected {scheme}://bucket/path")
        if self._kind == "container":
            container, at, account = authority.partition("@")
            if not at or not container or not account:
                raise ConfigError(
                    f"{location} names no container and account: expected {scheme}://container@account-host/path"
                )
            bound_account = (self._authority or "").partition("@")[2]
            # The account is the host's first label: its Blob and Data Lake hosts are one account.
            if bound_account and account.split(".")[0].lower() != bound_account.split(".")[0].lower():
                raise StorageError(
                    f"{location} is not on {bound_account!r}; open it with FileIO.for_location"
                )
            return container + path
        return authority + path

    # -- reading ---------------------------------------------------------------------------------

    def read(self, location: str) -> bytes:
        path = self.fs_path(location)
        with _translate(location, "read"), self._fs.open_input_file(path) as stream:
            data: bytes = stream.read()
        return data

    def open_input(self, location: str) -> InputStream:
        """A seekable stream for range reads (``read_at``); the caller closes it.

        Only opening is translated to tablekeeper errors; later reads raise pyarrow's OSError.
        """
        path = self.fs_path(location)
        with _translate(location, "open"):
            stream: InputStream = self._fs.open_input_file(path)
        return stream

    def size(self, location: str) -> int:
        info = self._info(location)
        if info.type == pafs.FileType.NotFound:
            raise _not_found(location)
        if info.type != pafs.FileType.File:
            raise StorageError(f"{location} is a directory, not a file (check the location)")
        return int(info.size)

    def exists(self, location: str) -> bool:
        """Whether anything (file or directory) is at ``location``."""
        return bool(self._info(location).type != pafs.FileType.NotFound)

    def file_info(self, location: str) -> FileInfo | None:
        """The file at ``location`` as a listing would show it, or None when none is there."""
        info = self._info(location)
        if info.type != pafs.FileType.File:
            return None
        if info.mtime_ns is None:  # an unknown age must not pass for "old"
            raise StorageError(f"storage reports no modification time for {location}")
        return FileInfo(location, int(info.size), int(info.mtime_ns) // 1_000_000)

    def _info(self, location: str) -> Any:
        path = self.fs_path(location)
        with _translate(location, "inspect"):
            return self._fs.get_file_info(path)

    # -- writing ---------------------------------------------------------------------------------

    def write(self, location: str, data: bytes, overwrite: bool = True) -> None:
        """Write ``data`` to ``location``. Locally, readers see the old or the new file, never a mix.

        ``overwrite=False`` is ``create_if_absent`` (and raises ``AlreadyExists``).
        """
        if not overwrite:
            self.create_if_absent(location, data)
            return
        path = self.fs_path(location)
        with _translate(location, "write"):
            if self._kind == "local":
                target = Path(path)
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = write_temp(target.parent, target.name, data)
                try:
                    tmp.replace(target)
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    raise
                fsync_dir(target.parent)
            else:
                self._make_parent(path)
                with self._fs.open_output_stream(path, compression=None) as out:
                    out.write(data)

    def create_if_absent(self, location: str, data: bytes) -> None:
        """Create ``location`` with ``data`` unless it exists; ``AlreadyExists`` if it does.

        Atomic locally (see the module docstring); best effort elsewhere (``atomic_create``).
        """
        path = self.fs_path(location)
        if self._kind != "local":
            logger.debug("create_if_absent(%s) on %s is best effort, not atomic", location, self._type)
            if self.exists(location):
                raise _already_exists(location)
            with _translate(location, "create"):
                self._make_parent(path)
                with self._fs.open_output_stream(path, compression=None) as out:
                    out.write(data)
            return
        with _translate(location, "create"):
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = write_temp(target.parent, target.name, data)
            try:
                link_noreplace(str(tmp), path)
            except FileExistsError as err:
                raise _already_exists(location) from err
            except NoAtomicPrimitive as err:
                raise _not_atomic(location) from err
            finally:
                tmp.unlink(missing_ok=True)
            fsync_dir(target.parent)

    def rename_if_absent(self, src: str, dst: str) -> None:
        """Give ``src``'s file the location ``dst`` unless ``dst`` exists (``AlreadyExists``).

        Locally this hard-links then unlinks ``src``: a crash in between leaves both names, never
        neither. Elsewhere it is best effort (and a copy plus delete on object stores).
        """
        src_path, dst_path = self.fs_path(src), self.fs_path(dst)
        if self._kind != "local":
            if self.exists(dst):
                raise _already_exists(dst)
            with _translate(src, "rename"):
                self._make_parent(dst_path)
                self._fs.move(src_path, dst_path)
            return
        with _translate(src, "rename"):
            if not Path(src_path).exists():
                raise FileNotFoundError(errno.ENOENT, "no such file", src_path)
            Path(dst_path).parent.mkdir(parents=True, exist_ok=True)
            try:
                link_noreplace(src_path, dst_path)
            except FileExistsError as err:
                raise _already_exists(dst) from err
            except NoAtomicPrimitive as err:
                raise _not_atomic(dst) from err
            Path(src_path).unlink(missing_ok=True)
            fsync_dir(Path(dst_path).parent)
            fsync_dir(Path(src_path).parent)

    def mkdirs(self, location: str) -> None:
        """Create a directory and its parents; a no-op on object stores, which have none."""
        path = self.fs_path(location)
        if self._flat:
            return
        with _translate(location, "create directory"):
            self._fs.create_dir(path, recursive=True)

    def _make_parent(self, path: str) -> None:
        # HDFS and test filesystems need the parent directory; object stores need nothing.
        parent = path.rsplit("/", 1)[0] if "/" in path.strip("/") else ""
        if parent and not self._flat:
            self._fs.create_dir(parent, recursive=True)

    # -- deleting --------------------------------------------------------------------------------

    def delete(self, location: str, *, missing_ok: bool = False) -> bool:
        """Delete one file. Returns False if it was already gone and ``missing_ok``."""
        path = self.fs_path(location)
        store = self._store
        if store is not None and store.batch_single_deletes and store.batch_delete is not None:
            outcome = store.batch_delete(self._authority, self._settings, [path])
            if outcome is not None:
                if outcome.failures:
                    why = _reason_text(outcome.failures[0][1])
                    raise StorageError(
                        f"cannot delete {location}: {why} (check access to the storage and retry)"
                    )
                if outcome.missing:
                    if missing_ok:
                        return False
                    raise _not_found(location)
                return True
        try:
            with _translate(location, "delete"):
                self._fs.delete_file(path)
        except FileNotFound:
            if missing_ok:
                return False
            raise
        return True

    def remove_empty_directory(self, location: str) -> None:
        """Remove a directory left empty (a no-op on object stores, or when it holds anything)."""
        if self._kind != "local":
            return
        with contextlib.suppress(OSError):
            Path(self.fs_path(location)).rmdir()

    @property
    def batches_deletes(self) -> bool:
        """Whether ``delete_many`` sends batches (S3, a store's batch API), so a caller should hand
        it many at once."""
        return self._s3 is not None or (self._store is not None and self._store.batch_delete is not None)

    def delete_many(self, locations: Iterable[str], max_workers: int = 8) -> DeleteReport:
        """Delete files concurrently, carrying on past failures and reporting each one.

        On S3 this sends batched DeleteObjects requests (which count a missing key as deleted).
        """
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        targets = tuple(locations)
        if not targets:
            return DeleteReport(0, 0)
        if self._s3 is not None:
            return self._delete_batched(targets, max_workers)
        if self._store is not None and self._store.batch_delete is not None:
            batched = self._store_batches(self._store, targets, max_workers)
            if batched is not None:
                return batched

        def one(location: str) -> str | None:
            # None: deleted; "": already missing; otherwise the failure reason.
            try:
                return None if self.delete(location, missing_ok=True) else ""
            except TablekeeperError as err:
                return err.message

        with ThreadPoolExecutor(max_workers=min(max_workers, len(targets))) as pool:
            outcomes: Sequence[str | None] = tuple(pool.map(one, targets))
        deleted = sum(1 for o in outcomes if o is None)
        missing = sum(1 for o in outcomes if o == "")
        failures = tuple((loc, o) for loc, o in zip(targets, outcomes, strict=True) if o)
        logger.info("deleted %d files (%d already missing, %d failed)", deleted, missing, len(failures))
        return DeleteReport(deleted, missing, failures)

    def _store_batches(self, store: Store, targets: tuple[str, ...], max_workers: int) -> DeleteReport | None:
        """Deletes through the store's batch API (``Store.batch_delete``); None when the store
        cannot batch with these settings."""
        assert store.batch_delete is not None
        batch = store.batch_delete
        by_path: dict[str, str] = {}
        for location in targets:
            by_path.setdefault(self.fs_path(location), location)
        paths = list(by_path)
        chunks = [paths[i : i + store.batch_size] for i in range(0, len(paths), store.batch_size)]
        first = batch(self._authority, self._settings, chunks[0])
        if first is None:
            return None
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(chunks) - 1))) as pool:
            rest = list(pool.map(lambda chunk: batch(self._authority, self._settings, chunk), chunks[1:]))
        outcomes = [
            o if o is not None else StoreDeletes(failures=tuple((p, "no batch") for p in c))
            for o, c in zip([first, *rest], chunks, strict=True)
        ]
        deleted = sum(len(o.deleted) for o in outcomes)
        missing = sum(len(o.missing) for o in outcomes)
        failures = tuple((by_path.get(p, p), _reason_text(why)) for o in outcomes for p, why in o.failures)
        logger.info(
            "deleted %d files in %d requests (%d already missing, %d failed)",
            deleted,
            len(chunks),
            missing,
            len(failures),
        )
        return DeleteReport(deleted, missing, failures)

    def _delete_batched(self, targets: tuple[str, ...], max_workers: int) -> DeleteReport:
        assert self._s3 is not None
        settings = self._s3
        by_key: dict[tuple[str, str], str] = {}
        for location in targets:
            bucket, _, key = self.fs_path(location).partition("/")
            by_key.setdefault((bucket, key), location)
        batches: list[tuple[str, list[str]]] = []
        for bucket, key in by_key:
            if not batches or batches[-1][0] != bucket or len(batches[-1][1]) >= settings.delete_batch:
                batches.append((bucket, []))
            batches[-1][1].append(key)
        with ThreadPoolExecutor(max_workers=min(max_workers, len(batches))) as pool:
            outcomes = tuple(pool.map(lambda b: (b[0], delete_keys(settings, b[0], b[1])), batches))
        deleted = sum(len(o.deleted) for _, o in outcomes)
        failures = tuple(
            (by_key.get((bucket, key), f"s3://{bucket}/{key}"), why)
            for bucket, o in outcomes
            for key, why in o.failures
        )
        logger.info("deleted %d objects in %d requests (%d failed)", deleted, len(batches), len(failures))
        return DeleteReport(deleted, 0, failures)

    # -- listing ---------------------------------------------------------------------------------

    def list(self, prefix_location: str, recursive: bool = True) -> Iterator[FileInfo]:
        """Files (not directories) under a directory location, spelled like ``prefix_location``.

        A missing prefix yields nothing; a prefix naming a file yields that file. The prefix is a
        directory: ``s3://b/data/part-`` lists ``data/part-/...``, not keys starting with it.
        """
        base = self.fs_path(prefix_location).rstrip("/") or "/"
        with _translate(prefix_location, "list"):
            top = self._fs.get_file_info(base)
            if top.type == pafs.FileType.NotFound:
                return
            local = self._kind == "local"
            infos = [] if top.type == pafs.FileType.File else entries(self._fs, base, recursive, local=local)
            if top.type == pafs.FileType.File and not local and top.size == 0:
                # An empty blob named like a directory that holds files: Hadoop's Azure drivers'
                # directory marker (io.walk), not the file the prefix names.
                infos = entries(self._fs, base, recursive, local=False)
            if top.type == pafs.FileType.File and not infos:
                infos = [(str(top.path), False, top.size, top.mtime_ns)]
        root = base if base.endswith("/") else base + "/"
        stem = strip_trailing_slash(prefix_location)
        for path, directory, size, mtime_ns in infos:
            if directory:
                continue
            if path == base:
                location = prefix_location
            elif path.startswith(root):
                location = stem + "/" + path[len(root) :]
            else:
                raise StorageError(f"listing {prefix_location} returned {path}, outside it")
            if mtime_ns is None:
                # An unknown age must not pass for "old": orphan removal would delete the file.
                raise StorageError(f"storage reports no modification time for {location}")
            yield FileInfo(location, int(size), int(mtime_ns) // 1_000_000)

    def list_dir(self, location: str) -> tuple[tuple[FileInfo, ...], tuple[str, ...]]:
        """One level of a directory: its files, and its subdirectories as locations spelled like
        ``location``. A missing directory is empty."""
        base = self.fs_path(location).rstrip("/") or "/"
        root = base if base.endswith("/") else base + "/"
        stem = strip_trailing_slash(location)
        files: builtins.list[FileInfo] = []
        dirs: builtins.list[str] = []
        with _translate(location, "list"):
            infos = entries(self._fs, base, not self._one_level, local=self._kind == "local")
        if not self._one_level:
            infos = _one_level(infos, root)
        for path, directory, size, mtime_ns in infos:
            if not path.startswith(root):
                raise StorageError(f"listing {location} returned {path}, outside it")
            child = stem + "/" + path[len(root) :]
            if directory:
                dirs.append(child)
            else:
                if mtime_ns is None:
                    raise StorageError(f"storage reports no modification time for {child}")
                files.append(FileInfo(child, int(size), int(mtime_ns) // 1_000_000))
        return tuple(files), tuple(dirs)


def _one_level(
    infos: Sequence[tuple[str, bool, int, int | None]], root: str
) -> list[tuple[str, bool, int, int | None]]:
    """A recursive listing under ``root`` folded to one level: the files directly in it, and each
    first path segment deeper files sit under as a directory."""
    out: list[tuple[str, bool, int, int | None]] = []
    seen: set[str] = set()
    for path, directory, size, mtime_ns in infos:
        if not path.startswith(root):  # kept, for the caller to refuse
            out.append((path, directory, size, mtime_ns))
            continue
        head, slash, _ = path[len(root) :].partition("/")
        if not slash and not directory:
            out.append((path, False, size, mtime_ns))
        elif head and head not in seen:
            seen.add(head)
            out.append((root + head, True, 0, None))
    return out


@contextlib.contextmanager
def _connect(location: str, scheme: str) -> Iterator[None]:
    try:
        yield
    except TablekeeperError:
        raise
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise ConfigError(
            f"unsupported storage scheme {scheme!r} in {location}: {_reason(err)} "
            "(use file, s3, gs, abfs or hdfs, or name a store: io-impl.<scheme>)"
        ) from err
    except (OSError, pa.ArrowException) as err:
        raise StorageError(f"cannot connect to storage for {location}: {_reason(err)}") from err


def _not_found(location: str) -> FileNotFound:
    return FileNotFound(f"file not found: {location} (check the location, or whether something deleted it)")


def _already_exists(location: str) -> AlreadyExists:
    return AlreadyExists(f"{location} already exists: another writer created it first (reload and retry)")


def _not_atomic(location: str) -> StorageError:
    return StorageError(
        f"cannot create {location} atomically: its filesystem supports neither hard links nor "
        "rename-without-replace (use a catalog that does not rely on file creation)"
    )
