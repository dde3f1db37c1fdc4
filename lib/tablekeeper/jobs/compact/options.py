"""compact's options: the dataclass, its command line, and the sizes they resolve to."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Literal

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.metadata import MAIN_BRANCH
from tablekeeper.iceberg.rewrite_plan import RewriteOptions
from tablekeeper.iceberg.sort_keys import MAX_OUTPUT_SIZE, VAR_LENGTH_CONTRIBUTION
from tablekeeper.jobs.common.context import (
    add_run_arguments,
    add_table_arguments,
    options_from_args,
    positive,
)
from tablekeeper.jobs.common.formats import delta_options, honoured, refused
from tablekeeper.jobs.common.options import parse_size

Strategy = Literal["binpack", "sort"]
Writer = Literal["auto", "spark"]


@dataclass(frozen=True)
class CompactOptions:
    table: str
    strategy: Strategy = "binpack"
    sort_order: str | None = None
    where: str | None = None
    target_file_size: str | None = None
    min_file_size: str | None = None
    max_file_size: str | None = None
    min_input_files: int = 5
    delete_file_threshold: int | None = None
    rewrite_all: bool = False
    partial_progress: bool = False
    max_commits: int = 10
    max_concurrent_groups: int = 5
    output_spec_id: int | None = None
    branch: str = MAIN_BRANCH
    dry_run: bool = False
    # "auto": Arrow on the executors for groups that need no shuffle; "spark": always Spark SQL.
    writer: Writer = "auto"
    # Iceberg's zorder options, with its names and defaults.
    var_length_contribution: int = VAR_LENGTH_CONTRIBUTION
    max_output_size: int = MAX_OUTPUT_SIZE
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CompactOptions:
        return options_from_args(cls, args, internal=("branch",))

    def __post_init__(self) -> None:
        if self.writer not in ("auto", "spark"):
            raise ConfigError(f"--writer {self.writer!r} is not auto or spark")

    def rewrite_options(self, properties: dict[str, str]) -> RewriteOptions:
        extra: dict[str, Any] = {"min_input_files": self.min_input_files, "rewrite_all": self.rewrite_all}
        if self.delete_file_threshold is not None:
            extra["delete_file_threshold"] = self.delete_file_threshold
        return RewriteOptions.resolve(
            properties,
            target_file_size=_size(self.target_file_size, "--target-file-size"),
            min_file_size=_size(self.min_file_size, "--min-file-size"),
            max_file_size=_size(self.max_file_size, "--max-file-size"),
            **extra,
        )


def _size(text: str | None, option: str) -> int | None:
    return None if text is None else parse_size(text, option)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    parser.add_argument("--strategy", default="binpack", choices=["binpack", "sort"])
    parser.add_argument(
        "--sort-order",
        help='sort strategy: "c1 ASC NULLS FIRST, bucket(16, c2) DESC, days(ts)" or "zorder(c1, c2)" '
        "(default: the table's order)",
    )
    parser.add_argument(
        "--var-length-contribution",
        type=positive,
        default=VAR_LENGTH_CONTRIBUTION,
        help=f"zorder: bytes a string or binary column contributes ({VAR_LENGTH_CONTRIBUTION})",
    )
    parser.add_argument(
        "--max-output-size",
        type=positive,
        default=MAX_OUTPUT_SIZE,
        help="zorder: bytes of the interleaved value (default: all of them)",
    )
    parser.add_argument(
        "--where", help="Spark SQL predicate: only files holding matching rows (Delta: partition columns)"
    )
    parser.add_argument(
        "--target-file-size", help="e.g. 512MB (default: write.target-file-size-bytes, else 512MB)"
    )
    parser.add_argument("--min-file-size", help="files below are rewritten (default 75%% of the target)")
    parser.add_argument("--max-file-size", help="files above are rewritten (default 180%% of the target)")
    parser.add_argument("--min-input-files", type=positive, default=5, help="smallest group rewritten (5)")
    parser.add_argument(
        "--delete-file-threshold", type=int, help="rewrite files read with at least this many delete files"
    )
    parser.add_argument("--rewrite-all", action="store_true", help="rewrite every file, whatever its size")
    parser.add_argument(
        "--partial-progress", action="store_true", help="commit batches of groups as they finish"
    )
    parser.add_argument("--max-commits", type=positive, default=10, help="with --partial-progress (10)")
    parser.add_argument(
        "--max-concurrent-groups", type=positive, default=5, help="groups rewritten at once (5)"
    )
    parser.add_argument("--output-spec-id", type=int, help="partition spec of the new files (current)")
    parser.add_argument(
        "--writer",
        default="auto",
        choices=["auto", "spark"],
        help="auto: Arrow on the executors where no shuffle is needed; spark: always Spark SQL (auto)",
    )
    add_run_arguments(parser)


_ICEBERG_PLAN = "delta-spark's OPTIMIZE has no such setting; drop it for Delta tables"
# compact on a Delta table runs delta-spark's OPTIMIZE (jobs.common.formats): what it honours, and how.
DELTA_OPTIONS = delta_options(
    {
        "strategy": honoured("binpack: OPTIMIZE; sort: OPTIMIZE ZORDER BY with --sort-order zorder(...)"),
        "sort_order": honoured("zorder(c1, c2): OPTIMIZE ZORDER BY (a linear order is refused)"),
        "where": honoured("OPTIMIZE WHERE, on partition columns"),
        "target_file_size": honoured("spark.databricks.delta.optimize.maxFileSize (and minFileSize)"),
        "min_file_size": honoured("spark.databricks.delta.optimize.minFileSize"),
        "max_concurrent_groups": honoured("spark.databricks.delta.optimize.maxThreads"),
        "partial_progress": honoured("spark.databricks.delta.optimize.batchSize: batches commit as they end"),
        "max_commits": honoured("with --partial-progress: the batch size is the input bytes / max-commits"),
        "var_length_contribution": refused("Delta's ZORDER BY has no such setting; drop it"),
        "max_output_size": refused("Delta's ZORDER BY has no such setting; drop it"),
        "max_file_size": refused("OPTIMIZE never splits large files; drop it for Delta tables"),
        "min_input_files": refused("OPTIMIZE rewrites any bin of two or more small files; drop it"),
        "delete_file_threshold": refused(
            "OPTIMIZE picks files by spark.databricks.delta.optimize.maxDeletedRowsRatio; set that instead"
        ),
        "rewrite_all": refused(_ICEBERG_PLAN),
        "output_spec_id": refused("Delta tables have one partitioning; drop it"),
        "writer": refused("OPTIMIZE writes through delta-spark itself; drop it for Delta tables"),
    }
)
