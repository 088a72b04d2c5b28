"""``gc-make-mcd-split``: :mod:`crg.cli.make_mcd_split` with ``--data NAME`` resolved by :mod:`features.catalog`."""

import sys

from crg.cli import make_mcd_split
from features.catalog import resolve_dataset
from features.world import gold_trees  # noqa: F401  registers --parser world (also without installed entry points)


def main(argv: list[str] | None = None) -> int:
    return make_mcd_split.main(argv, resolve_dataset=resolve_dataset)


if __name__ == "__main__":
    sys.exit(main())
