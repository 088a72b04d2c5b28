"""The CPU fast paths of COMPOSER and the flat model against the padded reference they replace.

Every fast path must give the reference's numbers: the packed layers (real tokens only, ``[CLS]`` only in the
last layer), the Composition Transformer's packed forward, the per-image keys shared across levels, whole
models with ``fast_path`` on and off (outputs and gradients), 50 optimiser steps (same losses to 1e-5), and
the whole-set scoring of :func:`composer.models.common.retrieval.score_matrix` against its pair-by-pair loop. Sizes are the
``tiny`` preset's, every one different from every other, so that a transposed axis cannot pass.
"""

from __future__ import annotations

import pytest
import torch

from composer.models.composer.config import composer_config
from composer.models.composer.losses import OrderScores, composer_loss
from composer.models.composer.attention import TransformerLayer
from composer.models.composer.model import Composer
from composer.models.composer.composition_transformer import CompositionTransformer, pack_tokens
from composer.models.composer.program import ConceptProgram, ProgramBatch
from composer.models.flat.model import FlatCrossTransformer
from composer.models.common.retrieval import score_matrix, score_matrix_pairwise
from test_composer_program import random_programs

B, T, D = 5, 7, 24        # items, padded tokens, text width (tiny)
I, R, DR, DV = 3, 6, 11, 20  # images, region slots, region features, visual width (tiny)
LENGTHS = [6, 4, 1, 7, 3]


@pytest.fixture(autouse=True)
def one_thread():
    """These tensors are tiny: with two OpenMP threads on a busy 2-core machine each op waits on the other
    thread (measured: the 50-step test 10 s on one thread, 290 s on two under load 14)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _pad_mask(lengths: list[int], width: int) -> torch.Tensor:
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def _grads(out: torch.Tensor, weights: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad((out * weights).sum(), inputs, allow_unused=True, retain_graph=True)


def _assert_same_grads(ref: tuple, fast: tuple) -> None:
    for g_ref, g_fast in zip(ref, fast):
        if g_ref is None or g_fast is None:
            assert g_ref is None and g_fast is None
            continue
        torch.testing.assert_close(g_fast, g_ref, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------- layers
def test_packed_first_token_matches_the_padded_layer_at_position_0():
    torch.manual_seed(0)
    layer = TransformerLayer(D, 3, 40, dropout=0.0).train()
    x = torch.randn(B, T, D, requires_grad=True)
    packed = pack_tokens(x, _pad_mask(LENGTHS, T))
    reference = layer(x, packed.mask)[:, 0]                                          # (B, D)
    fast = layer.forward_packed_first(packed.tokens, packed.where, packed.mask, packed.first)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(reference)
    inputs = [x, *layer.parameters()]
    _assert_same_grads(_grads(reference, w, inputs), _grads(fast, w, inputs))


@pytest.mark.parametrize("shared_images", [False, True])
def test_packed_cross_attention_matches_the_padded_layer_at_real_tokens(shared_images):
    torch.manual_seed(0)
    layer = TransformerLayer(D, 3, 40, encoder_size=DV, attention_size=18, dropout=0.0).train()
    x = torch.randn(B, T, D, requires_grad=True)
    mask = _pad_mask(LENGTHS, T)
    n_enc = I if shared_images else B
    enc = torch.randn(n_enc, R, DV, requires_grad=True)
    enc_mask = _pad_mask([6, 2, 4, 1, 5][:n_enc], R)
    index = torch.tensor([2, 0, 1, 1, 0]) if shared_images else None
    reference = layer(x, encoder_states=enc, encoder_mask=enc_mask, encoder_index=index)[mask]  # (N, D)
    packed = pack_tokens(x, mask)
    fast = layer.forward_packed_cross(packed.tokens, packed.where, mask, enc, enc_mask, index)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)
    # keys and values projected once by the caller give the same
    given = layer.forward_packed_cross(packed.tokens, packed.where, mask, None, enc_mask, index,
                                       encoder_kv=layer.encoder_keys(enc))
    torch.testing.assert_close(given, fast, rtol=1e-6, atol=1e-6)
    w = torch.randn_like(reference)
    inputs = [x, enc, *layer.parameters()]
    _assert_same_grads(_grads(reference, w, inputs), _grads(fast, w, inputs))


@pytest.mark.parametrize("keys", [5, 16, 21, 130])
def test_explicit_attention_matches_torchs_at_any_key_count(keys):
    """The packed layers' attention (scores padded to 16 key slots on CPU when shorter; torch's kernels past 128)
    against the reference layers' ``scaled_dot_product_attention``, values and gradients, masked keys included."""
    from composer.models.composer.attention import _Attention, softmax_key_length

    torch.manual_seed(0)
    att = _Attention(D, D, 18, 3, dropout=0.0, eps=1e-12)
    q = torch.randn(B, 3, T, 6, requires_grad=True)
    k = torch.randn(B, 3, keys, 6, requires_grad=True)
    v = torch.randn(B, 3, keys, 6, requires_grad=True)
    key_mask = _pad_mask([keys, 1, max(1, keys - 3), 2, keys], keys)
    reference, fast = att.attend(q, k, v, key_mask), att.attend_explicit(q, k, v, key_mask)   # (B, T, 18)
    assert fast.shape == reference.shape
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-6)
    w = torch.randn_like(reference)
    _assert_same_grads(_grads(reference, w, [q, k, v]), _grads(fast, w, [q, k, v]))
    assert softmax_key_length(torch.device("cpu"), keys) == max(keys, 16)
    assert softmax_key_length(torch.device("meta"), keys) == keys


