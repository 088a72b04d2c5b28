"""Programs, batching, and the level-batched recursion against a plain per-pair, per-node recursion."""

from __future__ import annotations

import random

import pytest
import torch
from nltk import Tree

from composer.models.composer.config import composer_config
from composer.models.composer.model import Composer
from composer.models.composer.program import ConceptProgram, ProgramBatch, plan_execution
from crg.extract import extract_concepts
from crg.graph import GraphBuilder

I, R = 4, 7          # images, region slots
Q = 9                # (image, caption) pairs

WORDS = ["dog", "skateboarder", "grass", "man", "frisbee", "woman", "bicycle"]
TEMPLATES = {
    0: ["it is raining", "nobody is here"],
    1: ["a [NN]", "two [NNS]", "[NP] running", "the [NNP] outside"],
    2: ["[NP] on [NP]", "[NP] is riding [NP]", "[S] while [NP] watches"],
    3: ["[NP] throws [NP] to [NP]"],
}


def _fill(template: str, children: list[str]) -> str:
    out, it = [], iter(children)
    for w in template.split():
        out.append(next(it) if w.startswith("[") else w)
    return " ".join(out)


def random_derivations(rng: random.Random, height: int) -> tuple[list[tuple[str, str, list[str]]], str]:
    """A random concept tree of exactly ``height`` as bottom-up derivations; returns (steps, root)."""
    steps: list[tuple[str, str, list[str]]] = []

    def node(h: int) -> str:
        if h == 0:
            return rng.choice(WORDS)
        arity = rng.choice([1, 1, 2, 2, 3]) if h > 1 else rng.choice([0, 1, 1, 2])
        template = rng.choice(TEMPLATES[arity])
        kids = [node(h - 1)] + [node(rng.randrange(h)) for _ in range(arity - 1)] if arity else []
        rng.shuffle(kids)
        text = _fill(template, kids)
        steps.append((text, template, kids))
        return text

    root = node(height)
    return steps, root


def random_programs(seed: int, n: int) -> list[ConceptProgram]:
    rng = random.Random(seed)
    programs = []
    for _ in range(n):
        steps, root = random_derivations(rng, rng.choice([1, 2, 3, 3]))
        programs.append(ConceptProgram.from_derivations(steps, root=root))
    return programs


# ----------------------------------------------------------------------------------------- programs
def test_from_derivations_orders_nodes_by_level_and_dedupes_concepts():
    p = ConceptProgram.from_derivations([
        ("a man", "a [NN]", ["man"]),
        ("a man and a man", "[NP] and [NP]", ["a man", "a man"]),
    ])
    assert p.texts == ("man", "a man", "a man and a man")
    assert p.levels == (0, 1, 2)
    assert p.children == ((), (0,), (1, 1))
    assert p.edges() == [(1, 0), (2, 1)]          # one edge although "a man" fills two placeholders
    assert p.root == 2 and p.height == 2


def test_program_validation_names_the_problem():
    with pytest.raises(ValueError, match="takes 2 arguments"):
        ConceptProgram.from_derivations([("x y", "[NP] on [NP]", ["x"])])
    with pytest.raises(ValueError, match="pass root"):
        ConceptProgram.from_derivations([])
    with pytest.raises(ValueError, match="not below the root"):
        ConceptProgram.from_derivations([("a dog", "a [NN]", ["dog"]), ("the cat", "the [NN]", ["cat"])],
                                        root="the cat")


def test_a_concept_derived_two_ways_keeps_the_first_and_drops_what_only_the_second_used():
    # a caption repeating "in front of a ring", its two parses pruned differently (Table 7)
    p = ConceptProgram.from_derivations([
        ("in front of a ring", "in front of a [NN]", ["ring"]),
        ("a ring", "a [NN]", ["ring"]),
        ("in front of a ring", "in front of [NP]", ["a ring"]),
        ("x in front of a ring", "x [PP]", ["in front of a ring"])])
    assert p.texts == ("ring", "in front of a ring", "x in front of a ring")
    assert p.templates[1] == "in front of a [NN]"
    with pytest.raises(ValueError, match="not below the root"):  # without a duplicate it stays an error
        ConceptProgram.from_derivations([("a ring", "a [NN]", ["ring"]), ("x y", "x [NN]", ["y"])], root="x y")


