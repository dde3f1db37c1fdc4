"""What the glue catalog reads from and writes into the Glue Data Catalog's records: a catalogs
entry's settings, the parameters that make a Glue table an Iceberg (or a Delta) one, and the
TableInput an Iceberg commit sends, as Iceberg Java's GlueCatalog writes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.types import DecimalType, IcebergType, ListType, MapType, PrimitiveType, StructType

# Iceberg's BaseMetastoreTableOperations parameter names, which every Glue client of Iceberg shares.
TABLE_TYPE = "table_type"
METADATA_LOCATION = "metadata_location"
PREVIOUS_METADATA_LOCATION = "previous_metadata_location"
ICEBERG = "ICEBERG"
EXTERNAL_TABLE = "EXTERNAL_TABLE"
# The fields of a Glue Table that its TableInput takes back: an update keeps what another tool set
# (a description, an owner, serde settings) instead of wiping it.
TABLE_INPUT_FIELDS = (
    "Description",
    "Owner",
    "LastAccessTime",
    "LastAnalyzedTime",
    "Retention",
    "StorageDescriptor",
    "PartitionKeys",
    "ViewOriginalText",
    "ViewExpandedText",
    "TableType",
    "Parameters",
    "TargetTable",
)
SETTINGS = (
    "glue.region",
    "glue.endpoint",
    "glue.id",
    "glue.account-id",
    "glue.access-key-id",
    "glue.secret-access-key",
    "glue.session-token",
    "glue.profile-name",
    "glue.max-retries",
    "glue.skip-archive",
    "glue.skip-name-validation",
    "glue.lakeformation-enabled",
)


def _flag(catalog: str, key: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"catalog {catalog!r}: {key}={value!r} must be true or false")
    return text == "true"


@dataclass(frozen=True)
class GlueSettings:
    """How to reach one Glue Data Catalog, from a catalogs-file entry's properties (PyIceberg's
    ``glue.*`` names, with ``client.*`` as the fallback, as PyIceberg reads them). Secrets stay out
    of ``repr``."""

    region: str | None = None
    endpoint: str | None = None  # None: AWS's own endpoint for the region
    catalog_id: str | None = None  # None: the caller's account's catalog
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    max_attempts: int = 5
    skip_archive: bool = True  # Iceberg Java's default: no Glue table version per commit
    skip_name_validation: bool = False

    @classmethod
    def parse(cls, catalog: str, properties: Mapping[str, str]) -> GlueSettings:
        props = {str(k): str(v) for k, v in properties.items()}
        unknown = sorted(k for k in props if k.startswith("glue.") and k not in SETTINGS)
        if unknown:
            raise ConfigError(
                f"catalog {catalog!r}: unsupported Glue properties {', '.join(unknown)}: "
                f"supported are {', '.join(SETTINGS)}"
            )
        if _flag(catalog, "glue.lakeformation-enabled", props.get("glue.lakeformation-enabled"), False):
            raise ConfigError(
                f"catalog {catalog!r}: glue.lakeformation-enabled=true is not supported: tablekeeper "
                "reaches the table's files with its own credentials, not Lake Formation's"
            )

        def pick(name: str) -> str | None:
            return props.get(f"glue.{name}") or props.get(f"client.{name}") or None

        access, secret = pick("access-key-id"), pick("secret-access-key")
        if bool(access) != bool(secret):
            raise ConfigError(
                f"catalog {catalog!r} sets only one of glue.access-key-id and glue.secret-access-key: "
                "set both, or neither to use the AWS credential chain"
            )
        endpoint = props.get("glue.endpoint") or None
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ConfigError(
                f"catalog {catalog!r}: glue.endpoint={endpoint!r}: use http://host:port or https://host"
            )
        retries = props.get("glue.max-retries", "4")
        if not retries.isdigit() or int(retries) > 20:
            raise ConfigError(
                f"catalog {catalog!r}: glue.max-retries={retries!r} must be a number from 0 to 20"
            )
        return cls(
            region=props.get("glue.region") or props.get("client.region") or None,
            endpoint=endpoint.rstrip("/") if endpoint else None,
            catalog_id=props.get("glue.id") or None,
            access_key=access,
            secret_key=secret,
            session_token=pick("session-token"),
            profile=props.get("glue.profile-name") or None,
            max_attempts=int(retries) + 1,
            skip_archive=_flag(catalog, "glue.skip-archive", props.get("glue.skip-archive"), True),
            skip_name_validation=_flag(
                catalog, "glue.skip-name-validation", props.get("glue.skip-name-validation"), False
            ),
        )


def glue_type(t: IcebergType) -> str:
    """The Hive-style type string Iceberg Java shows a column with in Glue (informational only:
    readers take the schema from the metadata file)."""
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    if isinstance(t, StructType):
        return "struct<" + ",".join(f"{f.name}:{glue_type(f.type)}" for f in t.fields) + ">"
    if isinstance(t, ListType):
        return f"array<{glue_type(t.element)}>"
    if isinstance(t, MapType):
        return f"map<{glue_type(t.key)},{glue_type(t.value)}>"
    if not isinstance(t, PrimitiveType):  # fixed
        return "binary"
    simple = {"long": "bigint", "time": "string", "uuid": "string", "timestamptz": "timestamp"}
    return simple.get(t.name, t.name)


def glue_columns(metadata: TableMetadata) -> list[dict[str, Any]]:
    """The current schema's columns, then those only older schemas have (marked not current), as
    Iceberg Java lists them in the table's storage descriptor."""
    columns: list[dict[str, Any]] = []
    seen: set[str] = set()
    current = metadata.schema()
    others = [s for s in metadata.schemas if s.schema_id != current.schema_id]
    for schema, is_current in ((current, True), *((s, False) for s in others)):
        for f in schema.fields:
            if f.name in seen:
                continue
            seen.add(f.name)
            column: dict[str, Any] = {
                "Name": f.name,
                "Type": glue_type(f.type),
                "Parameters": {
                    "iceberg.field.id": str(f.id),
                    "iceberg.field.optional": str(not f.required).lower(),
                    "iceberg.field.current": str(is_current).lower(),
                },
            }
            if f.doc:
                column["Comment"] = f.doc
            columns.append(column)
    return columns


