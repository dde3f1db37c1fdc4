from __future__ import annotations

import errno
import multiprocessing
import os
import pickle
import stat
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from tablekeeper.errors import (
    AlreadyExists,
    ConfigError,
    ExitCode,
    FileNotFound,
    StorageError,
    exit_code,
)
from tablekeeper.io import DeleteReport, FileInfo, FileIO, join_location, local_atomic

# The four spellings of one local directory; FileIO must accept each and answer in kind.
SPELLINGS = ("{p}", "file:{p}", "file://{p}", "file://localhost{p}")


def spell(form: str, path: Path) -> str:
    return form.format(p=path.as_posix())


@pytest.fixture
def io() -> FileIO:
    return FileIO.for_location("/")


# -- errors ------------------------------------------------------------------------------------


def test_storage_errors_map_to_their_exit_codes() -> None:
    assert exit_code(FileNotFound("x")) == ExitCode.USAGE
    assert exit_code(StorageError("x")) == ExitCode.UNEXPECTED
    assert exit_code(AlreadyExists("x")) == ExitCode.CONFLICT


def test_not_found_is_one_line_naming_the_location(io: FileIO, tmp_path: Path) -> None:
    location = spell("file:{p}", tmp_path / "missing.json")
    with pytest.raises(FileNotFound) as info:
        io.read(location)
    message = str(info.value)
    assert message.startswith(f"file not found: {location} ")
    assert "\n" not in message
    assert exit_code(info.value) == ExitCode.USAGE
    for call in (io.size, io.open_input):
        with pytest.raises(FileNotFound, match="file not found"):
            call(location)


def test_other_os_errors_become_storage_errors(io: FileIO, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=f"cannot read {tmp_path}") as info:
        io.read(str(tmp_path))  # a directory
    assert "\n" not in str(info.value)
    with pytest.raises(StorageError, match="is a directory"):
        io.size(str(tmp_path))


def test_local_fileio_refuses_other_storage_and_relative_paths(io: FileIO) -> None:
    with pytest.raises(StorageError, match=r"s3://bucket/k is not on this FileIO's local storage"):
        io.read("s3://bucket/k")
    with pytest.raises(StorageError, match="names host"):
        io.exists("file://otherhost/tmp/x")
    with pytest.raises(ConfigError, match="relative location"):
        io.exists("relative/dir")


# -- choosing the filesystem -------------------------------------------------------------------


@pytest.mark.parametrize("form", SPELLINGS)
def test_for_location_picks_local_for_paths_and_file_uris(form: str, tmp_path: Path) -> None:
    io = FileIO.for_location(spell(form, tmp_path))
    assert isinstance(io.filesystem, pafs.LocalFileSystem)
    assert io.atomic_create


def test_for_location_refuses_remote_file_hosts_and_unknown_schemes() -> None:
    with pytest.raises(ConfigError, match="names host 'nas'"):
        FileIO.for_location("file://nas/share/t")
    with pytest.raises(ConfigError, match="unsupported storage scheme 'nosuchfs'") as info:
        FileIO.for_location("nosuchfs://x/y")
    assert "\n" not in str(info.value)


def test_s3a_locations_use_s3_without_touching_the_network() -> None:
    props = {"s3.region": "us-east-1", "s3.endpoint": "http://127.0.0.1:9"}
    io = FileIO.for_location("s3a://bucket/warehouse/t", props)
    assert isinstance(io.filesystem, pafs.S3FileSystem)
    assert not io.atomic_create
    # The location keeps its scheme; only the access path drops it.
    assert io.fs_path("s3a://bucket/warehouse/t/f.parquet") == "bucket/warehouse/t/f.parquet"
    assert io.fs_path("s3n://other/k") == "other/k"
    with pytest.raises(StorageError, match="not on this FileIO's s3 storage"):
        io.fs_path("gs://bucket/k")
    with pytest.raises(ConfigError, match="names no bucket"):
        io.fs_path("s3:///k")


