"""The published JSON Schema of a job's result: ``result.schema.json``, shipped in the package.

Schedulers and dashboards parse the result line; the schema is its contract (the envelope, and
each job's metrics by name and type). The tests check every result a job prints against it: the
test session sets ``TABLEKEEPER_CHECK_RESULTS=1``, which every job process it starts inherits
(spark-submits and Airflow tasks included), and a result that breaks the schema then fails the
run instead of printing. Outside tests nothing is checked and ``jsonschema`` is not needed.
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from typing import Any

CHECK_ENV = "TABLEKEEPER_CHECK_RESULTS"
SCHEMA_FILE = "result.schema.json"


class ResultSchemaViolation(AssertionError):
    """A job printed a result its published schema does not allow (a test harness failure)."""


@functools.cache
def result_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(resources.files("tablekeeper").joinpath(SCHEMA_FILE).read_text())
    return schema


@functools.cache
def _validator() -> Any:
    import jsonschema  # only the tests check results: nothing else needs it

    return jsonschema.Draft202012Validator(result_schema())


def checking() -> bool:
    return os.environ.get(CHECK_ENV) == "1"


def check_result(line: str) -> None:
    """Raise ResultSchemaViolation naming where ``line`` (a printed result) breaks the schema."""
    body = json.loads(line)
    errors = sorted(_validator().iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(the result)"
        raise ResultSchemaViolation(
            f"{first.message} at {where}: the {body.get('job')} result breaks {SCHEMA_FILE} "
            f"({len(errors)} problem(s)); update the schema with the job's metrics"
        )
