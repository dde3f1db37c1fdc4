"""The worker daemon's import-cache rule: a zip archive on the path is read again when it changed,
and only then (the stock re-read costs every task of a session a read of Spark's big archives)."""

from __future__ import annotations

import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from tablekeeper.spark import daemon, session


def _zip(path: Path, body: str) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("zmod_daemon_probe.py", body)


def _importer(tmp_path: Path) -> tuple[Path, zipimport.zipimporter]:
    archive = tmp_path / "a.zip"
    _zip(archive, "X = 1\n")
    return archive, zipimport.zipimporter(str(archive))


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    stock = daemon._reread

    def counting(importer: zipimport.zipimporter) -> None:
        reads.append(importer.archive)
        stock(importer)

    monkeypatch.setattr(daemon, "_reread", counting)
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", daemon._reread_when_changed)
    return reads


def test_an_unchanged_archive_is_not_read_again(tmp_path: Path, patched: list[str]) -> None:
    archive, importer = _importer(tmp_path)
    importer.invalidate_caches()
    importer.invalidate_caches()
    importer.invalidate_caches()
    assert patched == [str(archive)]


def test_a_changed_archive_is_read_again_and_its_modules_found(tmp_path: Path, patched: list[str]) -> None:
    archive, importer = _importer(tmp_path)
    importer.invalidate_caches()
    replacement = tmp_path / "b.zip"
    _zip(replacement, "X = 2\n# longer than before\n")
    with zipfile.ZipFile(replacement, "a") as more:
        more.writestr("zmod_daemon_added.py", "Y = 3\n")
    replacement.replace(archive)
    assert importer.find_spec("zmod_daemon_added") is None  # the stale directory, as before
    importer.invalidate_caches()
    assert patched == [str(archive), str(archive)]
    assert importer.find_spec("zmod_daemon_added") is not None


def test_a_vanished_archive_is_read_again_every_time(tmp_path: Path, patched: list[str]) -> None:
    archive, importer = _importer(tmp_path)
    archive.unlink()
    importer.invalidate_caches()
    importer.invalidate_caches()
    assert len(patched) == 2


def test_install_marks_the_archives_already_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive, importer = _importer(tmp_path)
    monkeypatch.setitem(sys.path_importer_cache, str(archive), importer)
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)
    monkeypatch.setattr("traceback.print_exc", daemon._print_exc)
    monkeypatch.setenv(daemon.TRACEBACKS, "1")
    daemon.install()
    assert importer.__dict__["_read_as"] == daemon._signature(str(archive))
    import traceback

    assert traceback.print_exc is daemon._print_exc  # asked for tracebacks: stock printing


def test_the_session_names_the_daemons_switch() -> None:
    assert session.WORKER_TRACEBACKS == daemon.TRACEBACKS