def test_unknown_s3_properties_are_refused_not_ignored() -> None:
    with pytest.raises(ConfigError, match=r"unsupported S3 properties s3\.sse\.type"):
        FileIO.for_location("s3://bucket/t", {"s3.region": "eu-west-1", "s3.sse.type": "kms"})


def test_fileio_pickles_for_executors(tmp_path: Path) -> None:
    io = FileIO.for_location(str(tmp_path))
    io.write(str(tmp_path / "f"), b"x")
    clone = pickle.loads(pickle.dumps(io))
    assert clone.read(str(tmp_path / "f")) == b"x"


# -- reading and writing -----------------------------------------------------------------------


@pytest.mark.parametrize("form", SPELLINGS)
def test_write_read_round_trip_in_every_spelling(form: str, tmp_path: Path) -> None:
    io = FileIO.for_location(spell(form, tmp_path))
    location = spell(form, tmp_path / "deep" / "er" / "v1.metadata.json")
    io.write(location, b'{"format-version":2}')
    assert (tmp_path / "deep" / "er" / "v1.metadata.json").read_bytes() == b'{"format-version":2}'
    assert io.read(location) == b'{"format-version":2}'
    assert io.exists(location)
    assert io.size(location) == 20


def test_locations_are_used_literally(io: FileIO, tmp_path: Path) -> None:
    # Iceberg stores decoded names: "%20" in a location is three characters of the file name.
    io.write(str(tmp_path / "a%20b #1.parquet"), b"x")
    assert (tmp_path / "a%20b #1.parquet").exists()
    assert not (tmp_path / "a b #1.parquet").exists()


def test_overwrite_replaces_and_leaves_no_temp_files(io: FileIO, tmp_path: Path) -> None:
    target = str(tmp_path / "f")
    io.write(target, b"old")
    io.write(target, b"new")
    assert io.read(target) == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_write_without_overwrite_is_create_if_absent(io: FileIO, tmp_path: Path) -> None:
    target = str(tmp_path / "f")
    io.write(target, b"first", overwrite=False)
    with pytest.raises(AlreadyExists, match="already exists"):
        io.write(target, b"second", overwrite=False)
    assert io.read(target) == b"first"


def test_open_input_supports_range_reads(io: FileIO, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    with io.open_input(spell("file:{p}", tmp_path / "f")) as stream:
        assert stream.size() == 10
        assert stream.read_at(3, 4) == b"456"
        stream.seek(8)
        assert stream.read() == b"89"


def test_exists_and_mkdirs(io: FileIO, tmp_path: Path) -> None:
    location = spell("file://{p}", tmp_path / "a" / "b")
    assert not io.exists(location)
    io.mkdirs(location)
    assert (tmp_path / "a" / "b").is_dir()
    assert io.exists(location)


# -- create-if-absent --------------------------------------------------------------------------


def test_create_if_absent_creates_once(io: FileIO, tmp_path: Path) -> None:
    location = spell("file:{p}", tmp_path / "metadata" / "v1.metadata.json")
    io.create_if_absent(location, b"one")
    with pytest.raises(AlreadyExists) as info:
        io.create_if_absent(location, b"two")
    assert str(info.value).startswith(f"{location} already exists")
    assert exit_code(info.value) == ExitCode.CONFLICT
    assert io.read(location) == b"one"
    assert [p.name for p in (tmp_path / "metadata").iterdir()] == ["v1.metadata.json"]


def test_created_files_follow_the_umask_not_0600(io: FileIO, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        io.create_if_absent(str(tmp_path / "created"), b"x")
        io.write(str(tmp_path / "written"), b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "created").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "written").stat().st_mode) == 0o644


PAYLOAD_SIZE = 1024 * 1024
TARGETS = 8


def payload(worker: int) -> bytes:
    # Large enough that a reader could catch a half-written file; each worker's bytes differ.
    return bytes([65 + worker]) * PAYLOAD_SIZE


