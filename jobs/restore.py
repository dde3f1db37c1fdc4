"""spark-submit entry point for restore: the options of `tablekeeper restore`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["restore", *sys.argv[1:]]))
