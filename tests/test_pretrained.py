"""Saving and loading every model (composer.models.common.pretrained) and exporting Lightning checkpoints to pretrained
directories (composer.training.checkpoint): round trips give the same weights, config, tokenizer and
scores; loading needs nothing outside the directory and never unpickles; bad directories fail clearly."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from composer.models.clip.model import ClipConfig, ClipModel, clip_config
from composer.models.flat.model import FlatCrossTransformer
from composer.models.clip.iterated_learning import il_config
from composer.models.vse.model import VSE, VSEConfig, vse_config
from composer.models.common.config import plain_config
from composer.models.composer.config import ComposerConfig, composer_config
from composer.models.composer.model import Composer
from composer.models.composer.predicate_transformer import PredicateTransformer
from composer.models.common.pretrained import CONFIG_NAME, WEIGHTS_NAME, config_from_dict
from composer.models.registry import load_pretrained
from composer.models.composer.program import ConceptProgram
from composer.models.common.retrieval import score_matrix
from composer.models.flat.module import FlatModule
from composer.models.vse.module import VSEModule
from composer.training.checkpoint import export_pretrained, load_checkpoint, load_composer
from composer.models.clip.module import ClipModule
from composer.models.common.retrieval_module import OptimConfig
from composer.models.composer.module import ComposerModule
from composer.training.data import CompositionDataModule, DataConfig

PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle"}

# (sentence, primitive words): templates replace the primitives by [NN]
CAPTIONS = [("a red cube left of a blue ball", ["cube", "ball"]), ("two green rings", ["rings"]),
            ("a small yellow cone", ["cone"]), ("there is a metal box near a cube", ["box", "cube"])]


def program(sentence: str, words: list[str]) -> ConceptProgram:
    template = " ".join("[NN]" if w in words else w for w in sentence.split())
    return ConceptProgram.from_derivations([(sentence, template, [w for w in sentence.split() if w in words])])


def visual(region_dim: int, n_img: int = 3, n_reg: int = 7, seed: int = 0):
    """(I, R, Dr) regions, (I, R, 5) geometry, (I, R) bool mask (True = real region; some padding)."""
    g = torch.Generator().manual_seed(seed)
    regions = torch.randn(n_img, n_reg, region_dim, generator=g)
    geometry = torch.rand(n_img, n_reg, 5, generator=g)
    mask = torch.ones(n_img, n_reg, dtype=torch.bool)
    mask[1, 4:] = False
    return regions, geometry, mask


def scores_of(model, tokenizer, region_dim: int) -> np.ndarray:
    """(C, I) = (4, 3) scores of the captions against three images, through the evaluation's score_matrix."""
    regions, geometry, mask = visual(region_dim)
    return score_matrix(model.eval(), regions, geometry, mask, [program(s, w) for s, w in CAPTIONS], tokenizer).scores


# name -> a tiny model; every variant of the CLIP family is one ClipModel config
BUILDERS = {
    "composer": lambda: Composer(composer_config("tiny"), load_pretrained=False),
    "vse": lambda: VSE(vse_config("tiny"), load_pretrained=False),
    "flat": lambda: FlatCrossTransformer(composer_config("tiny"), load_pretrained=False),
    "clip": lambda: ClipModel(clip_config("tiny"), use_codebook=False, seed=4, kind="clip"),
    "codebook_clip": lambda: ClipModel(clip_config("tiny"), use_codebook=True, seed=4, kind="codebook_clip"),
    "il_clip_no_codebook": lambda: ClipModel(clip_config("tiny", text_causal=False), use_codebook=False, seed=4,
                                             kind="il_clip"),
}
MODEL_TYPE = {"composer": "composer", "vse": "vse", "flat": "flat", "clip": "clip", "codebook_clip": "clip",
              "il_clip_no_codebook": "clip"}


def trained_like(name: str):
    """A tiny model whose weights no initialisation reproduces (every tensor moved off its init), in eval mode."""
    torch.manual_seed(1)
    model = BUILDERS[name]()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def region_dim_of(cfg) -> int:
    return cfg.region_dim if isinstance(cfg, ClipConfig) else cfg.visual.region_dim


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k, v in sa.items():
        assert v.dtype == sb[k].dtype and torch.equal(v, sb[k]), k