def _race(directory: str, worker: int, barrier: Any, results: Any) -> None:
    io = FileIO.for_location(directory)
    data = payload(worker)
    barrier.wait()
    for n in range(TARGETS):
        try:
            io.create_if_absent(join_location(directory, f"v{n}.metadata.json"), data)
            results.put((n, worker, "won"))
        except AlreadyExists:
            results.put((n, worker, "lost"))
        except Exception as err:  # reported to the parent, which fails the test
            results.put((n, worker, f"error: {err!r}"))


def _watch(directory: Path, stop: threading.Event, seen: list[str]) -> None:
    """Poll every target while writers race; record any moment a target is not a complete payload.

    ``stat`` is cheap, so polling sizes catches a growing file far more often than reading would.
    """
    complete = {payload(w) for w in range(8)}
    verified: set[int] = set()
    while not stop.is_set():
        for n in range(TARGETS):
            target = directory / f"v{n}.metadata.json"
            try:
                size = target.stat().st_size
                if size == PAYLOAD_SIZE and n not in verified:
                    verified.add(n)
                    size = -1 if target.read_bytes() not in complete else size
            except FileNotFoundError:
                continue
            if size != PAYLOAD_SIZE:
                seen.append(f"v{n}: {size} bytes")


def test_racing_processes_exactly_one_wins_and_no_reader_sees_a_partial_file(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(8)
    results = ctx.Queue()
    directory = spell("file:{p}", tmp_path)
    procs = [ctx.Process(target=_race, args=(directory, w, barrier, results)) for w in range(8)]
    stop, partial = threading.Event(), list[str]()
    watcher = threading.Thread(target=_watch, args=(tmp_path, stop, partial))
    watcher.start()
    try:
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=120) for _ in range(8 * TARGETS)]
        for p in procs:
            p.join(timeout=30)
    finally:
        stop.set()
        watcher.join()
    assert all(p.exitcode == 0 for p in procs)
    assert [o for o in outcomes if o[2] not in ("won", "lost")] == []
    assert partial == []
    winners = {n: w for n, w, result in outcomes if result == "won"}
    assert Counter(n for n, _, result in outcomes if result == "won") == Counter(range(TARGETS))
    assert Counter(n for n, _, result in outcomes if result == "lost") == dict.fromkeys(range(TARGETS), 7)
    for n, w in winners.items():
        assert (tmp_path / f"v{n}.metadata.json").read_bytes() == payload(w)
    # Losers clean up after themselves: only the targets remain.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"v{n}.metadata.json" for n in range(TARGETS))


