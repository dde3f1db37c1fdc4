"""The ledger of runs: every job's result appended as a row of an Iceberg table, and read back.

The ledger (``tablekeeper.runs`` unless named otherwise) is an ordinary Iceberg v2 table that
Iceberg Spark, PyIceberg or Trino query like any other. tablekeeper writes it on the driver
without Spark: one small Parquet file per run (field ids, metrics from its footer) committed as an
append by the commit layer, which retries when other runs append at the same moment. Reading it
(``tablekeeper history``) opens the live data files of the current snapshot, skipping manifests
and files whose bounds rule them out.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper import clock
from tablekeeper.catalog import Catalog, LoadedTable, catalog_for
from tablekeeper.catalog.config import DEFAULT_LEDGER_TABLE, CatalogsConfig
from tablekeeper.commit import CommitResult, Committer, SnapshotChange
from tablekeeper.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    TablekeeperError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.arrow_project import projector
from tablekeeper.iceberg.content import MANIFEST_DATA, DataFile, ManifestFile
from tablekeeper.iceberg.conversions import from_bytes
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.metrics import MetricsConfig
from tablekeeper.iceberg.parquet import WRITER_OPTIONS, data_file_from_footer, to_arrow_schema
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.transforms import parse_transform
from tablekeeper.iceberg.types import BOOLEAN, INT, LONG, STRING, TIMESTAMPTZ, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.io.storage import configure_storage, storage_properties
from tablekeeper.jobs.common.result import (
    EPOCH,
    JobResult,
    LedgerNote,
    iso_to_micros,
    iso_utc,
    new_run_id,
    outcome,
)
from tablekeeper.redact import redact
from tablekeeper.tables.iceberg import load_manifests, read_entries

log = logging.getLogger(__name__)

SCHEMA = Schema(
    0,
    (
        NestedField(1, "run_id", STRING, True, doc="a UUID per run (v7), its OpenLineage runId"),
        NestedField(2, "job", STRING, True, doc="the subcommand, e.g. compact"),
        # Not `table`: a reserved word in SQL (Trino, ANSI Spark) would need quoting in every query.
        NestedField(3, "table_name", STRING, True, doc="the table as the run named it (or its catalog)"),
        NestedField(4, "status", STRING, True, doc="ok, dry_run, refused or failed"),
        NestedField(5, "dry_run", BOOLEAN, True),
        NestedField(6, "started_at", TIMESTAMPTZ, True),
        NestedField(7, "duration_ms", LONG, True),
        NestedField(8, "exit_code", INT, doc="the process's exit code"),
        NestedField(9, "error", STRING, doc="the one-line reason of a refused or failed run"),
        NestedField(10, "files_rewritten", LONG, doc="data, delete or manifest files rewritten"),
        NestedField(11, "files_added", LONG, doc="data, delete or manifest files added"),
        NestedField(12, "files_deleted", LONG, doc="files deleted from storage"),
        NestedField(13, "bytes_freed", LONG, doc="bytes of the files deleted"),
        NestedField(14, "tablekeeper_version", STRING),
        NestedField(15, "host", STRING, doc="where the driver ran"),
        NestedField(16, "result_json", STRING, doc="the whole JSON result, secrets masked"),
    ),
)
_STARTED_AT = 6
# By day: each run commits its own manifest (appends do not merge them), so a ledger nobody
# maintains holds one manifest per run. The manifest list keeps each manifest's day range, so
# `history --since` and engines' time filters skip old manifests without opening them; a day's
# runs are few, so nothing gets smaller files than the one-per-run it has anyway.
SPEC = PartitionSpec(0, (PartitionField(_STARTED_AT, 1000, "started_at_day", "day"),))
# Set when tablekeeper creates a ledger: only a table carrying it (or, for ledgers created before
# the marker existed, one whose schema is exactly SCHEMA) is ever appended to, so a mistyped
# --ledger-table never writes rows into an ordinary table.
LEDGER_MARKER = "tablekeeper.ledger"
PROPERTIES: Mapping[str, str] = {
    LEDGER_MARKER: "true",
    # Runs scheduled together finish together: give their appends room to retry (Iceberg's
    # default of 4 retries loses races with a handful of writers).
    "commit.retry.num-retries": "20",
    "commit.retry.min-wait-ms": "50",
    "commit.retry.max-wait-ms": "2000",
    "commit.retry.total-timeout-ms": "120000",
    # A commit per run: let expire-snapshots delete the metadata files that leave the log.
    "write.metadata.delete-after-commit.enabled": "true",
}

_READ_THREADS = 8


@dataclass(frozen=True)
class LedgerTarget:
    catalog: str
    table: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.table}"


@dataclass(frozen=True)
class LedgerRow:
    """One run as the ledger holds it (field names are the column names)."""

    run_id: str
    job: str
    table_name: str
    status: str
    dry_run: bool
    started_at: int  # microseconds since the epoch, UTC
    duration_ms: int
    exit_code: int | None = None
    error: str | None = None
    files_rewritten: int | None = None
    files_added: int | None = None
    files_deleted: int | None = None
    bytes_freed: int | None = None
    tablekeeper_version: str | None = None
    host: str | None = None
    result_json: str | None = None

    @classmethod
    def from_result(
        cls, result: JobResult, *, exit_code: int | None, run_id: str | None = None, host: str | None = None
    ) -> LedgerRow:
        # What the run did: a dry run did nothing (its plan stays in result_json).
        done = outcome(result)
        return cls(
            run_id=run_id or new_run_id(),
            job=result.job,
            table_name=result.table,
            status=result.status,
            dry_run=result.dry_run,
            started_at=iso_to_micros(result.started_at),
            duration_ms=result.duration_ms,
            exit_code=exit_code,
            error=redact(result.error) if result.error is not None else None,
            files_rewritten=done.files_rewritten,
            files_added=done.files_added,
            files_deleted=done.files_deleted,
            bytes_freed=done.bytes_freed,
            tablekeeper_version=result.tablekeeper_version,
            host=host if host is not None else socket.gethostname(),
            # The ledger's own note is not part of what it records.
            result_json=redact(replace(result, ledger=None).to_json()),
        )

    @classmethod
    def from_columns(cls, values: Mapping[str, Any]) -> LedgerRow:
        """A row read back: columns by name; columns the table lacks read as None."""
        known: dict[str, Any] = {f.name: values.get(f.name) for f in fields(cls)}
        return cls(**known)

    def to_obj(self) -> dict[str, Any]:
        """The JSON form ``history`` prints: the time in ISO form, the result parsed."""
        body = asdict(self)
        body["started_at"] = micros_to_iso(self.started_at)
        raw = body.pop("result_json")
        try:
            body["result"] = json.loads(raw) if raw is not None else None
        except ValueError:
            body["result"] = raw
        return body


def micros_to_iso(micros: int) -> str:
    return iso_utc(EPOCH + dt.timedelta(microseconds=micros))


# -- where the ledger is -------------------------------------------------------------------------


def ledger_target(
    catalogs: CatalogsConfig, catalog: str | None = None, table: str | None = None
) -> LedgerTarget | None:
    """Where runs are appended: ``--ledger-catalog``/``--ledger-table`` over the catalog file's
    ``ledger:`` block, key by key; None when neither names a catalog (no ledger)."""
    conf = catalogs.ledger
    if catalog is None and conf is None:
        if catalogs.ledger_error is not None:
            raise ConfigError(catalogs.ledger_error)
        if table is not None:
            raise ConfigError(
                "--ledger-table names no catalog: add --ledger-catalog, or a ledger block to the catalog file"
            )
        return None
    name = catalog or (conf.catalog if conf is not None else "")
    return LedgerTarget(name, table or (conf.table if conf is not None else DEFAULT_LEDGER_TABLE))


def history_target(catalogs: CatalogsConfig, catalog: str | None, table: str | None) -> LedgerTarget:
    """The ledger ``history`` reads: as jobs write it, else the default table in the default catalog."""
    target = ledger_target(catalogs, catalog, table) if catalog or catalogs.ledger else None
    return target or LedgerTarget(catalogs.default, table or DEFAULT_LEDGER_TABLE)


def open_catalog(catalogs: CatalogsConfig, name: str) -> Catalog:
    config = catalogs.get(name)
    # FileIO takes the process's storage settings, and the ledger's catalog may keep its files
    # elsewhere than the job's table did.
    if config.storage != dict(storage_properties()):
        configure_storage(config.storage)
    return catalog_for(config)


def load_ledger(catalogs: CatalogsConfig, target: LedgerTarget) -> LoadedTable:
    loaded = open_catalog(catalogs, target.catalog).load_if_exists(target.table)
    if loaded is None:
        raise ConfigError(
            f"no ledger {target} yet: run jobs with --ledger-catalog {target.catalog} (or a ledger block "
            "in the catalog file) to record them, or name the ledger with --ledger-catalog/--ledger-table"
        )
    return loaded


def _same_fields(a: Schema, b: Schema) -> bool:
    def key(s: Schema) -> list[tuple[int, str, object, bool]]:
        return [(f.id, f.name, f.type, f.required) for f in s.fields]

    return key(a) == key(b)


def check_ledger(table: LoadedTable, identifier: str) -> LoadedTable:
    """``table`` if it is a ledger tablekeeper created; a ConfigError (nothing written) if not."""
    meta = table.metadata
    if meta.properties.get(LEDGER_MARKER) != "true" and not _same_fields(meta.schema(), SCHEMA):
        raise ConfigError(
            f"{identifier} is not a tablekeeper ledger (no {LEDGER_MARKER} property, other columns): "
            "point --ledger-table at a new table name, and tablekeeper creates it"
        )
    _columns(meta.schema())
    return table


def preflight(catalogs: CatalogsConfig, catalog: str | None, table: str | None) -> None:
    """Refuse, before a job runs, a configured ledger that is an existing non-ledger table."""
    try:
        target = ledger_target(catalogs, catalog, table)
        if target is None or target.catalog not in catalogs.catalogs:
            return
        existing = open_catalog(catalogs, target.catalog).load_if_exists(target.table)
    except Exception:  # an unreachable or misconfigured ledger never fails the job: its note says so
        log.debug("ledger preflight skipped", exc_info=True)
        return
    if existing is not None:
        check_ledger(existing, str(target))


def ensure_ledger(catalog: Catalog, identifier: str, now_ms: int | None = None) -> LoadedTable:
    """The ledger table, created empty if the catalog has none; refused if it is no ledger."""
    existing = catalog.load_if_exists(identifier)
    if existing is not None:
        return check_ledger(existing, identifier)
    meta = new_table_metadata(
        schema=SCHEMA,
        spec=SPEC,
        location=catalog.new_table_location(identifier),
        timestamp_ms=clock.now_ms() if now_ms is None else now_ms,
        properties=PROPERTIES,
        format_version=2,
    )
    try:
        return catalog.create_table(identifier, meta)
    except (ConfigError, CommitFailed):
        # Another run created it first: append to theirs.
        raced = catalog.load_if_exists(identifier)
        if raced is None:
            raise
        log.info("ledger %s was created by another run meanwhile", identifier)
        return check_ledger(raced, identifier)


# -- writing -------------------------------------------------------------------------------------


def _columns(schema: Schema) -> set[str]:
    """The names of the table's columns this version writes; refuses a table it cannot fill (a
    ledger made elsewhere, or by a newer version, is written by name and type)."""
    ours = {f.name: f for f in SCHEMA.fields}
    found = set()
    for f in schema.fields:
        mine = ours.get(f.name)
        if mine is None:
            if f.required:
                raise ConfigError(
                    f"the ledger has a required column {f.name} tablekeeper does not fill: make it optional"
                )
            continue
        if f.type != mine.type:
            raise ConfigError(
                f"ledger column {f.name} is {f.type}, not {mine.type}: point --ledger-table at another table"
            )
        found.add(f.name)
    return found


def _partition(spec: PartitionSpec, schema: Schema, values: Mapping[str, Any]) -> tuple[Any, ...]:
    out = []
    for pf in spec.fields:
        source = schema.find_field(pf.source_id)
        value = values.get(source.name) if source is not None else None
        out.append(None if source is None else parse_transform(pf.transform).apply(source.type, value))
    return tuple(out)


def _partition_path(spec: PartitionSpec, schema: Schema, partition: tuple[Any, ...]) -> str:
    parts = []
    for pf, value in zip(spec.fields, partition, strict=True):
        source = schema.find_field(pf.source_id)
        text = parse_transform(pf.transform).human_string(source.type, value) if source else "null"
        parts.append(f"{urllib.parse.quote(pf.name, safe='')}={urllib.parse.quote(text, safe='')}/")
    return "".join(parts)


def _codec(meta: TableMetadata) -> str:
    codec = meta.properties.get("write.parquet.compression-codec", "zstd").lower()
    if codec == "uncompressed":
        return "none"
    # lz4 and brotli tables get zstd, which every Iceberg reader reads, rather than a failed write.
    return codec if codec in ("zstd", "snappy", "gzip", "none") else "zstd"


def write_data_files(table: LoadedTable, rows: Sequence[LedgerRow]) -> list[DataFile]:
    """``rows`` as Parquet data files of ``table`` (one per partition), with their metrics."""
    meta = table.metadata
    schema = meta.schema()
    spec = meta.spec()
    columns = _columns(schema)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        values = {name: value for name, value in asdict(row).items() if name in columns}
        groups.setdefault(_partition(spec, schema, values), []).append(values)
    arrow_schema = to_arrow_schema(schema)
    metrics = MetricsConfig.for_table(meta.properties, schema)
    written: list[str] = []
    out = []
    try:
        for partition, group in groups.items():
            buffer = pa.BufferOutputStream()
            pq.write_table(
                pa.Table.from_pylist(group, schema=arrow_schema),
                buffer,
                compression=_codec(meta),
                store_schema=False,
                write_statistics=True,
                **WRITER_OPTIONS,
            )
            data = buffer.getvalue().to_pybytes()
            path = f"{meta.data_location}/{_partition_path(spec, schema, partition)}{uuid.uuid4()}.parquet"
            table.io.create_if_absent(path, data)
            written.append(path)
            footer = pq.read_metadata(pa.BufferReader(data))
            out.append(
                data_file_from_footer(
                    footer,
                    schema,
                    path=path,
                    file_size=len(data),
                    spec_id=spec.spec_id,
                    partition=partition,
                    metrics=metrics,
                )
            )
    except Exception:
        table.io.delete_many(written)
        raise
    return out


def append_rows(catalog: Catalog, identifier: str, rows: Sequence[LedgerRow]) -> CommitResult:
    """Append ``rows`` to the ledger in one commit, creating the table first if needed."""
    table = ensure_ledger(catalog, identifier)
    files = write_data_files(table, rows)
    try:
        return Committer(catalog, identifier).commit_snapshot(
            SnapshotChange(
                "append", added_files=tuple(files), summary={"tablekeeper.ledger-rows": str(len(rows))}
            )
        )
    except CommitStateUnknown:
        raise  # the new snapshot may be live and reference the files
    except Exception:
        table.io.delete_many([f.file_path for f in files])
        raise


def _reason(err: Exception) -> str:
    if isinstance(err, TablekeeperError):
        return err.message
    return f"{err.__class__.__name__}: {' '.join(str(err).split())}"[:300]


def record_run(
    result: JobResult,
    *,
    exit_code: int,
    catalogs: Callable[[], CatalogsConfig],
    catalog: str | None = None,
    table: str | None = None,
    run_id: str | None = None,
) -> LedgerNote | None:
    """Append ``result`` to the ledger when one is configured (None when not), as ``run_id`` (the
    id its OpenLineage events carry; a new one if None). Nothing here raises: a failure is logged
    and said in the note, and the job's own outcome stands."""
    try:
        config = catalogs()
    except Exception as err:
        if catalog is None and table is None:
            # Whether a ledger is configured is unknown; the job's result reports the file.
            log.debug("no catalog file, so no ledger", exc_info=True)
            return None
        return _not_written(None, err)
    target: LedgerTarget | None = None
    try:
        target = ledger_target(config, catalog, table)
        if target is None:
            return None
        row = LedgerRow.from_result(result, exit_code=exit_code, run_id=run_id)
        append_rows(open_catalog(config, target.catalog), target.table, [row])
    except Exception as err:
        return _not_written(target, err)
    log.info("run %s recorded in the ledger %s", row.run_id, target)
    return LedgerNote(table=str(target), written=True, run_id=row.run_id)


