"""A run's OpenLineage events: START before the job runs, COMPLETE or FAIL once it has a result.

Each event is a frozen model (``RunEvent``, ``Dataset``) turned into OpenLineage's JSON only when it
is sent. A run's events share one runId, the ledger row's ``run_id``. The job is
``<job>.<table>`` in the configured namespace (a job is a recurring transformation of given
datasets: the same job on another table is another job), with the standard ``jobType`` facet. The
table is the input and, unless the run only reads (a dry run, health, validate-conversion), the
output too: a maintenance job reads and rewrites the same table. Datasets are named as
OpenLineage's naming spec names storage (``s3://bucket`` + key, ``file`` + path, ...), from the
table's location, with ``storage`` (iceberg or delta, parquet), ``version`` (the snapshot id or
Delta version: before the run on the input, after it on the output) and, for a table a catalog
named, ``symlinks`` (the catalog's identifier, type TABLE). Learning the location and the versions
takes a metadata load, made only here (OpenLineage configured); when it fails only those facets go.
Everything a location, identifier or error could carry is scrubbed of secrets.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from tablekeeper import __version__
from tablekeeper.catalog import catalog_for, delta_source, looks_like_path
from tablekeeper.catalog.config import CatalogConfig, CatalogsConfig
from tablekeeper.jobs.common.observe import LineageTarget, Parent, Sender
from tablekeeper.jobs.common.result import JobResult, iso_utc
from tablekeeper.redact import redact

log = logging.getLogger(__name__)

EventType = Literal["START", "COMPLETE", "FAIL"]
# Where the spec defines the event and each standard facet this module writes (their current
# versions, as OpenLineage's own clients write them).
_SPEC = "https://openlineage.io/spec"
EVENT_SCHEMA = f"{_SPEC}/2-0-2/OpenLineage.json#/$defs/RunEvent"
FACET_SCHEMAS: Mapping[str, str] = {
    "parent": f"{_SPEC}/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet",
    "processing_engine": (
        f"{_SPEC}/facets/1-1-1/ProcessingEngineRunFacet.json#/$defs/ProcessingEngineRunFacet"
    ),
    "errorMessage": f"{_SPEC}/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet",
    "jobType": f"{_SPEC}/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet",
    "storage": f"{_SPEC}/facets/1-0-1/StorageDatasetFacet.json#/$defs/StorageDatasetFacet",
    "symlinks": f"{_SPEC}/facets/1-0-1/SymlinksDatasetFacet.json#/$defs/SymlinksDatasetFacet",
    "version": f"{_SPEC}/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet",
}
RESULT_FACET = "tablekeeper_result"
# A custom facet's schema: the facet is {"result": <the job's JSON result>}, the result as
# result.schema.json (urn:tablekeeper:result:1) describes it (docs/observability.md).
RESULT_FACET_SCHEMA = "urn:tablekeeper:openlineage:1#/$defs/TablekeeperResultRunFacet"
INTEGRATION = "TABLEKEEPER"
# Jobs that only read their tables: no output dataset.
READ_ONLY_JOBS = frozenset({"health", "validate-conversion"})
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
_AZURE = frozenset({"abfs", "abfss", "wasb", "wasbs"})


def producer() -> str:
    return f"urn:tablekeeper:{__version__}"


@dataclass(frozen=True)
class Dataset:
    namespace: str
    name: str
    storage_layer: str | None = None  # iceberg | delta
    symlink: tuple[str, str] | None = None  # the catalog's namespace and identifier
    version: str | None = None


@dataclass(frozen=True)
class RunEvent:
    event_type: EventType
    event_time: str
    run_id: str
    job_namespace: str
    job_name: str
    job: str  # the subcommand: the jobType facet's jobType
    parent: Parent | None = None
    inputs: tuple[Dataset, ...] = ()
    outputs: tuple[Dataset, ...] = ()
    error: str | None = None
    stack_trace: str | None = None
    result_json: str | None = None  # the printed result, already redacted

    def to_wire(self) -> dict[str, Any]:
        """The event as OpenLineage's JSON."""
        run_facets: dict[str, Any] = {
            "processing_engine": _facet("processing_engine", version=str(__version__), name="tablekeeper")
        }
        if self.parent is not None:
            run_facets["parent"] = _facet(
                "parent",
                run={"runId": self.parent.run_id},
                job={"namespace": self.parent.namespace, "name": self.parent.name},
            )
        if self.error is not None:
            extra = {"stackTrace": self.stack_trace} if self.stack_trace else {}
            run_facets["errorMessage"] = _facet(
                "errorMessage", message=self.error, programmingLanguage="PYTHON", **extra
            )
        if self.result_json is not None:
            run_facets[RESULT_FACET] = {
                "_producer": producer(),
                "_schemaURL": RESULT_FACET_SCHEMA,
                "result": json.loads(self.result_json),
            }
        job_type = _facet("jobType", processingType="BATCH", integration=INTEGRATION, jobType=self.job)
        return {
            "eventType": self.event_type,
            "eventTime": self.event_time,
            "producer": producer(),
            "schemaURL": EVENT_SCHEMA,
            "run": {"runId": self.run_id, "facets": run_facets},
            "job": {"namespace": self.job_namespace, "name": self.job_name, "facets": {"jobType": job_type}},
            "inputs": [_dataset(d) for d in self.inputs],
            "outputs": [_dataset(d) for d in self.outputs],
        }


