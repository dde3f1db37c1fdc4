"""Storage schemes from outside the package: one module and one registration per store.

A ``Store`` says which location schemes it serves, how its pyarrow filesystem is made from the
storage settings, how a location becomes that filesystem's path, which settings are its own, and
what Spark's Hadoop layer needs to reach the same store. ``FileIO.for_location`` asks here before
its built-in schemes, so a registered scheme may also replace a built-in one.

Executor tasks only carry locations and the storage settings (``io.storage``), so a store must be
found there too: a catalogs-file entry names it with ``io-impl.<scheme>: package.module:NAME`` (as
PyIceberg's ``py-io-impl`` names a FileIO), a setting that travels with the others and is loaded
on first use in whichever process meets the scheme. Registering by code suits the driver alone.

The stores that ship with tablekeeper (Google Cloud Storage, Azure) are stores like any other,
named here by import path and loaded on first use: a run that never meets their schemes or
settings never imports them. A registration or an ``io-impl.<scheme>`` setting replaces them.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pyarrow.fs as pafs

from tablekeeper.errors import ConfigError

IMPL_PREFIX = "io-impl."


def _no_hadoop(_: Mapping[str, str]) -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class StoreDeletes:
    """What one of a store's batch deletes did, by filesystem path (``bucket/key``).
    ``refused_with``: the HTTP status (0: not sent) of a refusal of the batch request itself,
    before any call ran (credentials that may not batch, such as an Azure SAS scoped to a
    container or directory, though they may delete): nothing was deleted, and the caller deletes
    another way."""

    deleted: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    failures: tuple[tuple[str, str], ...] = ()
    refused_with: int | None = None

    @property
    def refused(self) -> bool:
        return self.refused_with is not None


@dataclass(frozen=True)
class Store:
    """One storage scheme family.

    ``open(authority, settings)`` makes the filesystem (``settings``: the storage settings the job
    uses, this store's among them). ``layout``: ``bucket`` when one filesystem serves every
    authority and takes ``authority/path``; ``path`` when it is bound to one authority and takes
    the bare path; ``container`` when it is bound to the account of a ``container@account-host``
    authority and takes ``container/path`` (Azure). ``prefixes``: the setting names that are this
    store's (kept with the storage settings and handed to executors). ``hadoop``: the Hadoop
    settings Spark's own reads and writes need for the same store. ``directories``: False for
    object stores (no markers made). ``lists_prefixes``: False when the filesystem's one-level
    listing reports only marker objects as directories (pyarrow's GCS), so a directory's
    subdirectories are found from a recursive listing instead. ``credentials``: the setting
    names that are one way of authenticating each (a token, a key, "none"): credentials a catalog
    vends replace every one of them the entry set, rather than clash with it. ``batch_delete``:
    deletes up to ``batch_size`` filesystem paths in one request of the service's batch API,
    retrying what it throttles; None from it (credentials only the filesystem's own client can
    use) leaves the deletes to the filesystem, one request each. ``batch_single_deletes``: a
    single delete goes through ``batch_delete`` too, where the filesystem's own costs more than
    one request (pyarrow's Azure filesystem leases the blob, writes its directory's marker blob,
    and makes a later delete of a missing blob wait out the lease it could not release).
    """

    name: str
    schemes: frozenset[str]
    open: Callable[[str, Mapping[str, str]], pafs.FileSystem]
    layout: Literal["bucket", "path", "container"] = "bucket"
    prefixes: tuple[str, ...] = ()
    hadoop: Callable[[Mapping[str, str]], Mapping[str, str]] = field(default=_no_hadoop)
    directories: bool = False
    lists_prefixes: bool = True
    credentials: tuple[str, ...] = ()
    batch_delete: Callable[[str | None, Mapping[str, str], Sequence[str]], StoreDeletes | None] | None = None
    batch_size: int = 100
    batch_single_deletes: bool = False


_lock = threading.Lock()
_by_scheme: dict[str, Store] = {}
# scheme -> "module:attribute" of the built-in Store serving it, imported on first use.
_BUILT_IN: Mapping[str, str] = {
    "gs": "tablekeeper.io.gcs:STORE",
    "gcs": "tablekeeper.io.gcs:STORE",
    "abfs": "tablekeeper.io.azure:STORE",
    "abfss": "tablekeeper.io.azure:STORE",
    "wasb": "tablekeeper.io.azure:STORE",
    "wasbs": "tablekeeper.io.azure:STORE",
}
# A built-in store's setting prefix -> its Store: settings with the prefix make it one of the
# stores a run uses (its Hadoop settings, its keys kept among the storage settings).
_BUILT_IN_PREFIXES: Mapping[str, str] = {
    "gcs.": "tablekeeper.io.gcs:STORE",
    "adls.": "tablekeeper.io.azure:STORE",
}


def register_store(store: Store) -> Store:
    """Serve ``store.schemes`` with ``store`` from now on (in this process)."""
    if not store.schemes or any(not s or s != s.lower() for s in store.schemes):
        raise ConfigError(f"store {store.name!r}: schemes must be non-empty lowercase names")
    with _lock:
        for scheme in store.schemes:
            _by_scheme[scheme] = store
    return store


def _load(impl: str, key: str) -> Store:
    module_name, sep, attribute = impl.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"storage setting {key}={impl!r} is not 'package.module:NAME'")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except ImportError as err:
        raise ConfigError(f"storage setting {key}={impl!r} cannot be imported ({err}): install it") from None
    except AttributeError:
        raise ConfigError(f"storage setting {key}={impl!r}: {module_name} has no {attribute!r}") from None
    if not isinstance(found, Store):
        raise ConfigError(f"storage setting {key}={impl!r} is a {type(found).__name__}, not a Store")
    return found


def store_for(scheme: str, settings: Mapping[str, str]) -> Store | None:
    """The store serving ``scheme``: registered, else named by the settings' ``io-impl.<scheme>``
    (loaded and registered here); None leaves the scheme to the built-in ones."""
    with _lock:
        found = _by_scheme.get(scheme)
    if found is not None:
        return found
    key = IMPL_PREFIX + scheme
    impl = settings.get(key)
    if not impl:
        built_in = _BUILT_IN.get(scheme)
        return None if built_in is None else _load(built_in, f"the built-in store for {scheme}")
    store = _load(impl, key)
    if scheme not in store.schemes:
        raise ConfigError(f"storage setting {key}={impl!r} names a store for {sorted(store.schemes)}")
    return register_store(store)


def _stores(settings: Mapping[str, str]) -> set[Store]:
    """The stores registered here, and those ``settings`` name with ``io-impl.<scheme>``."""
    with _lock:
        stores = set(_by_scheme.values())
    for name, impl in settings.items():
        if name.startswith(IMPL_PREFIX) and impl:
            stores.add(_load(impl, name))
    for prefix, built_in in _BUILT_IN_PREFIXES.items():
        if any(name.startswith(prefix) for name in settings):
            stores.add(_load(built_in, f"the built-in store for {prefix}*"))
    return stores


def store_prefixes(settings: Mapping[str, str]) -> tuple[str, ...]:
    """The setting names (``io-impl.`` and each store's own prefixes) that are storage settings."""
    found = (prefix for store in _stores(settings) for prefix in store.prefixes)
    return tuple(dict.fromkeys((IMPL_PREFIX, *_BUILT_IN_PREFIXES, *found)))


def hadoop_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """What Spark's Hadoop layer needs for every store registered or named in ``settings``."""
    out: dict[str, str] = {}
    for store in sorted(_stores(settings), key=lambda s: s.name):
        out.update(store.hadoop(settings))
    return out


def with_vended(own: Mapping[str, str], vended: Mapping[str, str]) -> dict[str, str]:
    """An entry's storage settings with what a catalog vended for a table on top: where the
    vended settings hold any of a store's credentials, the entry's credentials for that store
    give way (a vended GCS token replaces the entry's key, or its ``gcs.no-auth``)."""
    merged = dict(own)
    for store in _stores({**own, **vended}):
        if store.credentials and any(k in store.credentials for k in vended):
            for key in store.credentials:
                merged.pop(key, None)
    merged.update(vended)
    return merged
