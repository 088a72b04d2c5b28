"""Phrase-to-image retrieval on a hand-built CRG and world whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nltk import Tree

from composer.models.composer.config import composer_config
from composer.models.composer.model import Composer
from composer.evaluation.phrase_retrieval import (crg_positives, evaluate_phrase_retrieval, exact_positives, phrase_program,
                                       phrase_recall, sample_phrase_queries)
from composer.models.composer.predicate_transformer import TemplateTokenizer
from composer.models.composer.program import ConceptProgram, ProgramBatch
from composer.models.common.retrieval import score_matrix
from crg.extract import extract_concepts
from crg.graph import GraphBuilder
from features.world.scene import Scene, SceneObject
from features.world.truth import WorldTruth

IMAGES = ["im0", "im1", "im2"]
CAPTIONS = {  # image -> bracketed trees of its captions
    "im0": [("(S (NP (DT a) (JJ red) (NN ball)) (VP (VBZ is) (ADJP (JJ left) (PP (IN of) "
             "(NP (DT a) (JJ blue) (NN cube))))))")],
    "im1": ["(S (NP (EX there)) (VP (VBZ is) (NP (DT a) (JJ green) (NN cone))))"],
    "im2": [("(S (NP (DT a) (JJ blue) (NN cube)) (VP (VBZ is) (ADJP (JJ left) (PP (IN of) "
             "(NP (DT a) (JJ yellow) (NN ring))))))")],
}
# im1 holds a red ball that no caption of im1 mentions: true of im1, outside its CRG denotation
SCENES = {
    "im0": Scene("im0", [SceneObject("ball", "red", "small", "metal", 0.2, 0.5),
                         SceneObject("cube", "blue", "large", "wooden", 0.7, 0.5)]),
    "im1": Scene("im1", [SceneObject("ball", "red", "large", "rubber", 0.8, 0.5),
                         SceneObject("cone", "green", "small", "glass", 0.3, 0.5)]),
    "im2": Scene("im2", [SceneObject("cube", "blue", "small", "metal", 0.2, 0.5),
                         SceneObject("ring", "yellow", "large", "wooden", 0.7, 0.5)]),
}
# phrase -> score on im0, im1, im2
TABLE = {"a red ball": [0.5, 0.9, 0.1], "a blue cube": [0.6, 0.0, 0.8], "a green cone": [0.2, 0.7, 0.1],
         "a yellow ring": [0.7, 0.1, 0.3]}


@pytest.fixture(scope="module")
def graph():
    b = GraphBuilder(IMAGES, ["test"] * len(IMAGES))
    for i, image in enumerate(IMAGES):
        for j, bracketed in enumerate(CAPTIONS[image]):
            root = extract_concepts(Tree.fromstring(bracketed))
            b.add_caption(i, j, root.text, root)
    return b.build()


@pytest.fixture(scope="module")
def tokenizer():
    return TemplateTokenizer.from_config(composer_config("tiny"))


class TableModel:
    """score_pairs reads each pair's phrase text and image number (written into its first feature) off TABLE."""

    training = False

    def __init__(self):
        self.roots: list[str] = []

    def score_pairs(self, regions, geometry, region_mask, programs: ProgramBatch, pair_image, pair_caption):
        image = regions[pair_image, 0, 0].long().tolist()
        texts = [programs.programs[c].texts[programs.programs[c].root] for c in pair_caption.tolist()]
        self.roots.extend(texts)
        return torch.tensor([TABLE[t][i] for t, i in zip(texts, image)])


def numbered_images(n: int, r: int = 4, d: int = 11):
    regions = torch.randn(n, r, d)
    regions[:, 0, 0] = torch.arange(n, dtype=torch.float)  # the image's number, for TableModel
    return regions, torch.rand(n, r, 5), torch.ones(n, r, dtype=torch.bool)


def test_queries_are_the_phrases_rooted_at_themselves(graph):
    q = sample_phrase_queries(graph, IMAGES)
    texts = [graph.concept_texts[c] for c in q.concepts]
    assert sorted(texts) == sorted(["a red ball", "a blue cube", "a green cone", "a blue cube", "a yellow ring"])
    assert [IMAGES[i] for i in q.source_image] == [IMAGES[graph.caption_image[c]] for c in q.captions]
    assert len(q.programs) == 4  # "a blue cube" of im0 and of im2 is one program, scored once
    for k, text in zip(q.program_index, texts):
        prog = q.programs[k]
        assert prog.texts[prog.root] == text and prog.height == 1 and prog.num_nodes == 2
    one = sample_phrase_queries(graph, IMAGES, per_caption=1, seed=3)
    assert one.num_queries == 3  # one per caption; the phrase-less im1 caption gives its single phrase


def test_phrase_program_is_the_sub_tree_of_the_caption(graph):
    c = graph.captions_of_image("im0")[0]
    full = ConceptProgram.from_graph(graph, c)
    sub = phrase_program(graph, c, graph.concept_id("a blue cube"))
    assert sub.texts == ("cube", "a blue cube") and sub.templates == (None, "a blue [NN]")
    assert set(sub.texts) < set(full.texts)
    with pytest.raises(ValueError, match="does not occur"):
        phrase_program(graph, c, graph.concept_id("a yellow ring"))


