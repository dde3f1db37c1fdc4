"""Catalog types by name: what the catalogs file's ``type:`` means.

A catalog type is one class (a ``Catalog``) plus one registration, a ``CatalogType`` saying how a
catalogs-file entry opens it and what Iceberg's Spark catalog needs to reach the same catalog (so
the reference engine and tablekeeper always commit through one catalog). The built-in types are
named by import path and loaded on first use, so a run pays only for the catalogs it opens.

A type from outside the package is either registered by code (``register_catalog_type``) or named
in the catalogs file with ``impl: package.module:NAME`` (a ``CatalogType``), as PyIceberg's
``py-catalog-impl`` names a class.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tablekeeper.errors import ConfigError
from tablekeeper.io.storage import storage_subset

if TYPE_CHECKING:
    from tablekeeper.catalog.base import Catalog


@dataclass(frozen=True)
class CatalogConfig:
    name: str
    type: str  # a registered catalog type (tablekeeper.catalog.registry)
    warehouse: str
    # SQLAlchemy-style URI for sql catalogs (sqlite:///path, postgresql://..., mysql://...), the
    # server's base URI for rest catalogs (https://host/api/catalog), the metastore's address for
    # hive catalogs (thrift://host:9083); None for filesystem catalogs.
    uri: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)
    # The zone Delta tables converted into this catalog wrote zone-less timestamp partition values in.
    delta_partition_timezone: str | None = None
    # ``impl: package.module:NAME``: a CatalogType from outside the package (type is then its name).
    impl: str | None = None
    # ``quarantine: true``: destructive jobs on its tables move files aside by default
    # (files.quarantine); ``--no-quarantine`` overrides it for a run.
    quarantine: bool = False

    @property
    def storage(self) -> dict[str, str]:
        """The FileIO settings (``s3.*``, ``client.region``) among the properties."""
        return storage_subset(self.properties)

    @property
    def sqlite_path(self) -> Path | None:
        if self.uri is not None and self.uri.startswith("sqlite:///"):
            return Path(self.uri[len("sqlite:///") :])
        return None


# Iceberg's Spark catalog: the default for every type, a type may name another (a session catalog).
ICEBERG_SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"


@dataclass(frozen=True)
class CatalogType:
    """One catalog type.

    ``open`` makes the catalog from its catalogs-file entry. ``spark`` gives the settings Iceberg's
    Spark catalog needs for it, without the ``spark.sql.catalog.<name>.`` prefix (``type``, ``uri``,
    ...); the warehouse and the entry's other properties are added by the caller. ``uri_example``:
    the type needs a ``uri`` (shown when it is missing); ``warehouse_required``: an entry without a
    warehouse is refused (a REST server decides where tables live, so it needs none).
    """

    name: str
    open: Callable[[CatalogConfig], Catalog]
    spark: Callable[[CatalogConfig], Mapping[str, str]]
    uri_example: str | None = None
    warehouse_required: bool = True
    spark_catalog_class: str = ICEBERG_SPARK_CATALOG


# name -> "module:attribute" of its CatalogType, imported on first use.
_BUILT_IN: Mapping[str, str] = {
    "sql": "tablekeeper.catalog.sql:CATALOG_TYPE",
    "filesystem": "tablekeeper.catalog.filesystem:CATALOG_TYPE",
    "rest": "tablekeeper.catalog.rest:CATALOG_TYPE",
    "glue": "tablekeeper.catalog.glue:CATALOG_TYPE",
    "hive": "tablekeeper.catalog.hive:CATALOG_TYPE",
}
_lock = threading.Lock()
_registered: dict[str, CatalogType] = {}


def register_catalog_type(catalog_type: CatalogType) -> CatalogType:
    """Make ``catalog_type.name`` usable as a ``type:`` in catalogs files (replacing a previous
    registration of that name); returns it, so a module can register what it defines in one line."""
    if not catalog_type.name or catalog_type.name != catalog_type.name.strip():
        raise ConfigError(f"catalog type name {catalog_type.name!r} must be a non-empty word")
    with _lock:
        _registered[catalog_type.name] = catalog_type
    return catalog_type


def catalog_type_names() -> list[str]:
    with _lock:
        return [*_BUILT_IN, *sorted(set(_registered) - set(_BUILT_IN))]


def load_impl(impl: str, where: str) -> CatalogType:
    """The ``CatalogType`` a catalogs file names as ``impl: package.module:NAME``."""
    module_name, sep, attribute = impl.partition(":")
    if not sep:
        module_name, _, attribute = impl.rpartition(".")
    if not module_name or not attribute:
        raise ConfigError(f"{where}: impl {impl!r} is not 'package.module:NAME'")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except ImportError as err:
        raise ConfigError(
            f"{where}: impl {impl!r} cannot be imported ({err}): install it or fix the name"
        ) from None
    except AttributeError:
        raise ConfigError(f"{where}: impl {impl!r}: {module_name} has no {attribute!r}") from None
    if not isinstance(found, CatalogType):
        raise ConfigError(f"{where}: impl {impl!r} is a {type(found).__name__}, not a CatalogType")
    return found


def catalog_type(name: str, where: str = "catalogs file") -> CatalogType:
    """The registered type ``name``, refused by name (with the known types) when there is none."""
    with _lock:
        found = _registered.get(name)
    if found is not None:
        return found
    path = _BUILT_IN.get(name)
    if path is None:
        said = f"type {name!r}" if name else "no 'type'"
        raise ConfigError(
            f"{where} has {said}; use one of {', '.join(catalog_type_names())} "
            "(or name your own with impl: package.module:NAME)"
        )
    built_in = load_impl(path, where)
    with _lock:
        return _registered.setdefault(name, built_in)


def type_of(config: CatalogConfig) -> CatalogType:
    """The type a parsed catalogs-file entry names (its ``impl``, else its registered ``type``)."""
    where = f"catalog {config.name!r}"
    return load_impl(config.impl, where) if config.impl else catalog_type(config.type, where)
