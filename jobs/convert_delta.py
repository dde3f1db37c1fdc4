"""spark-submit entry point for convert-delta: the same options as `tablekeeper convert-delta`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert-delta", *sys.argv[1:]]))
