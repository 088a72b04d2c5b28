"""Whether two saved CRGs are the same graph: every array (values and dtype) and every string table.

    python benchmarks/compare_graphs.py runs/bench/world_1000000_partitioned_w2 runs/bench/world_1000000_driver_w2

Either layout (columnar, memory-mapped; or ``graph.npz`` + string tables). Arrays are compared in slices and
string tables element by element, so two graphs of millions of concepts are compared without holding a
second copy of either. Prints one line per table and exits 1 if any differs (the first differing index is
named). The tests compare small graphs the same way (``tests/test_crg_scale.py``); this is for the large
ones the scale benchmark builds.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from crg.graph import _ARRAYS, _STRINGS, load_graph

SLICE = 1 << 22  # elements per compared slice of an array


def first_array_difference(a: np.ndarray, b: np.ndarray) -> str | None:
    """None when equal, else what differs (dtype, shape or the first differing index)."""
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} != {b.dtype}"
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    for start in range(0, a.shape[0], SLICE):
        x, y = np.asarray(a[start:start + SLICE]), np.asarray(b[start:start + SLICE])
        if not np.array_equal(x, y):
            i = start + int(np.flatnonzero(np.any((x != y).reshape(len(x), -1), axis=1))[0])
            return f"first difference at index {i}"
    return None


def first_string_difference(a, b) -> str | None:
    if len(a) != len(b):
        return f"length {len(a)} != {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at index {i}: {x!r} != {y!r}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="a graph folder")
    parser.add_argument("b", help="another graph folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    a, b = load_graph(args.a), load_graph(args.b)
    differing = 0
    for name in itertools.chain(_STRINGS, _ARRAYS):
        compare = first_string_difference if name in _STRINGS else first_array_difference
        what = compare(getattr(a, name), getattr(b, name))
        differing += what is not None
        print(f"{name}: {'equal' if what is None else what} ({len(getattr(a, name)):,} entries)")
    print(f"{'same graph' if not differing else f'{differing} tables differ'} "
          f"({time.perf_counter() - started:.1f} s)")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
