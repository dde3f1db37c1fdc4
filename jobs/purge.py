"""spark-submit entry point for purge: the options of `tablekeeper purge`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["purge", *sys.argv[1:]]))