def test_subprogram_is_the_subtree():
    steps, root = random_derivations(random.Random(3), 3)
    p = ConceptProgram.from_derivations(steps, root=root)
    child = p.children[p.root][0]
    sub = p.subprogram(child)
    assert sub.texts[-1] == p.texts[child]
    assert sub.height == p.levels[child]


GRAPH_CAPTIONS = [
    (0, "(TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) (PP (IN on) (NP (DT the) (NN grass)))))))"),
    (1, "(TOP (NP (NNS Dogs)))"),
    (2, "(TOP (S (NP (PRP It)) (VP (VBZ is) (VP (VBG raining)))))"),
    (1, "(TOP (NP (NP (CD two) (NNS dogs)) (PP (IN on) (NP (DT the) (NN grass)))))"),
]


def _graph():
    b = GraphBuilder(["img0", "img1", "img2"], ["train"] * 3)
    for k, (image, bracketed) in enumerate(GRAPH_CAPTIONS):
        tree = Tree.fromstring(bracketed)
        b.add_caption(image, k, " ".join(tree.leaves()), extract_concepts(tree))
    return b.build()


def test_programs_from_a_concept_graph():
    g = _graph()
    p = ConceptProgram.from_graph(g, 0)
    assert p.texts == ("dogs", "grass", "two dogs", "the grass", "two dogs are running on the grass")
    assert p.templates[2:] == ("two [NNS]", "the [NN]", "[NP] are running on [NP]")
    assert p.children[-1] == (2, 3) and p.levels == (0, 0, 1, 1, 2)
    assert [g.concept_texts[c] for c in p.concept_ids] == list(p.texts)
    one_noun = ConceptProgram.from_graph(g, 1)          # "Dogs." is the primitive itself
    assert one_noun.texts == ("dogs",) and one_noun.templates == (None,) and one_noun.height == 0
    nullary = ConceptProgram.from_graph(g, 2)           # no noun: a 0-ary predicate, level 1
    assert nullary.templates == ("it is raining",) and nullary.children == ((),) and nullary.levels == (1,)


@pytest.fixture(scope="module")
def tokenizer():
    from composer.models.composer.predicate_transformer import TemplateTokenizer

    return TemplateTokenizer.from_config(composer_config("tiny"))


def test_collate_shares_subtrees_templates_and_words(tokenizer):
    g = _graph()
    batch = ProgramBatch.from_graph(g, range(4), tokenizer)
    assert batch.words == ["dogs", "grass"]
    assert len(batch.templates) == len(set(batch.templates)) == 5
    # "two dogs" and "the grass" appear in captions 0 and 3: same sub-trees
    assert batch.node_subtree[0, 2] == batch.node_subtree[3, 2]
    assert batch.node_subtree[0, 3] == batch.node_subtree[3, 3]
    # the one-noun caption's only node is the "dogs" primitive of caption 0
    assert batch.node_subtree[1, 0] == batch.node_subtree[0, 0]
    assert batch.node_mask.sum(1).tolist() == [5, 1, 1, 5]
    assert batch.root.tolist() == [4, 0, 0, 4]
    assert batch.node_is_primitive[1, 0] and batch.node_is_root[1, 0]
    assert batch.edge_mask.sum(1).tolist() == [4, 0, 0, 4]
    assert batch.subtree_level[batch.node_subtree[0]].tolist() == [0, 0, 1, 1, 2]
    assert batch.subtree_children.shape == (batch.num_subtrees, 2)


