"""Partition specs and sort orders: frozen models and their JSON form."""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.types import UNKNOWN, IcebergType, NestedField, Schema, StructType

# Partition field ids start here; ids below belong to schema columns (spec: "starts at 1000").
PARTITION_DATA_ID_START = 1000


@dataclass(frozen=True)
class PartitionField:
    source_id: int
    field_id: int
    name: str
    transform: str  # Iceberg's string form, e.g. "bucket[16]"; parsed by tablekeeper.iceberg.transforms
    # v3 multi-argument transforms name several sources; single-source specs leave this empty.
    source_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class PartitionSpec:
    spec_id: int
    fields: tuple[PartitionField, ...] = ()

    @property
    def is_unpartitioned(self) -> bool:
        return all(f.transform == "void" for f in self.fields)

    def last_assigned_field_id(self) -> int:
        return max((f.field_id for f in self.fields), default=PARTITION_DATA_ID_START - 1)

    def partition_type(self, schema: Schema) -> StructType:
        """The struct of partition tuples (every field optional), as written into manifests."""
        from tablekeeper.iceberg.transforms import parse_transform

        fields = []
        for f in self.fields:
            source = schema.find_type(f.source_id)
            result: IcebergType = (
                UNKNOWN if source is None else parse_transform(f.transform).result_type(source)
            )
            fields.append(NestedField(f.field_id, f.name, result, required=False))
        return StructType(tuple(fields))

    def identity_columns(self, schema: Schema) -> tuple[tuple[int, NestedField], ...]:
        """(position in the partition tuple, top-level column) of each identity field: the
        columns whose value a file's partition tuple gives (files converted from Delta hold none)."""
        columns = {f.id: f for f in schema.fields}
        return tuple(
            (i, columns[f.source_id])
            for i, f in enumerate(self.fields)
            if f.transform == "identity" and f.source_id in columns
        )

    def compatible_with(self, other: PartitionSpec) -> bool:
        """Same fields and transforms (ids may differ): Java reuses a spec instead of adding a copy."""

        def key(spec: PartitionSpec) -> list[tuple[int, str, str]]:
            return [(f.source_id, f.transform, f.name) for f in spec.fields]

        return key(self) == key(other)


UNPARTITIONED = PartitionSpec(spec_id=0, fields=())


@dataclass(frozen=True)
class SortField:
    source_id: int
    transform: str
    direction: str  # "asc" | "desc"
    null_order: str  # "nulls-first" | "nulls-last"
    # v3 multi-argument transforms name several sources; single-source fields leave this empty.
    source_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SortOrder:
    order_id: int
    fields: tuple[SortField, ...] = ()

    @property
    def is_unsorted(self) -> bool:
        return not self.fields


UNSORTED = SortOrder(order_id=0, fields=())


_DOUBLE_BITS = struct.Struct(">d").pack
_CANONICAL_NAN = _DOUBLE_BITS(math.nan)


def partition_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A partition tuple as a key that is equal exactly when the spec says the partitions are.

    Floats compare by their bits, as Java's ``Double.equals`` does: every NaN is one partition
    (Python's NaN equals nothing, itself included, so it would never find its own deletes), and
    -0.0 is another partition than +0.0 (Python's ``==`` would merge them).
    """
    if not any(type(v) is float for v in values):
        return values
    return tuple(
        (_CANONICAL_NAN if math.isnan(v) else _DOUBLE_BITS(v), "float") if type(v) is float else v
        for v in values
    )


def _req(obj: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return obj[key]
    except (KeyError, TypeError):
        raise CorruptMetadataError(f"malformed {what}: missing {key!r}") from None


def _sources(obj: Mapping[str, Any], what: str) -> tuple[int, tuple[int, ...]]:
    """(source-id, source-ids) of a partition or sort field: v3 multi-argument transforms name
    their sources in "source-ids" (then no "source-id"); a single source keeps the ids empty."""
    source_ids = tuple(int(i) for i in obj.get("source-ids", ()))
    source_id = obj.get("source-id", source_ids[0] if source_ids else None)
    if source_id is None:
        raise CorruptMetadataError(f"malformed {what}: missing 'source-id'")
    return int(source_id), source_ids if len(source_ids) > 1 else ()


def partition_field_from_json(obj: Mapping[str, Any]) -> PartitionField:
    source_id, source_ids = _sources(obj, "partition field")
    return PartitionField(
        source_id=source_id,
        # v1 specs may omit field ids; Java then numbers them from 1000 in order (handled by caller).
        field_id=int(obj.get("field-id", -1)),
        name=str(_req(obj, "name", "partition field")),
        transform=str(_req(obj, "transform", "partition field")),
        source_ids=source_ids,
    )


def partition_spec_from_json(obj: Mapping[str, Any]) -> PartitionSpec:
    return spec_from_fields(int(obj.get("spec-id", 0)), _req(obj, "fields", "partition spec"))


def spec_from_fields(spec_id: int, fields_json: Any) -> PartitionSpec:
    if not isinstance(fields_json, list):
        raise CorruptMetadataError("malformed partition spec: 'fields' must be a list")
    fields = []
    next_id = PARTITION_DATA_ID_START
    for raw in fields_json:
        f = partition_field_from_json(raw)
        if f.field_id < 0:
            f = PartitionField(f.source_id, next_id, f.name, f.transform, f.source_ids)
        next_id = f.field_id + 1
        fields.append(f)
    return PartitionSpec(spec_id, tuple(fields))


def partition_fields_to_json(spec: PartitionSpec) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in spec.fields:
        item: dict[str, Any] = {"name": f.name, "transform": f.transform}
        if f.source_ids:
            item["source-ids"] = list(f.source_ids)
        else:
            item["source-id"] = f.source_id
        item["field-id"] = f.field_id
        out.append(item)
    return out


def partition_spec_to_json(spec: PartitionSpec) -> dict[str, Any]:
    return {"spec-id": spec.spec_id, "fields": partition_fields_to_json(spec)}


def _sort_field_from_json(f: Mapping[str, Any]) -> SortField:
    source_id, source_ids = _sources(f, "sort field")
    return SortField(
        source_id=source_id,
        transform=str(_req(f, "transform", "sort field")),
        direction=str(_req(f, "direction", "sort field")).lower(),
        null_order=str(_req(f, "null-order", "sort field")).lower(),
        source_ids=source_ids,
    )


def sort_order_from_json(obj: Mapping[str, Any]) -> SortOrder:
    fields = tuple(_sort_field_from_json(f) for f in _req(obj, "fields", "sort order"))
    return SortOrder(int(_req(obj, "order-id", "sort order")), fields)


def _sort_field_to_json(f: SortField) -> dict[str, Any]:
    item: dict[str, Any] = {"transform": f.transform}
    if f.source_ids:
        item["source-ids"] = list(f.source_ids)
    else:
        item["source-id"] = f.source_id
    return item | {"direction": f.direction, "null-order": f.null_order}


def sort_order_to_json(order: SortOrder) -> dict[str, Any]:
    return {
        "order-id": order.order_id,
        "fields": [_sort_field_to_json(f) for f in order.fields],
    }
