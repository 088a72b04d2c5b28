"""The graph: counts, derivations, denotations, queries, and a save/load round trip."""

import numpy as np
import pytest
from nltk import Tree

from crg.extract import extract_concepts
from crg.graph import ConceptGraph, GraphBuilder

CAPTIONS = [  # (image index, tree)
    (0, "(TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) (PP (IN on) (NP (DT the) (NN grass)))))))"),
    (0, "(TOP (NP (NP (CD two) (NNS dogs)) (PP (IN on) (NP (DT the) (NN grass)))))"),
    (1, "(TOP (S (NP (DT a) (NN dog)) (VP (VBZ sleeps) (PP (IN on) (NP (DT the) (NN grass))))))"),
    (2, "(TOP (S (NP (PRP It)) (VP (VBZ is) (VP (VBG raining)))))"),
]


@pytest.fixture()
def graph() -> ConceptGraph:
    b = GraphBuilder(["img0", "img1", "img2"], ["train", "train", "test"])
    for k, (image, bracketed) in enumerate(CAPTIONS):
        tree = Tree.fromstring(bracketed)
        b.add_caption(image, k, " ".join(tree.leaves()), extract_concepts(tree))
    return b.build(meta={"note": "test"})


def test_counts_match_a_hand_count(graph):
    # sentences: 4; phrases: "two dogs", "the grass", "a dog"; primitives: dogs, grass, dog
    assert graph.num_concepts == 10
    assert graph.num_primitives == 3
    assert sorted(graph.predicate_templates) == sorted([
        "[NP] are running on [NP]", "two [NNS]", "the [NN]", "[NP] on [NP]", "[NP] sleeps on [NP]", "a [NN]",
        "it is raining"])
    # derivations are stored once even when two captions use them ("two dogs", "the grass")
    assert len(graph.deriv_parent) == 7
    stats = graph.stats()
    assert stats["num_concepts"] == 10 and stats["num_predicates"] == 7
    assert stats["avg_height"] == pytest.approx((2 + 2 + 2 + 0) / 4)


def test_children_parents_and_denotations(graph):
    (d,) = graph.children("two dogs")
    assert d.predicate.template == "two [NNS]" and [graph.concept_texts[c] for c in d.children] == ["dogs"]
    parents = {graph.concept_texts[p.parent] for p in graph.parents("the grass")}
    assert parents == {"two dogs are running on the grass", "two dogs on the grass", "a dog sleeps on the grass"}
    assert graph.denotation("the grass") == ["img0", "img1"]
    assert graph.denotation("two dogs") == ["img0"]
    assert graph.concept("Two  Dogs").kinds == ("phrase",)
    assert graph.concept("dogs").kinds == ("primitive",)
    with pytest.raises(KeyError, match="no concept 'three cats'"):
        graph.concept_id("three cats")


def test_caption_derivations_run_children_before_parents(graph):
    steps = graph.caption_derivations(0)
    done = set()
    for step in steps:
        for child in step.children:
            kinds = graph.concept(child).kinds
            assert child in done or kinds == ("primitive",)
        done.add(step.parent)
    assert steps[-1].parent == graph.caption_root[0]


def test_phrase_queries_exclude_sentences_and_are_seeded(graph):
    q = graph.sample_phrase_queries(per_caption=2, seed=7)
    assert q == graph.sample_phrase_queries(per_caption=2, seed=7)
    roots = set(graph.caption_root.tolist())
    assert all(c not in roots for _, c in q)
    per_caption = {cap: sum(1 for k, _ in q if k == cap) for cap in range(4)}
    assert per_caption == {0: 2, 1: 2, 2: 2, 3: 0}  # "it is raining" has no sub-concept
    all_q = graph.sample_phrase_queries(per_caption=50, seed=0, captions=[0])
    assert len(all_q) == 4  # two dogs, dogs, the grass, grass


def test_save_and_load_round_trip(graph, tmp_path):
    graph.save(tmp_path / "g")
    loaded = ConceptGraph.load(tmp_path / "g")
    assert loaded.concept_texts == graph.concept_texts
    assert loaded.predicate_templates == graph.predicate_templates
    for name in ("deriv_children", "caption_derivs", "concept_images", "caption_height"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(graph, name))
    assert loaded.meta == {"note": "test"}
    assert loaded.denotation("the grass") == ["img0", "img1"]


def test_loading_a_directory_without_a_graph_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="graph.npz is missing"):
        ConceptGraph.load(tmp_path)