def _facet(kind: str, **fields: Any) -> dict[str, Any]:
    return {"_producer": producer(), "_schemaURL": FACET_SCHEMAS[kind], **fields}


def _dataset(d: Dataset) -> dict[str, Any]:
    facets: dict[str, Any] = {}
    if d.storage_layer is not None:
        facets["storage"] = _facet("storage", storageLayer=d.storage_layer, fileFormat="parquet")
    if d.symlink is not None:
        namespace, name = d.symlink
        identifier = {"namespace": namespace, "name": name, "type": "TABLE"}
        facets["symlinks"] = _facet("symlinks", identifiers=[identifier])
    if d.version is not None:
        facets["version"] = _facet("version", datasetVersion=d.version)
    return {"namespace": d.namespace, "name": d.name, "facets": facets}


# -- naming --------------------------------------------------------------------------------------


def dataset_name(location: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a table's location: ``file`` and the path, ``s3://bucket``
    and the key, ``abfss://container@account.dfs.core.windows.net`` and the path,
    ``scheme://host:port`` and the path for the others; never a user or password."""
    location = location.rstrip("/") or "/"
    if not _SCHEME.match(location) or len(location.split(":", 1)[0]) == 1:  # a path (or C:\...)
        return "file", redact(str(Path(location).absolute()))
    parts = urllib.parse.urlsplit(location)
    scheme = parts.scheme.lower()
    userinfo, _, host = parts.netloc.rpartition("@")
    path = urllib.parse.unquote(parts.path) or "/"
    if scheme == "file":
        return "file", redact(path)
    key = path.lstrip("/") or "/"
    if scheme in _OBJECT_STORES:
        return redact(f"{_OBJECT_STORES[scheme]}://{host}"), redact(key)
    if scheme in _AZURE:
        container = userinfo.partition(":")[0]  # the container; never what follows a colon
        return redact(f"{scheme}://{container}@{host}" if container else f"{scheme}://{host}"), redact(key)
    return redact(f"{scheme}://{host}"), redact(path)


def catalog_identity(config: CatalogConfig, identifier: str) -> tuple[str, str]:
    """The (namespace, name) of a table as its catalog knows it: the naming spec's ``hive://host:port``
    and Glue's ARN where they apply, else the catalog's URI (or its warehouse, for a file-system
    catalog) without credentials or query."""
    uri = config.uri or ""
    if config.type == "hive" and uri:
        return redact(f"hive://{urllib.parse.urlsplit(uri).netloc.rpartition('@')[2]}"), identifier
    if config.type == "glue":
        region = config.properties.get("glue.region") or config.properties.get("client.region")
        account = config.properties.get("glue.id")
        if region and account:
            database, _, table = identifier.rpartition(".")
            return f"arn:aws:glue:{region}:{account}", f"table/{database}/{table}"
    where = uri or config.warehouse or f"tablekeeper://{config.name}"
    if _SCHEME.match(where) and "://" in where:
        parts = urllib.parse.urlsplit(where)
        host = parts.netloc.rpartition("@")[2]
        where = f"{parts.scheme}://{host}{parts.path.rstrip('/')}"  # sqlite:////abs/path keeps its slashes
    return redact(where), redact(identifier)


# -- what a run names ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TableRef:
    """A table a run names: ``--table`` (or convert-delta's ``--source`` and ``--target``)."""

    table: str
    catalog: str | None = None
    delta_source: bool = False  # convert-delta's --source: a Delta table, by path or catalog


def _delta_version(root: str) -> str:
    from tablekeeper.delta.segment import build_segment
    from tablekeeper.io import FileIO
    from tablekeeper.tables.delta import list_log, normalise_root

    root = normalise_root(root)
    return str(build_segment(list_log(FileIO.for_location(root), root), table=root).version)


def _is_delta(root: str) -> bool:
    from tablekeeper.jobs.common.delta_maintenance import is_delta_table

    return is_delta_table(root)


def describe(ref: TableRef, catalogs: CatalogsConfig | None) -> Dataset | None:
    """The dataset ``ref`` is, with its facets (its version now); only the name when the table
    cannot be loaded; None when not even that is known (a catalog table without a catalog file)."""
    try:
        if ref.delta_source or looks_like_path(ref.table):
            location = delta_source(ref.table, catalogs) if ref.delta_source and catalogs else ref.table
            if not looks_like_path(location):
                location = str(Path(location).absolute())
            return _describe_path(location, known_delta=ref.delta_source)
    except Exception:
        log.debug("lineage: %s not described", redact(ref.table), exc_info=True)
        return None
    if catalogs is None:
        return None
    try:
        config = catalogs.get(ref.catalog)
        symlink = catalog_identity(config, ref.table)
    except Exception:
        log.debug("lineage: no catalog for %s", redact(ref.table), exc_info=True)
        return None
    try:
        loaded = catalog_for(config).require(ref.table)
    except Exception:  # not there yet (a conversion's target) or not reachable: named by its catalog
        log.debug("lineage: %s not loaded", redact(ref.table), exc_info=True)
        return Dataset(*symlink)
    namespace, name = dataset_name(loaded.metadata.location)
    snapshot = loaded.metadata.current_snapshot_id
    return Dataset(namespace, name, "iceberg", symlink, None if snapshot is None else str(snapshot))


def _describe_path(location: str, *, known_delta: bool) -> Dataset:
    namespace, name = dataset_name(location)
    try:
        if known_delta or _is_delta(location):
            return Dataset(namespace, name, "delta", version=_delta_version(location))
        from tablekeeper.catalog import PathCatalog

        snapshot = PathCatalog().require(location.rstrip("/")).metadata.current_snapshot_id
        return Dataset(namespace, name, "iceberg", version=None if snapshot is None else str(snapshot))
    except Exception:
        log.debug("lineage: %s not loaded", redact(location), exc_info=True)
        return Dataset(namespace, name)


# -- sending -------------------------------------------------------------------------------------


def _now() -> str:
    return iso_utc(dt.datetime.now(dt.timezone.utc))


class LineageRun:
    """One run's events: ``start()`` before the job, ``finish(result)`` after it. Sending never
    raises; a failure is one warning (jobs.common.observe.Sender)."""

    def __init__(
        self,
        target: LineageTarget,
        *,
        run_id: str,
        job: str,
        table: str,
        reads: tuple[TableRef, ...],
        writes: tuple[TableRef, ...],
        catalogs: Callable[[], CatalogsConfig | None],
    ) -> None:
        self.target = target
        self.reads, self.writes = reads, writes
        self.catalogs = catalogs
        self.base = RunEvent(
            event_type="START",
            event_time=_now(),
            run_id=run_id,
            job_namespace=target.namespace,
            job_name=redact(f"{job}.{table}" if table else job),
            job=job,
            parent=target.parent,
        )
        self.inputs: tuple[Dataset, ...] = ()
        self.sender = Sender("OpenLineage")

    def _describe(self, refs: tuple[TableRef, ...]) -> dict[TableRef, Dataset]:
        try:
            catalogs = self.catalogs()
        except Exception:
            log.debug("lineage: no catalog file", exc_info=True)
            catalogs = None
        found = {r: describe(r, catalogs) for r in dict.fromkeys(refs)}
        return {r: d for r, d in found.items() if d is not None}

    def start(self) -> None:
        # A table both read and written is loaded once: before the run, both are the same version.
        known = self._describe((*self.reads, *self.writes))
        self.inputs = tuple(known[r] for r in self.reads if r in known)
        outputs = tuple(known[r] for r in self.writes if r in known)
        self._send(replace(self.base, inputs=self.inputs, outputs=outputs))

    def finish(self, result: JobResult, stack_trace: str | None = None) -> None:
        ok = result.status in ("ok", "dry_run")
        event = replace(
            self.base,
            event_type="COMPLETE" if ok else "FAIL",
            event_time=_now(),
            inputs=self.inputs,
            outputs=tuple(self._describe(self.writes).values()),
            error=None if ok else redact(result.error or result.status),
            stack_trace=None if ok or not stack_trace else redact(stack_trace),
            result_json=redact(result.to_json()),
        )
        self._send(event)

    def _send(self, event: RunEvent) -> None:
        try:
            body = json.dumps(event.to_wire(), separators=(",", ":")).encode()
        except Exception:  # a model bug: logged, never the job's failure
            log.warning("OpenLineage %s event not built", event.event_type, exc_info=True)
            return
        headers = {"Content-Type": "application/json"}
        if self.target.api_key:
            headers["Authorization"] = f"Bearer {self.target.api_key}"
        self.sender.send(self.target.url, body, headers, self.target.timeout_s, f"{event.event_type} event")
