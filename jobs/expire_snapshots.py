"""spark-submit entry point for expire-snapshots: the same options as `tablekeeper expire-snapshots`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["expire-snapshots", *sys.argv[1:]]))
