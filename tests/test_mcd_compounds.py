"""Compound definitions of MCD splits (crg/compounds.py): template heads against plain recursion, counts against
per-caption loops, the paper's split unchanged byte for byte, and --compounds on the generated world."""

import json
import os
import random
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from conftest import ROOT
from crg.build import build_crg
from crg.compounds import (
    SEMANTIC, TEMPLATE, TEMPLATE_HEADS, count_matrices, derivation_compounds, head_concepts, head_slots,
    image_count_matrices, semantic_annotations,
)
from crg.corpus import read_corpus
from crg.extract import PRIMITIVE
from crg.graph import KIND_BITS
from crg.mcd import MCDConfig
from crg.mcd_output import GraphOptions, MCDCorpora, write_mcd_split
from crg.preparsed import PreparsedTrees

COLORS = ("red", "blue", "green", "small", "large")
SHAPES = ("cube", "ball", "cone", "ring")
RELATIONS = (("left", "of"), ("on", "top", "of"), ("next", "to"), ("behind",))


def tiny_corpora(out, seed=3, n_train=30, n_cand=24):
    """Train / candidate JSONL corpora of hand-bracketed captions ('a red cube sits left of a blue ball'), their
    union (one corpus) and the trees: no parser needed. The byte-identity test's expected split was made from
    exactly these files by the splitter before compound definitions and the atom bound existed."""
    rng = random.Random(seed)
    trees = {}
    for name, n, split in (("train", n_train, "train"), ("cands", n_cand, "test")):
        lines = []
        for i in range(n):
            caps = []
            for _ in range(3):
                c1, s1, c2, s2 = rng.choice(COLORS), rng.choice(SHAPES), rng.choice(COLORS), rng.choice(SHAPES)
                rel = rng.choice(RELATIONS)
                if rng.random() < 0.3:
                    words, tree = ["a", c1, s1], f"(NP (DT a) (JJ {c1}) (NN {s1}))"
                else:
                    verb = rng.choice(("is", "sits", "lies"))
                    words = ["a", c1, s1, verb, *rel, "a", c2, s2]
                    prep = " ".join(f"(IN {w})" for w in rel)
                    tree = (f"(S (NP (DT a) (JJ {c1}) (NN {s1})) (VP (VBZ {verb}) (PP {prep} (NP (DT a) (JJ {c2}) "
                            f"(NN {s2})))))")
                caps.append(" ".join(words))
                trees[caps[-1]] = tree
            lines.append(json.dumps({"image_id": f"{name[0]}{i}", "split": split, "captions": caps}) + "\n")
        (out / f"{name}.jsonl").write_text("".join(lines))
    (out / "both.jsonl").write_text((out / "train.jsonl").read_text() + (out / "cands.jsonl").read_text())
    (out / "trees.txt").write_text("".join(t + "\n" for t in trees.values()))
    return out


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return tiny_corpora(tmp_path_factory.mktemp("tiny_corpora"))


@pytest.fixture(scope="module")
def graph(corpora):
    g, _ = build_crg(read_corpus(corpora / "train.jsonl"), PreparsedTrees(corpora / "trees.txt"), progress=False)
    return g


# ------------------------------------------------------------------ heads against plain recursion
def test_head_slots_pick_the_modified_noun_the_subject_or_the_last_noun_of_a_compound():
    assert head_slots(["a [NN] [NN] on [NP]", "[NP] left of [NP]", "a small [NN]", "it is sunny"]).tolist() == \
        [1, 0, 0, -1]
    assert head_slots(["[NNS] [NN]", "[NP] while [S]", "two [NNS] and [NP]"]).tolist() == [1, 0, 0]


def _head_by_recursion(graph, concept):
    """Reference: a primitive is its own head, else recurse into the head slot of the first derivation."""
    if graph.concept_kinds[concept] & KIND_BITS[PRIMITIVE]:
        return concept
    derivs = np.flatnonzero(graph.deriv_parent == concept)
    if len(derivs) == 0:
        return -1
    d = int(derivs[0])
    slot = head_slots([graph.predicate_templates[graph.deriv_predicate[d]]])[0]
    children = graph.deriv_children[graph.deriv_child_ptr[d]:graph.deriv_child_ptr[d + 1]]
    return -1 if slot < 0 else _head_by_recursion(graph, int(children[slot]))


def test_head_concepts_equal_plain_recursion(graph):
    fast = head_concepts(graph)
    assert fast.tolist() == [_head_by_recursion(graph, c) for c in range(graph.num_concepts)]
    assert graph.concept_texts[fast[graph.concept_id("a red cube")]] == "cube"


