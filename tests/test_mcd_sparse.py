"""MCD splits from the per-image counts saved with a graph (crg/mcd_counts.py) instead of its caption arrays.

The counts the partitioned build saves = the counts computed from the graph = what
:func:`crg.compounds.image_count_matrices` gives, over the same shared vocabularies; and ``write_mcd_split`` on
graphs built by the partitioned build (memory-mapped, counts read from disk) selects the same images as today's
path through the graph cache, on a Flickr30K-train -> COCO-test slice.
"""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import ROOT
from crg.build import build_crg
from crg.corpus import read_corpus
from crg.graph import load_graph
from crg.mcd import AnnealConfig, MCDConfig, image_count_matrices
from crg.mcd_counts import GraphCounts, counts_from_graph, read_graph_counts, template_matrices
from crg.parse_cache import default_cache_path
from crg.mcd_output import GraphOptions, MCDCorpora, write_mcd_split
from crg.ray_engine import ParserSpec, RayConfig
from crg.ray_scale import build_crg_partitioned

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"


def same_matrix(a, b) -> bool:
    return a.shape == b.shape and (a != b).nnz == 0


@pytest.mark.parametrize("shards", [1, 4])
def test_saved_counts_equal_the_graphs_and_the_mcd_matrices(tmp_path, spacy_parser, shards):
    build = build_crg_partitioned(TOY, ParserSpec("spacy"), tmp_path / "g", config=RayConfig(shards=shards),
                                  num_partitions=2, progress=False, use_ray=False)
    want, _ = build_crg(read_corpus(TOY), spacy_parser, progress=False)
    saved = read_graph_counts(tmp_path / "g")
    ref = counts_from_graph(want)
    assert same_matrix(saved.compounds, ref.compounds) and same_matrix(saved.atoms, ref.atoms)
    assert saved.compounds.sum() == len(want.caption_derivs) and saved.compounds.shape[1] == want.num_predicates
    for seed_vocab in ({}, {"[NP] sits": 0, "zebra": 0}):  # empty, or holding another graph's entries already
        got_c, got_a, ref_c, ref_a = dict(seed_vocab), dict(seed_vocab), dict(seed_vocab), dict(seed_vocab)
        got = template_matrices(saved, build.graph.predicate_templates, build.graph.concept_texts,
                                build.graph.concept_kinds, got_c, got_a)
        expected = image_count_matrices(want, ref_c, ref_a)
        assert list(got_c.items()) == list(ref_c.items()) and list(got_a.items()) == list(ref_a.items())
        for g, w in zip(got, expected):
            assert g.dtype == w.dtype and same_matrix(g, w)


def test_a_graph_saved_without_counts_gives_them_from_its_arrays(tmp_path, spacy_parser):
    graph, _ = build_crg(read_corpus(TOY), spacy_parser, progress=False)
    graph.save(tmp_path / "npz")
    graph.save(tmp_path / "col", columnar=True)
    for where in ("npz", "col"):
        counts = read_graph_counts(tmp_path / where)
        assert isinstance(counts, GraphCounts) and same_matrix(counts.compounds, counts_from_graph(graph).compounds)


