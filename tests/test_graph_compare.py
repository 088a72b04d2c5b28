"""crg.graph_compare finds a difference wherever it is; benchmarks/compare_graphs.py reports it and fails.

The engines' equality tests (test_crg_ray.py, test_crg_scale.py) rest on this comparison, so it is checked
first on arrays and tables built to differ in one place, then on a real graph changed in one entry.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

from conftest import ROOT
from crg.build import build_crg
from crg.corpus import read_corpus
from crg.graph import ConceptGraph
from crg.graph_compare import (SLICE, compare_graphs, first_array_difference, first_string_difference,
                               graph_differences)

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"

_spec = importlib.util.spec_from_file_location("_script_compare_graphs", ROOT / "benchmarks" / "compare_graphs.py")
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


@pytest.mark.parametrize("where", [0, 5, SLICE + 3])
def test_first_array_difference_names_the_index_also_past_the_first_slice(where):
    a = np.arange(SLICE + 10, dtype=np.int64)
    b = a.copy()
    assert first_array_difference(a, b) is None
    b[where] += 1
    assert first_array_difference(a, b) == f"first difference at index {where}"


def test_array_dtype_shape_and_two_dimensional_rows():
    a = np.zeros((4, 3), dtype=np.int32)
    assert first_array_difference(a, a.astype(np.int64)).startswith("dtype")
    assert first_array_difference(a, a[:3]).startswith("shape")
    b = a.copy()
    b[2, 1] = 7
    assert first_array_difference(a, b) == "first difference at index 2"
    assert first_array_difference(a, b, slice_size=1) == "first difference at index 2"


def test_string_tables():
    assert first_string_difference(["a", "b"], ["a", "b"]) is None
    assert first_string_difference(["a", "b"], ["a"]).startswith("length")
    assert first_string_difference(["a", "b"], ["a", "c"]) == "first difference at index 1: 'b' != 'c'"


@pytest.fixture(scope="module")
def toy_graph(spacy_parser) -> ConceptGraph:
    return build_crg(read_corpus(TOY), spacy_parser, progress=False)[0]


def test_a_graph_equals_itself_saved_either_way_and_one_changed_entry_is_found(toy_graph, tmp_path):
    toy_graph.save(tmp_path / "npz")
    toy_graph.save(tmp_path / "columnar", columnar=True)
    for saved in ("npz", "columnar"):
        assert graph_differences(ConceptGraph.load(tmp_path / saved), toy_graph) == {}
    assert [t.name for t in compare_graphs(toy_graph, toy_graph)][:2] == ["image_ids", "image_splits"]

    kinds = np.array(toy_graph.concept_kinds)
    kinds[3] ^= 1
    texts = list(toy_graph.concept_texts)
    texts[-1] += "!"
    changed = dataclasses.replace(toy_graph, concept_kinds=kinds, concept_texts=texts)
    assert graph_differences(changed, toy_graph) == {
        "concept_kinds": "first difference at index 3",
        "concept_texts": f"first difference at index {len(texts) - 1}: {texts[-1]!r} != {texts[-1][:-1]!r}"}


def test_the_script_prints_every_table_and_exits_1_on_a_difference(toy_graph, tmp_path, capsys):
    toy_graph.save(tmp_path / "a", columnar=True)
    toy_graph.save(tmp_path / "b")
    assert script.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "same graph" in out and "concept_kinds: equal" in out
    ids = np.array(toy_graph.caption_image)
    ids[0] += 1
    dataclasses.replace(toy_graph, caption_image=ids).save(tmp_path / "c")
    assert script.main([str(tmp_path / "a"), str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert "caption_image: first difference at index 0" in out and "1 tables differ" in out
