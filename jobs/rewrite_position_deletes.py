"""spark-submit entry point: the options of `tablekeeper rewrite-position-deletes`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["rewrite-position-deletes", *sys.argv[1:]]))
