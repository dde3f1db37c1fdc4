"""spark-submit entry point for remove-orphans: the same options as `tablekeeper remove-orphans`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["remove-orphans", *sys.argv[1:]]))
