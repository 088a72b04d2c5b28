"""The one model registry: a model's name mapped to everything about it (:class:`ModelSpec`).

Training, checkpoint loading, evaluation, the study, the command-line programs and the benchmarks ask the
registry what a model can do (``spec.step_schedule``, ``spec.losses``, ...); nothing else branches on a
model's name. Adding a model is one folder under ``composer/models/`` and one :func:`register` call (a test
registers a toy model from its own file: tests/test_model_registry.py).

>>> names()
('composer', 'vse', 'flat', 'clip', 'codebook_clip', 'il_clip', 'negclip')
>>> model_config("flat", "tiny", region_dim=7).visual.region_dim
7
>>> get("codebook_clip").family, get("codebook_clip").default_losses
('clip', ())
>>> get("resnet")
Traceback (most recent call last):
...
ValueError: unknown model 'resnet'; choose one of ('composer', 'vse', 'flat', 'clip', 'codebook_clip', 'il_clip', 'negclip')

The built-in entries name their classes and functions by import path (``"module:attribute"``), imported
when first used, so that reading the registry imports no model.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["ModelSpec", "get", "load_pretrained", "model_config", "names", "register", "spec_of_checkpoint",
           "spec_of_saved", "unregister"]

# An object, or the "module:attribute" path it is imported from when first used.
Ref = Any


def resolve(ref: Ref) -> Any:
    """The object ``ref`` names (a ``"module:attribute"`` string), or ``ref`` itself."""
    if isinstance(ref, str):
        module, _, attribute = ref.partition(":")
        return getattr(importlib.import_module(module), attribute)
    return ref


@dataclass(frozen=True)
class ModelSpec:
    """Everything the library needs to know about one model, by name.

    Attributes:
        name: the registry name: ``--model``, ``results.json``'s ``model``, a run's recipe.
        family: the ``model_type`` its saved folders write in config.json (one model class per family;
            the CLIP family's three entries share ``"clip"`` and tell themselves apart by ``kind``).
        config: ``(preset, **overrides) -> config dataclass`` (nested dicts override sub-configs).
        presets: the preset names ``config`` knows.
        model: the ``nn.Module`` class (a :class:`composer.models.common.pretrained.PretrainedModel`).
        module: the LightningModule class; ``module.from_recipe(recipe, model_cfg)`` builds it, and its
            hyperparameters hold ``"model"`` (the plain config) and ``"kind"`` (this name).
        named_recipes: dataset -> the recipe's settings that differ from the defaults (``preset``,
            ``OptimConfig`` / ``DataConfig`` fields, ``val_every``).
        fallback_preset: the preset for a dataset without a named recipe (a caption file).
        region_dim_field: the config field the feature store's region size sets (dotted for sub-configs).
        build: ``(cfg, *, load_pretrained, seed) -> model``; None: ``model.from_config(cfg, load_pretrained=)``.
        losses: the optional losses it can train with (``"mvsa"``, ``"order"``); default_losses: those on
            unless turned off.
        sampled_negatives: whether its loss reads the batch's sampled (hard) caption negatives.
        mvsa_concepts: phrases per positive caption for a text-level MVSA (the flat model), else None.
        step_schedule: ``(preset, **overrides) -> ILConfig``-like step schedule for a model trained from
            scratch for a number of steps (no text model, no epochs), else None.
        schedule_group: which of the study's schedules it trains on (``"composer"`` or ``"vse"``).
        init_reaches_text_only: the init std (``text.initializer_range``) reaches only its text encoder.
        concept_tree: it scores a caption's concepts bottom-up (interpretation reads them).
        baseline: ``gc-train-baseline`` trains it (COMPOSER has its own command).
        cli_options: the ``gc-train-baseline`` model options (argparse names) that apply to it.
        checkpoint_extras: ``(hparams, weights) -> dict`` of what ``model.build_for_weights`` needs beside
            the config when rebuilding it from a Lightning checkpoint; None: nothing.
        recognise: for checkpoints written before the modules recorded ``kind``: ``(hparams, top-level
            weight names) -> bool``; None: only by ``kind``.
    """

    name: str
    family: str
    config: Ref
    presets: tuple[str, ...]
    model: Ref
    module: Ref
    named_recipes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fallback_preset: str = "offline"
    region_dim_field: str = "visual.region_dim"
    build: Ref | None = None
    losses: tuple[str, ...] = ()
    default_losses: tuple[str, ...] = ()
    sampled_negatives: bool = False
    mvsa_concepts: int | None = None
    step_schedule: Ref | None = None
    schedule_group: str = "composer"
    init_reaches_text_only: bool = False
    concept_tree: bool = False
    baseline: bool = True
    cli_options: tuple[str, ...] = ()
    checkpoint_extras: Ref | None = None
    recognise: Callable[[Mapping[str, Any], set[str]], bool] | None = None

    def __post_init__(self):
        if not set(self.default_losses) <= set(self.losses):
            raise ValueError(f"{self.name}: default_losses {self.default_losses} not among losses {self.losses}")
        object.__setattr__(self, "named_recipes", MappingProxyType({k: MappingProxyType(dict(v))
                                                                    for k, v in self.named_recipes.items()}))

    def make_config(self, preset: str, overrides: Mapping[str, Any] | None = None, *,
                    region_dim: int | None = None):
        """The config dataclass at ``preset`` with ``overrides`` (unknown fields: a ValueError naming them)
        and, when given, the feature store's ``region_dim``."""
        values = copy.deepcopy(dict(overrides or {}))  # the caller's dict stays as it is
        if region_dim is not None:
            *path, last = self.region_dim_field.split(".")
            node = values
            for key in path:
                node = node.setdefault(key, {})
            node[last] = region_dim
        return resolve(self.config)(preset, **values)

    def build_model(self, cfg, *, load_pretrained: bool = True, seed: int = 0):
        """The ``nn.Module`` of config ``cfg`` (``load_pretrained``: the text encoder's pretrained weights
        where the config names a text model; ``seed``: for models that draw their own initialisation)."""
        if self.build is not None:
            return resolve(self.build)(cfg, load_pretrained=load_pretrained, seed=seed)
        return resolve(self.model).from_config(cfg, load_pretrained=load_pretrained)

    def region_dim(self, cfg) -> int:
        """The region feature size config ``cfg`` expects."""
        value = cfg
        for key in self.region_dim_field.split("."):
            value = getattr(value, key)
        return value


_REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec, *, replace: bool = False) -> ModelSpec:
    """Add ``spec`` under ``spec.name`` (a name already taken is an error unless ``replace``)."""
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"model {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove ``name`` (a test's toy model, for instance)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered model names, in registration order."""
    return tuple(_REGISTRY)


def get(name: str) -> ModelSpec:
    """The spec of ``name``; an unknown name is a ValueError listing the registered ones."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; choose one of {names()}")
    return _REGISTRY[name]


def model_config(name: str, preset: str, overrides: Mapping[str, Any] | None = None, *,
                 region_dim: int | None = None):
    """``get(name).make_config(preset, overrides, region_dim=region_dim)``."""
    return get(name).make_config(preset, overrides, region_dim=region_dim)


def spec_of_saved(model_type: str, kind: str | None = None) -> ModelSpec:
    """The spec of a saved model: its config.json's ``model_type`` (the family) and, where the family has
    several entries, the ``kind`` saved beside it (None: the family's first entry)."""
    if kind is not None and kind in _REGISTRY and _REGISTRY[kind].family == model_type:
        return _REGISTRY[kind]
    for spec in _REGISTRY.values():
        if spec.family == model_type:
            return spec
    raise ValueError(f"unknown model_type {model_type!r}; known: {sorted({s.family for s in _REGISTRY.values()})}")


def spec_of_checkpoint(hparams: Mapping[str, Any], weight_names: set[str]) -> ModelSpec | None:
    """The spec of a LightningModule checkpoint: by the ``kind`` its module recorded, else (a checkpoint
    written before modules recorded it) by the first spec whose ``recognise`` accepts its top-level weight
    names (``model.<part>.``); None if none does."""
    kind = hparams.get("kind")
    if isinstance(kind, str) and kind in _REGISTRY:
        return _REGISTRY[kind]
    parts = {k.split(".")[1] for k in weight_names if k.startswith("model.") and k.count(".") >= 2}
    for spec in _REGISTRY.values():
        if spec.recognise is not None and spec.recognise(hparams, parts):
            return spec
    return None


def load_pretrained(directory: str | Path):
    """The model saved in ``directory`` by ``save_pretrained``, whichever model it is
    (:class:`composer.models.common.pretrained.LoadedModel`; ``name`` is its registry name)."""
    from composer.models.common.pretrained import CONFIG_NAME, load_directory, read_saved_type

    directory = Path(directory)
    model_type, kind = read_saved_type(directory)
    try:
        spec = spec_of_saved(model_type, kind)
    except ValueError as err:
        raise ValueError(f"{directory / CONFIG_NAME}: {err}") from None
    return load_directory(directory, resolve(spec.model), name=spec.name)


# ---------------------------------------------------------------------------------------------- the models
# The generated world's data settings, shared by every model.
# The world's recipes train on the 15,000-image compositional world (9,000 training images, 45,000 captions):
# the size at which the world-size table (docs/benchmarks.md) stops the models memorising, and the converge
# study's world. ``--world-images 3000`` gives the earlier, 1,800-training-image world.
_WORLD_DATA = {"max_regions": 14, "eval_images": 100, "world_images": 15000}

# COMPOSER on the world: one epoch, 703 steps at batch 64 (the 45,000 training captions), the Predicate
# Transformer started from the packaged MiniLM's embeddings and first 2 layers (``small-minilm``: random-init
# text sits at chance for hundreds of steps, issue 17), a 281-step warm-up (0.4 epoch) to 5e-4, gradients
# clipped at 1 (docs/composer.md, "Learning from scratch": the paper's 4e-5 leaves a random-init model at
# chance). Validation every 3 epochs, so none in the one epoch (100 images x 500 captions of full cross-scoring
# cost a minute), so that generation + graph + training + test take under 8 minutes on 2 cores (6 min 55 s
# measured, README). The job before issue 31: ``small`` (random-init text), batch 32, 3 epochs (/10 for the last) on
# the 3,000-image world.
_COMPOSER_WORLD = {**_WORLD_DATA, "preset": "small-minilm", "epochs": 1, "lr": 5e-4, "warmup_epochs": 0.4,
                   "decay_epochs": (), "grad_clip": 1.0, "batch_size": 64, "val_every": 3}
_BERT_PRESETS = ("paper", "offline", "small", "small-minilm", "tiny")

register(ModelSpec(
    name="composer", family="composer", presets=_BERT_PRESETS, baseline=False, concept_tree=True,
    config="composer.models.composer.config:composer_config", model="composer.models.composer.model:Composer",
    module="composer.models.composer.module:ComposerModule",
    named_recipes={"world": _COMPOSER_WORLD,
                   # the paper preset's text model is bert-base-uncased; naming it here would also impose it
                   # on --preset small / offline / tiny, whose widths it does not fit
                   "f30k": {"preset": "paper"}, "coco": {"preset": "paper"}},
    losses=("mvsa", "order"), default_losses=("mvsa", "order"), sampled_negatives=True,
    recognise=lambda hparams, parts: "predicate_transformer" in parts))

register(ModelSpec(
    name="vse", family="vse", presets=_BERT_PRESETS, schedule_group="vse", init_reaches_text_only=True,
    config="composer.models.vse.model:vse_config", model="composer.models.vse.model:VSE",
    module="composer.models.vse.module:VSEModule",
    # two towers meeting in a dot product: cheap, so a larger batch and step than COMPOSER's
    named_recipes={"world": {**_WORLD_DATA, "preset": "small", "batch_size": 64, "epochs": 2, "lr": 1e-3,
                             "warmup_epochs": 0.2, "decay_epochs": ()},
                   "f30k": {"preset": "paper"},   # 12 BERT layers from bert-base-uncased (Appendix C)
                   "coco": {"preset": "paper"}},
    cli_options=("text_layers", "embed_dim", "pool", "margin", "hardest_negative"),
    recognise=lambda hparams, parts: "text_projection" in parts))

register(ModelSpec(
    name="flat", family="flat", presets=_BERT_PRESETS,
    config="composer.models.composer.config:composer_config", model="composer.models.flat.model:FlatCrossTransformer",
    module="composer.models.flat.module:FlatModule",
    named_recipes={"world": _COMPOSER_WORLD,  # COMPOSER's world settings: the cross-attention models compare alike
                   "f30k": {"preset": "paper"},   # COMPOSER's width and depth (PT 6 + CT 5), flat
                   "coco": {"preset": "paper"}},
    losses=("mvsa",), sampled_negatives=True, mvsa_concepts=2,
    cli_options=("pt_layers", "ct_layers", "mvsa", "mvsa_kind", "mvsa_concepts"),
    recognise=lambda hparams, parts: "composition_transformer" in parts))

# negclip: CLIP trained with NegCLIP's word-swap and pool-neighbour negatives (ILConfig.negclip; with il_clip
# the same switch gives IL-NegCLIP)
for _kind in ("clip", "codebook_clip", "il_clip", "negclip"):
    register(ModelSpec(
        name=_kind, family="clip", presets=("paper", "small", "tiny"), fallback_preset="paper",
        config="composer.models.clip.model:clip_config", model="composer.models.clip.model:ClipModel",
        module="composer.models.clip.module:ClipModule", build=f"composer.models.clip.model:build_{_kind}",
        # the CLIP family's schedule is in steps (ILConfig, Table 5 of Zheng et al.), not epochs
        named_recipes={"world": {**_WORLD_DATA, "preset": "small", "batch_size": 64},  # il_config("small"): 1,800 steps
                       "f30k": {"preset": "paper"}, "coco": {"preset": "paper"}},
        region_dim_field="region_dim", step_schedule="composer.models.clip.iterated_learning:"
                                                     + ("negclip_config" if _kind == "negclip" else "il_config"),
        cli_options=("il_preset", "negclip"), checkpoint_extras="composer.models.clip.model:checkpoint_extras"))
del _kind
