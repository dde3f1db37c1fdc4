"""Servers the interop tests talk to over loopback. Each starts on first request and lives for
the session, so test files that never ask for one pay nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.object_store import S3Endpoint, run_s3proxy
from tests.support.rest_catalog_server import RestCatalogServer, run_rest_catalog

S3_BUCKET = "warehouse"
REST_WAREHOUSE = f"s3://{S3_BUCKET}/rest"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """An in-memory S3 store with the bucket ``warehouse`` created."""
    with run_s3proxy(tmp_path_factory.mktemp("s3proxy")) as s3:
        s3.create_bucket(S3_BUCKET)
        yield s3


@pytest.fixture(scope="session")
def rest_server(
    tmp_path_factory: pytest.TempPathFactory, s3_server: S3Endpoint
) -> Iterator[RestCatalogServer]:
    """Iceberg's REST catalog server, its warehouse at s3://warehouse/rest in ``s3_server``."""
    with run_rest_catalog(tmp_path_factory.mktemp("rest-catalog"), s3_server, REST_WAREHOUSE) as server:
        yield server
