"""The real Delta tables in ../shared/delta-tables/delta-rs (read-only input) and a way to copy one.

A table is any directory holding a ``_delta_log`` directory, found recursively (``golden/`` nests
tables one level down); it is named by its path relative to the delta-rs folder, e.g.
``"golden/data-reader-array-primitives"``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DELTA_RS_TABLES = REPO_ROOT.parent / "shared" / "delta-tables" / "delta-rs"


def discover_tables(root: Path = DELTA_RS_TABLES) -> list[str]:
    """Relative names (with ``/``) of every directory under ``root`` that holds a ``_delta_log``."""
    if not root.is_dir():
        return []
    names = {log.parent.relative_to(root).as_posix() for log in root.rglob("_delta_log") if log.is_dir()}
    return sorted(names)


SHARED_TABLES: list[str] = discover_tables()

# Tables whose _delta_log was copied without the data files: the log names live files that are
# not on disk, so nothing may read their rows.
LOG_ONLY = frozenset(
    {
        "checkpoint_with_partitions",
        "checkpoints",
        "checkpoints_vacuumed",
        "latest_not_checkpointed",
        "with_checkpoint_no_last_checkpoint",
        "spark-variant-stable-feature-checkpoint",
    }
)


def shared_table_path(name: str) -> Path:
    """The read-only original; copy it (``copy_table``) before anything that might write."""
    path = DELTA_RS_TABLES / name
    if not (path / "_delta_log").is_dir():
        raise FileNotFoundError(f"{path} is not a Delta table: ../shared must sit beside the repository")
    return path


def copy_table(name: str, tmp_dir: Path) -> Path:
    """Copy the shared table ``name`` to ``tmp_dir/<name>`` (file times kept) and return the copy."""
    source = shared_table_path(name)
    target = Path(tmp_dir) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target, symlinks=True)
    return target