def test_fused_projections_are_the_separate_ones():
    torch.manual_seed(0)
    layer = TransformerLayer(D, 3, 40, encoder_size=D, attention_size=18, dropout=0.0)
    x = torch.randn(B, D)
    att = layer.attention.self
    torch.testing.assert_close(layer.attention.fused_qkv(x), torch.cat([att.query(x), att.key(x), att.value(x)], -1))
    torch.testing.assert_close(layer.attention.fused_qkv(x, "kv"), torch.cat([att.key(x), att.value(x)], -1))


def test_pack_tokens_needs_a_real_first_token():
    with pytest.raises(ValueError, match="first token"):
        pack_tokens(torch.zeros(2, 3, 4), torch.tensor([[True, True, False], [False, True, False]]))


# ----------------------------------------------------------------------------- the CT
@pytest.mark.parametrize("layers,selfatt", [(1, "first"), (3, "first"), (5, "first"), (5, "every")])
@pytest.mark.parametrize("shared_images", [False, True])
def test_packed_composition_transformer_matches_the_padded_one(layers, selfatt, shared_images):
    torch.manual_seed(0)
    ct = CompositionTransformer(composer_config("tiny", ct_layers=layers,
                                                composition={"visual_selfatt": selfatt})).train()
    text = torch.randn(B, T, D, requires_grad=True)
    tmask = _pad_mask(LENGTHS, T)
    regions = torch.randn(I, R, DR, requires_grad=True)
    vmask = _pad_mask([6, 2, 4], R)
    visual = ct.encode_visual(regions, torch.rand(I, R, 5), vmask)
    img = torch.tensor([2, 0, 1, 1, 0])
    if shared_images:
        args = dict(visual=visual, visual_mask=vmask, item_image=img)
    else:
        args = dict(visual=None if visual is None else visual[img], visual_mask=vmask[img])
    reference = ct(text, tmask, **args)                                              # (B, D)
    fast = ct(pack_tokens(text, tmask), None, **args)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)
    if shared_images and layers > 1:  # the first CrossAtt's keys over the images, projected once by the caller
        given = ct(pack_tokens(text, tmask), None, **args, visual_kv=ct.visual_keys(visual))
        torch.testing.assert_close(given, fast, rtol=1e-6, atol=1e-6)
    w = torch.randn_like(reference)
    inputs = [text, regions, *ct.parameters()]
    _assert_same_grads(_grads(reference, w, inputs), _grads(fast, w, inputs))


# ----------------------------------------------------------------------------- whole models
@pytest.fixture(scope="module")
def tokenizer():
    from composer.models.composer.predicate_transformer import TemplateTokenizer

    return TemplateTokenizer.from_config(composer_config("tiny"))


