"""NegCLIP as IL-CLIP's paper trains it (issue 36): the running pool of image representations, its nearest
neighbours as image negatives, word-swap text negatives, and the registered ``negclip`` model."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from composer.models import registry
from composer.models.clip.iterated_learning import clip_contrastive_loss, il_config
from composer.models.clip.model import clip_config
from composer.models.clip.module import ClipModule, negclip_text_swaps
from composer.models.clip.negatives import ImagePool
from composer.models.common.retrieval_module import OptimConfig
from composer.models.composer.program import ConceptProgram, ProgramBatch
from composer.training.data import TrainBatch
from composer.training.recipes import RecipeOverrides, named_recipe

torch.set_num_threads(1)


def _naive_neighbours(pool_ids, pool_emb, queries, query_ids, k, exclude):
    """Brute force: cosine to every pool entry, skipping the query's own image and the excluded ones."""
    out = []
    for q, qid in zip(queries, query_ids):
        sims = [(float(F.cosine_similarity(q, e, dim=0)), i) for i, e in zip(pool_ids, pool_emb)
                if i != qid and i not in exclude]
        out.append([i for _, i in sorted(sims, reverse=True)[:k]])
    return out


def test_pool_is_a_fifo_of_distinct_images_holding_the_newest_embedding():
    pool = ImagePool(size=5)
    g = torch.Generator().manual_seed(0)
    first = torch.randn(3, 4, generator=g)
    pool.push(first, ["a", "b", "c"])
    pool.push(torch.randn(2, 4, generator=g), ["d", "e"])
    assert pool.image_ids == ["a", "b", "c", "d", "e"]
    newer_b = torch.randn(1, 4, generator=g)
    pool.push(torch.cat([newer_b, torch.randn(1, 4, generator=g)]), ["b", "f"])   # "b" seen again, "a" oldest out
    assert pool.image_ids == ["c", "d", "e", "b", "f"]
    assert torch.allclose(pool.embeddings[3], F.normalize(newer_b[0], dim=0))      # the newest b, unit norm
    assert torch.allclose(pool.embeddings[0], F.normalize(first[2], dim=0))
    with pytest.raises(ValueError, match="distinct"):
        pool.push(torch.randn(2, 4), ["x", "x"])


def test_pool_neighbours_match_brute_force_and_never_return_the_own_or_batch_images():
    g = torch.Generator().manual_seed(1)
    pool = ImagePool(size=40)
    ids = [f"im{k}" for k in range(30)]
    emb = torch.randn(30, 7, generator=g)
    pool.push(emb, ids)
    queries = torch.cat([emb[[2, 5]] + 0.01 * torch.randn(2, 7, generator=g), torch.randn(3, 7, generator=g)])
    query_ids = ["im2", "im5", "im9", "new1", "im2"]                  # two captions of im2; one image not pooled
    exclude = ["im2", "im5", "im9", "new1", "im11"]                   # the batch's images
    got = pool.neighbours(queries, query_ids, 3, exclude=exclude)
    assert got.image_ids == _naive_neighbours(ids, emb, queries, query_ids, 3, set(exclude))
    assert got.valid.all()
    for row, qid in zip(got.image_ids, query_ids):
        assert qid not in row and not set(row) & set(exclude)
    for b in range(5):                                                # embeddings are the pooled ones
        for j, i in enumerate(got.image_ids[b]):
            assert torch.allclose(got.embeddings[b, j], F.normalize(emb[ids.index(i)], dim=0))
    # too few candidates: the rest invalid; an empty pool: none
    small = ImagePool(size=4)
    small.push(emb[:2], ["im0", "im1"])
    few = small.neighbours(queries[:1], ["im0"], 3)
    assert few.valid.tolist() == [[True, False, False]] and few.image_ids == [["im1", None, None]]
    assert not ImagePool(3).neighbours(queries, query_ids, 2).valid.any()


def test_pool_state_round_trips():
    pool = ImagePool(size=3)
    pool.push(torch.randn(4, 5)[:3], ["x", "y", "z"])
    other = ImagePool(size=1)
    other.load_state_dict(pool.state_dict())
    assert other.image_ids == pool.image_ids and torch.equal(other.embeddings, pool.embeddings) and other.size == 3


def test_loss_with_pool_images_is_the_naive_cross_entropy():
    g = torch.Generator().manual_seed(2)
    img, txt = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    near = torch.randn(4, 2, 6, generator=g)
    valid = torch.tensor([[True, True], [True, False], [False, False], [True, True]])
    scale = torch.tensor(2.5)
    out = clip_contrastive_loss(img, txt, scale, hard_images=near, hard_images_valid=valid)
    i, t, n = F.normalize(img, dim=-1), F.normalize(txt, dim=-1), F.normalize(near, dim=-1)
    per_image = scale * i @ t.T
    i2t = F.cross_entropy(per_image, torch.arange(4))                 # images -> texts: unchanged
    t2i = 0.0
    for b in range(4):                                                # each caption: the batch's images + its own neighbours
        logits = [scale * (t[b] @ i[j]) for j in range(4)] + [scale * (t[b] @ n[b, k]) for k in range(2) if valid[b, k]]
        t2i = t2i - torch.log_softmax(torch.stack(logits), 0)[b]
    assert torch.allclose(out.loss, 0.5 * (i2t + t2i / 4), atol=1e-5)


