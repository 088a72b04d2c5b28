"""Whether two saved CRGs are the same graph: every array (values and dtype) and every string table.

    python benchmarks/compare_graphs.py runs/bench/world_1000000_partitioned_w2 runs/bench/world_1000000_driver_w2

Either layout (columnar, memory-mapped; or ``graph.npz`` + string tables). Prints one line per table and exits 1
if any differs (the first differing index is named). The comparison is ``crg.graph_compare``, the one the tests
use on small graphs; it works in slices, so graphs of millions of concepts are compared without a second copy.
"""

from __future__ import annotations

import argparse
import sys
import time

from crg.graph import load_graph
from crg.graph_compare import compare_graphs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="a graph folder")
    parser.add_argument("b", help="another graph folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tables = compare_graphs(load_graph(args.a), load_graph(args.b))
    for t in tables:
        print(f"{t.name}: {t.difference or 'equal'} ({t.entries:,} entries)")
    differing = sum(t.difference is not None for t in tables)
    print(f"{'same graph' if not differing else f'{differing} tables differ'} "
          f"({time.perf_counter() - started:.1f} s)")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
