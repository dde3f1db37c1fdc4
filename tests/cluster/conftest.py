"""The standalone cluster the tests of this directory submit jobs to: started once per session,
on the first test that asks for it, and torn down (every process group) at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.spark_cluster import StandaloneCluster
from tests.support.spark_submit import build_package


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    build_package()  # dist/tablekeeper.zip, which every submit ships, is this checkout's code
    standalone = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield standalone.start()
    finally:
        standalone.stop()
