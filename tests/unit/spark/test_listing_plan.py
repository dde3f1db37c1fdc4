"""The Spark engine's listing plan: what the driver lists of the first levels plus what each task
lists of its subtree (deciding nested tables from its own markers) is exactly the driver engine's
listing, wherever the nested tables sit relative to the levels the driver lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from tablekeeper.files.listing import Classifier
from tablekeeper.files.local import LocalEngine
from tablekeeper.files.rules import PathRules
from tablekeeper.io import FileIO
from tablekeeper.spark import listing
from tablekeeper.spark.listing import plan_listing, tree_rows

FILES = [
    "metadata/v1.metadata.json",  # the table's own
    "metadata/snap-1.avro",
    "_delta_log/00000000000000000000.json",  # converted in place: its own log, hidden
    "data/f0.parquet",
    "data/.f0.parquet.crc",
    "data/_temporary/0/x.parquet",
    "data/_p=1/f.parquet",  # a partition directory (``_p`` is a partition field)
    "data/a=1/f1.parquet",
    "data/a=2/f2.parquet",
    "data/metadata/notes.txt",  # a directory named metadata, without a table's metadata file
    # An Iceberg table one level down, with a Delta table inside it (covered by the outer).
    "inner1/metadata/v1.metadata.json",
    "inner1/data/x.parquet",
    "inner1/data/inner2/_delta_log/0.json",
    "inner1/data/inner2/p.parquet",
    # A Delta table two levels down.
    "data/delta_t/_delta_log/00000000000000000000.json",
    "data/delta_t/part-0.parquet",
    "data/delta_t/sub/p.parquet",
    # An Iceberg table three levels down.
    "data/a=1/deep/metadata/v2.metadata.json.gz",
    "data/a=1/deep/data/y.parquet",
    # A Delta table whose log holds only a staged-commits directory.
    "x/y/_delta_log/_commits/00000000000000000001.abc.json",
    "x/y/part.parquet",
    "x/z.parquet",
    # A Delta table four levels down, beside a file of ours.
    "a/b/c/d/_delta_log/0.json",
    "a/b/c/d/p.parquet",
    "a/b/c/e.parquet",
]


@pytest.fixture(scope="module")
def location(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("plan") / "t"
    for relative in FILES:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    return str(root)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("wanted", [1, 2, 3, 5, 8, 64])
def test_driver_rows_and_task_trees_list_what_the_driver_engine_lists(
    location: str, depth: int, wanted: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "_DRIVER_DEPTH", depth)
    rules = PathRules()
    partitions = frozenset({"_p", "a"})
    classify = Classifier(location, rules, partitions)
    own_key = rules.prefix(location)[:-1]
    plan = plan_listing(FileIO.for_location(location), classify, own_key, wanted)
    for tree in plan.trees:  # no subtree listed twice
        assert not any(other != tree and tree.startswith(other + "/") for other in plan.trees)
    found = sorted([*plan.rows, *(row for tree in plan.trees for row in tree_rows(tree, classify, own_key))])
    expected = sorted(LocalEngine()._list(location, rules, partitions))
    assert found == expected
    kept = {Path(r[0]).relative_to(location).as_posix() for r in found}
    assert kept == {
        "metadata/v1.metadata.json",
        "metadata/snap-1.avro",
        "data/f0.parquet",
        "data/_p=1/f.parquet",
        "data/a=1/f1.parquet",
        "data/a=2/f2.parquet",
        "data/metadata/notes.txt",
        "x/z.parquet",
        "a/b/c/e.parquet",
    }
