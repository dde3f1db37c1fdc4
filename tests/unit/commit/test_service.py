"""The commit service: the one staging sequence every job that writes new files commits through."""

from __future__ import annotations

import ast
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tablekeeper.catalog.base import Catalog
from tablekeeper.catalog.filesystem import FileSystemCatalog
from tablekeeper.commit import CommitResult, Committer, SnapshotChange
from tablekeeper.commit.service import Staging, plan_again, staging
from tablekeeper.errors import CommitConflict, CommitFailed, CommitStateUnknown, ManifestsChanged
from tablekeeper.files.journal import Staged, list_journals
from tablekeeper.iceberg.content import DATA, DataFile
from tests.unit.commit.test_transaction_faults import Flaky, create

LIB = Path(__file__).resolve().parents[3] / "lib" / "tablekeeper"


def _open(catalog: FileSystemCatalog, ident: str) -> tuple[str, AbstractContextManager[Staging]]:
    table = catalog.require(ident)
    return table.metadata.location, staging(
        catalog,
        ident,
        job="test",
        io=table.io,
        location=table.metadata.location,
        base_metadata=table.metadata_location,
        staged=lambda token: (Staged(f"{table.metadata.location}/data", token),),
    )


def _write(location: str, run: Staging, n: int) -> DataFile:
    path = Path(location, "data", f"{run.token}-{n}.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * 10)
    return DataFile(DATA, str(path), "PARQUET", (), 1, 10)


def _append(catalog: Catalog, ident: str, run: Staging, f: DataFile) -> CommitResult:
    change = SnapshotChange("append", added_files=(f,))
    return run.commit(
        lambda: Committer(catalog, ident, file_prefix=run.token).commit_snapshot(change), [f.file_path]
    )


def test_a_known_failure_deletes_only_what_the_table_does_not_reference(tmp_path: Path) -> None:
    catalog = FileSystemCatalog("c", str(tmp_path / "wh"))
    ident = create(catalog)
    location, opened = _open(catalog, ident)
    with pytest.raises(RuntimeError, match="boom"), opened as run:
        kept = _write(location, run, 1)
        _append(catalog, ident, run, kept)
        lost = _write(location, run, 2)
        raise RuntimeError("boom")
    assert Path(kept.file_path).exists() and not Path(lost.file_path).exists()
    assert list_journals(catalog.require(ident).io, location) == []


def test_after_an_unknown_state_nothing_more_commits_and_everything_stays(tmp_path: Path) -> None:
    inner = FileSystemCatalog("c", str(tmp_path / "wh"))
    ident = create(inner)
    flaky = Flaky(inner, unknown_after_commit=True)
    location, opened = _open(inner, ident)
    with pytest.raises(CommitStateUnknown), opened as run:
        first = _write(location, run, 1)
        with pytest.raises(CommitStateUnknown):
            _append(flaky, ident, run, first)
        second = _write(location, run, 2)
        _append(inner, ident, run, second)  # refused: the first commit's state is unknown
    assert Path(first.file_path).exists() and Path(second.file_path).exists()
    assert len(inner.require(ident).metadata.snapshots) == 1  # only the first commit, which landed
    assert len(list_journals(inner.require(ident).io, location)) == 1  # left for the next run


def test_a_staged_file_deleted_meanwhile_commits_nothing(tmp_path: Path) -> None:
    catalog = FileSystemCatalog("c", str(tmp_path / "wh"))
    ident = create(catalog)
    location, opened = _open(catalog, ident)
    with pytest.raises(CommitFailed, match="are gone"), opened as run:
        f = _write(location, run, 1)
        Path(f.file_path).unlink()
        _append(catalog, ident, run, f)
    assert catalog.require(ident).metadata.snapshots == ()


def test_plan_again_retries_only_its_conflict() -> None:
    calls: list[int] = []

    def once(plans: int) -> int:
        calls.append(plans)
        if plans < 3:
            raise ManifestsChanged("moved")
        return plans

    assert plan_again(once, 3, ManifestsChanged) == 3 and calls == [1, 2, 3]
    with pytest.raises(CommitConflict):
        plan_again(lambda plans: (_ for _ in ()).throw(CommitConflict("again")), 2)
    calls.clear()
    with pytest.raises(ManifestsChanged):
        plan_again(once, 2, ManifestsChanged)
    assert calls == [1, 2]


# What only the commit service may do: open a staging journal, check it, publish, discard.
_SERVICE_ONLY = {"discard", "require_staged", "intact", "publish", "finish_journals"}


def test_no_job_writes_its_own_staging_steps() -> None:
    """The staging sequence exists once: jobs (and the layers above) go through commit.service."""
    offenders = []
    for path in sorted(
        [*(LIB / "jobs").rglob("*.py"), *(LIB / "spark").rglob("*.py"), *(LIB / "cli").rglob("*.py")]
    ):
        for node in ast.walk(ast.parse(path.read_text())):
            name = None
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                kind = [k for k in node.keywords if k.arg == "kind"]
                if kind and isinstance(kind[0].value, ast.Constant) and kind[0].value.value == "stage":
                    offenders.append(f"{path.relative_to(LIB)}:{node.lineno} opens a staging journal")
            if name in _SERVICE_ONLY:
                offenders.append(f"{path.relative_to(LIB)}:{getattr(node, 'lineno', 0)} calls {name}")
    assert offenders == []
