"""spark-submit entry point for health: the same options as `tablekeeper health`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["health", *sys.argv[1:]]))
