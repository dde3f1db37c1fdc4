"""Catalog definitions from ``conf/catalogs.yaml`` (or a file given on the command line)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import yaml

from tablekeeper.catalog.registry import CatalogConfig, catalog_type, load_impl
from tablekeeper.errors import ConfigError
from tablekeeper.redact import register_secrets, register_uri_secrets
from tablekeeper.settings import CATALOGS_FILE, conf_dir, default_warehouse, expand

# CatalogConfig, one entry, lives with the catalog types (the registry) and is re-exported here.
__all__ = [
    "DEFAULT_LEDGER_TABLE",
    "PARTITION_TIMEZONE_KEY",
    "CatalogConfig",
    "CatalogsConfig",
    "LedgerConfig",
    "TelemetryConfig",
    "load_catalogs",
    "parse_catalogs",
]

DEFAULT_LEDGER_TABLE = "tablekeeper.runs"
# How far back a job looks in the ledger for the health run that recommended it.
DEFAULT_PREDICTION_WINDOW_DAYS = 7
# A catalog's default for convert-delta --partition-timezone (tablekeeper's own: never passed to Spark).
PARTITION_TIMEZONE_KEY = "delta-partition-timezone"


@dataclass(frozen=True)
class LedgerConfig:
    """The file's ``ledger:`` block: the table every run's result is appended to."""

    catalog: str
    table: str = DEFAULT_LEDGER_TABLE
    # A job's run is held against health's newest recommendation of it within this many days.
    prediction_window_days: int = DEFAULT_PREDICTION_WINDOW_DAYS


@dataclass(frozen=True)
class TelemetryConfig:
    """The file's ``telemetry:`` block: where runs send their metrics and lineage events (the
    standard environment variables win, key by key: jobs.common.observe)."""

    otlp_endpoint: str | None = None
    openlineage_url: str | None = None
    openlineage_namespace: str | None = None


_TELEMETRY_KEYS = {
    "otlp-endpoint": "otlp_endpoint",
    "openlineage-url": "openlineage_url",
    "openlineage-namespace": "openlineage_namespace",
}


@dataclass(frozen=True)
class CatalogsConfig:
    default: str
    catalogs: Mapping[str, CatalogConfig] = field(hash=False)
    # Catalogs whose values name an unset ${VAR}: an error only for a job that uses them.
    unusable: Mapping[str, str] = field(default_factory=dict, hash=False)
    ledger: LedgerConfig | None = None
    # A malformed ledger block: reported in each run's result, never failing the job itself.
    ledger_error: str | None = None
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    # A malformed telemetry block: a warning when a job starts, never failing it.
    telemetry_error: str | None = None

    def get(self, name: str | None) -> CatalogConfig:
        key = name or self.default
        if key in self.unusable:
            raise ConfigError(self.unusable[key])
        try:
            return self.catalogs[key]
        except KeyError:
            known = ", ".join(sorted(self.catalogs)) or "none"
            raise ConfigError(
                f"unknown catalog {key!r} (known: {known}): define it in conf/{CATALOGS_FILE}"
            ) from None


def parse_catalogs(text: str, warehouse: Path, source: str = CATALOGS_FILE) -> CatalogsConfig:
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{source} is not valid YAML ({err.__class__.__name__}): fix it") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("catalogs", {}), dict):
        raise ConfigError(f"{source}: expected a mapping with a 'catalogs' mapping")
    variables = {"warehouse": str(warehouse)}
    catalogs: dict[str, CatalogConfig] = {}
    unusable: dict[str, str] = {}
    for name, body in cast(dict[str, object], doc.get("catalogs", {})).items():
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: catalog {name!r} must be a mapping")
        try:
            props = {str(k): expand(str(v), variables) for k, v in body.items()}
        except ConfigError as err:
            unusable[str(name)] = f"{source}: catalog {name!r}: {err.message}"
            continue
        where = f"{source}: catalog {name!r}"
        impl = props.pop("impl", None)
        if impl:
            try:
                kind = load_impl(impl, where)
            except ConfigError as err:  # only a job that uses this catalog fails on it
                unusable[str(name)] = err.message
                continue
        else:
            kind = catalog_type(props.get("type") or "", where)
        ctype = props.pop("type", None) or kind.name
        wh = props.pop("warehouse", None)
        if not wh and not kind.warehouse_required:
            wh = ""  # the server decides where tables live
        elif not wh:
            raise ConfigError(f"{where} needs a 'warehouse'")
        uri = props.pop("uri", None)
        register_uri_secrets(uri)  # taken out of props: its password is learnt here
        if kind.uri_example is not None and not uri:
            raise ConfigError(f"{source}: {ctype} catalog {name!r} needs a 'uri' such as {kind.uri_example}")
        zone = props.pop(PARTITION_TIMEZONE_KEY, None)
        if zone is not None:
            from tablekeeper.delta.values import writer_zone  # only a file that sets one pays for it

            try:
                writer_zone(zone)
            except ConfigError as err:
                raise ConfigError(
                    f"{source}: catalog {name!r}: {PARTITION_TIMEZONE_KEY}: {err.message}"
                ) from None
        quarantine = props.pop("quarantine", "false").strip().lower()
        if quarantine not in ("true", "false"):
            raise ConfigError(f"{where}: quarantine must be true or false, not {quarantine!r}")
        register_secrets(props)
        catalogs[str(name)] = CatalogConfig(
            name=str(name),
            type=ctype,
            warehouse=wh,
            uri=uri,
            properties=props,
            delta_partition_timezone=zone,
            impl=impl or None,
            quarantine=quarantine == "true",
        )
    default = str(doc.get("default") or next(iter([*catalogs, *unusable]), ""))
    if (catalogs or unusable) and default not in catalogs and default not in unusable:
        raise ConfigError(f"{source}: default catalog {default!r} is not defined")
    ledger, ledger_error = _parse_ledger(doc.get("ledger"), source)
    telemetry, telemetry_error = _parse_telemetry(doc.get("telemetry"), source, variables)
    return CatalogsConfig(
        default=default,
        catalogs=catalogs,
        unusable=unusable,
        ledger=ledger,
        ledger_error=ledger_error,
        telemetry=telemetry,
        telemetry_error=telemetry_error,
    )


def _parse_telemetry(
    value: object, source: str, variables: Mapping[str, str]
) -> tuple[TelemetryConfig, str | None]:
    if value is None:
        return TelemetryConfig(), None
    example = "telemetry: {otlp-endpoint: <url>, openlineage-url: <url>, openlineage-namespace: <name>}"
    if not isinstance(value, dict):
        return TelemetryConfig(), f"{source}: 'telemetry' must be a mapping like {example}"
    unknown = sorted(str(k) for k in value if k not in _TELEMETRY_KEYS)
    if unknown:
        keys = ", ".join(unknown)
        return TelemetryConfig(), f"{source}: telemetry has unknown key(s) {keys}: use {example}"
    given: dict[str, str] = {}
    for key, name in _TELEMETRY_KEYS.items():
        raw = value.get(key)
        if raw is None or raw == "":
            continue
        try:
            given[name] = expand(str(raw), variables)
        except ConfigError as err:
            return TelemetryConfig(), f"{source}: telemetry {key}: {err.message}"
        register_uri_secrets(given[name])  # an endpoint may carry a password or a token parameter
    return TelemetryConfig(**given), None


def _parse_ledger(value: object, source: str) -> tuple[LedgerConfig | None, str | None]:
    if value is None:
        return None, None
    example = f"ledger: {{catalog: <name>, table: {DEFAULT_LEDGER_TABLE}}}"
    if not isinstance(value, dict):
        return None, f"{source}: 'ledger' must be a mapping like {example}"
    unknown = sorted(str(k) for k in value if k not in ("catalog", "table", "prediction_window_days"))
    if unknown:
        return None, f"{source}: ledger has unknown key(s) {', '.join(unknown)}: use {example}"
    catalog, table = value.get("catalog"), value.get("table") or DEFAULT_LEDGER_TABLE
    if not isinstance(catalog, str) or not catalog or not isinstance(table, str):
        return None, f"{source}: ledger needs a catalog name (and optionally a table): use {example}"
    window = value.get("prediction_window_days", DEFAULT_PREDICTION_WINDOW_DAYS)
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        return None, f"{source}: ledger.prediction_window_days must be a whole number of days, e.g. 7"
    return LedgerConfig(catalog=catalog, table=table, prediction_window_days=window), None


def load_catalogs(path: Path | None = None, warehouse: Path | None = None) -> CatalogsConfig:
    source = path or conf_dir() / CATALOGS_FILE
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read catalog file {source}: {err.strerror}") from err
    return parse_catalogs(text, warehouse or default_warehouse(), str(source))
