"""remove-orphans' listing rules: which listed files are hidden, their keys, and which files mark
another table nested under the location."""

from __future__ import annotations

import pytest

from tablekeeper.files.listing import Classifier, is_hidden, nested
from tablekeeper.files.rules import PathRules
from tablekeeper.io.fileio import FileInfo

HIDDEN = {
    "data/a.parquet": False,
    "data/_temporary/0/x.parquet": True,
    "data/.staging.crc": True,
    "data/_p=1/x.parquet": False,  # with _p a partition field
    "data/_q=1/x.parquet": True,
    "data/_p=1/_p=2/f.parquet": False,
    "data/_p/x.parquet": True,
    "_SUCCESS": True,
    ".hidden/x": True,
    "metadata/v1.metadata.json": False,
    "data/cat=a/_x.parquet": True,
    "data/cat=a/.x.parquet.crc": True,
    "data/cat=a/f.parquet": False,
    "data/x_y/_z=1/f.parquet": True,
}


@pytest.mark.parametrize(("relative", "hidden"), sorted(HIDDEN.items()))
def test_hidden_rule(relative: str, hidden: bool) -> None:
    assert is_hidden(relative, frozenset({"_p", "cat"})) is hidden


def test_partition_directories_starting_with_underscore_are_visible_only_when_they_are_partitions() -> None:
    assert not is_hidden("data/_p=1/x.parquet", frozenset({"_p"}))
    assert is_hidden("data/_p=1/x.parquet", frozenset({"p"}))
    assert is_hidden("data/_p/x.parquet", frozenset({"_p"}))


@pytest.mark.parametrize("stem", ["/wh/t", "file:/wh/t", "s3a://Bucket/wh/t", "s3://bucket"])
def test_classifier_rows_match_the_rules_file_by_file(stem: str) -> None:
    rules = PathRules()
    classify = Classifier(stem, rules, frozenset({"_p", "cat"}))
    infos = [FileInfo(f"{stem}/{rel}", 7, 11) for rel in HIDDEN]
    rows = list(classify.rows(infos))
    # Hidden files vanish except markers; every key is the full normalisation of its path.
    assert {r[0][len(stem) + 1 :] for r in rows if not r[4]} == {rel for rel, h in HIDDEN.items() if not h}
    for path, key, size, mtime, _, _ in rows:
        assert key == rules.key(path)
        assert (size, mtime) == (7, 11)


def test_markers_name_the_tables_they_belong_to() -> None:
    stem = "s3a://b/wh/t"
    classify = Classifier(stem, PathRules(), frozenset())
    rels = [
        "metadata/00001-a.metadata.json",  # the table itself
        "inner/metadata/v2.metadata.json.gz",
        "inner/metadata/snap-1.avro",  # not a marker
        "inner/data/f.parquet",
        "delta/_delta_log/00000.json",
        "delta/_delta_log/_commits/00001.uuid.json",
        "delta/part-0.parquet",
        "data/metadata.json",  # not under a metadata directory
    ]
    rows = {r[0][len(stem) + 1 :]: r for r in classify.rows(FileInfo(f"{stem}/{rel}", 1, 1) for rel in rels)}
    roots = {rel: row[5] for rel, row in rows.items()}
    assert roots == {
        "metadata/00001-a.metadata.json": "s3://b/wh/t",
        "inner/metadata/v2.metadata.json.gz": "s3://b/wh/t/inner",
        "inner/metadata/snap-1.avro": None,
        "inner/data/f.parquet": None,
        "delta/_delta_log/00000.json": "s3://b/wh/t/delta",
        "delta/_delta_log/_commits/00001.uuid.json": "s3://b/wh/t/delta",
        "delta/part-0.parquet": None,
        "data/metadata.json": None,
    }
    assert rows["delta/_delta_log/00000.json"][4] is True  # kept as a marker, still hidden
    assert nested(set(roots.values()) - {None}, "s3://b/wh/t") == ["s3://b/wh/t/delta", "s3://b/wh/t/inner"]


def test_nested_roots_keep_only_outermost_and_ignore_siblings() -> None:
    roots = ["s3://b/t", "s3://b/t/x", "s3://b/t/x/y", "s3://b/t_2", "s3://b/t/z", "s3://b/other"]
    assert nested(roots, "s3://b/t") == ["s3://b/t/x", "s3://b/t/z"]
