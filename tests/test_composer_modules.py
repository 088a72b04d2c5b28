"""Shapes and masks of each COMPOSER part on the tiny config (all sizes different), configs, presets."""

from __future__ import annotations

import pytest
import torch

from composer.models.composer.attention import CoAttentionLayer, TransformerLayer, VisualEmbedding
from composer.models.composer.composition_transformer import AlignmentScorer, CompositionTransformer
from composer.models.composer.config import ComposerConfig, composer_config
from composer.models.composer.film import Modulator, film_modulate
from composer.models.flat.model import FlatCrossTransformer
from composer.models.composer.model import Composer
from composer.models.composer.predicate_transformer import PLACEHOLDER_TYPES, PredicateTransformer, TemplateTokenizer, placeholder_token
from composer.models.composer.primitive_encoder import PrimitiveEncoder
from composer.models.composer.program import ConceptProgram, ProgramBatch
from crg.extract import CONCEPT_LABELS, PRIMITIVE_TAGS

B, T, R = 5, 6, 7          # batch, tokens, regions
D, DV = 24, 20             # tiny text / visual widths
DR = 11                    # tiny region feature size


@pytest.fixture(scope="module")
def cfg() -> ComposerConfig:
    return composer_config("tiny")


@pytest.fixture(scope="module")
def tok(cfg) -> TemplateTokenizer:
    return TemplateTokenizer.from_config(cfg)


def _pad_mask(lengths: list[int], width: int) -> torch.Tensor:
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


# ------------------------------------------------------------------------------------ attention
def test_transformer_layer_self_attention_ignores_padding():
    torch.manual_seed(0)
    layer = TransformerLayer(D, 3, 40, dropout=0.0).eval()
    x = torch.randn(B, T, D)
    mask = _pad_mask([6, 4, 1, 5, 3], T)
    out = layer(x, mask)
    assert out.shape == (B, T, D)
    garbage = torch.where(mask[..., None], x, torch.full_like(x, 1e4))
    torch.testing.assert_close(layer(garbage, mask)[mask], out[mask])
    torch.testing.assert_close(layer(x[1:2, :4], mask[1:2, :4])[0], out[1, :4])