def test_template_heads_write_each_arguments_head_noun(graph):
    heads = set(derivation_compounds(graph, TEMPLATE_HEADS))
    templates = set(derivation_compounds(graph, TEMPLATE))
    assert "[NP:cube] sits left of [NP:ring]" in heads and "a red [NN:cube]" in heads
    assert "[NP] sits left of [NP]" in templates and "a red [NN]" in templates
    assert len(heads) > len(templates)


def _naive_counts(graph, compound_of_derivation):
    """Reference: per image, loop over its captions' composition steps and primitive concepts."""
    comps, atoms = [Counter() for _ in graph.image_ids], [Counter() for _ in graph.image_ids]
    for cap in range(graph.num_captions):
        img = int(graph.caption_image[cap])
        for d in graph.caption_derivs[graph.caption_deriv_ptr[cap]:graph.caption_deriv_ptr[cap + 1]]:
            comps[img][compound_of_derivation[d]] += 1
        for c in graph.caption_concepts[graph.caption_concept_ptr[cap]:graph.caption_concept_ptr[cap + 1]]:
            if graph.concept_kinds[c] & KIND_BITS[PRIMITIVE]:
                atoms[img][graph.concept_texts[c]] += 1
    return comps, atoms


def _as_counters(matrix, index):
    names = {i: t for t, i in index.items()}
    return [Counter({names[j]: v for j, v in zip(row.indices, row.data)}) for row in matrix]


@pytest.mark.parametrize("definition", [TEMPLATE, TEMPLATE_HEADS])
def test_count_matrices_equal_per_caption_loops(graph, definition):
    c_index, a_index = {}, {}
    counts = count_matrices(graph, definition, c_index, a_index)
    comps, atoms = _naive_counts(graph, derivation_compounds(graph, definition))
    assert _as_counters(counts.compounds, c_index) == comps
    assert _as_counters(counts.atoms, a_index) == atoms
    if definition == TEMPLATE:  # the paper's counts, through the function the splitter always used
        old_c, old_a = image_count_matrices(graph, {}, {})
        assert (old_c != counts.compounds).nnz == 0 and (old_a != counts.atoms).nnz == 0


def test_semantic_counts_each_captions_distinct_compounds_once_and_need_logical_forms(graph):
    records = [{"image_id": i, "compounds": [["attr:red|cube", "attr:red|cube"], ["rel:cube|left_of|ball"]],
                "atoms": [["red", "cube"], ["cube", "ball", "left_of"]]} for i in graph.image_ids]
    counts = count_matrices(graph, SEMANTIC, (ci := {}), (ai := {}), semantic_annotations(records))
    assert _as_counters(counts.compounds, ci)[0] == Counter({"attr:red|cube": 1, "rel:cube|left_of|ball": 1})
    assert _as_counters(counts.atoms, ai)[0] == Counter({"cube": 2, "red": 1, "ball": 1, "left_of": 1})
    with pytest.raises(ValueError, match="only the generated world.*template-heads"):
        semantic_annotations([{"image_id": "x", "captions": ["a dog"]}])


# ------------------------------------------------------------------ the paper's split, byte for byte
# Made from tiny_corpora() by the splitter at c4c9f4c (before compound definitions and the atom bound):
# num_images 6, seed 4, targets 0.03 and 0.06.
PAPER_SPLITS = {
    "cross": {"eval": ["c10", "c18", "c20", "c21", "c22", "c23"], "cd_0.030": ["c3", "c4", "c11", "c12", "c13", "c19"],
              "cd_0.060": ["c10", "c18", "c20", "c21", "c22", "c23"], "compound": 0.037475, "atom": 0.019623,
              "random": 0.019957},
    "within": {"eval": ["t12", "t15", "t23", "c7", "c19", "c20"], "cd_0.030": ["t15", "t19", "t22", "t28", "c3", "c9"],
               "cd_0.060": ["t15", "t19", "t22", "t23", "t28", "c9"], "compound": 0.031374, "atom": 0.051671,
               "random": 0.018165},
}


