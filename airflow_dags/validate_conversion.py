"""spark-submit application of the Delta migration DAG's ``validate_row_counts`` task: the
``validate-conversion`` job (``tablekeeper.jobs.validate_conversion``), which compares the rows of
the converted Iceberg table with its Delta source's at the converted version.

    spark-submit ... airflow_dags/validate_conversion.py --source /data/delta/t --target db.t \
        [--catalog C] [--conf-file F] (--convert-result '<convert-delta JSON>' | --delta-version N \
        [--snapshot-id S]) [--result-file F]

Prints one JSON result line like every job; exits 0 when the counts agree and 3 when they differ.
Importing this module does nothing: it sits in the DAG folder, where Airflow imports every file
(without tablekeeper installed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

JOB = "validate-conversion"


def build_parser() -> argparse.ArgumentParser:
    from tablekeeper.jobs.validate_conversion import add_arguments

    parser = argparse.ArgumentParser(prog="validate_conversion", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from tablekeeper.cli import main as tablekeeper

    return tablekeeper([JOB, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
