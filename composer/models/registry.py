"""The one model registry: every model the library trains, its config family and its constructor.

Training (:mod:`composer.training.recipes`), evaluation, the study and the benchmarks all build models
here, so a model name means the same thing everywhere.

>>> MODELS
('composer', 'vse', 'flat', 'clip', 'codebook_clip', 'il_clip')
>>> model_config("flat", "tiny", region_dim=7).visual.region_dim
7
>>> model_config("resnet", "tiny")
Traceback (most recent call last):
...
ValueError: unknown model 'resnet'; choose one of ('composer', 'vse', 'flat', 'clip', 'codebook_clip', 'il_clip')
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLIP_FAMILY", "MODELS", "PRESETS", "build_model", "check_model", "model_config"]

CLIP_FAMILY = ("clip", "codebook_clip", "il_clip")
MODELS = ("composer", "vse", "flat", *CLIP_FAMILY)
PRESETS = ("paper", "offline", "small", "small-minilm", "tiny")  # composer.models.composer.config.PRESETS; the CLIP family: paper, small, tiny


def check_model(model: str) -> str:
    """``model`` if it is a registered name, else a ValueError listing the names."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {MODELS}")
    return model


def model_config(model: str, preset: str, overrides: dict[str, Any] | None = None, *,
                 region_dim: int | None = None):
    """The config dataclass of ``model`` at ``preset`` with ``overrides`` applied (nested dicts for
    sub-configs; unknown fields are a ValueError naming the field).

    ``region_dim`` (the feature store's region size) fixes the visual input. COMPOSER and the flat model
    share :class:`composer.models.composer.config.ComposerConfig`; VSE has its own; the CLIP family's agents start from
    random weights, so their configs take no text overrides.
    """
    check_model(model)
    overrides = dict(overrides or {})
    if model in CLIP_FAMILY:
        from composer.models.clip.model import clip_config

        if region_dim is not None:
            overrides["region_dim"] = region_dim
        return clip_config(preset, **overrides)
    if region_dim is not None:
        overrides["visual"] = {**overrides.get("visual", {}), "region_dim": region_dim}
    if model == "vse":
        from composer.models.vse.model import vse_config

        return vse_config(preset, **overrides)
    from composer.models.composer.config import composer_config

    return composer_config(preset, **overrides)


def build_model(model: str, cfg, *, load_pretrained: bool = True, seed: int = 0):
    """The ``torch.nn.Module`` of ``model`` from its config (``load_pretrained``: the text encoder's
    pretrained weights where the config names a text model; ``seed``: the CLIP agents' initialisation,
    which they draw from their own generators). IL-CLIP without a codebook is its Table 4 ablation:
    build it with ``model="clip"``."""
    check_model(model)
    if model == "composer":
        from composer.models.composer.model import Composer

        return Composer.from_config(cfg, load_pretrained=load_pretrained)
    if model == "flat":
        from composer.models.flat.model import FlatCrossTransformer

        return FlatCrossTransformer.from_config(cfg, load_pretrained=load_pretrained)
    if model == "vse":
        from composer.models.vse.model import VSE

        return VSE.from_config(cfg, load_pretrained=load_pretrained)
    from composer.models.clip.model import ClipModel

    return ClipModel(cfg, use_codebook=model != "clip", seed=seed, kind=model)
