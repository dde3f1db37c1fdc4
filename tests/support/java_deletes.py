"""Equality deletes written and committed by Iceberg Java in the test's Spark JVM: its generic
equality delete writer (``GenericFileWriterFactory``: Parquet, field ids, metrics as Java writes
them) and a ``RowDelta`` commit through the table as Iceberg Spark loads it, the way Flink's
upsert sink and Kafka Connect's writer commit theirs. The deleted keys are either given (through
Py4J: ints for INT columns, as Py4J passes small ints as Integer; floats for DOUBLE; strings;
None) or read by Iceberg Java's generic reader from the table's own live rows matching a
predicate, as Java values of the columns' types (any type, BIGINT included)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EqualityDelete:
    """One equality delete file to write: rows of ``columns``, in spec ``spec_id`` (None: the
    table's current spec) and ``partition`` (that spec's values, in order)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...] = ()
    partition: tuple[Any, ...] = ()
    spec_id: int | None = None
    # (Expressions method, column, value), e.g. ("lessThan", "id", 6): also delete the keys of
    # the table's live rows it matches, as Iceberg Java reads them.
    matching: tuple[str, str, Any] | None = None


def commit_equality_delete_files(spark: Any, table: str, deletes: Sequence[EqualityDelete]) -> list[str]:
    """Write each of ``deletes`` as an equality delete file and commit them all in one RowDelta.
    Returns their paths."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    loaded.refresh()
    schema = loaded.schema()
    delta = loaded.newRowDelta()
    paths = []
    for d in deletes:
        names = jvm.java.util.ArrayList()
        for c in d.columns:
            names.add(c)
        delete_schema = schema.select(names)
        ids = gateway.new_array(gateway.jvm.int, len(d.columns))
        for i, c in enumerate(d.columns):
            ids[i] = schema.findField(c).fieldId()
        spec = loaded.specs().get(d.spec_id) if d.spec_id is not None else loaded.spec()
        builder = getattr(jvm.org.apache.iceberg.data, "GenericFileWriterFactory$Builder")(loaded)
        factory = (
            builder.equalityFieldIds(ids)
            .equalityDeleteRowSchema(delete_schema)
            .deleteFileFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
            .build()
        )
        path = f"{loaded.location()}/data/eq-deletes-{uuid.uuid4().hex}.parquet"
        out = jvm.org.apache.iceberg.encryption.EncryptedFiles.plainAsEncryptedOutput(
            loaded.io().newOutputFile(path)
        )
        key = None
        if spec.isPartitioned():
            key = jvm.org.apache.iceberg.data.GenericRecord.create(spec.partitionType())
            for i, value in enumerate(d.partition):
                key.set(i, value)
        writer = factory.newEqualityDeleteWriter(out, spec, key)
        try:
            for row in d.rows:
                record = jvm.org.apache.iceberg.data.GenericRecord.create(delete_schema)
                for c, value in zip(d.columns, row, strict=True):
                    record.setField(c, value)
                writer.write(record)
            if d.matching is not None:
                method, column, value = d.matching
                expression = getattr(jvm.org.apache.iceberg.expressions.Expressions, method)(column, value)
                scan = jvm.org.apache.iceberg.data.IcebergGenerics.read(loaded).where(expression)
                records = scan.project(delete_schema).build()
                try:
                    found = records.iterator()
                    while found.hasNext():
                        writer.write(found.next())
                finally:
                    records.close()
        finally:
            writer.close()
        delta.addDeletes(writer.toDeleteFile())
        paths.append(path)
    delta.commit()
    spark.sql(f"REFRESH TABLE {table}")
    return paths


def commit_equality_deletes(
    spark: Any,
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    partition: Sequence[Any] = (),
    spec_id: int | None = None,
) -> str:
    """One equality delete file of ``rows`` (values of ``columns``), committed on its own."""
    delete = EqualityDelete(tuple(columns), tuple(tuple(r) for r in rows), tuple(partition), spec_id)
    [path] = commit_equality_delete_files(spark, table, [delete])
    return path