def test_captions_outside_the_candidates_are_refused(graph):
    with pytest.raises(ValueError, match="not among"):
        sample_phrase_queries(graph, ["im0", "im1"], captions=range(graph.num_captions))
    assert set(sample_phrase_queries(graph, ["im0", "im1"]).source_image) <= {0, 1}  # default: their captions


def test_crg_positives_are_a_subset_of_exact_ones(graph):
    q = sample_phrase_queries(graph, IMAGES)
    crg = crg_positives(graph, q)
    truth = WorldTruth(SCENES)
    ex = exact_positives(truth, graph, q)
    assert ex.exact.all() and ex.crg_outside_truth == 0
    for k, c in enumerate(q.concepts):  # the candidates-only evaluation agrees with the world's own denotation
        assert {IMAGES[i] for i in np.flatnonzero(ex.positives[k])} == truth.denotation(graph.concept_texts[c])
    assert not (crg & ~ex.positives).any()
    by_text = {graph.concept_texts[c]: (crg[k], ex.positives[k]) for k, c in enumerate(q.concepts)}
    assert by_text["a red ball"][0].tolist() == [True, False, False]
    assert by_text["a red ball"][1].tolist() == [True, True, False]  # the uncaptioned red ball of im1
    assert by_text["a blue cube"][0].tolist() == [True, False, True]


def test_exact_positives_fall_back_to_the_crg_outside_the_language(graph, monkeypatch):
    import features.world.truth as world_truth

    q = sample_phrase_queries(graph, IMAGES)
    parse = world_truth.parse_phrase
    monkeypatch.setattr(world_truth, "parse_phrase", lambda text, cfg: None if text == "a green cone" else parse(text, cfg))
    ex = exact_positives(WorldTruth(SCENES), graph, q)
    cone = [k for k, c in enumerate(q.concepts) if graph.concept_texts[c] == "a green cone"]
    assert not ex.exact[cone].any() and ex.exact.sum() == q.num_queries - len(cone)
    assert ex.positives[cone].sum() == 1
    with pytest.raises(ValueError, match="unknown to the exact truth"):
        exact_positives(WorldTruth({"im0": SCENES["im0"]}), graph, q)


def test_recall_single_is_below_crg_multi_below_exact_multi(graph, tokenizer):
    regions, geometry, mask = numbered_images(3)
    model = TableModel()
    truth = WorldTruth(SCENES)
    exact = evaluate_phrase_retrieval(model, regions, geometry, mask, tokenizer, graph, IMAGES, truth=truth)
    crg = evaluate_phrase_retrieval(model, regions, geometry, mask, tokenizer, graph, IMAGES)
    assert set(model.roots) == set(TABLE)  # the model was asked about the phrases themselves
    # by hand: R@1 hits are blue cube (from im2) and green cone; CRG adds blue cube (from im0), since
    # im2 is in its denotation; exact truth adds the red ball, whose best image im1 shows one
    assert exact["single"]["R@1"] == crg["single"]["R@1"] == pytest.approx(100 * 2 / 5)
    assert crg["multi"]["R@1"] == exact["multi_crg"]["R@1"] == pytest.approx(100 * 3 / 5)
    assert exact["multi"]["R@1"] == pytest.approx(100 * 4 / 5)
    assert exact["single"]["R@5"] == exact["multi"]["R@5"] == 100.0
    assert exact["exact_fraction"] == 1.0 and "lower bound" in crg["multi_positives"]
    assert exact["num_queries"] == 5 and exact["num_phrases"] == 4
    assert exact["mean_positives"] > crg["mean_positives"] > 1
    import json
    json.dumps(exact)  # JSON-serialisable


def test_phrase_recall_checks_its_inputs(graph):
    q = sample_phrase_queries(graph, IMAGES)
    with pytest.raises(ValueError, match="distinct phrases"):
        phrase_recall(np.zeros((q.num_queries, 3)), q)
    with pytest.raises(ValueError, match="source image"):
        elsewhere = np.eye(3, dtype=bool)[(q.source_image + 1) % 3]  # (Qp, I): every query misses its own image
        phrase_recall(np.zeros((len(q.programs), 3)), q, elsewhere)


def test_a_phrase_scores_as_it_does_inside_its_sentence(graph, tokenizer):
    """Standalone phrase programs go through score_matrix; their scores must equal the phrase's node
    score when the whole caption is composed (the same sub-tree on the same image)."""
    torch.manual_seed(0)
    model = Composer(composer_config("tiny"), load_pretrained=False).eval()
    regions, geometry, mask = numbered_images(3)
    q = sample_phrase_queries(graph, IMAGES)
    phrase = score_matrix(model, regions, geometry, mask, q.programs, tokenizer).scores        # (U, I)
    for k in range(q.num_queries):
        full = ConceptProgram.from_graph(graph, int(q.captions[k]))
        node = full.concept_ids.index(int(q.concepts[k]))
        out = model(regions, geometry, mask, ProgramBatch.collate([full], tokenizer), torch.arange(3),
                    torch.zeros(3, dtype=torch.long))
        torch.testing.assert_close(torch.from_numpy(phrase[q.program_index[k]]), out.node_scores[:, node],
                                   rtol=1e-4, atol=1e-5)


def test_the_world_truth_meets_the_evaluation_protocol():
    from composer.evaluation.truth import ExactTruth

    assert isinstance(WorldTruth(SCENES), ExactTruth)