def _not_written(target: LedgerTarget | None, err: Exception) -> LedgerNote:
    reason = _reason(err)
    log.debug("ledger write failed", exc_info=True)
    log.warning("the run was not recorded in the ledger%s: %s", f" {target}" if target else "", reason)
    return LedgerNote(table=str(target) if target else None, written=False, error=reason)


# -- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryQuery:
    table: str | None = None
    job: str | None = None
    since_us: int | None = None  # runs started at or after
    limit: int | None = 20  # newest first; None: all
    jobs: frozenset[str] | None = None  # runs of any of these jobs (with ``job``: of both)


def _bound(f: DataFile, field: NestedField | None, upper: bool) -> Any:
    if field is None:
        return None
    bounds = f.upper_bounds if upper else f.lower_bounds
    raw = (bounds or {}).get(field.id)
    return None if raw is None else from_bytes(field.type, raw)


def _manifest_may_hold(meta: TableMetadata, m: ManifestFile, since_us: int | None) -> bool:
    """False when the manifest's partition ranges put all its runs before ``since_us``."""
    if since_us is None or not m.partitions:
        return True
    schema = meta.schema()
    started = schema.find_field(_STARTED_AT)
    spec = meta.spec(m.partition_spec_id)
    for pf, summary in zip(spec.fields, m.partitions, strict=False):
        transform = parse_transform(pf.transform)
        if started is None or pf.source_id != started.id or not transform.preserves_order:
            continue
        if summary.upper_bound is None:
            continue
        upper = from_bytes(transform.result_type(started.type), summary.upper_bound)
        threshold = transform.apply(started.type, since_us)
        if threshold is not None and upper < threshold:  # type: ignore[operator]
            return False
    return True


