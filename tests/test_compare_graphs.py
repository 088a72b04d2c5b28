"""benchmarks/compare_graphs.py finds a difference wherever it is (the scale benchmark's equality check)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("_script_compare_graphs", ROOT / "benchmarks" / "compare_graphs.py")
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


@pytest.mark.parametrize("where", [0, 5, (1 << 22) + 3])
def test_first_array_difference_names_the_index_also_past_the_first_slice(where):
    a = np.arange((1 << 22) + 10, dtype=np.int64)
    b = a.copy()
    assert compare.first_array_difference(a, b) is None
    b[where] += 1
    assert compare.first_array_difference(a, b) == f"first difference at index {where}"


def test_array_dtype_shape_and_two_dimensional_rows():
    a = np.zeros((4, 3), dtype=np.int32)
    assert compare.first_array_difference(a, a.astype(np.int64)).startswith("dtype")
    assert compare.first_array_difference(a, a[:3]).startswith("shape")
    b = a.copy()
    b[2, 1] = 7
    assert compare.first_array_difference(a, b) == "first difference at index 2"


def test_string_tables():
    assert compare.first_string_difference(["a", "b"], ["a", "b"]) is None
    assert compare.first_string_difference(["a", "b"], ["a"]).startswith("length")
    assert compare.first_string_difference(["a", "b"], ["a", "c"]) == "first difference at index 1: 'b' != 'c'"