@pytest.mark.parametrize("train", [False, True])
def test_packed_self_attention_matches_the_padded_layer(train):
    """The fast path (real tokens only) against the plain padded layer: same states and same gradients."""
    torch.manual_seed(0)
    layer = TransformerLayer(D, 3, 40, dropout=0.0).train(train)
    x = torch.randn(B, T, D, requires_grad=True)
    mask = _pad_mask([6, 4, 1, 5, 3], T)
    where = mask.flatten().nonzero()[:, 0]
    reference = layer(x, mask)[mask]                                           # (N, D)
    packed = layer.forward_packed(x.flatten(0, 1)[where], where, mask)         # (N, D)
    torch.testing.assert_close(packed, reference, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(reference)
    grads = [torch.autograd.grad((out * weights).sum(), [x, *layer.parameters()]) for out in (reference, packed)]
    for g_ref, g_packed in zip(*grads):
        torch.testing.assert_close(g_packed, g_ref, rtol=1e-4, atol=1e-5)


def test_transformer_layer_becomes_cross_attention_with_encoder_states():
    torch.manual_seed(0)
    layer = TransformerLayer(D, 2, 40, encoder_size=DV, attention_size=18, dropout=0.0).eval()
    x, enc = torch.randn(B, T, D), torch.randn(B, R, DV)
    enc_mask = _pad_mask([7, 2, 5, 1, 3], R)
    out = layer(x, encoder_states=enc, encoder_mask=enc_mask)
    assert out.shape == (B, T, D)
    assert layer.attention.self.key.weight.shape == (18, DV)
    garbage = torch.where(enc_mask[..., None], enc, torch.full_like(enc, -1e4))
    torch.testing.assert_close(layer(x, encoder_states=garbage, encoder_mask=enc_mask), out)


def test_coattention_exchanges_both_streams_and_respects_masks():
    torch.manual_seed(0)
    co = CoAttentionLayer(D, DV, 18, 3, text_intermediate_size=40, visual_intermediate_size=52).eval()
    t, v = torch.randn(B, T, D), torch.randn(B, R, DV)
    tm, vm = _pad_mask([6, 2, 3, 4, 1], T), _pad_mask([1, 7, 3, 5, 2], R)
    out = co(t, tm, v, vm)
    assert out.text.shape == (B, T, D) and out.visual.shape == (B, R, DV)
    t2 = torch.where(tm[..., None], t, torch.full_like(t, 50.0))
    v2 = torch.where(vm[..., None], v, torch.full_like(v, -50.0))
    out2 = co(t2, tm, v2, vm)
    torch.testing.assert_close(out2.text[tm], out.text[tm])
    torch.testing.assert_close(out2.visual[vm], out.visual[vm])
    # changing the image changes the text stream (and vice versa)
    assert not torch.allclose(co(t, tm, v + 1, vm).text, out.text)
    assert not torch.allclose(co(t + 1, tm, v, vm).visual, out.visual)


def test_coattention_without_visual_half_and_with_per_image_keys():
    torch.manual_seed(0)
    full = CoAttentionLayer(D, DV, 18, 3, text_intermediate_size=40, visual_intermediate_size=52).eval()
    text_only = CoAttentionLayer(D, DV, 18, 3, text_intermediate_size=40, visual_intermediate_size=52,
                                 visual_output=False).eval()
    assert text_only.visual is None and not any(k.startswith("visual.") for k in text_only.state_dict())
    text_only.load_state_dict({k: v for k, v in full.state_dict().items() if k.startswith("text.")})
    t, tm = torch.randn(B, T, D), _pad_mask([6, 2, 3, 4, 1], T)
    images, image_mask = torch.randn(3, R, DV), _pad_mask([7, 2, 5], R)
    item_image = torch.tensor([2, 0, 0, 1, 2])
    out = full(t, tm, images[item_image], image_mask[item_image])
    indexed = full(t, tm, images, image_mask, visual_index=item_image)    # keys projected once per image
    torch.testing.assert_close(indexed.text, out.text)
    torch.testing.assert_close(indexed.visual, out.visual)
    half = text_only(t, tm, images, image_mask, visual_index=item_image)
    assert half.visual is None
    torch.testing.assert_close(half.text, out.text)


def test_visual_embedding_checks_sizes():
    emb = VisualEmbedding(DR, 5, DV)
    assert emb(torch.randn(3, R, DR), torch.rand(3, R, 5)).shape == (3, R, DV)
    with pytest.raises(ValueError, match="region_dim=11"):
        emb(torch.randn(3, R, 12), torch.rand(3, R, 5))


# ---------------------------------------------------------------------------- predicate side
def test_placeholders_map_to_distinct_unused_entries(tok):
    assert set(PLACEHOLDER_TYPES) == set(CONCEPT_LABELS) | set(PRIMITIVE_TAGS)
    ids = [tok.placeholder_ids[k] for k in PLACEHOLDER_TYPES]
    assert len(set(ids)) == len(PLACEHOLDER_TYPES)
    assert tok.tokenizer.convert_ids_to_tokens(ids) == [f"[unused{i}]" for i in range(len(PLACEHOLDER_TYPES))]
    assert placeholder_token("SBAR") == "[unused2]"
    assert len(tok.tokenizer) == 30522  # the vocabulary keeps its size


def test_template_encoding_records_positions_order_and_types(tok):
    enc = tok.encode_templates(["[NP] throws [NP] to [NN]", "skateboarder on [S]", "it is raining"])
    P, Tt = enc.ids.shape
    assert enc.mask.shape == (P, Tt) and enc.placeholder_positions.shape == (3, 3)
    assert enc.ids[:, 0].tolist() == [tok.cls_id] * 3
    first = enc.ids[0, enc.mask[0]].tolist()
    assert first == [tok.cls_id, 1, *tok.word_ids("throws"), 1, *tok.word_ids("to"), 8, tok.sep_id]
    assert enc.placeholder_positions[0].tolist() == [1, 3, 5]
    assert enc.placeholder_types[0].tolist() == [0, 0, PLACEHOLDER_TYPES.index("NN")]
    n1 = len(tok.word_ids("skateboarder")) + len(tok.word_ids("on")) + 1  # "skateboarder" is several pieces
    assert enc.placeholder_positions[1, 0] == n1 and enc.placeholder_mask[1].tolist() == [True, False, False]
    assert enc.placeholder_slot[0, [1, 3, 5]].tolist() == [0, 1, 2]
    assert int((enc.placeholder_slot[2] >= 0).sum()) == 0 and not enc.placeholder_mask[2].any()
    with pytest.raises(ValueError, match="unknown placeholder"):
        tok.encode_templates(["[VP] and [NP]"])


def test_predicate_transformer_shapes_and_padding(cfg, tok):
    torch.manual_seed(0)
    pt = PredicateTransformer.from_config(cfg).eval()
    assert len(pt.encoder.layer) == cfg.pt_layers
    enc = tok.encode_templates(["a [NN]", "[NP] is riding [NP] down [NP] at night"])
    out = pt(enc.ids, enc.mask)
    assert out.shape == (2, enc.ids.shape[1], D)
    alone = tok.encode_templates(["a [NN]"])
    torch.testing.assert_close(pt(alone.ids, alone.mask)[0], out[0, :alone.ids.shape[1]])
    assert not out[~enc.mask].any()  # padding rows are zeros, not leftovers
    # the padded reference: embeddings, then every layer over all slots
    x = pt.embeddings(enc.ids)
    for layer in pt.encoder.layer:
        x = layer(x, enc.mask)
    torch.testing.assert_close(out[enc.mask], x[enc.mask], rtol=1e-5, atol=1e-5)


def test_offline_preset_loads_the_first_layers_of_the_minilm():
    from safetensors.torch import load_file

    cfg = composer_config("offline", pt_layers=4)
    pt = PredicateTransformer.from_config(cfg)
    ckpt = load_file(f"{cfg.text_model}/model.safetensors")
    prefix = "" if "embeddings.word_embeddings.weight" in ckpt else "bert."
    for name in ("embeddings.word_embeddings.weight", "embeddings.LayerNorm.bias",
                 "encoder.layer.0.attention.self.query.weight", "encoder.layer.3.output.dense.weight"):
        torch.testing.assert_close(pt.state_dict()[name], ckpt[prefix + name], rtol=0, atol=0)
    assert len(pt.encoder.layer) == 4 and cfg.text.hidden_size == 384
    with pytest.raises(ValueError, match="does not match"):
        PredicateTransformer.from_config(composer_config("offline", text={"intermediate_size": 1000}))


# --------------------------------------------------------------------------- primitives, FiLM
def test_primitive_encoder_grounds_in_the_image_and_ignores_padding(cfg):
    torch.manual_seed(0)
    enc = PrimitiveEncoder(cfg).eval()
    words = torch.randn(B, 3, D)
    word_mask = _pad_mask([3, 1, 2, 3, 1], 3)
    regions, geometry = torch.randn(B, R, DR), torch.rand(B, R, 5)
    vmask = _pad_mask([7, 4, 1, 2, 6], R)
    visual = enc.embed_visual(regions, geometry)
    assert visual.shape == (B, R, D)
    out = enc(words, word_mask, visual, vmask)
    assert out.shape == (B, D)
    noisy_words = torch.where(word_mask[..., None], words, torch.full_like(words, 99.0))
    noisy_regions = torch.where(vmask[..., None], regions, torch.full_like(regions, -99.0))
    torch.testing.assert_close(enc(noisy_words, word_mask, enc.embed_visual(noisy_regions, geometry), vmask), out)
    other = enc(words, word_mask, enc.embed_visual(regions + 1, geometry), vmask)
    assert not torch.allclose(other, out)
    # per-image form: the regions of 3 images, each pair reading its own
    img = torch.tensor([2, 0, 1, 1, 0])
    per_image = enc.embed_visual(regions[:3], geometry[:3])               # (3, R, D)
    torch.testing.assert_close(enc(words, word_mask, per_image, vmask[:3], item_image=img),
                               enc(words, word_mask, per_image[img], vmask[:3][img]))


def test_primitive_encoder_without_crossatt_is_the_mean_of_sub_words():
    enc = PrimitiveEncoder(composer_config("tiny", primitive_cross_attention=False))
    assert sum(p.numel() for p in enc.parameters()) == 0
    words = torch.randn(B, 3, D)
    mask = _pad_mask([3, 1, 2, 3, 2], 3)
    expected = torch.stack([words[b, :int(mask[b].sum())].mean(0) for b in range(B)])
    torch.testing.assert_close(enc(words, mask), expected)


def test_film_modulate_is_affine():
    c, a, b = torch.randn(4, D), torch.randn(4, D), torch.randn(4, D)
    torch.testing.assert_close(film_modulate(c, a, b), a * c + b)


def test_each_modulator_computes_its_formula():
    """Table 4's variants against their definitions, written out with the modules' own weights."""
    torch.manual_seed(0)
    ph, child = torch.randn(B, 3, D), torch.randn(B, 3, D)
    gelu = torch.nn.functional.gelu

    def mlp(m, x):
        return m.fc2(gelu(m.fc1(x)))

    film = Modulator(composer_config("tiny"))
    with torch.no_grad():  # leave the a = 1, b = 0 initialisation so that the scale and bias matter
        film.scale.fc2.weight.normal_()
        film.bias.fc2.weight.normal_()
    a, b = mlp(film.scale, ph), mlp(film.bias, ph)                       # (B, 3, D) each
    torch.testing.assert_close(film(ph, child), mlp(film.project, a * child + b))
    mlp_mod = Modulator(composer_config("tiny", modulator="mlp"))
    torch.testing.assert_close(mlp_mod(ph, child), mlp(mlp_mod.mlp, torch.cat([ph, child], -1)))  # (B, 3, 2D) in
    replace = Modulator(composer_config("tiny", modulator="replace"))
    torch.testing.assert_close(replace(ph, child), child)
    assert list(replace.parameters()) == []
    fresh = Modulator(composer_config("tiny"))
    # at initialisation a = 1 and b = 0: the child passes through the projection MLP only
    torch.testing.assert_close(fresh(ph, child), mlp(fresh.project, child))


# ------------------------------------------------------------------------ composition transformer
@pytest.mark.parametrize("layers,selfatt,counts", [
    (1, "first", (1, 0, 0)), (3, "first", (2, 1, 1)), (5, "first", (3, 1, 2)), (5, "every", (3, 2, 2))])
def test_composition_transformer_layer_schedule(layers, selfatt, counts):
    cfg = composer_config("tiny", ct_layers=layers, composition={"visual_selfatt": selfatt})
    ct = CompositionTransformer(cfg)
    assert (len(ct.text_layers), len(ct.visual_layers), len(ct.coattention)) == counts
    # only the last CrossAtt block lacks a visual half: nothing reads the visual stream after it
    assert [co.visual is not None for co in ct.coattention] == [True] * (counts[2] - 1) + [False] * (counts[2] > 0)


@pytest.mark.parametrize("layers,selfatt", [(3, "first"), (5, "first"), (5, "every")])
def test_every_ct_parameter_gets_a_gradient_and_old_checkpoints_load(layers, selfatt):
    """DDP (without find_unused_parameters) fails on parameters that take no part in the loss."""
    torch.manual_seed(0)
    cfg = composer_config("tiny", ct_layers=layers, composition={"visual_selfatt": selfatt})
    ct = CompositionTransformer(cfg)
    text, tmask = torch.randn(B, T, D), _pad_mask([6, 3, 2, 5, 4], T)
    vmask = _pad_mask([7, 2, 4], R)
    visual = ct.encode_visual(torch.randn(3, R, DR), torch.rand(3, R, 5), vmask)
    ct(text, tmask, visual, vmask, item_image=torch.tensor([0, 1, 2, 1, 0])).sum().backward()
    assert [n for n, p in ct.named_parameters() if p.grad is None] == []
    # a checkpoint from before the last block lost its visual half still loads, strictly
    old = dict(ct.state_dict())
    last = f"coattention.{len(ct.coattention) - 1}."
    old.update({last + "visual.output.dense.weight": torch.zeros(DV, 52), last + "visual.output.dense.bias":
                torch.zeros(DV)})
    CompositionTransformer(cfg).load_state_dict(old)


def test_composition_transformer_shapes_masks_and_image_dependence(cfg):
    torch.manual_seed(0)
    ct = CompositionTransformer(cfg).eval()
    text, tmask = torch.randn(B, T, D), _pad_mask([6, 3, 2, 5, 4], T)
    regions, geometry = torch.randn(3, R, DR), torch.rand(3, R, 5)
    vmask = _pad_mask([7, 2, 4], R)
    visual = ct.encode_visual(regions, geometry, vmask)
    assert visual.shape == (3, R, DV)
    img = torch.tensor([0, 1, 2, 1, 0])
    out = ct(text, tmask, visual[img], vmask[img])
    assert out.shape == (B, D)
    text2 = torch.where(tmask[..., None], text, torch.full_like(text, 7.0))
    regions2 = torch.where(vmask[..., None], regions, torch.full_like(regions, 1e3))
    visual2 = ct.encode_visual(regions2, geometry, vmask)
    torch.testing.assert_close(ct(text2, tmask, visual2[img], vmask[img]), out)
    moved = torch.tensor([1, 2, 0, 0, 1])
    changed = ct(text, tmask, visual[moved], vmask[moved])
    assert not torch.isclose(changed, out).all(dim=1).any()  # every item reads its own image
    torch.testing.assert_close(ct(text, tmask, visual, vmask, item_image=img), out)  # per-image form
    one = CompositionTransformer(composer_config("tiny", ct_layers=1)).eval()
    assert one.encode_visual(regions, geometry, vmask) is None and one(text, tmask).shape == (B, D)
    assert AlignmentScorer(D)(torch.randn(B, 3, D)).shape == (B, 3)


# --------------------------------------------------------------------------- model variants
def _small_batch(tok):
    programs = [
        ConceptProgram.from_derivations([("two dogs", "two [NNS]", ["dogs"]), ("the grass", "the [NN]", ["grass"]),
                                         ("two dogs run on the grass", "[NP] run on [NP]", ["two dogs", "the grass"])]),
        ConceptProgram.from_derivations([], root="skateboarder"),
        ConceptProgram.from_derivations([("a man", "a [NN]", ["man"]), ("a man sleeps", "[NP] sleeps", ["a man"])]),
    ]
    return ProgramBatch.collate(programs, tok)


@pytest.mark.parametrize("overrides", [
    {"modulator": "mlp"}, {"modulator": "replace"}, {"primitive_cross_attention": False}])
def test_ablation_variants_run_and_differ_from_the_default(overrides, tok):
    batch = _small_batch(tok)
    regions, geometry = torch.randn(2, R, DR), torch.rand(2, R, 5)
    mask = _pad_mask([7, 4], R)
    pairs = (torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 2, 2]))
    torch.manual_seed(0)
    base = Composer.from_config(composer_config("tiny")).eval()
    torch.manual_seed(0)
    variant = Composer.from_config(composer_config("tiny", **overrides)).eval()
    with torch.no_grad():
        a = base(regions, geometry, mask, batch, *pairs)
        b = variant(regions, geometry, mask, batch, *pairs)
    assert b.node_embeddings.shape == a.node_embeddings.shape == (4, 5, D)
    assert b.root_scores.shape == (4,)
    assert not torch.allclose(a.root_scores, b.root_scores)


