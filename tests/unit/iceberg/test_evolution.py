from __future__ import annotations

import pytest

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import DOUBLE, FLOAT, INT, LONG, STRING, DecimalType, NestedField, Schema
from tablekeeper.iceberg.updates import add_partition_spec, add_schema, new_table_metadata

BASE = Schema(
    0, (NestedField(1, "id", INT, True), NestedField(2, "x", FLOAT), NestedField(3, "d", DecimalType(9, 2)))
)


def meta(version: int = 2):  # type: ignore[no-untyped-def]
    spec = PartitionSpec(0, (PartitionField(1, 1000, "id_b", "bucket[4]"),))
    return new_table_metadata(schema=BASE, location="/t", timestamp_ms=1, spec=spec, format_version=version)


def test_promotions_and_new_columns_are_accepted() -> None:
    evolved = Schema(
        0,
        (
            NestedField(1, "id", LONG, True),
            NestedField(2, "x", DOUBLE),
            NestedField(3, "d", DecimalType(12, 2)),
            NestedField(4, "note", STRING),
        ),
    )
    m = add_schema(meta(), evolved, timestamp_ms=2)
    assert m.current_schema_id == 1 and m.last_column_id == 4
    assert [s.schema_id for s in m.schemas] == [0, 1]
    # Adding the same schema again reuses it.
    assert add_schema(m, evolved, timestamp_ms=3).schemas == m.schemas


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (NestedField(1, "id", STRING, True), "int cannot be promoted to string"),
        (NestedField(3, "d", DecimalType(12, 3)), "cannot be promoted"),
        (NestedField(2, "x", FLOAT, True), "cannot change from optional to required"),
    ],
)
def test_incompatible_changes_are_refused(field: NestedField, message: str) -> None:
    fields = tuple(field if f.id == field.id else f for f in BASE.fields)
    with pytest.raises(ConfigError, match=message):
        add_schema(meta(), Schema(0, fields), timestamp_ms=2)


def test_new_required_column_without_default_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs an initial default"):
        add_schema(meta(), Schema(0, (*BASE.fields, NestedField(9, "r", INT, True))), timestamp_ms=2)


def test_spec_evolution_assigns_fresh_field_ids_and_reuses_equal_specs() -> None:
    m = meta()
    wider = PartitionSpec(
        0, (PartitionField(1, 0, "id_b", "bucket[4]"), PartitionField(3, 0, "d_t", "truncate[10]"))
    )
    m2 = add_partition_spec(m, wider, timestamp_ms=2)
    spec = m2.spec()
    assert spec.spec_id == 1 and [f.field_id for f in spec.fields] == [1000, 1001]
    assert m2.last_partition_id == 1001
    back = add_partition_spec(m2, m.spec(0), timestamp_ms=3)
    assert back.default_spec_id == 0 and len(back.partition_specs) == 2


def test_transforms_must_fit_their_source() -> None:
    with pytest.raises(ConfigError, match="cannot apply"):
        add_partition_spec(meta(), PartitionSpec(0, (PartitionField(2, 0, "x_day", "day"),)), timestamp_ms=2)
    with pytest.raises(ConfigError, match="not in the schema"):
        add_partition_spec(
            meta(), PartitionSpec(0, (PartitionField(42, 0, "nope", "identity"),)), timestamp_ms=2
        )


def test_a_retyped_field_may_change_beyond_promotions_and_only_it() -> None:
    # int to string is no promotion: allowed only for a field whose files are all rewritten.
    changed = Schema(
        0, tuple(NestedField(f.id, f.name, STRING if f.id == 1 else f.type, f.required) for f in BASE.fields)
    )
    with pytest.raises(ConfigError, match="cannot be promoted"):
        add_schema(meta(), changed, timestamp_ms=2)
    assert add_schema(meta(), changed, timestamp_ms=2, retyped=frozenset({1})).schema().find_type(1) == STRING
    with pytest.raises(ConfigError, match="cannot be promoted"):
        add_schema(meta(), changed, timestamp_ms=2, retyped=frozenset({2}))
