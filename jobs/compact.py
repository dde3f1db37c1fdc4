"""spark-submit entry point for compact: the same options as `tablekeeper compact`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["compact", *sys.argv[1:]]))