def is_delta(table: Mapping[str, Any]) -> bool:
    params = {str(k).lower(): str(v).lower() for k, v in (table.get("Parameters") or {}).items()}
    return params.get(TABLE_TYPE) == "delta" or params.get("spark.sql.sources.provider") == "delta"


def delta_location(table: Mapping[str, Any]) -> str | None:
    """Where a Glue table registered for Delta keeps its files: the storage descriptor's location,
    else the ``path`` serde parameter Spark's Hive-style registration writes."""
    descriptor = table.get("StorageDescriptor") or {}
    location = descriptor.get("Location") or (descriptor.get("SerdeInfo") or {}).get("Parameters", {}).get(
        "path"
    )
    return str(location).rstrip("/") if location else None


def pointer(table: Mapping[str, Any] | None) -> str | None:
    """The Iceberg metadata a Glue table names (None: no table, or not an Iceberg one)."""
    if table is None:
        return None
    params = table.get("Parameters") or {}
    if str(params.get(TABLE_TYPE, "")).upper() != ICEBERG:
        return None
    location = params.get(METADATA_LOCATION)
    return str(location) if location else None


def table_input(
    existing: Mapping[str, Any] | None,
    name: str,
    metadata: TableMetadata,
    location: str,
    previous: str | None,
) -> dict[str, Any]:
    """The TableInput that makes ``name`` point at ``location``: what ``existing`` (the table as
    read) holds is kept, its parameters included; Iceberg's parameters, the table's location and
    its columns are set."""
    kept = {k: v for k, v in (existing or {}).items() if k in TABLE_INPUT_FIELDS}
    params = {str(k): str(v) for k, v in (kept.get("Parameters") or {}).items()}
    params.update({TABLE_TYPE: ICEBERG, METADATA_LOCATION: location})
    if previous:
        params[PREVIOUS_METADATA_LOCATION] = previous
    descriptor = dict(kept.get("StorageDescriptor") or {})
    descriptor.update(Location=metadata.location, Columns=glue_columns(metadata))
    return {
        **kept,
        "Name": name,
        "TableType": EXTERNAL_TABLE,
        "Parameters": params,
        "StorageDescriptor": descriptor,
    }
