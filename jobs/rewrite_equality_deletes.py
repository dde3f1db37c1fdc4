"""spark-submit entry point: the options of `tablekeeper rewrite-equality-deletes`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["rewrite-equality-deletes", *sys.argv[1:]]))