def assert_no_pickle(directory: Path) -> None:
    files = sorted(p.name for p in directory.iterdir())
    assert not [f for f in files if Path(f).suffix in PICKLE_SUFFIXES], files
    for f in files:  # every file is JSON or safetensors
        if f.endswith(".json"):
            json.loads((directory / f).read_text())
        else:
            assert f in (WEIGHTS_NAME, "vocab.txt"), f
    load_file(str(directory / WEIGHTS_NAME))


@pytest.fixture
def no_unpickling(monkeypatch):
    """Any torch.load or pickle.load(s) while loading fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("loading a pretrained directory must not unpickle")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)


# ---------------------------------------------------------------------- round trips
@pytest.mark.parametrize("name", list(BUILDERS))
def test_save_load_round_trip(name, tmp_path, no_unpickling):
    model = trained_like(name)
    before = scores_of(model, model.make_tokenizer(), region_dim_of(model.config))
    out = model.save_pretrained(tmp_path / "saved")
    assert out == tmp_path / "saved"
    assert {CONFIG_NAME, WEIGHTS_NAME, "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert_no_pickle(out)

    loaded = load_pretrained(out)
    assert loaded.model_type == MODEL_TYPE[name] and type(loaded.model) is type(model)
    assert not loaded.model.training and loaded.path == out
    assert loaded.config == model.config and loaded.model.config == model.config
    assert_same_state(model, loaded.model)
    after = scores_of(loaded.model, loaded.tokenizer, region_dim_of(loaded.config))
    np.testing.assert_array_equal(after, before)

    # the class's own from_pretrained gives the same model; the tokenizer reads captions alike
    again = type(model).from_pretrained(out)
    assert_same_state(model, again)
    assert torch.equal(loaded.tokenizer.encode_sentences(["a cube", "two blue balls"]).ids,
                       model.make_tokenizer().encode_sentences(["a cube", "two blue balls"]).ids)
    if isinstance(model, ClipModel):
        assert again.use_codebook == model.use_codebook and again.kind == model.kind


@pytest.mark.parametrize("name", ["composer", "vse", "codebook_clip"])
def test_config_json_is_the_plain_config_with_a_model_type(name, tmp_path):
    model = trained_like(name)
    meta = json.loads((model.save_pretrained(tmp_path) / CONFIG_NAME).read_text())
    assert meta.pop("model_type") == MODEL_TYPE[name]
    if isinstance(model, ClipModel):
        assert (meta.pop("use_codebook"), meta.pop("kind")) == (True, "codebook_clip")
    assert meta == plain_config(model.config)


@pytest.mark.parametrize("cfg", [
    composer_config("paper"), composer_config("tiny", modulator="mlp", composition={"visual_selfatt": "every"}),
    composer_config("small"), composer_config("offline"), vse_config("paper"),
    vse_config("small", image_pool="max", loss={"negatives": "hardest"}), clip_config("paper"),
    clip_config("tiny", text_causal=False, code_temperature=0.3)], ids=lambda c: type(c).__name__)
def test_configs_rebuild_exactly_from_their_json(cfg):
    text = json.dumps(plain_config(cfg))
    assert config_from_dict(type(cfg), json.loads(text)) == cfg


def test_config_from_dict_names_unknown_fields_and_bad_values():
    with pytest.raises(ValueError, match=r"VSEConfig.loss has no field\(s\) \['negative'\]"):
        config_from_dict(VSEConfig, {"loss": {"negative": "sum"}})
    with pytest.raises(ValueError, match="ct_layers"):
        config_from_dict(ComposerConfig, {"ct_layers": 2})
    with pytest.raises(ValueError, match="ComposerConfig.text must be a JSON object"):
        config_from_dict(ComposerConfig, {"text": 24})


def test_loading_needs_neither_the_text_model_nor_the_configured_tokenizer(tmp_path, monkeypatch):
    # a config naming a text model and a vocabulary that are gone by the time the model is loaded
    vocab = tmp_path / "vocab"
    Composer(composer_config("tiny"), load_pretrained=False).make_tokenizer().tokenizer.save_pretrained(str(vocab))
    cfg = vse_config("tiny", text_model=str(tmp_path / "bert-that-is-gone"), tokenizer=str(vocab))
    torch.manual_seed(0)
    model = VSE(cfg, load_pretrained=False).eval()
    before = scores_of(model, model.make_tokenizer(), cfg.visual.region_dim)
    model.save_pretrained(tmp_path / "saved")
    shutil.rmtree(vocab)

    def refuse(self, name_or_path):
        raise AssertionError(f"loading a pretrained directory read the text model {name_or_path}")

    monkeypatch.setattr(PredicateTransformer, "load_pretrained", refuse)
    loaded = load_pretrained(tmp_path / "saved")
    assert loaded.config == cfg  # the config still records where the model came from
    np.testing.assert_array_equal(scores_of(loaded.model, loaded.model.tokenizer, cfg.visual.region_dim), before)


# ---------------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def saved_vse(tmp_path_factory) -> Path:
    return trained_like("vse").save_pretrained(tmp_path_factory.mktemp("vse") / "model")


def broken_copy(saved: Path, tmp_path: Path) -> Path:
    out = tmp_path / "broken"
    shutil.copytree(saved, out)
    return out


def edit_config(directory: Path, **changes) -> None:
    meta = json.loads((directory / CONFIG_NAME).read_text())
    meta.update(changes)
    (directory / CONFIG_NAME).write_text(json.dumps(meta))


def test_a_missing_directory_or_file_is_named(saved_vse, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere is not a directory"):
        load_pretrained(tmp_path / "nowhere")
    for name in (CONFIG_NAME, WEIGHTS_NAME, "tokenizer.json"):
        d = broken_copy(saved_vse, tmp_path)
        (d / name).unlink()
        (d / "vocab.txt").unlink(missing_ok=True)
        with pytest.raises(FileNotFoundError, match=rf"{d}.* no {'tokenizer' if 'tok' in name else name}"):
            load_pretrained(d)
        shutil.rmtree(d)


def test_an_unknown_model_type_is_refused(saved_vse, tmp_path):
    d = broken_copy(saved_vse, tmp_path)
    edit_config(d, model_type="bert")
    with pytest.raises(ValueError, match=rf"{d}.*unknown model_type 'bert'; known: \['clip', 'composer'"):
        load_pretrained(d)
    with pytest.raises(ValueError, match="holds a 'vse' model, not a Composer"):
        Composer.from_pretrained(saved_vse)


def test_a_config_that_does_not_fit_the_weights_is_refused(saved_vse, tmp_path):
    d = broken_copy(saved_vse, tmp_path)
    edit_config(d, embed_dim=21)  # the projections change shape
    with pytest.raises(ValueError, match=rf"{d}.*do not fit the VSE.*of another shape.*text_projection.weight"):
        load_pretrained(d)
    edit_config(d, embed_dim=20, text_layers=3)  # one more layer: its weights are missing
    with pytest.raises(ValueError, match=r"missing \['text_encoder.encoder.layer.2"):
        load_pretrained(d)
    edit_config(d, text_layers=2, image_pool="median")
    with pytest.raises(ValueError, match=rf"{d}.*image_pool='median'"):
        load_pretrained(d)
    edit_config(d, image_pool="mean", embed_size=20)
    with pytest.raises(ValueError, match=r"no field\(s\) \['embed_size'\]"):
        load_pretrained(d)


def test_weights_of_another_model_or_no_safetensors_are_refused(saved_vse, tmp_path):
    d = broken_copy(saved_vse, tmp_path)
    save_file({"codes": torch.zeros(3, 2)}, str(d / WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"missing .*1 unexpected \['codes'\]"):
        load_pretrained(d)
    torch.save({"text_projection.weight": torch.zeros(2)}, d / WEIGHTS_NAME)  # a pickle under the right name
    with pytest.raises(ValueError, match=f"cannot read {d / WEIGHTS_NAME} as safetensors"):
        load_pretrained(d)


def test_clip_kind_must_fit_the_codebook():
    with pytest.raises(ValueError, match="'clip' has no codebook"):
        ClipModel(clip_config("tiny"), use_codebook=True, kind="clip")
    with pytest.raises(ValueError, match="kind is one of"):
        ClipModel(clip_config("tiny"), use_codebook=True, kind="vse")


# ---------------------------------------------------------------------- Lightning checkpoints
def lightning_checkpoint(module, path: Path, datamodule=None) -> Path:
    """A real Lightning checkpoint of ``module``: after a one-step fit when given data, else untrained."""
    trainer = L.Trainer(default_root_dir=path.parent, accelerator="cpu", max_steps=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        enable_checkpointing=False)
    if datamodule is None:
        trainer.strategy.connect(module)
    else:
        trainer.fit(module, datamodule=datamodule)
        assert trainer.global_step == 1
    trainer.save_checkpoint(path)
    return path


def test_a_trained_baseline_checkpoint_exports_and_loads(tiny_world, tmp_path):
    module = VSEModule(vse_config("tiny", visual={"region_dim": 256}), OptimConfig(lr=1e-3, epochs=1, warmup_epochs=0),
                       load_pretrained=False, seed=3)
    data = DataConfig(data=str(tiny_world / "captions.jsonl"), features=str(tiny_world / "features.h5"),
                      batch_size=4, max_regions=12, eval_images=6, seed=3)
    ckpt = lightning_checkpoint(module, tmp_path / "run" / "checkpoints" / "last.ckpt",
                                CompositionDataModule(data, module.tokenizer))
    model = module.model.eval()
    before = scores_of(model, model.tokenizer, 256)

    restored = load_checkpoint(tmp_path / "run")
    assert (restored.model_type, restored.kind, restored.global_step) == ("vse", "vse", 1)
    assert_same_state(model, restored.model)
    with pytest.raises(ValueError, match="is a VSEModule checkpoint .vse., not a ComposerModule one"):
        load_composer(ckpt)

    out = export_pretrained(ckpt, tmp_path / "exported")
    assert_no_pickle(out)
    loaded = load_pretrained(out)
    assert loaded.model_type == "vse" and loaded.config == module.model_cfg
    assert_same_state(model, loaded.model)
    np.testing.assert_array_equal(scores_of(loaded.model, loaded.tokenizer, 256), before)


@pytest.mark.parametrize("kind", ["composer", "flat", "codebook_clip", "il_clip"])
def test_checkpoints_of_every_module_load_and_export(kind, tmp_path):
    torch.manual_seed(0)
    if kind == "composer":
        module = ComposerModule(composer_config("tiny"), OptimConfig(), load_pretrained=False)
    elif kind == "flat":
        module = FlatModule(composer_config("tiny"), OptimConfig(), load_pretrained=False)
    else:
        module = ClipModule(kind, clip_config("tiny"), il_config("paper", use_codebook=kind == "codebook_clip"),
                            OptimConfig(), seed=2)
    ckpt = lightning_checkpoint(module, tmp_path / "m.ckpt")
    restored = load_checkpoint(ckpt)
    assert restored.kind == kind and restored.config == module.model.config
    assert_same_state(module.model, restored.model)
    if kind == "composer":
        assert_same_state(module.model, load_composer(ckpt).model)

    loaded = load_pretrained(export_pretrained(ckpt, tmp_path / "exported"))
    assert_same_state(module.model, loaded.model)
    if isinstance(loaded.model, ClipModel):  # IL-CLIP without its codebook (Table 4's ablation) stays IL-CLIP
        assert (loaded.model.kind, loaded.model.use_codebook) == (kind, kind == "codebook_clip")
    region_dim = region_dim_of(loaded.config)
    np.testing.assert_array_equal(scores_of(loaded.model, loaded.tokenizer, region_dim),
                                  scores_of(module.model, module.tokenizer, region_dim))


@pytest.mark.parametrize("name", ["vse", "clip", "codebook_clip"])
def test_dual_encoders_score_the_matrix_at_once_with_the_numbers_of_score_pairs(name):
    """score_matrix's dual-encoder path (cross_scores: each image and sentence encoded once) against the
    pair-by-pair path every model has (score_pairs over every (caption, image) pair)."""
    from composer.models.composer.program import ProgramBatch

    model = BUILDERS[name]().eval()
    tokenizer = model.make_tokenizer()
    region_dim = region_dim_of(model.config)
    fast = scores_of(model, tokenizer, region_dim)                                    # (C, I) via cross_scores
    regions, geometry, mask = visual(region_dim)
    programs = ProgramBatch.collate([program(s, w) for s, w in CAPTIONS], tokenizer)
    n_cap, n_img = len(CAPTIONS), regions.shape[0]
    with torch.no_grad():
        naive = model.score_pairs(regions, geometry, mask, programs, torch.arange(n_img).repeat(n_cap),
                                  torch.arange(n_cap).repeat_interleave(n_img)).view(n_cap, n_img)
    assert fast.shape == (n_cap, n_img)
    np.testing.assert_allclose(fast, naive.numpy(), rtol=1e-5, atol=1e-5)
