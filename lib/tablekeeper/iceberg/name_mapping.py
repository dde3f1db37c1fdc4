"""Iceberg name mapping: the ``schema.name-mapping.default`` table property.

A name mapping tells readers which field id a column has in data files written without ids
(imported Parquet, Delta tables with column mapping). It is a JSON array of objects with
``names`` (0 or more names the column may have), optional ``field-id`` and optional ``fields``
(the children of a struct, list or map; list elements are named ``element``, map entries
``key`` and ``value``).

Within one level a name may belong to one field only, and a field id may appear only once in a
mapping: either would make a lookup ambiguous, so both are treated as corrupt metadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.types import IcebergType, ListType, MapType, Schema, StructType

__all__ = [
    "NAME_MAPPING_PROPERTY",
    "MappedField",
    "NameMapping",
    "name_mapping_from_schema",
    "name_mapping_to_json",
    "parse_name_mapping",
]

NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
_FIX = f"fix or unset the table property {NAME_MAPPING_PROPERTY}"


def _index_names(fields: tuple[MappedField, ...], where: str) -> dict[str, MappedField]:
    index: dict[str, MappedField] = {}
    for f in fields:
        for name in f.names:
            if name in index:
                raise CorruptMetadataError(f"name mapping: name {name!r} maps to two fields {where}; {_FIX}")
            index[name] = f
    return index


def _where(path: tuple[str, ...]) -> str:
    return f"under {'.'.join(path)!r}" if path else "at the top level"


@dataclass(frozen=True)
class MappedField:
    """One column: the names it may have, its field id (None: no id, skip it) and its children."""

    names: tuple[str, ...]
    field_id: int | None = None
    fields: tuple[MappedField, ...] = ()
    _by_name: Mapping[str, MappedField] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        label = self.names[0] if self.names else f"field id {self.field_id}"
        object.__setattr__(self, "_by_name", _index_names(self.fields, _where((label,))))

    def child(self, name: str) -> MappedField | None:
        return self._by_name.get(name)


@dataclass(frozen=True)
class NameMapping:
    """A whole mapping. Immutable: ``with_aliases`` returns a new one."""

    fields: tuple[MappedField, ...] = ()
    _by_name: Mapping[str, MappedField] = field(default_factory=dict, compare=False, repr=False)
    _by_id: Mapping[int, MappedField] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", _index_names(self.fields, _where(())))
        by_id: dict[int, MappedField] = {}
        for f in _walk(self.fields):
            if f.field_id is None:
                continue
            if f.field_id in by_id:
                raise CorruptMetadataError(f"name mapping: field id {f.field_id} appears twice; {_FIX}")
            by_id[f.field_id] = f
        object.__setattr__(self, "_by_id", by_id)

    def __iter__(self) -> Iterator[MappedField]:
        return iter(self.fields)

    def find(self, path: tuple[str, ...]) -> MappedField | None:
        """The field at ``path`` (one name per level, any of a field's names), or None."""
        if not path:
            return None
        found = self._by_name.get(path[0])
        for name in path[1:]:
            if found is None:
                return None
            found = found.child(name)
        return found

    def find_by_id(self, field_id: int) -> MappedField | None:
        return self._by_id.get(field_id)

    def with_aliases(self, field_id: int, *extra_names: str) -> NameMapping:
        """A copy where field ``field_id`` also answers to ``extra_names`` (e.g. Delta physical names)."""
        return self.with_all_aliases({field_id: extra_names})

    def with_all_aliases(self, aliases: Mapping[int, Iterable[str]]) -> NameMapping:
        """``with_aliases`` for many fields at once. Names a field already has are not repeated.

        Raises ``KeyError`` for a field id the mapping lacks and ``CorruptMetadataError`` if an
        alias is already a sibling's name.
        """
        missing = sorted(set(aliases) - set(self._by_id))
        if missing:
            raise KeyError(f"name mapping has no field id {', '.join(map(str, missing))}")
        wanted = {fid: tuple(names) for fid, names in aliases.items()}

        def rebuild(fields: tuple[MappedField, ...]) -> tuple[MappedField, ...]:
            out = []
            for f in fields:
                extra = wanted.get(f.field_id, ()) if f.field_id is not None else ()
                names = f.names + tuple(n for n in dict.fromkeys(extra) if n not in f.names)
                out.append(MappedField(names, f.field_id, rebuild(f.fields)))
            return tuple(out)

        return NameMapping(rebuild(self.fields))


def _walk(fields: Iterable[MappedField]) -> Iterator[MappedField]:
    for f in fields:
        yield f
        yield from _walk(f.fields)


# ---------------------------------------------------------------------------------------------
# From a schema


def _children(t: IcebergType) -> tuple[MappedField, ...]:
    if isinstance(t, StructType):
        return tuple(MappedField((f.name,), f.id, _children(f.type)) for f in t.fields)
    if isinstance(t, ListType):
        return (MappedField(("element",), t.element_id, _children(t.element)),)
    if isinstance(t, MapType):
        return (
            MappedField(("key",), t.key_id, _children(t.key)),
            MappedField(("value",), t.value_id, _children(t.value)),
        )
    return ()


def name_mapping_from_schema(schema: Schema) -> NameMapping:
    """The mapping that names every field of ``schema`` by its current name."""
    return NameMapping(_children(schema.as_struct()))


# ---------------------------------------------------------------------------------------------
# JSON


def _field_from_json(value: Any, where: str) -> MappedField:
    if not isinstance(value, dict):
        raise CorruptMetadataError(f"name mapping entry {where} is not an object; {_FIX}")
    names = value.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CorruptMetadataError(f"name mapping entry {where}: 'names' must be a list of strings; {_FIX}")
    field_id = value.get("field-id")
    # bool is an int in Python but never a field id.
    if field_id is not None and (not isinstance(field_id, int) or isinstance(field_id, bool)):
        raise CorruptMetadataError(f"name mapping entry {where}: 'field-id' must be an integer; {_FIX}")
    return MappedField(tuple(names), field_id, _fields_from_json(value.get("fields"), f"{where}.fields"))


def _fields_from_json(value: Any, where: str) -> tuple[MappedField, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CorruptMetadataError(f"name mapping {where or 'value'} must be a JSON array; {_FIX}")
    return tuple(_field_from_json(item, f"{where}[{i}]") for i, item in enumerate(value))


def parse_name_mapping(json_text: str | bytes) -> NameMapping:
    """Parse the property's JSON. Unknown keys in an entry are ignored, as newer writers may add some."""
    try:
        value = json.loads(json_text)
    except json.JSONDecodeError as err:
        raise CorruptMetadataError(
            f"name mapping is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); {_FIX}"
        ) from err
    except UnicodeDecodeError as err:
        raise CorruptMetadataError(f"name mapping is not UTF-8 text; {_FIX}") from err
    if value is None:
        raise CorruptMetadataError(f"name mapping must be a JSON array, not null; {_FIX}")
    return NameMapping(_fields_from_json(value, ""))


def _field_to_json(f: MappedField) -> dict[str, Any]:
    out: dict[str, Any] = {"names": list(f.names)}
    if f.field_id is not None:
        out["field-id"] = f.field_id
    if f.fields:
        out["fields"] = [_field_to_json(c) for c in f.fields]
    return out


def name_mapping_to_json(mapping: NameMapping) -> str:
    """Compact JSON with keys in the order names, field-id, fields; empty parts omitted."""
    return json.dumps([_field_to_json(f) for f in mapping.fields], separators=(",", ":"), ensure_ascii=False)


def merge_name_mappings(
    newer: NameMapping, older: NameMapping, *, keep_former_names: bool = True
) -> NameMapping:
    """``newer`` plus the fields only ``older`` has, so files written under an earlier schema still
    resolve after a column was dropped or renamed. On a clash (a name or id at one level taken
    by both) the newer field wins; fields with the same id merge their children, keeping the
    older names too unless ``keep_former_names`` is off."""
    taken_ids = {f.field_id for f in _walk(newer.fields) if f.field_id is not None}

    def merge(new: tuple[MappedField, ...], old: tuple[MappedField, ...]) -> tuple[MappedField, ...]:
        by_id = {f.field_id: f for f in old if f.field_id is not None}
        out = []
        for f in new:
            prior = by_id.get(f.field_id) if f.field_id is not None else None
            if prior is None:
                out.append(f)
                continue
            # Former names of the field are kept as aliases unless a sibling now uses them.
            sibling_names = {n for g in new if g is not f for n in g.names}
            extra = tuple(
                n for n in prior.names if keep_former_names and n not in f.names and n not in sibling_names
            )
            out.append(MappedField(f.names + extra, f.field_id, merge(f.fields, prior.fields)))
        used = {n for f in out for n in f.names}
        for f in old:
            if f.field_id is not None and f.field_id in taken_ids:
                continue
            names = tuple(n for n in f.names if n not in used)
            if names and not any(g.field_id in taken_ids for g in _walk(f.fields) if g.field_id is not None):
                out.append(MappedField(names, f.field_id, f.fields))
                used.update(names)
        return tuple(out)

    return NameMapping(merge(newer.fields, older.fields))
