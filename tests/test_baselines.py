"""Baselines: VSE's encoders and hinge loss, the flat model's MVSA pairs, their Lightning steps, and
the train_baseline.py entry point."""

import json
import random
from dataclasses import replace
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from kill_switch import KillAt, Killed

from composer.models.vse.model import VSE, vse_config, vse_hinge_loss
from composer.cli import train_baseline
from composer.models.composer.config import composer_config
from composer.models import registry
from composer.models.composer.program import ConceptProgram
from composer.models.flat.module import FlatModule, flat_mvsa_plan
from composer.models.vse.module import VSEModule
from composer.models.common.retrieval_module import OptimConfig
from composer.training.data import CompositionDataModule, DataConfig

REGION_DIM = 11


def one_node(text: str) -> ConceptProgram:
    return ConceptProgram(texts=(text,), templates=(None,), children=((),), levels=(0,), root=0)


def programs_of(*texts: str):
    """A stand-in ProgramBatch: the baselines read only ``programs[c].texts[root]``."""
    return SimpleNamespace(programs=[one_node(t) for t in texts])


def visual(n_img=5, n_reg=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    regions = torch.randn(n_img, n_reg, REGION_DIM, generator=g)
    geometry = torch.rand(n_img, n_reg, 5, generator=g)
    mask = torch.ones(n_img, n_reg, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    return regions, geometry, mask


@pytest.fixture(scope="module")
def vse():
    torch.manual_seed(0)
    return VSE.from_config(vse_config("tiny", visual={"region_dim": REGION_DIM})).eval()


# ---------------------------------------------------------------------- VSE model
def test_vse_encoders_give_unit_vectors_of_the_joint_size(vse):
    regions, geometry, mask = visual()
    x = vse.encode_images(regions, geometry, mask)
    y = vse.encode_sentences(["a red cube", "two blue spheres left of a cube", "a cone"])
    assert x.shape == (5, 20) and y.shape == (3, 20)
    assert torch.allclose(x.norm(dim=-1), torch.ones(5)) and torch.allclose(y.norm(dim=-1), torch.ones(3))


@pytest.mark.parametrize("pool", ["mean", "max"])
def test_padded_regions_do_not_change_the_image_embedding(pool):
    torch.manual_seed(0)
    model = VSE.from_config(vse_config("tiny", visual={"region_dim": REGION_DIM}, image_pool=pool)).eval()
    regions, geometry, mask = visual()
    before = model.encode_images(regions, geometry, mask)
    regions[~mask] = 100.0
    geometry[~mask] = 3.0
    assert torch.allclose(model.encode_images(regions, geometry, mask), before, atol=1e-6)
    regions[1, 0] += 1.0  # a real region does count
    assert not torch.allclose(model.encode_images(regions, geometry, mask)[1], before[1])


def test_score_pairs_equals_cross_scoring_the_encodings(vse):
    regions, geometry, mask = visual()
    texts = ("a red cube", "two blue spheres left of a cube", "a cone", "a large green cylinder")
    full = vse.encode_sentences(list(texts)) @ vse.encode_images(regions, geometry, mask).T   # (C, I)
    g = torch.Generator().manual_seed(1)
    pair_image = torch.randint(0, 5, (17,), generator=g)      # repeats and a missing image on purpose
    pair_caption = torch.randint(0, 4, (17,), generator=g)
    scores = vse.score_pairs(regions, geometry, mask, programs_of(*texts), pair_image, pair_caption)
    assert scores.shape == (17,)
    assert torch.allclose(scores, full[pair_caption, pair_image], atol=1e-5)


def test_vse_rejects_a_region_size_it_was_not_built_for(vse):
    regions, geometry, mask = visual()
    with pytest.raises(ValueError, match="region_dim"):
        vse.encode_images(regions[..., :7], geometry, mask)


# ---------------------------------------------------------------------- hinge loss
def naive_hinge(scores, target, margin, hardest):
    total = 0.0
    for c in range(scores.shape[0]):
        t = int(target[c])
        pos = float(scores[c, t])
        img = [max(0.0, margin - pos + float(scores[c, i])) for i in range(scores.shape[1]) if i != t]
        cap = [max(0.0, margin - pos + float(scores[d, t])) for d in range(scores.shape[0]) if int(target[d]) != t]
        reduce = (lambda v: max(v, default=0.0)) if hardest else sum
        total += reduce(img) + reduce(cap)
    return total / scores.shape[0]


def test_hinge_loss_by_hand():
    s = torch.tensor([[0.5, 0.4, 0.45], [0.1, 0.9, 0.8]])  # 2 captions x 3 images
    t = torch.tensor([0, 1])
    # caption 0: images 1, 2 violate by 0.1, 0.15; caption 1: image 2 by 0.1; no caption-side violation
    assert vse_hinge_loss(s, t, margin=0.2).item() == pytest.approx((0.25 + 0.1) / 2)
    assert vse_hinge_loss(s, t, margin=0.2, negatives="hardest").item() == pytest.approx((0.15 + 0.1) / 2)
    assert vse_hinge_loss(s, t, margin=0.0).item() == pytest.approx(0.0)


@pytest.mark.parametrize("hardest", [False, True])
def test_hinge_loss_matches_a_naive_loop_and_skips_captions_of_the_same_image(hardest):
    g = torch.Generator().manual_seed(2)
    scores = torch.rand(9, 6, generator=g)
    target = torch.tensor([0, 1, 1, 2, 3, 3, 3, 4, 5])  # several captions share an image
    got = vse_hinge_loss(scores, target, margin=0.3, negatives="hardest" if hardest else "sum")
    assert got.item() == pytest.approx(naive_hinge(scores, target, 0.3, hardest), rel=1e-5)
    # raising a same-image caption's score on that image must not add loss to its sibling
    bumped = scores.clone()
    bumped[2, 1] = 5.0
    only_own = vse_hinge_loss(bumped, target, margin=0.3, negatives="hardest" if hardest else "sum")
    assert only_own.item() == pytest.approx(naive_hinge(bumped, target, 0.3, hardest), rel=1e-5)


# ---------------------------------------------------------------------- flat MVSA pairs
def test_flat_mvsa_plan_pairs_phrases_with_their_negatives():
    red_cube = ConceptProgram(texts=("red", "cube", "red cube", "a red cube is on the left"),
                              templates=(None, None, "[JJ] [NN]", "[NP] is on the left"),
                              children=((), (), (0, 1), (2,)), levels=(0, 0, 1, 2), root=3)
    cone = one_node("cone")
    programs = [red_cube, cone, ConceptProgram(texts=("ball", "a ball"), templates=(None, "a [NN]"),
                                               children=((), (0,)), levels=(0, 1), root=1)]
    pair_image = torch.tensor([[0, 0, 0, 1], [1, 1, 1, 2]])   # 2 caption negatives, 1 image negative
    pair_caption = torch.tensor([[0, 2, 1, 0], [1, 0, 2, 1]])
    plan = flat_mvsa_plan(programs, pair_image, pair_caption, 2, 3, random.Random(0))
    n = plan.num_pairs
    # row 0: its only phrase is "red cube" (primitives and the sentence are not phrases)
    assert plan.mask.tolist() == [[True, False, False], [False, False, False]]
    assert plan.texts[plan.pair_text[plan.positive[0, 0]]] == "red cube"
    assert plan.pair_image[plan.positive[0, 0]] == 0
    neg_img = plan.negative_image[0, 0, 0]
    assert plan.pair_image[neg_img] == 1 and plan.texts[plan.pair_text[neg_img]] == "red cube"
    for k, q in enumerate([programs[2], programs[1]]):  # concepts of the negative captions, on image 0
        p = plan.negative_concept[0, 0, k]
        assert plan.pair_image[p] == 0
        assert plan.texts[plan.pair_text[p]] in {q.texts[j] for j in range(q.num_nodes)
                                                  if not q.is_primitive(j) or j == q.root}
    assert n == 1 + 2 + 1
    assert (plan.positive[~plan.mask] == n).all() and (plan.negative_image[~plan.mask] == n).all()


# ---------------------------------------------------------------------- Lightning steps
def data_config(tiny_world):
    return DataConfig(data=str(tiny_world / "captions.jsonl"), features=str(tiny_world / "features.h5"),
                      batch_size=4, max_regions=12, eval_images=6, seed=3)


class _Grads(L.Callback):
    def __init__(self):
        self.finite, self.nonzero = [], []

    def on_after_backward(self, trainer, module):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        self.finite.append(all(torch.isfinite(g).all() for g in grads))
        self.nonzero.append(sum(int(g.abs().sum() > 0) for g in grads))


def one_step(module, dm, tmp_path):
    before = {k: v.clone() for k, v in module.state_dict().items()}
    grads = _Grads()
    t = L.Trainer(default_root_dir=tmp_path, accelerator="cpu", max_steps=1, logger=False, enable_progress_bar=False,
                  enable_model_summary=False, limit_val_batches=0, enable_checkpointing=False, callbacks=[grads])
    t.fit(module, datamodule=dm)
    assert t.global_step == 1 and grads.finite == [True] and grads.nonzero[0] > 0
    assert torch.isfinite(t.callback_metrics["train/loss"]) and "train/match_acc" in t.callback_metrics
    changed = [k for k, v in module.state_dict().items() if not torch.equal(v, before[k])]
    assert changed
    return t, changed


def test_vse_module_step(tiny_world, tmp_path):
    module = VSEModule(vse_config("tiny", visual={"region_dim": 256}), OptimConfig(lr=1e-3, epochs=1, warmup_epochs=0), seed=3)
    dm = CompositionDataModule(data_config(tiny_world), module.tokenizer)
    _, changed = one_step(module, dm, tmp_path)
    assert any(k.startswith("model.image_encoder") for k in changed)
    assert any(k.startswith("model.text_encoder") for k in changed)


@pytest.mark.parametrize("use_mvsa", [False, True])
def test_flat_module_step(tiny_world, tmp_path, use_mvsa):
    cfg = composer_config("tiny", visual={"region_dim": 256})
    module = FlatModule(cfg, OptimConfig(lr=1e-3, epochs=1, warmup_epochs=0, use_mvsa=use_mvsa), seed=3)
    dm = CompositionDataModule(data_config(tiny_world), module.tokenizer)
    t, _ = one_step(module, dm, tmp_path)
    assert (float(t.callback_metrics["train/mvsa"]) > 0) == use_mvsa


def test_vse_module_resumes_exactly_after_a_kill(tiny_world, tmp_path):
    def make():
        cfg = vse_config("tiny", visual={"region_dim": 256}, text={"dropout": 0.2})  # dropout draws must resume too
        module = VSEModule(cfg, OptimConfig(lr=1e-3, epochs=2, warmup_epochs=0.5, decay_epochs=(1,)), seed=3)
        data = replace(data_config(tiny_world), batch_size=16)  # fewer steps: this test fits three times
        return module, CompositionDataModule(data, module.tokenizer)

    def trainer(root, **kw):
        return L.Trainer(default_root_dir=root, accelerator="cpu", logger=False, enable_progress_bar=False,
                         num_sanity_val_steps=0, limit_val_batches=0, enable_model_summary=False, max_epochs=2, **kw)

    L.seed_everything(0)
    module, dm = make()
    full = trainer(tmp_path / "full")
    full.fit(module, datamodule=dm)
    reference = {k: v.clone() for k, v in module.state_dict().items()}
    kill_at = full.global_step // 2 + 1  # mid-way through the second epoch
    L.seed_everything(0)
    module, dm = make()
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=kill_at, save_last=True)
    with pytest.raises(Killed):
        trainer(tmp_path / "run", callbacks=[ckpt, KillAt(kill_at)]).fit(module, datamodule=dm)
    L.seed_everything(123)
    module, dm = make()
    second = trainer(tmp_path / "run")
    second.fit(module, datamodule=dm, ckpt_path=str(tmp_path / "ck" / "last.ckpt"))
    assert second.global_step == full.global_step
    for k, v in module.state_dict().items():
        assert torch.equal(v, reference[k]), k


# ---------------------------------------------------------------------- entry point
@pytest.mark.parametrize("model", train_baseline.baselines())
def test_arguments_resolve_for_every_model(model):
    clip = registry.get(model).step_schedule is not None
    parse = train_baseline.build_argparser().parse_args
    recipe = train_baseline.recipe_from_args(parse(["--model", model, "--out", "x", "--lr", "0.01"]))
    named = registry.get(model).named_recipes["world"]
    assert recipe.model == model and recipe.preset == named["preset"]
    assert recipe.data.batch_size == named["batch_size"] and recipe.data.world_images == named["world_images"]
    assert not recipe.optim.use_mvsa and not recipe.optim.use_order
    if clip:  # the schedule is ILConfig's, in steps
        assert recipe.il.lr == 0.01 and recipe.il.total_steps > 0
        default = train_baseline.recipe_from_args(parse(["--model", model, "--out", "x"]))
        assert recipe.il.total_steps == default.il.total_steps and default.il.lr != 0.01
        with pytest.raises(ValueError, match="--epochs"):
            train_baseline.recipe_from_args(parse(["--model", model, "--out", "x", "--epochs", "3"]))
    else:
        assert recipe.il is None and recipe.optim.lr == 0.01 and recipe.optim.epochs == named["epochs"]
    paper = train_baseline.recipe_from_args(parse(["--model", model, "--data", "f30k", "--out", "x"]))
    assert paper.preset == "paper" and paper.data.batch_size == 64
    assert (paper.il.total_steps > recipe.il.total_steps) if clip else (paper.optim.epochs == 20)
    cfg = recipe.model_config(region_dim=31)
    assert (cfg.region_dim if clip else cfg.visual.region_dim) == 31


def test_model_specific_flags_reach_the_configs():
    parse = train_baseline.build_argparser().parse_args
    vse = train_baseline.recipe_from_args(parse(["--model", "vse", "--out", "x", "--pool", "max",
                                                 "--hardest-negative", "--margin", "0.1", "--preset", "tiny"]))
    cfg = vse.model_config(region_dim=9)
    assert (cfg.image_pool, cfg.loss.negatives, cfg.loss.margin, cfg.visual.region_dim) == ("max", "hardest", 0.1, 9)
    flat = train_baseline.recipe_from_args(parse(["--model", "flat", "--out", "x", "--mvsa", "--ct-layers", "1",
                                                  "--mvsa-concepts", "3", "--preset", "tiny"]))
    assert flat.optim.use_mvsa and flat.mvsa_concepts == 3
    assert flat.model_config(region_dim=9).ct_layers == 1
    with pytest.raises(SystemExit):
        parse(["--model", "vilbert", "--out", "x"])
    with pytest.raises(ValueError, match="--pool.*--mvsa"):
        train_baseline.recipe_from_args(parse(["--model", "clip", "--out", "x", "--pool", "max", "--mvsa"]))


def test_vse_end_to_end_on_a_tiny_world(tiny_world, tmp_path):
    out = tmp_path / "run"
    rc = train_baseline.main(["--model", "vse", "--data", str(tiny_world / "captions.jsonl"),
                              "--features", str(tiny_world / "features.h5"), "--preset", "tiny",
                              "--batch-size", "8", "--max-regions", "12", "--eval-images", "6", "--epochs", "1",
                              "--lr", "1e-3", "--accelerator", "cpu", "--out", str(out), "--quiet"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    test = results["test"]
    assert results["model"] == "vse" and 0 < test["num_images"] <= 6  # the tiny world's test split may be smaller
    assert test["chance_R@1"] == pytest.approx(100 / test["num_images"], abs=1e-3)
    assert set(test["sentence"]) == {"R@1", "R@5", "R@10"}
    assert test["sentence"]["R@1"] <= test["sentence"]["R@5"] <= test["sentence"]["R@10"] == 100.0  # <= 10 images
    assert (out / "checkpoints" / "last.ckpt").exists()


def test_every_model_size_preset_is_selectable_on_the_command_line():
    """--preset takes every preset COMPOSER, the flat model and VSE define (small-minilm was once missing)."""
    from composer.cli.arguments import model_presets
    from composer.models.composer import config as composer_cfg
    from composer.models.vse.model import VSE_PRESETS

    assert set(model_presets()) == set(composer_cfg.PRESETS) and set(VSE_PRESETS) <= set(model_presets())
    args = train_baseline.build_argparser().parse_args(["--model", "flat", "--preset", "small-minilm", "--out", "x"])
    assert args.preset == "small-minilm"


@pytest.mark.parametrize("args", [["--model", "negclip"], ["--model", "il_clip", "--negclip"]])
def test_negclip_and_il_negclip_train_through_the_command(tiny_world, tmp_path, args):
    """NegCLIP and IL-NegCLIP (IL-CLIP's Table 8) through gc-train-baseline: the saved recipe has both negative
    kinds on, and the checkpoint carries the filled image pool (issue 36)."""
    out = tmp_path / "run"
    rc = train_baseline.main([*args, "--data", str(tiny_world / "captions.jsonl"),
                              "--features", str(tiny_world / "features.h5"), "--preset", "tiny",
                              "--batch-size", "8", "--max-regions", "12", "--eval-images", "6", "--max-steps", "6",
                              "--accelerator", "cpu", "--out", str(out), "--quiet"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == args[1] and 0 < results["test"]["num_images"] <= 6
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 6
    pool = ckpt["negclip_image_pool"]
    assert 8 <= len(pool["image_ids"]) == len(set(pool["image_ids"])) == pool["embeddings"].shape[0]
    il = results["config"]["recipe"]["il"] if "recipe" in results["config"] else results["config"]["il"]
    assert il["negclip"] and il["image_negatives"] >= 1  # both kinds: word swaps and pool neighbours
    saved = registry.load_pretrained(out / results["model_dir"])
    assert (saved.model.codebook is not None) == (args[1] == "il_clip")  # IL-NegCLIP keeps IL-CLIP's codebook