def test_forward_validates_visual_inputs(tok):
    model = Composer.from_config(composer_config("tiny")).eval()
    batch = _small_batch(tok)
    regions, geometry = torch.randn(2, R, DR), torch.rand(2, R, 5)
    empty = _pad_mask([7, 0], R)
    with pytest.raises(ValueError, match=r"images \[1\] have no real region"):
        model(regions, geometry, empty, batch, torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="must be bool"):
        model(regions, geometry, empty.long(), batch, torch.tensor([0]), torch.tensor([0]))


# ------------------------------------------------------------------------------ flat baseline
def test_flat_cross_transformer_scores_pairs_and_ignores_padding(cfg, tok):
    torch.manual_seed(0)
    flat = FlatCrossTransformer.from_config(cfg).eval()
    enc = tok.encode_sentences(["two dogs run on the grass", "a skateboarder", "a man sleeps on a bench"])
    regions, geometry = torch.randn(2, R, DR), torch.rand(2, R, 5)
    mask = _pad_mask([7, 3], R)
    pair_image, pair_caption = torch.tensor([0, 1, 1, 0, 0]), torch.tensor([0, 0, 2, 1, 2])
    out = flat(regions, geometry, mask, enc.ids, enc.mask, pair_image, pair_caption)
    assert out.scores.shape == (5,) and out.embeddings.shape == (5, D)
    q = 2  # alone, unpadded
    n_tok, n_reg = int(enc.mask[2].sum()), 3
    single = flat(regions[1:2, :n_reg], geometry[1:2, :n_reg], mask[1:2, :n_reg], enc.ids[2:3, :n_tok],
                  enc.mask[2:3, :n_tok], torch.tensor([0]), torch.tensor([0]))
    torch.testing.assert_close(single.scores[0], out.scores[q])
    assert len(flat.text_encoder.encoder.layer) == cfg.pt_layers


