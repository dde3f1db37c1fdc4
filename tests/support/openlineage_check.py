"""Every OpenLineage event a run sends, built into openlineage-python's generated attrs models
(``openlineage.client.generated``): a strict structurer here refuses a key the model does not have
and a required key that is missing, checks each value's type against the model's annotations, and
lets the models' own validators check eventTime, the runIds (UUIDs) and the URIs. Every standard
facet's ``_schemaURL`` (and the event's ``schemaURL``) must be the one the model names for its spec
version; the built model, serialized back by the client's Serde, must equal what was sent.

openlineage-python ships no copy of the spec's JSON Schema (OpenLineage.json), so the models, which
the client generates from that schema, are the check.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any

import attr
from openlineage.client.generated import (
    base,
    dataset_version_dataset,
    error_message_run,
    job_type_job,
    parent_run,
    processing_engine_run,
    storage_dataset,
    symlinks_dataset,
)
from openlineage.client.serde import Serde

from tablekeeper.jobs.common.result_schema import check_result

RUN_FACETS: Mapping[str, type] = {
    "parent": parent_run.ParentRunFacet,
    "processing_engine": processing_engine_run.ProcessingEngineRunFacet,
    "errorMessage": error_message_run.ErrorMessageRunFacet,
}
JOB_FACETS: Mapping[str, type] = {"jobType": job_type_job.JobTypeJobFacet}
DATASET_FACETS: Mapping[str, type] = {
    "storage": storage_dataset.StorageDatasetFacet,
    "symlinks": symlinks_dataset.SymlinksDatasetFacet,
    "version": dataset_version_dataset.DatasetVersionDatasetFacet,
}
# The facets maps each model holds, by the model and its field.
FACET_MAPS: Mapping[tuple[type, str], Mapping[str, type]] = {
    (base.Run, "facets"): RUN_FACETS,
    (base.Job, "facets"): JOB_FACETS,
    (base.InputDataset, "facets"): DATASET_FACETS,
    (base.OutputDataset, "facets"): DATASET_FACETS,
    (base.InputDataset, "inputFacets"): {},
    (base.OutputDataset, "outputFacets"): {},
    (parent_run.Run, "facets"): {},
    (parent_run.Job, "facets"): {},
}
CUSTOM_RUN_FACET = "tablekeeper_result"


class InvalidEvent(AssertionError):
    pass


def _schema_key(cls: type) -> str | None:
    names = {f.name for f in attr.fields(cls)}
    return "_schemaURL" if "_schemaURL" in names else ("schemaURL" if "schemaURL" in names else None)


def structure(cls: type, data: Any, where: str) -> Any:
    """``data`` as an instance of the attrs model ``cls``, or InvalidEvent saying where it is not."""
    if not isinstance(data, dict):
        raise InvalidEvent(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    schema_key = _schema_key(cls)
    given = [f for f in attr.fields(cls) if f.init]
    unknown = set(data) - {f.name for f in given} - {schema_key}
    if unknown:
        raise InvalidEvent(f"{where}: {cls.__name__} has no {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    for f in given:
        if f.name not in data:
            if f.default is attr.NOTHING:
                raise InvalidEvent(f"{where}: {cls.__name__} misses required {f.name!r}")
            continue
        maps = FACET_MAPS.get((cls, f.name))
        if maps is not None:
            kwargs[f.alias] = _facets(maps, data[f.name], f"{where}.{f.name}")
        else:
            kwargs[f.alias] = _value(hints[f.name], data[f.name], f"{where}.{f.name}")
    try:
        built = cls(**kwargs)
    except (ValueError, TypeError) as err:  # the models' validators (dates, UUIDs, URIs)
        raise InvalidEvent(f"{where}: {cls.__name__}: {err}") from err
    if schema_key is not None:
        expected = built._get_schema()
        if data.get(schema_key) != expected:
            raise InvalidEvent(
                f"{where}.{schema_key}: {data.get(schema_key)!r}, the model names {expected!r}"
            )
    return built


def _facets(known: Mapping[str, type], data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidEvent(f"{where}: expected an object of facets")
    out = {}
    for name, body in data.items():
        if name not in known:
            raise InvalidEvent(f"{where}: unexpected facet {name!r}")
        out[name] = structure(known[name], body, f"{where}.{name}")
    return out


def _value(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            if len(arms) == len(typing.get_args(tp)):
                raise InvalidEvent(f"{where}: null is not allowed")
            return None
        return _value(arms[0], value, where)
    if origin is list:
        if not isinstance(value, list):
            raise InvalidEvent(f"{where}: expected a list")
        (item,) = typing.get_args(tp)
        return [_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        raise InvalidEvent(f"{where}: a map this checker has no facet registry for")
    if isinstance(tp, type) and attr.has(tp):
        return structure(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(value)
        except ValueError:
            raise InvalidEvent(f"{where}: {value!r} is not one of {[e.value for e in tp]}") from None
    if tp is bool or tp is str:
        if type(value) is not tp:
            raise InvalidEvent(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    if tp is int:
        if type(value) is not int:
            raise InvalidEvent(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if type(value) not in (int, float):
            raise InvalidEvent(f"{where}: expected a number, got {value!r}")
        return value
    raise InvalidEvent(f"{where}: no rule for {tp!r}")


def validate_event(body: bytes) -> tuple[base.RunEvent, dict[str, Any]]:
    """The event as the client's RunEvent, and tablekeeper's own run facet (checked: producer,
    schema URL, and its result against the published result schema)."""
    data = json.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("run"), dict):
        raise InvalidEvent("not a run event")
    facets = dict(data["run"].get("facets") or {})
    custom = facets.pop(CUSTOM_RUN_FACET, None)
    standard = {**data, "run": {**data["run"], "facets": facets}}
    event = structure(base.RunEvent, standard, "event")
    if _without_empty(Serde.to_dict(event)) != _without_empty(standard):
        raise InvalidEvent("the event does not survive the client's own serialization unchanged")
    if custom is not None:
        if set(custom) != {"_producer", "_schemaURL", "result"}:
            raise InvalidEvent(f"{CUSTOM_RUN_FACET}: keys {sorted(custom)}")
        if not isinstance(custom["_producer"], str) or not custom["_producer"]:
            raise InvalidEvent(f"{CUSTOM_RUN_FACET}: no _producer")
        base.RunFacet(producer=custom["_producer"])  # the base facet's own URI check
        if not custom["_schemaURL"].startswith("urn:tablekeeper:"):
            raise InvalidEvent(f"{CUSTOM_RUN_FACET}: _schemaURL {custom['_schemaURL']!r}")
        check_result(json.dumps(custom["result"]))
    return event, custom or {}


def _without_empty(value: Any) -> Any:
    """What Serde drops (nulls, empty objects inside lists) and what the models default to (empty
    maps of facets) compare as absent."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [_without_empty(v) for v in value if v is not None and v != {}]
    return value