def _file_may_hold(schema: Schema, f: DataFile, query: HistoryQuery) -> bool:
    by_name = {c.name: c for c in schema.fields}
    if query.since_us is not None:
        upper = _bound(f, by_name.get("started_at"), True)
        if upper is not None and upper < query.since_us:
            return False
    for name, wanted in (("job", query.job), ("table_name", query.table)):
        if wanted is None:
            continue
        # Bounds of strings may be truncated; the lower one only shorter, the upper one only
        # larger, so a value outside them is in no row.
        lower, upper = _bound(f, by_name.get(name), False), _bound(f, by_name.get(name), True)
        if (lower is not None and wanted < lower) or (upper is not None and wanted > upper):
            return False
    if query.jobs is not None:
        lower, upper = _bound(f, by_name.get("job"), False), _bound(f, by_name.get("job"), True)
        if not any((lower is None or j >= lower) and (upper is None or j <= upper) for j in query.jobs):
            return False
    return True


def _candidates(ledger: LoadedTable, query: HistoryQuery) -> list[DataFile]:
    meta = ledger.metadata
    schema = meta.schema()
    out: list[DataFile] = []
    for m in load_manifests(ledger.io, meta.current_snapshot()):
        if not m.has_live_files():
            continue
        if m.content != MANIFEST_DATA:
            raise UnsupportedFeatureError(
                f"the ledger {ledger.identifier} has delete files, which history does not apply: "
                f"run tablekeeper compact --table {ledger.identifier} on it first"
            )
        if _manifest_may_hold(meta, m, query.since_us):
            out.extend(
                e.data_file
                for e in read_entries(ledger.io, meta, m)
                if e.is_live and _file_may_hold(schema, e.data_file, query)
            )
    return out