def test_plan_dedupes_image_subtree_pairs(tokenizer):
    g = _graph()
    batch = ProgramBatch.collate([ConceptProgram.from_graph(g, c) for c in range(4)], tokenizer)
    pair_image = torch.tensor([0, 0, 1, 1, 0])
    pair_caption = torch.tensor([0, 3, 1, 2, 0])
    plan = plan_execution(batch, pair_image, pair_caption, num_images=2)
    expected = {(int(i), int(s)) for i, c in zip(pair_image, pair_caption)
                for s in batch.node_subtree[c][batch.node_mask[c]].tolist()}
    assert len(plan.work_image) == len(expected)
    # children come before parents, and levels are contiguous blocks
    for w in range(len(plan.work_image)):
        kids = plan.work_children[w]
        assert bool((kids[kids >= 0] < w).all())
    levels = batch.subtree_level[plan.work_subtree]
    assert levels.tolist() == sorted(levels.tolist())
    with pytest.raises(ValueError, match="outside"):
        plan_execution(batch, torch.tensor([2]), torch.tensor([0]), num_images=2)


# ------------------------------------------------------------------------- batched vs recursive
def _reference_node(model: Composer, tok, prog: ConceptProgram, node: int, regions, geometry, memo: dict):
    """Plain recursion for one pair and one node: no batching, no padding; ``memo`` is per pair."""
    if node not in memo:
        memo[node] = _reference_compute(model, tok, prog, node, regions, geometry, memo)
    return memo[node]


def _reference_compute(model, tok, prog, node, regions, geometry, memo):
    if prog.templates[node] is None:
        ids = torch.tensor([tok.word_ids(prog.texts[node])])
        words = model.predicate_transformer.embed(ids)                           # (1, S, D)
        ones_w = torch.ones(ids.shape, dtype=torch.bool)
        if not model.primitive_encoder.cross_attention:
            return model.primitive_encoder(words, ones_w)[0]
        visual = model.primitive_encoder.embed_visual(regions[None], geometry[None])
        return model.primitive_encoder(words, ones_w, visual, torch.ones(visual.shape[:2], dtype=torch.bool))[0]
    enc = tok.encode_templates([prog.templates[node]])
    ones_t = torch.ones(enc.ids.shape, dtype=torch.bool)
    states = model.predicate_transformer(enc.ids, ones_t)                         # (1, T, D)
    seq = states.clone()
    for j, child in enumerate(prog.children[node]):
        pos = int(enc.placeholder_positions[0, j])
        child_emb = _reference_node(model, tok, prog, child, regions, geometry, memo)
        seq[0, pos] = model.modulator(states[0, pos], child_emb)
    ones_r = torch.ones((1, regions.shape[0]), dtype=torch.bool)
    visual = model.composition_transformer.encode_visual(regions[None], geometry[None], ones_r)
    return model.composition_transformer(seq, ones_t, visual, ones_r)[0]


