"""``gc-build-crg``: :mod:`crg.cli.build_crg` with ``--data NAME`` resolved by :mod:`features.catalog`."""

import sys

from crg.cli import build_crg
from features.catalog import resolve_dataset
from features.world import gold_trees  # noqa: F401  registers --parser world (also without installed entry points)


def main(argv: list[str] | None = None) -> int:
    return build_crg.main(argv, resolve_dataset=resolve_dataset)


if __name__ == "__main__":
    sys.exit(main())
