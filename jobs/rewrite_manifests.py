"""spark-submit entry point for rewrite-manifests: the options of `tablekeeper rewrite-manifests`."""

import sys

from tablekeeper.cli import main

if __name__ == "__main__":
    sys.exit(main(["rewrite-manifests", *sys.argv[1:]]))
