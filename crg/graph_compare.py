"""Whether two CRGs are the same graph: every array (values and dtype) and every string table.

One comparison for the tests (the partitioned, Ray and default engines must build the same graph) and for
``benchmarks/compare_graphs.py`` (the same check on the scale benchmark's graphs of millions of concepts).
Arrays are compared in slices and string tables element by element, so two memory-mapped graphs are compared
without holding a second copy of either; a difference is reported by its first index, which is what one needs
to find the caption that diverged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from crg.graph import _ARRAYS, _STRINGS, ConceptGraph

__all__ = ["TableComparison", "compare_graphs", "graph_differences", "first_array_difference",
           "first_string_difference"]

SLICE = 1 << 22  # elements per compared slice of an array


@dataclass(frozen=True)
class TableComparison:
    """One table of the graph: its name, its length in ``a`` and what differs (None when equal)."""

    name: str
    entries: int
    difference: str | None


def first_array_difference(a: np.ndarray, b: np.ndarray, slice_size: int = SLICE) -> str | None:
    """None when equal, else what differs: the dtype, the shape or the first differing row."""
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} != {b.dtype}"
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    for start in range(0, a.shape[0], slice_size):
        x, y = np.asarray(a[start:start + slice_size]), np.asarray(b[start:start + slice_size])
        if not np.array_equal(x, y):
            row_differs = np.any((x != y).reshape(len(x), -1), axis=1)  # (rows in the slice,)
            return f"first difference at index {start + int(np.flatnonzero(row_differs)[0])}"
    return None


def first_string_difference(a, b) -> str | None:
    """None when equal, else the lengths or the first differing string (any sequence of str: list, StringTable)."""
    if len(a) != len(b):
        return f"length {len(a)} != {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at index {i}: {x!r} != {y!r}"
    return None


def compare_graphs(a: ConceptGraph, b: ConceptGraph) -> list[TableComparison]:
    """Every string table, then every array, of two graphs (in memory or memory-mapped)."""
    out = []
    for name in itertools.chain(_STRINGS, _ARRAYS):
        compare = first_string_difference if name in _STRINGS else first_array_difference
        x, y = getattr(a, name), getattr(b, name)
        out.append(TableComparison(name, len(x), compare(x, y)))
    return out


def graph_differences(a: ConceptGraph, b: ConceptGraph) -> dict[str, str]:
    """``{table: what differs}``, empty when the graphs are the same: ``assert not graph_differences(a, b)``."""
    return {t.name: t.difference for t in compare_graphs(a, b) if t.difference is not None}