def _program(sentence: str, words: list[str]) -> ConceptProgram:
    """A one-predicate program: the sentence over its ``words`` (the primitives a swap prefers)."""
    template = " ".join("[NN]" if w in words else w for w in sentence.split())
    return ConceptProgram.from_derivations([(sentence, template, [w for w in sentence.split() if w in words])])


def _batch(tokenizer, sentences, image_of, seed=0, image_ids=None) -> TrainBatch:
    """B captions, each its own positive; ``image_of[b]``: the image slot of caption b."""
    g = torch.Generator().manual_seed(seed)
    n_img = max(image_of) + 1
    progs = [_program(s, [w for w in s.split() if w not in ("a", "of", "left", "the", "and")]) for s in sentences]
    b = len(sentences)
    return TrainBatch(torch.randn(n_img, 5, 11, generator=g), torch.rand(n_img, 5, 5, generator=g),
                      torch.ones(n_img, 5, dtype=torch.bool), ProgramBatch.collate(progs, tokenizer),
                      torch.tensor([[i, i] for i in image_of]), torch.tensor([[c, (c + 1) % b] for c in range(b)]),
                      1, image_ids=tuple(image_ids or (f"img{k}" for k in range(n_img))))


SENTENCES = ["a red cube left of a blue ball", "a ball and a cube", "a cube and a ball", "two green cones",
             "a small cylinder behind a large sphere", "a yellow ball"]


def _module(kind="negclip", **il) -> ClipModule:
    il_cfg = il_config("small", t_warm=2, t_distill=1, t_interact=2, generations=1, t_extend=1, lr_warmup_steps=1,
                       image_pool_size=8, **il)
    if kind == "negclip":
        il_cfg = registry.resolve(registry.get("negclip").step_schedule)(
            "small", t_warm=2, t_distill=1, t_interact=2, generations=1, t_extend=1, lr_warmup_steps=1,
            image_pool_size=8, **il)
    return ClipModule(kind, clip_config("tiny"), il_cfg, OptimConfig(lr=1e-3))


def test_text_swaps_never_equal_the_positive_nor_another_caption_of_its_image():
    m = _module()
    # captions 1 and 2 show image 0 and are each other's word swap: that swap is no negative
    batch = _batch(m.tokenizer, SENTENCES, [0, 0, 0, 1, 2, 3])
    for step in range(30):
        swaps = negclip_text_swaps(batch, list(range(6)), [0, 0, 0, 1, 2, 3], np.random.default_rng([step]))
        for s, w in zip(SENTENCES, swaps):
            assert w is None or (w != s and w.lower() != s.lower())
        assert swaps[1] is None and swaps[2] is None                  # "a cube and a ball" is true of image 0
        assert all(swaps[k] is not None for k in (0, 3, 4, 5))       # every other caption has its swap


def test_negclip_registers_trains_with_both_negatives_and_fills_its_pool():
    spec = registry.get("negclip")
    assert spec.family == "clip" and "negclip" in registry.names()
    recipe = named_recipe("negclip", "world")
    assert recipe.il.negclip and recipe.il.text_swaps and recipe.il.pool_negatives == 1
    assert not named_recipe("clip", "world").il.negclip             # CLIP's recipe is as it was
    assert named_recipe("il_clip", "world", RecipeOverrides(il={"negclip": True})).il.negclip  # IL-NegCLIP
    m = _module()
    assert m.model.codebook is None and m.image_pool is not None and m.kind == "negclip" and m.il.negclip
    assert spec.build_model(clip_config("tiny")).kind == "negclip"
    opt = m.make_optimizer()
    seen = []
    for step, image_ids in enumerate((["p", "q", "r", "s"], ["t", "u", "v", "w"], ["p", "x", "y", "z"])):
        batch = _batch(m.tokenizer, SENTENCES, [0, 0, 0, 1, 2, 3], seed=step, image_ids=image_ids)
        before = len(m.image_pool)
        loss = m.step_loss(batch, m.phase_at(step), step)
        opt.zero_grad(set_to_none=True)
        loss.total.backward()
        opt.step()
        assert torch.isfinite(loss.total)
        seen.append((before, len(m.image_pool)))
    assert seen == [(0, 4), (4, 8), (8, 8)]                           # FIFO of size 8; "p" refreshed
    assert m.image_pool.image_ids[-4:] == ["p", "x", "y", "z"]


