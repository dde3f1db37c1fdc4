"""Sessions tablekeeper starts run their Python workers under its daemon: a task does not re-read
the zip archives on the workers' path (Spark's own among them) when they have not changed."""

from __future__ import annotations

from typing import Any


def _importers(_: Any) -> tuple[str, list[tuple[str, bool]]]:
    import sys
    import zipimport

    rule = zipimport.zipimporter.invalidate_caches.__name__
    marked = [
        (key, "_read_as" in importer.__dict__)
        for key, importer in sys.path_importer_cache.items()
        if isinstance(importer, zipimport.zipimporter)
    ]
    return rule, marked


def test_workers_read_unchanged_archives_once(spark) -> None:  # type: ignore[no-untyped-def]
    sc = spark.sparkContext
    sc.parallelize(range(4), 4).count()  # every worker has run a task since its start
    found = sc.parallelize(range(4), 4).map(_importers).collect()
    assert {rule for rule, _ in found} == {"_reread_when_changed"}
    archives = [entry for _, marked in found for entry in marked]
    assert archives, "no zip archive on the workers' path: the rule is untested"
    assert all(read for _, read in archives), archives
