"""spark-submit entry point for validate-conversion: the same options as `tablekeeper validate-conversion`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["validate-conversion", *sys.argv[1:]]))
