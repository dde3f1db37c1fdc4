"""spark-submit entry point for backfill-row-lineage: the options of `tablekeeper backfill-row-lineage`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["backfill-row-lineage", *sys.argv[1:]]))