@pytest.fixture(scope="module")
def f30k_to_coco(tmp_path_factory, shared_data):
    """The first 1,500 Flickr30K training images and the first 150 COCO test images (8,250 captions)."""
    where = tmp_path_factory.mktemp("mcd_slice")
    train = []
    with open(shared_data / "flickr30k" / "captions.jsonl", encoding="utf-8") as f:
        for line in f:
            if json.loads(line).get("split") == "train":
                train.append(line)
            if len(train) == 1500:
                break
    test = []
    with gzip.open(shared_data / "coco" / "captions.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            if json.loads(line).get("split") == "test":
                test.append(line)
            if len(test) == 150:
                break
    (where / "f30k.jsonl").write_text("".join(train), encoding="utf-8")
    (where / "coco.jsonl").write_text("".join(test), encoding="utf-8")
    return where / "f30k.jsonl", where / "coco.jsonl"


def test_mcd_split_from_partitioned_graphs_and_saved_counts_selects_the_same_images(tmp_path, f30k_to_coco):
    train, candidates = f30k_to_coco
    corpora = MCDCorpora(train, ["train"], None, candidates, ["test"], None)
    config = MCDConfig(num_images=20, num_random=5, seed=3, anneal=AnnealConfig(steps_per_image=4, restarts=2, seed=3))
    today = write_mcd_split(corpora, tmp_path / "today", config,
                            graphs=GraphOptions(progress=False, cache_root=tmp_path / "graph_cache"))
    graphs = {}
    for name, path, split in (("train", train, "train"), ("cand", candidates, "test")):
        build_crg_partitioned(path, ParserSpec("spacy"), tmp_path / name, splits=[split], config=RayConfig(shards=3),
                              num_partitions=2, progress=False, use_ray=False, cache_path=default_cache_path())
        graphs[name] = tmp_path / name
        assert (tmp_path / name / "graph.json").exists() and "counts" in json.loads((tmp_path / name / "graph.json")
                                                                                   .read_text())
    sparse = write_mcd_split(corpora, tmp_path / "sparse", config,
                             graphs=GraphOptions(progress=False, train_graph=graphs["train"],
                                                 candidate_graph=graphs["cand"]))
    assert (tmp_path / "sparse" / "eval_ids.txt").read_text() == (tmp_path / "today" / "eval_ids.txt").read_text()
    assert len((tmp_path / "today" / "eval_ids.txt").read_text().split()) == 20
    for key in ("compound_divergences", "atom_divergences", "max_atom_divergence"):
        assert sparse.report[key] == today.report[key], key
    assert sparse.report["graph_cache_hits"] == ["prebuilt", "prebuilt"]


def test_a_prebuilt_graph_of_another_corpus_or_split_is_refused(tmp_path, f30k_to_coco):
    train, candidates = f30k_to_coco
    build_crg_partitioned(candidates, ParserSpec("spacy"), tmp_path / "cand", config=RayConfig(shards=2),
                          progress=False, use_ray=False, cache_path=default_cache_path())
    corpora = MCDCorpora(train, ["train"], None, candidates, ["test"], None)
    with pytest.raises(ValueError, match="built from .*coco.jsonl, not from .*f30k.jsonl"):
        write_mcd_split(corpora, tmp_path / "x", MCDConfig(num_images=5),
                        graphs=GraphOptions(progress=False, train_graph=tmp_path / "cand",
                                            candidate_graph=tmp_path / "cand"))
    with pytest.raises(ValueError, match="give both --train-graph and --candidate-graph"):
        write_mcd_split(corpora, tmp_path / "y", MCDConfig(num_images=5),
                        graphs=GraphOptions(progress=False, candidate_graph=tmp_path / "cand"))
    graph = load_graph(tmp_path / "cand")
    assert graph.image_splits.names == ["test"]


def test_cli_within_one_corpus_with_a_prebuilt_graph_gives_the_same_split(tmp_path, f30k_to_coco):
    from crg.cli.make_mcd_split import main

    train, _ = f30k_to_coco
    build_crg_partitioned(train, ParserSpec("spacy"), tmp_path / "g", config=RayConfig(shards=2), num_partitions=3,
                          progress=False, use_ray=False, cache_path=default_cache_path())
    base = ["--train", str(train), "--num-images", "25", "--num-random", "4", "--anneal-steps", "3", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "today"), "--graph-cache", str(tmp_path / "cache")]) == 0
    assert main([*base, "--out", str(tmp_path / "sparse"), "--train-graph", str(tmp_path / "g")]) == 0
    for name in ("eval_ids.txt", "train_ids.txt"):
        assert (tmp_path / "sparse" / name).read_text() == (tmp_path / "today" / name).read_text(), name
    assert len((tmp_path / "sparse" / "eval_ids.txt").read_text().split()) == 25
    with pytest.raises(SystemExit, match="--candidate-graph is for candidates from another corpus"):
        main([*base, "--out", str(tmp_path / "x"), "--train-graph", str(tmp_path / "g"),
              "--candidate-graph", str(tmp_path / "g")])