@pytest.mark.parametrize("overrides", [
    {},
    {"modulator": "mlp", "primitive_cross_attention": False, "ct_layers": 5,
     "composition": {"visual_selfatt": "every"}},
    {"modulator": "replace", "ct_layers": 1, "pt_layers": 0},
])
def test_level_batched_recursion_equals_plain_recursion(overrides, tokenizer):
    torch.manual_seed(0)
    model = Composer.from_config(composer_config("tiny", **overrides)).double().eval()
    with torch.no_grad():  # make every parameter matter (FiLM starts at a = 1, b = 0)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    programs = random_programs(seed=7, n=6)
    programs.append(ConceptProgram.from_derivations([], root="skateboarder"))           # one-noun caption
    programs.append(ConceptProgram.from_derivations([("it is raining", "it is raining", [])]))  # 0-ary
    batch = ProgramBatch.collate(programs, tokenizer)

    regions = torch.randn(I, R, 11, dtype=torch.float64)
    geometry = torch.rand(I, R, 5, dtype=torch.float64)
    n_real = [7, 3, 1, 5]
    region_mask = torch.arange(R)[None, :] < torch.tensor(n_real)[:, None]
    regions[~region_mask] = 1e3                      # padding must not leak into anything
    gen = torch.Generator().manual_seed(1)
    pair_image = torch.randint(0, I, (Q,), generator=gen)
    pair_caption = torch.randint(0, len(programs), (Q,), generator=gen)
    pair_caption[:3] = torch.tensor([len(programs) - 2, len(programs) - 1, 0])
    pair_image[3], pair_caption[3] = pair_image[4], pair_caption[4]   # a repeated pair

    with torch.no_grad():
        out = model(regions, geometry, region_mask, batch, pair_image, pair_caption)
        D = model.config.text.hidden_size
        assert out.node_embeddings.shape == (Q, batch.node_mask.shape[1], D)
        for q in range(Q):
            i, prog = int(pair_image[q]), programs[int(pair_caption[q])]
            regs, geom = regions[i, :n_real[i]], geometry[i, :n_real[i]]
            assert int(out.node_mask[q].sum()) == prog.num_nodes
            memo: dict = {}
            for n in range(prog.num_nodes):
                ref = _reference_node(model, tokenizer, prog, n, regs, geom, memo)
                torch.testing.assert_close(out.node_embeddings[q, n], ref, rtol=1e-9, atol=1e-9)
                torch.testing.assert_close(out.node_scores[q, n], model.scorer(ref), rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(out.root_scores[q], out.node_scores[q, prog.root])
            assert out.node_is_root[q, prog.root] and int(out.node_is_root[q].sum()) == 1
            assert out.node_is_primitive[q, :prog.num_nodes].tolist() == [t is None for t in prog.templates]
        assert not out.node_mask[~batch.node_mask[pair_caption]].any()


def test_each_template_is_encoded_once_and_the_ct_runs_once_per_level(tokenizer):
    torch.manual_seed(0)
    model = Composer.from_config(composer_config("tiny")).eval()
    programs = random_programs(seed=11, n=5)
    batch = ProgramBatch.collate(programs, tokenizer)
    calls = {"pt": [], "ct": 0, "prim": 0}
    model.predicate_transformer.register_forward_hook(lambda m, a, o: calls["pt"].append(a[0].shape[0]))
    model.composition_transformer.register_forward_hook(lambda m, a, o: calls.__setitem__("ct", calls["ct"] + 1))
    model.primitive_encoder.register_forward_hook(lambda m, a, o: calls.__setitem__("prim", calls["prim"] + 1))
    pair_image = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    pair_caption = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    regions, geometry = torch.randn(3, R, 11), torch.rand(3, R, 5)
    with torch.no_grad():
        out = model(regions, geometry, torch.ones(3, R, dtype=torch.bool), batch, pair_image, pair_caption)
    used = {programs[c].templates[n] for c in pair_caption.tolist() for n in range(programs[c].num_nodes)} - {None}
    assert calls["pt"] == [len(used)]
    height = max(programs[c].height for c in pair_caption.tolist())
    assert calls["ct"] == height and calls["prim"] == 1
    assert out.num_work_items <= int(batch.node_mask[pair_caption].sum())


def test_output_feeds_the_losses(tokenizer):
    from composer.models.composer.losses import MVSAScores, composer_loss

    torch.manual_seed(0)
    model = Composer.from_config(composer_config("tiny")).train()
    programs = random_programs(seed=5, n=3)
    batch = ProgramBatch.collate(programs, tokenizer)
    regions, geometry = torch.randn(2, R, 11), torch.rand(2, R, 5)
    mask = torch.ones(2, R, dtype=torch.bool)
    pos = model(regions, geometry, mask, batch, torch.tensor([0, 1, 0]), torch.tensor([0, 1, 2]))
    neg_img = model(regions, geometry, mask, batch, torch.tensor([1, 0, 1]), torch.tensor([0, 1, 2]))
    concepts = pos.concept_mask()
    mvsa = MVSAScores(positive=pos.node_scores, negative_concept=neg_img.node_scores[..., None] * 0.5,
                      negative_image=neg_img.node_scores[..., None], mask=concepts)
    match = torch.stack([pos.root_scores, neg_img.root_scores], dim=1)
    loss = composer_loss(match, mvsa, pos.edge_scores())
    loss.total.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.scorer.theta.weight.grad.abs().sum() > 0
    assert model.primitive_encoder.layer.attention.self.query.weight.grad.abs().sum() > 0