def _read_file(ledger: LoadedTable, schema: Schema, f: DataFile) -> list[LedgerRow]:
    data = pq.read_table(pa.BufferReader(ledger.io.read(f.file_path)))
    wanted = [c for c in schema.fields if c.name in {x.name for x in fields(LedgerRow)}]
    read, project = projector(data.schema, wanted, None, f.file_path)
    rows: list[LedgerRow] = []
    for batch in data.select(read).to_batches():
        arrays = [
            a.cast(pa.int64()) if c.id == _STARTED_AT else a
            for c, a in zip(wanted, project(batch, batch.num_rows), strict=True)
        ]
        table = pa.Table.from_arrays(arrays, names=[c.name for c in wanted])
        rows.extend(LedgerRow.from_columns(r) for r in table.to_pylist())
    return rows


def _matches(row: LedgerRow, query: HistoryQuery) -> bool:
    return (
        (query.job is None or row.job == query.job)
        and (query.jobs is None or row.job in query.jobs)
        and (query.table is None or row.table_name == query.table)
        and (query.since_us is None or row.started_at >= query.since_us)
    )


def read_runs(ledger: LoadedTable, query: HistoryQuery) -> tuple[LedgerRow, ...]:
    """The runs ``query`` asks for, newest first. Files are read newest-bound first and reading
    stops once no file left can hold a run newer than the oldest one kept."""
    schema = ledger.metadata.schema()
    started = schema.find_field(_STARTED_AT)
    unbounded = float("inf")

    def newest(f: DataFile) -> float:
        upper = _bound(f, started, True)
        return unbounded if upper is None else float(upper)

    files = sorted(_candidates(ledger, query), key=newest, reverse=True)
    found: list[LedgerRow] = []
    step = _READ_THREADS * 4
    with ThreadPoolExecutor(_READ_THREADS) as pool:
        for start in range(0, len(files), step):
            for rows in pool.map(lambda f: _read_file(ledger, schema, f), files[start : start + step]):
                found.extend(r for r in rows if _matches(r, query))
            found.sort(key=lambda r: (r.started_at, r.run_id), reverse=True)
            if query.limit is not None and len(found) >= query.limit:
                del found[query.limit :]
                following = files[start + step] if start + step < len(files) else None
                if following is None or newest(following) < found[-1].started_at:
                    break
    return tuple(found)
