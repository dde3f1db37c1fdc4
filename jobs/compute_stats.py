"""spark-submit entry point for compute-stats: the options of `tablekeeper compute-stats`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["compute-stats", *sys.argv[1:]]))
