"""The wall clock of retention decisions: real unless a test injects one."""

from __future__ import annotations

import time
from pathlib import Path

from tablekeeper import clock
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tests.unit.files.test_journal import _table


def test_real_unless_injected() -> None:
    assert abs(clock.now_ms() - time.time() * 1000) < 5_000
    with clock.injected(lambda: 86_400.0):
        assert clock.now_ms() == 86_400_000
    assert abs(clock.now_ms() - time.time() * 1000) < 5_000


def test_remove_orphans_judges_age_by_the_injected_clock(tmp_path: Path) -> None:
    """A file written just now is young by the real clock, and four days old by one moved four
    days ahead: retention reads the injected clock, not the wall."""
    catalog, ident = _table(tmp_path)
    location = Path(catalog.require(ident).metadata.location)
    orphan = location / "data" / "orphan.parquet"
    orphan.write_bytes(b"x")
    options = RemoveOrphansOptions(table=ident, older_than="3d", engine="driver")
    assert run_orphans(options, catalog, ident).metrics["deleted_files_count"] == 0
    assert orphan.exists()
    later = time.time() + 4 * 86_400
    with clock.injected(lambda: later):
        assert run_orphans(options, catalog, ident).metrics["deleted_files_count"] == 1
    assert not orphan.exists()


def test_the_library_reads_the_wall_clock_in_one_place() -> None:
    """One clock: retention, ages and timestamps come from ``clock.now_ms`` (which tests move),
    except the journal heartbeat, whose times other processes compare with their own, and a GCS
    access token's lifetime, which is the token server's (the JWT's issue time, its renewal)."""
    import ast
    from pathlib import Path

    lib = Path(__file__).resolve().parents[2] / "lib" / "tablekeeper"
    calls = []
    for path in sorted(lib.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "time"
                and isinstance(func.value, ast.Name)
                and func.value.id == "time"
            ):
                calls.append(f"{path.relative_to(lib)}")
    assert sorted(calls) == ["files/journal.py", "files/journal.py", "io/gcs.py", "io/gcs.py"]
