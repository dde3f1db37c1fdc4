"""The glue catalog: Iceberg tables in the AWS Glue Data Catalog, as Iceberg Java's GlueCatalog
keeps them, so Iceberg Spark (``org.apache.iceberg.aws.glue.GlueCatalog``), Athena, PyIceberg and
tablekeeper share one catalog.

A Glue database is a namespace; an Iceberg table is a Glue table whose parameters say
``table_type=ICEBERG`` and name its ``metadata_location`` (and ``previous_metadata_location``). A
commit reads the table, checks that it still names the metadata the commit started from, then sends
UpdateTable with the ``VersionId`` it read: Glue refuses it (ConcurrentModificationException) when
another writer updated the table in between, so exactly one of racing commits wins. The swap is
sent once, never retried by the client: a retried UpdateTable whose first attempt landed would be
refused as a conflict, and its metadata file deleted while the table names it.

Credentials follow boto3's chain (environment, shared profile, container and instance roles)
unless the entry names keys; they are secrets, masked wherever they could show.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from tablekeeper import faults
from tablekeeper.catalog.base import (
    Catalog,
    LoadedTable,
    TableIdentifier,
    landed,
    read_metadata,
    write_next_metadata,
)
from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.catalog.glue_records import (
    ICEBERG,
    METADATA_LOCATION,
    TABLE_TYPE,
    GlueSettings,
    delta_location,
    is_delta,
    pointer,
    table_input,
)
from tablekeeper.catalog.registry import CatalogType, register_catalog_type
from tablekeeper.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    CorruptMetadataError,
    NotATableError,
    StorageError,
    TablekeeperError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io import FileIO
from tablekeeper.redact import redact, register_secrets

log = logging.getLogger(__name__)

GLUE_CATALOG_IMPL = "org.apache.iceberg.aws.glue.GlueCatalog"
HADOOP_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO"
# Iceberg Java's name rules for Glue (IcebergToGlueConverter): what Spark can reach, tablekeeper may create.
_DATABASE_NAME = re.compile(r"^[a-z0-9_]{1,252}$")
_TABLE_NAME = re.compile(r"^[a-z0-9_]{1,255}$")
_TIMEOUT_S = 60.0
_CONNECT_TIMEOUT_S = 10.0
# Refusals that mean Glue was busy: nothing was applied, and the commit may simply be tried again.
_BUSY = frozenset({"ThrottlingException", "TooManyRequestsException", "ResourceNumberLimitExceededException"})
_CREDENTIALS_HINT = (
    "set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, run with a role, or name "
    "glue.access-key-id and glue.secret-access-key"
)


def _code(err: BaseException) -> tuple[str, int]:
    """A botocore ClientError's error code and HTTP status."""
    response = getattr(err, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return code, status


class GlueCatalog(Catalog):
    # A swap whose sender died (or whose answer was lost) may still be applied by Glue: the journal
    # of such a run is finished only once every timeout has passed.
    commit_settle_ms = int(4 * _TIMEOUT_S * 1000)

    def __init__(self, name: str, warehouse: str, properties: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.warehouse = warehouse.rstrip("/")
        props = dict(properties or {})
        register_secrets(props)
        self.settings = GlueSettings.parse(name, props)
        self._lock = threading.Lock()
        self._clients: dict[bool, Any] = {}

    # -- the client ------------------------------------------------------------------------------

    def _client(self, retries: bool = True) -> Any:
        """boto3's Glue client; ``retries=False`` sends each request once (the commit's swap)."""
        with self._lock:
            if retries not in self._clients:
                self._clients[retries] = self._new_client(retries)
            return self._clients[retries]

    def _new_client(self, retries: bool) -> Any:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        s = self.settings
        config = Config(
            retries={"mode": "standard", "total_max_attempts": s.max_attempts if retries else 1},
            connect_timeout=_CONNECT_TIMEOUT_S,
            read_timeout=_TIMEOUT_S,
        )
        try:
            session = boto3.session.Session(
                aws_access_key_id=s.access_key,
                aws_secret_access_key=s.secret_key,
                aws_session_token=s.session_token,
                profile_name=s.profile,
            )
            return session.client("glue", region_name=s.region, endpoint_url=s.endpoint, config=config)
        except BotoCoreError as err:
            hint = (
                "set client.region (or glue.region) or AWS_DEFAULT_REGION"
                if "region" in str(err)
                else "check it"
            )
            raise ConfigError(f"catalog {self.name}: {redact(str(err))}: {hint}") from None

    def _ask(self, operation: str, retries: bool = True, **params: Any) -> dict[str, Any]:
        """One Glue request, the catalog id added. Glue's own answer (a ClientError) is raised as
        it is, for the caller to judge; no credentials, or no answer, become one masked line."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        if self.settings.catalog_id:
            params["CatalogId"] = self.settings.catalog_id
        try:
            reply: dict[str, Any] = getattr(self._client(retries), operation)(**params)
            return reply
        except ClientError:
            raise
        except NoCredentialsError:
            raise ConfigError(f"catalog {self.name} found no AWS credentials: {_CREDENTIALS_HINT}") from None
        except BotoCoreError as err:
            raise StorageError(
                f"catalog {self.name}: Glue did not answer {operation} ({redact(str(err))}): check "
                "glue.endpoint, the region and the network"
            ) from None

    def _read(self, operation: str, what: str, **params: Any) -> dict[str, Any] | None:
        """A read; None when Glue has no such entity."""
        from botocore.exceptions import ClientError

        try:
            return self._ask(operation, **params)
        except ClientError as err:
            code, _ = _code(err)
            if code == "EntityNotFoundException":
                return None
            raise self._refused(err, what) from None

    def _refused(self, err: BaseException, what: str) -> TablekeeperError:
        code, status = _code(err)
        message = redact(str(getattr(err, "response", {}).get("Error", {}).get("Message", "")))
        if code in ("AccessDeniedException", "UnrecognizedClientException", "InvalidClientTokenId"):
            return ConfigError(
                f"catalog {self.name}: Glue refused {what} ({code}: {message}): check its credentials"
            )
        return StorageError(f"catalog {self.name}: Glue failed {what} ({code or status}: {message})")

    # -- names -----------------------------------------------------------------------------------

    def _names(self, identifier: str) -> tuple[str, str]:
        ident = TableIdentifier.parse(identifier)
        if len(ident.namespace) != 1:
            raise ConfigError(
                f"table {identifier} is not <database>.<table>: Glue has one level of namespace"
            )
        database, table = ident.namespace[0], ident.name
        if not self.settings.skip_name_validation and not (
            _DATABASE_NAME.match(database) and _TABLE_NAME.match(table)
        ):
            raise ConfigError(
                f"table {identifier}: Glue names are lowercase letters, digits and '_' (as Iceberg Java "
                "checks them); rename it, or set glue.skip-name-validation=true"
            )
        return database, table

    def _get_table(self, database: str, table: str) -> dict[str, Any] | None:
        reply = self._read("get_table", f"reading {database}.{table}", DatabaseName=database, Name=table)
        return None if reply is None else dict(reply["Table"])

    # -- Catalog ---------------------------------------------------------------------------------

    def default_table_location(self, identifier: str) -> str:
        """As Iceberg Java's GlueCatalog: under the database's location when it has one, else
        ``<warehouse>/<database>.db/<table>``."""
        database, table = self._names(identifier)
        found = self._read("get_database", f"reading database {database}", Name=database)
        uri = (found or {}).get("Database", {}).get("LocationUri")
        if uri:
            return f"{str(uri).rstrip('/')}/{table}"
        return f"{self.warehouse}/{database}.db/{table}" if self.warehouse else ""

    def table_exists(self, identifier: str) -> bool:
        return pointer(self._get_table(*self._names(identifier))) is not None

    def load_table(self, identifier: str) -> LoadedTable:
        database, name = self._names(identifier)
        table = self._get_table(database, name)
        if table is None:
            raise NotATableError(f"table {identifier} not found in catalog {self.name}: check the name")
        location = pointer(table)
        if location is None:
            kind = (table.get("Parameters") or {}).get(TABLE_TYPE) or "no table_type"
            if str(kind).upper() == ICEBERG:
                raise CorruptMetadataError(
                    f"Glue table {identifier} is Iceberg's but names no {METADATA_LOCATION}"
                )
            raise NotATableError(f"{identifier} in catalog {self.name} is not an Iceberg table ({kind})")
        io = FileIO.for_location(location)
        return LoadedTable(identifier, location, read_metadata(io, location), io)

    def _pages(self, operation: str, key: str, what: str, **params: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            reply = self._read(operation, what, **params, **({"NextToken": token} if token else {}))
            if reply is None:
                raise NotATableError(f"catalog {self.name} has no {what.removeprefix('listing ')}")
            yield from reply.get(key) or ()
            token = reply.get("NextToken")
            if not token:
                return

    def list_namespaces(self) -> list[str]:
        return sorted(
            str(d["Name"]) for d in self._pages("get_databases", "DatabaseList", "listing databases")
        )

    def _tables(self, namespace: str) -> Iterator[dict[str, Any]]:
        return self._pages("get_tables", "TableList", f"listing database {namespace}", DatabaseName=namespace)

    def list_tables(self, namespace: str) -> list[str]:
        return sorted(f"{namespace}.{t['Name']}" for t in self._tables(namespace) if pointer(t))

    def delta_tables(self, namespace: str) -> list[str]:
        """Locations of the Delta tables registered in the database (``table_type=DELTA``, or
        Spark's ``spark.sql.sources.provider=delta``)."""
        found = (delta_location(t) for t in self._tables(namespace) if is_delta(t))
        return sorted(loc for loc in found if loc)

    def delta_table_location(self, identifier: str) -> str:
        """Where the Delta table registered as ``identifier`` keeps its files."""
        database, name = self._names(identifier)
        table = self._get_table(database, name)
        if table is None:
            raise NotATableError(f"table {identifier} not found in catalog {self.name}: check the name")
        location = delta_location(table) if is_delta(table) else None
        if location is None:
            raise NotATableError(
                f"{identifier} in catalog {self.name} is not registered as a Delta table with a location "
                "(table_type=DELTA or spark.sql.sources.provider=delta): name its path instead"
            )
        return location

    def ensure_namespace(self, namespace: str) -> None:
        from botocore.exceptions import ClientError

        if self._read("get_database", f"reading database {namespace}", Name=namespace) is not None:
            return
        try:
            self._ask("create_database", DatabaseInput={"Name": namespace})
        except ClientError as err:
            if _code(err)[0] != "AlreadyExistsException":  # made meanwhile by another writer
                raise self._refused(err, f"creating database {namespace}") from None

    def _send(self, operation: str, **params: Any) -> str | None:
        """Send a swap once. None: applied; "refused": certainly not applied (no connection was
        made); "lost": it may have been applied. A 4xx ClientError (refused whole) is raised for
        the caller to judge."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            ParamValidationError,
        )

        if self.settings.catalog_id:
            params["CatalogId"] = self.settings.catalog_id
        try:
            getattr(self._client(retries=False), operation)(**params)
        except (EndpointConnectionError, ConnectTimeoutError):
            return "refused"
        except ParamValidationError as err:  # botocore's own check, before anything is sent
            raise StorageError(f"catalog {self.name}: {operation} not sent ({redact(str(err))})") from None
        except NoCredentialsError:
            raise ConfigError(f"catalog {self.name} found no AWS credentials: {_CREDENTIALS_HINT}") from None
        except ClientError as err:
            _, status = _code(err)
            if 400 <= status < 500:
                raise
            return "lost"  # Glue's own failure: it may have applied the update before failing
        except BotoCoreError as err:  # a timeout or a broken connection after sending
            log.warning("catalog %s: %s got no answer (%s)", self.name, operation, redact(str(err)))
            return "lost"
        return None

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        from botocore.exceptions import ClientError

        database, name = self._names(identifier)
        io = FileIO.for_location(metadata.location)
        location = write_next_metadata(io, metadata, None)
        faults.kill_point("commit.metadata-written")
        try:
            self.ensure_namespace(database)
            outcome = self._send(
                "create_table",
                DatabaseName=database,
                TableInput=table_input(None, name, metadata, location, None),
            )
        except ClientError as err:
            io.delete(location)  # refused whole: no table, the metadata file is unused
            if _code(err)[0] == "AlreadyExistsException":
                raise ConfigError(f"table {identifier} already exists in catalog {self.name}") from None
            raise self._refused(err, f"creating {identifier}") from None
        except TablekeeperError:
            io.delete(location)
            raise
        if outcome == "refused":
            io.delete(location)
            raise StorageError(f"catalog {self.name}: Glue could not be reached to create {identifier}")
        if outcome == "lost":
            try:
                current = self._get_table(database, name)
            except TablekeeperError:
                current = None
            if pointer(current) != location:
                if current is None:
                    raise CommitStateUnknown(
                        f"catalog {self.name}: the answer to creating {identifier} was lost; check whether "
                        "it exists before cleaning anything"
                    )
                io.delete(location)  # another writer's table holds the name: ours can never land
                raise ConfigError(f"table {identifier} already exists in catalog {self.name}")
        faults.kill_point("commit.swapped")
        return LoadedTable(identifier, location, metadata, io)

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        from botocore.exceptions import ClientError

        database, name = self._names(base.identifier)
        location = write_next_metadata(base.io, new_metadata, base.metadata_location)
        faults.kill_point("commit.metadata-written")
        try:
            table = self._get_table(database, name)
            if table is None:
                raise NotATableError(
                    f"{base.identifier} was dropped from catalog {self.name} since it was loaded"
                )
            if pointer(table) != base.metadata_location:
                raise CommitFailed(f"{base.identifier} was changed by another writer since it was loaded")
            version_id = table.get("VersionId")
            if not version_id:
                raise UnsupportedFeatureError(
                    f"catalog {self.name}: Glue answered no VersionId for {base.identifier}, so a commit "
                    "could overwrite a concurrent one: refused"
                )
            params: dict[str, Any] = {
                "DatabaseName": database,
                "TableInput": table_input(table, name, new_metadata, location, base.metadata_location),
                "VersionId": str(version_id),
                "SkipArchive": self.settings.skip_archive,
            }
            outcome = self._send("update_table", **params)
        except ClientError as err:
            base.io.delete(location)  # a 4xx: the update was refused whole
            code, _ = _code(err)
            if code == "ConcurrentModificationException":
                raise CommitFailed(
                    f"{base.identifier} was changed by another writer since it was loaded"
                ) from None
            if code in _BUSY:
                raise CommitFailed(f"catalog {self.name} busy ({code}); retrying") from None
            if code == "EntityNotFoundException":
                raise NotATableError(f"{base.identifier} was dropped from catalog {self.name}") from None
            raise self._refused(err, f"the commit of {base.identifier}") from None
        except TablekeeperError:
            base.io.delete(location)  # nothing was sent
            raise
        if outcome == "refused":
            base.io.delete(location)
            raise StorageError(f"catalog {self.name}: Glue could not be reached to commit {base.identifier}")
        if outcome == "lost":
            self._settle(base, database, name, location)
        faults.kill_point("commit.swapped")
        log.info("committed %s -> %s", base.identifier, location)
        return LoadedTable(base.identifier, location, new_metadata, base.io)

    def _settle(self, base: LoadedTable, database: str, name: str, location: str) -> None:
        """The swap's answer was lost: read the table again. Ours there, or in the history of the
        metadata there (landed, then another commit on top), means it was applied; a third
        writer's without ours means it never can be (its VersionId is stale); the old one, or no
        answer, leaves it unknown (Glue may still be applying it)."""
        unknown = CommitStateUnknown(
            f"catalog {self.name}: the answer to the commit of {base.identifier} was lost; check whether "
            f"{location} is current before cleaning anything"
        )
        try:
            table = self._get_table(database, name)
        except TablekeeperError:
            raise unknown from None
        applied = landed(base.io, pointer(table), location, base.metadata_location)
        if applied is None:
            raise unknown
        if applied:
            log.info("catalog %s: the lost answer was a success: %s is applied", self.name, location)
            return
        base.io.delete(location)
        raise CommitFailed(f"{base.identifier} was changed by another writer since it was loaded")


def _open(config: CatalogConfig) -> Catalog:
    return GlueCatalog(config.name, config.warehouse, config.properties)


def _spark(config: CatalogConfig) -> dict[str, str]:
    """Iceberg Java's GlueCatalog on the same catalog: its client takes ``client.region`` (a
    ``glue.region`` is handed on as that), ``glue.endpoint`` and ``glue.id`` as they are, and the
    default credential chain (or ``client.credentials-provider``). Java's GlueCatalog writes with
    S3FileIO unless told otherwise, so a warehouse elsewhere gets Hadoop's FileIO."""
    settings = GlueSettings.parse(config.name, config.properties)
    conf = {"catalog-impl": GLUE_CATALOG_IMPL}
    if settings.region and "client.region" not in config.properties:
        conf["client.region"] = settings.region
    if "io-impl" not in config.properties and not config.warehouse.startswith(("s3://", "s3a://", "s3n://")):
        conf["io-impl"] = HADOOP_FILE_IO
    return conf


CATALOG_TYPE = register_catalog_type(CatalogType("glue", _open, _spark))