def _inputs(seed: int, n_images: int = 4, n_slots: int = 7):
    gen = torch.Generator().manual_seed(seed)
    regions = torch.randn(n_images, n_slots, DR, generator=gen)
    geometry = torch.rand(n_images, n_slots, 5, generator=gen)
    n_real = torch.randint(1, n_slots + 1, (n_images,), generator=gen)
    mask = torch.arange(n_slots)[None, :] < n_real[:, None]
    regions[~mask] = 1e3                              # padding must not leak into anything
    return regions, geometry, mask


def _perturbed(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():  # make every parameter matter (FiLM starts at a = 1, b = 0; zero biases)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _pair(model_cls, overrides: dict, seed: int = 0):
    torch.manual_seed(seed)
    ref = _perturbed(model_cls.from_config(composer_config("tiny", **overrides), load_pretrained=False))
    fast = model_cls.from_config(composer_config("tiny", **overrides), load_pretrained=False)
    fast.load_state_dict(ref.state_dict())
    ref.fast_path, fast.fast_path = False, True
    return ref, fast


VARIANTS = [
    {},
    {"modulator": "mlp", "primitive_cross_attention": False, "ct_layers": 5,
     "composition": {"visual_selfatt": "every"}},
    {"modulator": "replace", "ct_layers": 1, "pt_layers": 0},
]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_composer_fast_path_gives_the_reference_outputs_and_gradients(overrides, tokenizer):
    ref, fast = _pair(Composer, overrides)
    programs = random_programs(seed=3, n=7)
    programs.append(ConceptProgram.from_derivations([], root="skateboarder"))           # one-noun caption
    programs.append(ConceptProgram.from_derivations([("it is raining", "it is raining", [])]))  # 0-ary
    batch = ProgramBatch.collate(programs, tokenizer)
    regions, geometry, mask = _inputs(1)
    gen = torch.Generator().manual_seed(2)
    pair_image = torch.randint(0, 4, (12,), generator=gen)
    pair_caption = torch.randint(0, len(programs), (12,), generator=gen)
    pair_caption[:2] = torch.tensor([len(programs) - 2, len(programs) - 1])
    outs = [m(regions, geometry, mask, batch, pair_image, pair_caption) for m in (ref, fast)]
    torch.testing.assert_close(outs[1].node_embeddings, outs[0].node_embeddings, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[1].node_scores, outs[0].node_scores, rtol=1e-5, atol=1e-5)
    assert torch.equal(outs[1].node_mask, outs[0].node_mask)
    w = torch.randn_like(outs[0].node_scores)
    for m, out in zip((ref, fast), outs):
        (out.node_scores * w).sum().backward()
    for (name, p_ref), p_fast in zip(ref.named_parameters(), fast.parameters()):
        assert (p_ref.grad is None) == (p_fast.grad is None), name
        if p_ref.grad is not None:
            torch.testing.assert_close(p_fast.grad, p_ref.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("overrides", VARIANTS)
def test_composer_fast_path_on_captions_without_primitives(overrides, tokenizer):
    """0-ary concepts only: level 1 has no children to modulate and no level 0 exists."""
    ref, fast = _pair(Composer, overrides)
    programs = [ConceptProgram.from_derivations([(t, t, [])]) for t in ("it is raining", "nobody is here")]
    batch = ProgramBatch.collate(programs, tokenizer)
    regions, geometry, mask = _inputs(3)
    pair_image, pair_caption = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 1, 0])
    outs = [m(regions, geometry, mask, batch, pair_image, pair_caption) for m in (ref, fast)]
    torch.testing.assert_close(outs[1].node_scores, outs[0].node_scores, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(outs[0].node_scores)
    for out in outs:
        (out.node_scores * w).sum().backward()
    for (name, p_ref), p_fast in zip(ref.named_parameters(), fast.parameters()):
        assert (p_ref.grad is None) == (p_fast.grad is None), name
        if p_ref.grad is not None:
            torch.testing.assert_close(p_fast.grad, p_ref.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_flat_fast_path_gives_the_reference_scores_and_gradients(tokenizer):
    ref, fast = _pair(FlatCrossTransformer, {})
    sentences = [p.texts[p.root] for p in random_programs(seed=4, n=6)]
    enc = tokenizer.encode_sentences(sentences)
    regions, geometry, mask = _inputs(5)
    pair_image = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0])
    pair_caption = torch.tensor([0, 1, 2, 3, 4, 5, 0, 0, 5])
    outs = [m(regions, geometry, mask, enc.ids, enc.mask, pair_image, pair_caption) for m in (ref, fast)]
    torch.testing.assert_close(outs[1].embeddings, outs[0].embeddings, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(outs[0].scores)
    for out in outs:
        (out.scores * w).sum().backward()
    for p_ref, p_fast in zip(ref.parameters(), fast.parameters()):
        torch.testing.assert_close(p_fast.grad, p_ref.grad, rtol=1e-4, atol=1e-5)


def test_fifty_training_steps_give_the_reference_losses(tokenizer):
    """COMPOSER's three losses, Adam, 50 steps on fixed random batches: the fast path's losses are the
    reference's to 1e-5 (float32, as training runs)."""
    ref, fast = _pair(Composer, {})
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in (ref, fast)]
    programs = random_programs(seed=9, n=16)
    losses: list[list[float]] = [[], []]
    for step in range(50):
        gen = torch.Generator().manual_seed(100 + step)
        caps = torch.randperm(len(programs), generator=gen)[:4]                       # 4 positives
        batch = ProgramBatch.collate([programs[int(c)] for c in caps], tokenizer)
        regions, geometry, mask = _inputs(200 + step, n_images=5)
        pos_img = torch.arange(4)
        neg_cap = (torch.arange(4) + 1) % 4
        pair_image = torch.stack([pos_img, pos_img, torch.full((4,), 4)], 1)          # (4, 3)
        pair_caption = torch.stack([torch.arange(4), neg_cap, torch.arange(4)], 1)    # (4, 3)
        for k, (model, opt) in enumerate(zip((ref, fast), optimizers)):
            opt.zero_grad(set_to_none=True)
            out = model(regions, geometry, mask, batch, pair_image.reshape(-1), pair_caption.reshape(-1))
            e, edges = out.edge_parent.shape[1], out.edge_scores()
            order = OrderScores(edges.parent.view(4, 3, e)[:, 0], edges.child.view(4, 3, e)[:, 0],
                                edges.mask.view(4, 3, e)[:, 0])                      # the positives' edges
            loss = composer_loss(out.root_scores.view(4, 3), None, order).total
            loss.backward()
            opt.step()
            losses[k].append(loss.item())
    assert len(set(round(x, 3) for x in losses[0])) > 10      # the losses move: the comparison means something
    diffs = [abs(a - b) for a, b in zip(*losses)]
    assert max(diffs) < 1e-5, max(diffs)