# ------------------------------------------------------------------------------------ configs
def test_config_validation_names_the_fix():
    with pytest.raises(ValueError, match="must be odd"):
        composer_config("tiny", ct_layers=4)
    with pytest.raises(ValueError, match="choose one of"):
        composer_config("tiny", modulator="gate")
    with pytest.raises(ValueError, match="multiple of the head count"):
        composer_config("tiny", composition={"cross_heads": 4})
    with pytest.raises(ValueError, match="no field 'hidden'"):
        composer_config("tiny", text={"hidden": 3})
    with pytest.raises(ValueError, match="available"):
        composer_config("base")


def test_presets_follow_the_paper_where_they_can():
    paper = composer_config("paper")
    assert (paper.pt_layers, paper.ct_layers, paper.text.hidden_size, paper.text.num_heads) == (6, 5, 768, 12)
    assert (paper.composition.cross_hidden_size, paper.composition.cross_heads) == (1024, 8)
    assert (paper.visual.region_dim, paper.visual.geometry_dim) == (2048, 5)
    assert (paper.loss.mvsa_margin, paper.loss.order_margin, paper.loss.mvsa) == (0.8, 0.2, "hinge")
    assert paper.text_model == paper.tokenizer == "bert-base-uncased"
    offline = composer_config("offline")
    assert offline.text.hidden_size == 384 and offline.composition.cross_hidden_size % 8 == 0
    tiny = composer_config("tiny")
    sizes = [tiny.text.hidden_size, tiny.text.intermediate_size, tiny.composition.visual_hidden_size,
             tiny.composition.cross_hidden_size, tiny.composition.intermediate_size,
             tiny.composition.visual_intermediate_size, tiny.primitive.intermediate_size,
             tiny.modulation.hidden_size, tiny.visual.region_dim]
    assert len(set(sizes)) == len(sizes)


def test_paper_parameter_count_on_the_meta_device():
    with torch.device("meta"):
        model = Composer.from_config(composer_config("paper"), load_pretrained=False)
    total = sum(p.numel() for p in model.parameters())
    # docs/composer.md: Table 6 reports 157M for PT = 6, CT = 5 (ours without the last CrossAtt's unused visual half)
    assert total == 132_132_864


def test_initializer_range_sets_the_std_of_every_random_init_module():
    for std in (0.02, 0.1):
        model = Composer.from_config(composer_config("tiny", text={"initializer_range": std}))
        for name, module in [("CT", model.composition_transformer), ("PT", model.predicate_transformer)]:
            w = torch.cat([p.detach().flatten() for n, p in module.named_parameters()
                           if n.endswith("weight") and p.dim() == 2])
            assert abs(w.std().item() - std) < 0.25 * std, (name, std, w.std().item())
    with pytest.raises(ValueError, match="initializer_range"):
        composer_config("tiny", text={"initializer_range": 0.0})
