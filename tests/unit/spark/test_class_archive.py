"""The local session's class archive: named by Spark and Java, added only when built, never over a
session's own choice of archive."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tablekeeper.settings import JARS_ENV
from tablekeeper.spark import class_archive

pytestmark = pytest.mark.unit


@pytest.fixture
def java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    binary = home / "bin" / "java"
    binary.write_bytes(b"a java")
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv(JARS_ENV, str(tmp_path / "jars"))
    return binary


def test_no_archive_built_leaves_the_options_as_they_are(java: Path) -> None:
    assert class_archive.java_options() == ""
    assert class_archive.java_options("-Xmx1g") == "-Xmx1g"


def test_a_built_archive_is_added_quietly_after_the_sessions_own_options(java: Path) -> None:
    path = class_archive.archive_path()
    assert path is not None and path.parent == Path(os.environ[JARS_ENV]).resolve() / "classes"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    options = class_archive.java_options("-Xmx1g")
    assert options == f"-Xmx1g -XX:SharedArchiveFile={path} -Xlog:cds=off,cds+dynamic=off"


@pytest.mark.parametrize(
    "own", ["-XX:SharedArchiveFile=/elsewhere.jsa", "-XX:ArchiveClassesAtExit=/out.jsa", "-Xshare:off"]
)
def test_options_naming_an_archive_or_sharing_are_left_alone(java: Path, own: str) -> None:
    path = class_archive.archive_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert class_archive.java_options(own) == own


def test_another_java_binary_names_another_archive(java: Path) -> None:
    before = class_archive.archive_path()
    java.write_bytes(b"an upgraded java")
    assert class_archive.archive_path() != before


def test_no_java_no_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "absent"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert class_archive.archive_path() is None
    assert class_archive.java_options("-Xmx1g") == "-Xmx1g"
