from __future__ import annotations

from tablekeeper.io.walk import _without_folder_markers


def test_an_empty_blob_named_like_a_directory_that_holds_files_is_that_directory() -> None:
    """Hadoop's Azure drivers mark directories with empty blobs of their own name: a listing
    reports the directory (once), never an empty file beside it; an empty file that marks nothing
    stays a file (remove-orphans may take it)."""
    flat = [
        ("t", False, 0, 1),  # the table location's marker
        ("t/data", False, 0, 1),  # a marker, listed beside the directory pyarrow derived
        ("t/data", True, 0, None),
        ("t/data/a.parquet", False, 10, 1),
        ("t/metadata/v1.json", False, 5, 1),
        ("t/empty.txt", False, 0, 1),
    ]
    assert _without_folder_markers(flat) == [
        ("t", True, 0, None),
        ("t/data", True, 0, None),
        ("t/data/a.parquet", False, 10, 1),
        ("t/metadata/v1.json", False, 5, 1),
        ("t/empty.txt", False, 0, 1),
    ]