def test_target_is_invisible_until_its_content_is_durable(
    io: FileIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deterministic companion to the race above: at the moment the bytes are flushed to disk, a
    # reader must not yet find the target (as it would after O_CREAT|O_EXCL followed by writes).
    target = tmp_path / "v1.json"
    visible_during_fsync: list[bool] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        visible_during_fsync.append(target.exists())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    io.create_if_absent(str(target), b"complete")
    assert visible_during_fsync
    assert visible_during_fsync[0] is False
    assert target.read_bytes() == b"complete"


def test_racing_threads_exactly_one_wins(io: FileIO, tmp_path: Path) -> None:
    for round_ in range(20):
        target = str(tmp_path / f"t{round_}")
        barrier = threading.Barrier(8)
        outcome: dict[int, str] = {}

        def attempt(
            worker: int,
            target: str = target,
            barrier: threading.Barrier = barrier,
            outcome: dict[int, str] = outcome,
        ) -> None:
            barrier.wait()
            try:
                io.create_if_absent(target, payload(worker)[:1024])
                outcome[worker] = "won"
            except AlreadyExists:
                outcome[worker] = "lost"

        threads = [threading.Thread(target=attempt, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (winner,) = [w for w, o in outcome.items() if o == "won"]
        assert sorted(outcome.values()).count("lost") == 7
        assert Path(target).read_bytes() == payload(winner)[:1024]


def _no_hard_links(self: Path, target: object) -> None:
    raise OSError(errno.EPERM, "Operation not permitted")


@pytest.mark.skipif(local_atomic._renameat2() is None, reason="renameat2 needs Linux glibc")
def test_without_hard_links_renameat2_keeps_create_atomic(
    io: FileIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Path, "hardlink_to", _no_hard_links)
    target = str(tmp_path / "v1.json")
    io.create_if_absent(target, b"one")
    with pytest.raises(AlreadyExists):
        io.create_if_absent(target, b"two")
    assert io.read(target) == b"one"
    assert [p.name for p in tmp_path.iterdir()] == ["v1.json"]


def test_without_any_atomic_primitive_create_refuses(
    io: FileIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Path, "hardlink_to", _no_hard_links)
    monkeypatch.setattr(local_atomic, "_renameat2", lambda: None)
    with pytest.raises(StorageError, match=r"cannot create .* atomically"):
        io.create_if_absent(str(tmp_path / "v1.json"), b"one")
    assert list(tmp_path.iterdir()) == []


def test_rename_if_absent(io: FileIO, tmp_path: Path) -> None:
    src, dst = tmp_path / "tmp.json", tmp_path / "meta" / "v2.json"
    src.write_bytes(b"payload")
    io.rename_if_absent(str(src), spell("file:{p}", dst))
    assert dst.read_bytes() == b"payload"
    assert not src.exists()

    src.write_bytes(b"late")
    with pytest.raises(AlreadyExists, match=r"v2\.json already exists"):
        io.rename_if_absent(str(src), str(dst))
    assert dst.read_bytes() == b"payload"
    assert src.read_bytes() == b"late"

    with pytest.raises(FileNotFound, match="nope"):
        io.rename_if_absent(str(tmp_path / "nope"), str(tmp_path / "other"))


# -- non-local filesystems: best effort --------------------------------------------------------


def test_object_store_style_filesystem_is_best_effort() -> None:
    io = FileIO(pafs._MockFileSystem())
    assert not io.atomic_create
    io.create_if_absent("mock://bucket/t/v1.json", b"one")
    with pytest.raises(AlreadyExists):
        io.create_if_absent("mock://bucket/t/v1.json", b"two")
    io.rename_if_absent("mock://bucket/t/v1.json", "mock://bucket/t/v2.json")
    assert io.read("mock://bucket/t/v2.json") == b"one"
    assert [f.location for f in io.list("mock://bucket/t/")] == ["mock://bucket/t/v2.json"]


# -- deleting ----------------------------------------------------------------------------------


def test_delete_single(io: FileIO, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    assert io.delete(str(tmp_path / "f")) is True
    assert not (tmp_path / "f").exists()
    with pytest.raises(FileNotFound):
        io.delete(str(tmp_path / "f"))
    assert io.delete(str(tmp_path / "f"), missing_ok=True) is False


def test_delete_many_counts_missing_apart_from_failures(io: FileIO, tmp_path: Path) -> None:
    present = [tmp_path / f"f{i}" for i in range(25)]
    for p in present:
        p.write_bytes(b"x")
    (tmp_path / "adir").mkdir()
    locations = [spell("file:{p}", p) for p in present]
    locations += [str(tmp_path / "gone1"), str(tmp_path / "gone2")]
    locations += [str(tmp_path / "adir"), "s3://bucket/k"]
    report = io.delete_many(locations, max_workers=4)
    assert isinstance(report, DeleteReport)
    assert (report.deleted, report.missing) == (25, 2)
    assert [loc for loc, _ in report.failures] == [str(tmp_path / "adir"), "s3://bucket/k"]
    assert all(reason for _, reason in report.failures)
    assert not report.ok
    assert not any(p.exists() for p in present)
    assert (tmp_path / "adir").is_dir()


def test_delete_many_of_nothing_and_bad_workers(io: FileIO) -> None:
    assert io.delete_many([]) == DeleteReport(0, 0, ())
    with pytest.raises(ValueError, match="max_workers"):
        io.delete_many(["/x"], max_workers=0)


# -- listing -----------------------------------------------------------------------------------


def _tree(root: Path) -> None:
    (root / "data" / "p=1").mkdir(parents=True)
    (root / "data" / "a.parquet").write_bytes(b"12345")
    (root / "data" / "p=1" / "b.parquet").write_bytes(b"123")
    (root / "metadata").mkdir()
    (root / "metadata" / "v1.json").write_bytes(b"{}")
    os.utime(root / "data" / "a.parquet", ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    os.utime(root / "data" / "p=1" / "b.parquet", ns=(1_600_000_000_000_000_000,) * 2)


@pytest.mark.parametrize("form", SPELLINGS)
@pytest.mark.parametrize("trailing", ["", "/"])
def test_list_answers_in_the_prefix_spelling(form: str, trailing: str, tmp_path: Path) -> None:
    _tree(tmp_path)
    prefix = spell(form, tmp_path) + trailing
    io = FileIO.for_location(prefix)
    found = sorted(io.list(prefix), key=lambda f: f.location)
    stem = spell(form, tmp_path)
    assert found == [
        FileInfo(f"{stem}/data/a.parquet", 5, 1_700_000_000_123),
        FileInfo(f"{stem}/data/p=1/b.parquet", 3, 1_600_000_000_000),
        FileInfo(f"{stem}/metadata/v1.json", 2, found[2].mtime_ms),
    ]
    # Every listed location reads back through the same FileIO.
    assert [io.size(f.location) for f in found] == [5, 3, 2]


def test_list_non_recursive_skips_directories(io: FileIO, tmp_path: Path) -> None:
    _tree(tmp_path)
    found = [f.location for f in io.list(str(tmp_path / "data"), recursive=False)]
    assert found == [f"{tmp_path}/data/a.parquet"]


def test_list_missing_prefix_is_empty_and_file_prefix_is_itself(io: FileIO, tmp_path: Path) -> None:
    _tree(tmp_path)
    assert list(io.list(str(tmp_path / "nothing-here"))) == []
    file_location = spell("file:{p}", tmp_path / "metadata" / "v1.json")
    assert [f.location for f in io.list(file_location)] == [file_location]


def test_local_listings_never_follow_a_linked_directory(tmp_path: Path) -> None:
    """A link under a listed directory to a directory elsewhere is not listed into (orphan
    removal and journal removal would delete what it reaches); a link to a file is a file."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    (elsewhere / "deep" / "f").write_bytes(b"not mine")
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    (root / "d" / "own").write_bytes(b"mine")
    (root / "d" / "dir-link").symlink_to(elsewhere, target_is_directory=True)
    (root / "file-link").symlink_to(elsewhere / "deep" / "f")
    (root / "dangling").symlink_to(tmp_path / "gone")
    io = FileIO.for_location(str(root))
    listed = sorted(i.location for i in io.list(str(root), recursive=True))
    assert listed == [f"{root}/d/own", f"{root}/dangling", f"{root}/file-link"]
    files, dirs = io.list_dir(f"{root}/d")
    assert [f.location for f in files] == [f"{root}/d/own"] and dirs == ()
    assert io.list_dir(str(root))[1] == (f"{root}/d",)


def test_a_store_without_prefix_listing_finds_subdirectories_from_a_recursive_listing(tmp_path: Path) -> None:
    from tablekeeper.io.stores import Store

    root = tmp_path / "root"
    for name in ("b/t/a.txt", "b/t/data/x/1.parquet", "b/t/data/2.parquet", "b/t/metadata/v1.json"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"1")
    store = Store(
        "flatlist",
        frozenset({"flatlist"}),
        lambda authority, settings: pafs.SubTreeFileSystem(str(root), pafs.LocalFileSystem()),
        lists_prefixes=False,
    )
    io = FileIO(store.open("b", {}), store=store)
    files, dirs = io.list_dir("flatlist://b/t")
    assert [f.location for f in files] == ["flatlist://b/t/a.txt"]
    assert sorted(dirs) == ["flatlist://b/t/data", "flatlist://b/t/metadata"]