@pytest.mark.parametrize("kind", ["cross", "within"])
def test_the_papers_split_is_unchanged_one_flag_away(corpora, tmp_path, kind):
    graphs = GraphOptions(parser_name="preparsed", parser_model=str(corpora / "trees.txt"),
                          cache_root=tmp_path / "graphs", parse_cache_path=tmp_path / "parse.sqlite", progress=False)
    if kind == "cross":
        which = MCDCorpora(corpora / "train.jsonl", ["train"], candidates=corpora / "cands.jsonl",
                           candidate_splits=["test"])
    else:
        which = MCDCorpora(corpora / "both.jsonl")
    out = write_mcd_split(which, tmp_path / "out", MCDConfig(num_images=6, seed=4, target_cds=(0.03, 0.06),
                                                             max_atom_divergence=None), graphs=graphs)
    expected = PAPER_SPLITS[kind]
    ids = lambda d: (d / "eval_ids.txt").read_text().split()  # noqa: E731
    order = {i: k for k, i in enumerate(json.loads(line)["image_id"] for line in
                                         (corpora / "both.jsonl").read_text().splitlines())}
    assert ids(tmp_path / "out") == sorted(expected["eval"], key=order.get)
    for name in ("cd_0.030", "cd_0.060"):
        assert ids(tmp_path / "out" / "targets" / name) == sorted(expected[name], key=order.get)
    report = out.report
    assert (report["compound_divergence"], report["atom_divergence"], report["random_compound_divergence"]) == \
        (expected["compound"], expected["atom"], expected["random"])
    assert report["compounds"] == TEMPLATE and report["max_atom_divergence"] is None and "anneal" not in report
    assert set(report["compound_divergences"]) == {TEMPLATE, TEMPLATE_HEADS}
    assert report["compound_divergences"][TEMPLATE] == report["compound_divergence"]
    # the default bounds the atom divergence and optimises: another split, within the bound
    bounded = write_mcd_split(which, tmp_path / "bounded", MCDConfig(num_images=6, seed=4), graphs=graphs).report
    assert bounded["meets_atom_bound"] and bounded["atom_divergence"] <= bounded["max_atom_divergence"]
    assert bounded["max_atom_divergence"] == max(0.02, bounded["random_atom_divergence"])


# ------------------------------------------------------------------ --compounds on the generated world
def run_cli(*args, env=None):
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "make_mcd_split.py"), *map(str, args), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, env=env)


def test_world_splits_under_semantic_and_template_head_compounds(tmp_path, corpora, monkeypatch):
    from features.catalog import world_dir
    from features.world.compositional import CompositionalConfig
    from features.world.generate import GenerateConfig, generate_world

    env = {**os.environ, "GC_DATA_DIR": str(tmp_path / "data"), "GC_CACHE_DIR": str(tmp_path / "cache")}
    monkeypatch.setenv("GC_DATA_DIR", env["GC_DATA_DIR"])
    world = world_dir(200)  # where --data world looks: made here, without renders
    generate_world(world, GenerateConfig(num_images=200, seed=0, render=0, workers=1,
                                         compositional=CompositionalConfig()), progress=False)
    candidate_splits = ["val", "test_iid", "test_systematic", "test_productivity"]
    run = run_cli("--data", "world", "--world-images", "200", "--train-split", "train", "--candidate-splits",
                  ",".join(candidate_splits), "--num-images", "20", "--num-random", "10", "--compounds", SEMANTIC,
                  "--out", tmp_path / SEMANTIC, env=env)
    assert run.returncode == 0, run.stderr
    assert f"compounds optimised: {SEMANTIC}" in run.stdout and "atom bound: 0.0200 (met)" in run.stdout
    reports = {SEMANTIC: json.loads((tmp_path / SEMANTIC / "report.json").read_text())}
    graphs = GraphOptions(parser_name="world", cache_root=tmp_path / "cache" / "graphs",
                          parse_cache_path=tmp_path / "parse.sqlite", progress=False)
    reports[TEMPLATE_HEADS] = write_mcd_split(
        MCDCorpora(world / "captions.jsonl", ["train"], candidate_splits=candidate_splits), tmp_path / TEMPLATE_HEADS,
        MCDConfig(num_images=20, num_random=10), graphs=graphs, compounds=TEMPLATE_HEADS).report
    for definition, report in reports.items():
        assert report["compounds"] == definition and report["meets_atom_bound"]
        assert set(report["compound_divergences"]) == {SEMANTIC, TEMPLATE, TEMPLATE_HEADS}
        assert report["compound_divergence"] == report["compound_divergences"][definition]
        assert report["compound_divergence"] > report["random_compound_divergences"][definition]
    # each split is the most divergent under its own definition
    semantic_cd = {name: report["compound_divergences"][SEMANTIC] for name, report in reports.items()}
    assert semantic_cd[SEMANTIC] > semantic_cd[TEMPLATE_HEADS]
    # semantic compounds exist only where captions carry logical forms
    with pytest.raises(ValueError, match="only the generated world.*template-heads"):
        write_mcd_split(MCDCorpora(corpora / "both.jsonl", ["train"], candidate_splits=["test"]), tmp_path / "plain",
                        MCDConfig(num_images=2), compounds=SEMANTIC,
                        graphs=GraphOptions(parser_name="preparsed", parser_model=str(corpora / "trees.txt"),
                                            cache_root=tmp_path / "graphs", parse_cache_path=tmp_path / "parse.sqlite",
                                            progress=False))