def test_pool_negatives_change_the_loss_only_when_the_pool_has_images():
    m = _module()
    batch = _batch(m.tokenizer, SENTENCES, [0, 0, 0, 1, 2, 3], image_ids=["a", "b", "c", "d"])
    torch.manual_seed(0)
    empty = m.contrastive(m.model, batch, 0, pool=ImagePool(8)).loss
    plain = m.contrastive(m.model, batch, 0, pool=None).loss
    assert torch.allclose(empty, plain)                               # an empty pool adds nothing
    pool = ImagePool(8)
    pool.push(torch.randn(3, m.model_cfg.embed_dim), ["e", "f", "g"])
    with_pool = m.contrastive(m.model, batch, 0, pool=pool).loss
    assert with_pool > plain                                          # more negatives: a larger cross-entropy
    assert pool.image_ids == ["e", "f", "g", "a", "b", "c", "d"]     # and the batch joined the pool
    nameless = TrainBatch(*[getattr(batch, f) for f in ("regions", "geometry", "region_mask", "programs",
                                                          "pair_image", "pair_caption", "num_caption_negatives")])
    with pytest.raises(ValueError, match="image ids"):
        m.contrastive(m.model, nameless, 0, pool=pool)


def test_clip_without_negclip_is_unchanged():
    """The default CLIP loss equals the plain in-batch InfoNCE: NegCLIP's options change nothing while off."""
    m = _module("clip")
    assert m.image_pool is None and not m.il.text_swaps
    batch = _batch(m.tokenizer, SENTENCES, [0, 1, 2, 3, 4, 5], image_ids=[f"i{k}" for k in range(6)])
    out = m.contrastive(m.model, batch, 0, pool=None)
    img = m.model.image_features(batch.regions, batch.geometry, batch.region_mask)[0]
    from composer.models.clip.module import _sentences

    txt = m.model.text_features(*m.model.tokenize(_sentences(batch, range(6))))[0]
    assert torch.allclose(out.loss, clip_contrastive_loss(img, txt, m.model.scale()).loss, atol=1e-6)


def _steps(m, opt, batches, steps):
    for step in steps:
        loss = m.step_loss(batches[step], m.phase_at(step), step)
        opt.zero_grad(set_to_none=True)
        loss.total.backward()
        opt.step()


def test_the_pool_travels_in_checkpoints_so_a_resumed_run_is_exact():
    tok = _module().tokenizer
    # six batches over a sliding window of images: the pool holds earlier ones, so neighbours are found
    batches = [_batch(tok, SENTENCES, [0, 0, 0, 1, 2, 3], seed=k, image_ids=[f"im{k + j}" for j in range(4)])
               for k in range(6)]
    full = _module()
    _steps(full, full.make_optimizer(), batches, range(6))

    def resumed(restore_pool: bool):
        first = _module()
        opt = first.make_optimizer()
        _steps(first, opt, batches, range(3))
        ckpt = {}
        first.on_save_checkpoint(ckpt)
        assert ckpt["negclip_image_pool"]["image_ids"] == first.image_pool.image_ids and len(first.image_pool) == 6
        second = _module()
        second.load_state_dict(first.state_dict())
        opt2 = second.make_optimizer()
        opt2.load_state_dict(opt.state_dict())
        if restore_pool:
            second.on_load_checkpoint(ckpt)
        _steps(second, opt2, batches, range(3, 6))
        return second

    again = resumed(True)
    assert all(torch.equal(v, full.state_dict()[k]) for k, v in again.state_dict().items())
    assert again.image_pool.image_ids == full.image_pool.image_ids
    lost = resumed(False)                                              # without the pool the run differs
    assert not all(torch.equal(v, full.state_dict()[k]) for k, v in lost.state_dict().items())


def test_a_long_running_pool_keeps_matching_brute_force():
    """Many pushes (the id table is rebuilt on the way): neighbours and contents stay those of a naive FIFO."""
    g = torch.Generator().manual_seed(5)
    pool, fifo = ImagePool(size=6), []
    for step in range(40):
        ids = [f"im{(step * 3 + j) % 50}" for j in range(3)]              # 50 images, back now and then
        emb = torch.randn(3, 4, generator=g)
        queries = torch.randn(3, 4, generator=g)
        if fifo:
            got = pool.neighbours(queries, ids, 2, exclude=ids)
            assert got.image_ids == _naive_neighbours([i for i, _ in fifo], [e for _, e in fifo], queries, ids, 2,
                                                      set(ids))
        pool.push(emb, ids)
        fifo = [(i, e) for i, e in fifo if i not in ids] + list(zip(ids, emb))
        fifo = fifo[-6:]
        assert pool.image_ids == [i for i, _ in fifo]
    assert len(pool._codes) <= 4 * 6 + 2 * 12                          # the table was rebuilt, not grown
