"""A metadata transition as the Iceberg REST protocol commits it: requirements plus updates.

tablekeeper builds the whole new metadata (``iceberg.updates``) and file-based catalogs swap it in
one step. A REST catalog instead takes the changes and checks requirements against its current
metadata, so the pair (base, new) is turned into the updates that lead from one to the other,
guarded by requirements that make the commit compare-and-swap: it fails (409) when anything the
transition was computed from has moved. Pure: metadata in, JSON-ready objects out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.errors import UnsupportedFeatureError
from tablekeeper.iceberg.metadata import (
    StatisticsFile,
    TableMetadata,
    ref_to_obj,
    snapshot_to_obj,
    statistics_to_obj,
)
from tablekeeper.iceberg.partitioning import partition_spec_to_json, sort_order_to_json
from tablekeeper.iceberg.types import schema_to_json


@dataclass(frozen=True)
class Requirement:
    type: str
    body: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, **self.body}


@dataclass(frozen=True)
class Update:
    action: str
    body: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, **self.body}


@dataclass(frozen=True)
class TableChange:
    requirements: tuple[Requirement, ...]
    updates: tuple[Update, ...]

    def request(self, namespace: tuple[str, ...], name: str) -> dict[str, Any]:
        """The body of ``POST .../namespaces/{ns}/tables/{table}``."""
        return {
            "identifier": {"namespace": list(namespace), "name": name},
            "requirements": [r.to_json() for r in self.requirements],
            "updates": [u.to_json() for u in self.updates],
        }


def table_change(base: TableMetadata, new: TableMetadata) -> TableChange:
    """The updates that turn ``base`` into ``new``, ordered so each refers only to what exists
    (schemas and specs before snapshots, snapshots before the refs that point at them, refs moved
    before snapshots are removed), and the requirements that pin what they were computed from."""
    if new.table_uuid != base.table_uuid:
        raise UnsupportedFeatureError("a commit cannot change the table uuid")
    if tuple(new.encryption_keys) != tuple(base.encryption_keys):
        raise UnsupportedFeatureError("tablekeeper does not commit encryption key changes")
    reqs: dict[tuple[str, str], Requirement] = {
        ("assert-table-uuid", ""): Requirement("assert-table-uuid", {"uuid": base.table_uuid})
    }
    ups: list[Update] = []

    def require(kind: str, body: dict[str, Any], key: str = "") -> None:
        reqs.setdefault((kind, key), Requirement(kind, body))

    if new.format_version != base.format_version:
        if new.format_version < base.format_version:
            raise UnsupportedFeatureError("a format version never goes down")
        ups.append(Update("upgrade-format-version", {"format-version": new.format_version}))

    # A server may give an added schema, spec or order another id (reusing an equal one), so making
    # the one just added current says -1, "the last added", as Iceberg's own clients do.
    base_schemas = {s.schema_id for s in base.schemas}
    added_schema = None
    for s in new.schemas:
        if s.schema_id not in base_schemas:
            require("assert-last-assigned-field-id", {"last-assigned-field-id": base.last_column_id})
            ups.append(
                Update("add-schema", {"schema": schema_to_json(s), "last-column-id": new.last_column_id})
            )
            added_schema = s.schema_id
    if new.current_schema_id != base.current_schema_id:
        require("assert-current-schema-id", {"current-schema-id": base.current_schema_id})
        current = -1 if new.current_schema_id == added_schema else new.current_schema_id
        ups.append(Update("set-current-schema", {"schema-id": current}))

    base_specs = {s.spec_id for s in base.partition_specs}
    added_spec = None
    for spec in new.partition_specs:
        if spec.spec_id not in base_specs:
            require(
                "assert-last-assigned-partition-id", {"last-assigned-partition-id": base.last_partition_id}
            )
            ups.append(Update("add-spec", {"spec": partition_spec_to_json(spec)}))
            added_spec = spec.spec_id
    if new.default_spec_id != base.default_spec_id:
        require("assert-default-spec-id", {"default-spec-id": base.default_spec_id})
        default = -1 if new.default_spec_id == added_spec else new.default_spec_id
        ups.append(Update("set-default-spec", {"spec-id": default}))

    base_orders = {o.order_id for o in base.sort_orders}
    added_order = None
    for order in new.sort_orders:
        if order.order_id not in base_orders:
            ups.append(Update("add-sort-order", {"sort-order": sort_order_to_json(order)}))
            added_order = order.order_id
    if new.default_sort_order_id != base.default_sort_order_id:
        require("assert-default-sort-order-id", {"default-sort-order-id": base.default_sort_order_id})
        default = -1 if new.default_sort_order_id == added_order else new.default_sort_order_id
        ups.append(Update("set-default-sort-order", {"sort-order-id": default}))

    if new.location != base.location:
        ups.append(Update("set-location", {"location": new.location}))

    changed = {k: v for k, v in new.properties.items() if base.properties.get(k) != v}
    if changed:
        ups.append(Update("set-properties", {"updates": changed}))
    removed_props = sorted(set(base.properties) - set(new.properties))
    if removed_props:
        ups.append(Update("remove-properties", {"removals": removed_props}))

    base_snapshots = {s.snapshot_id for s in base.snapshots}
    for snap in new.snapshots:
        if snap.snapshot_id not in base_snapshots:
            ups.append(Update("add-snapshot", {"snapshot": snapshot_to_obj(snap, new.format_version)}))

    for name, ref in new.refs.items():
        if base.refs.get(name) != ref:
            old = base.refs.get(name)
            require(
                "assert-ref-snapshot-id", {"ref": name, "snapshot-id": old.snapshot_id if old else None}, name
            )
            ups.append(Update("set-snapshot-ref", {"ref-name": name, **ref_to_obj(ref)}))
    for name in sorted(set(base.refs) - set(new.refs)):
        require("assert-ref-snapshot-id", {"ref": name, "snapshot-id": base.refs[name].snapshot_id}, name)
        ups.append(Update("remove-snapshot-ref", {"ref-name": name}))

    new_snapshots = {s.snapshot_id for s in new.snapshots}
    gone = sorted(base_snapshots - new_snapshots)
    if gone:
        # Which snapshots may go was decided from every ref: a ref moved meanwhile (a rollback
        # to a snapshot being removed) must fail the commit.
        for name, ref in base.refs.items():
            require("assert-ref-snapshot-id", {"ref": name, "snapshot-id": ref.snapshot_id}, name)
        ups.append(Update("remove-snapshots", {"snapshot-ids": gone}))

    _statistics(base, new, ups)
    gone_specs = sorted(base_specs - {s.spec_id for s in new.partition_specs})
    if gone_specs:
        ups.append(Update("remove-partition-specs", {"spec-ids": gone_specs}))
    gone_schemas = sorted(base_schemas - {s.schema_id for s in new.schemas})
    if gone_schemas:
        ups.append(Update("remove-schemas", {"schema-ids": gone_schemas}))
    return TableChange(tuple(reqs.values()), tuple(ups))


def _set_statistics(stats: StatisticsFile) -> Update:
    # The REST spec deprecates the update's own snapshot-id, but servers built on Iceberg 1.7 or
    # older require it (400 without), and Iceberg Java's client still writes it.
    return Update(
        "set-statistics", {"snapshot-id": stats.snapshot_id, "statistics": statistics_to_obj(stats)}
    )


def _statistics(base: TableMetadata, new: TableMetadata, ups: list[Update]) -> None:
    old = {s.snapshot_id: s for s in base.statistics}
    now = {s.snapshot_id: s for s in new.statistics}
    for sid, stats in now.items():
        if old.get(sid) != stats:
            ups.append(_set_statistics(stats))
    for sid in sorted(set(old) - set(now)):
        ups.append(Update("remove-statistics", {"snapshot-id": sid}))
    old_p = {s.snapshot_id: s for s in base.partition_statistics}
    now_p = {s.snapshot_id: s for s in new.partition_statistics}
    for sid, p in now_p.items():
        if old_p.get(sid) != p:
            body = {
                "snapshot-id": p.snapshot_id,
                "statistics-path": p.statistics_path,
                "file-size-in-bytes": p.file_size_in_bytes,
            }
            ups.append(Update("set-partition-statistics", {"partition-statistics": body}))
    for sid in sorted(set(old_p) - set(now_p)):
        ups.append(Update("remove-partition-statistics", {"snapshot-id": sid}))


def creation_change(meta: TableMetadata) -> TableChange:
    """The updates that build ``meta`` from nothing, for a create transaction (requirement
    ``assert-create``): a server applies them in order to empty metadata and creates the table
    with all of it at once, snapshots included.

    Schemas, specs and orders are added in id order, as a builder numbers them; the snapshot log
    is rebuilt by moving ``main`` to each of its entries in turn, then every ref is set."""
    ups: list[Update] = [
        Update("assign-uuid", {"uuid": meta.table_uuid}),
        Update("upgrade-format-version", {"format-version": meta.format_version}),
    ]
    for schema in sorted(meta.schemas, key=lambda x: x.schema_id):
        ups.append(
            Update("add-schema", {"schema": schema_to_json(schema), "last-column-id": meta.last_column_id})
        )
    ups.append(Update("set-current-schema", {"schema-id": meta.current_schema_id}))
    for spec in sorted(meta.partition_specs, key=lambda x: x.spec_id):
        ups.append(Update("add-spec", {"spec": partition_spec_to_json(spec)}))
    ups.append(Update("set-default-spec", {"spec-id": meta.default_spec_id}))
    for order in sorted(meta.sort_orders, key=lambda x: x.order_id):
        ups.append(Update("add-sort-order", {"sort-order": sort_order_to_json(order)}))
    ups.append(Update("set-default-sort-order", {"sort-order-id": meta.default_sort_order_id}))
    ups.append(Update("set-location", {"location": meta.location}))
    if meta.properties:
        ups.append(Update("set-properties", {"updates": dict(meta.properties)}))
    logged = [e.snapshot_id for e in meta.snapshot_log]
    for snap in meta.snapshots:
        ups.append(Update("add-snapshot", {"snapshot": snapshot_to_obj(snap, meta.format_version)}))
    for sid in logged:
        ups.append(Update("set-snapshot-ref", {"ref-name": "main", "snapshot-id": sid, "type": "branch"}))
    for name, ref in meta.refs.items():
        ups.append(Update("set-snapshot-ref", {"ref-name": name, **ref_to_obj(ref)}))
    for stats in meta.statistics:
        ups.append(_set_statistics(stats))
    for p in meta.partition_statistics:
        body = {
            "snapshot-id": p.snapshot_id,
            "statistics-path": p.statistics_path,
            "file-size-in-bytes": p.file_size_in_bytes,
        }
        ups.append(Update("set-partition-statistics", {"partition-statistics": body}))
    return TableChange((Requirement("assert-create"),), tuple(ups))