# ----------------------------------------------------------------------------- evaluation
@pytest.mark.parametrize("model_cls", [Composer, FlatCrossTransformer])
@pytest.mark.parametrize("max_pairs", [4096, 13, 5])
def test_whole_set_scoring_gives_the_pairwise_reference_scores(model_cls, max_pairs, tokenizer):
    """``score_matrix`` through the model's ``score_all`` (captions together, a few images at a time, each image's
    and caption's own work once) against the pair-by-pair loop on the padded reference path; chunks of 4096
    (one chunk), 13 (several images per chunk) and 5 pairs (fewer than the captions: captions chunked too)."""
    ref, fast = _pair(model_cls, {})
    ref.eval(), fast.eval()
    programs = random_programs(seed=21, n=8)
    programs.append(ConceptProgram.from_derivations([], root="dog"))
    regions, geometry, mask = _inputs(22, n_images=6)
    expected = score_matrix_pairwise(ref, regions, geometry, mask, programs, tokenizer, max_pairs=max_pairs)
    calls = []
    got = fast.score_all(regions, geometry, mask, programs, tokenizer, max_pairs=max_pairs,
                         on_chunk=lambda: calls.append(1))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    res = score_matrix(fast, regions, geometry, mask, programs, tokenizer, max_pairs=max_pairs)
    torch.testing.assert_close(torch.from_numpy(res.scores), expected, rtol=1e-5, atol=1e-5)
    per_call = min(len(programs), max_pairs) * max(1, max_pairs // min(len(programs), max_pairs))
    assert len(calls) >= 6 * len(programs) / per_call     # every call within max_pairs pairs
    assert not torch.isclose(expected, expected[:, :1]).all()   # the images are told apart: the test can fail
