"""Training recipes: a model's named configuration, and typed overrides on top of it.

A :class:`TrainingRecipe` is everything that decides one training run before the data are read (the
region feature size comes from the store). Named configurations (each model's
:attr:`composer.models.registry.ModelSpec.named_recipes`, per dataset) hold only what differs from the
defaults: ``OptimConfig``'s and ``DataConfig``'s, and the model config's paper values.
:class:`RecipeOverrides` changes any of it with typed values, never argv strings: the command-line scripts
and the study build one and call :func:`named_recipe`.

>>> r = named_recipe("composer", "world")
>>> r.preset, r.optim.lr, r.data.batch_size, r.val_every
('small-minilm', 0.0005, 64, 3)
>>> named_recipe("flat", "world", RecipeOverrides(lr=1e-3, model={"ct_layers": 1})).optim.lr
0.001
>>> named_recipe("vse", "world", RecipeOverrides(model={"modulator": "mlp"}))
Traceback (most recent call last):
...
ValueError: VSEConfig has no field 'modulator'; fields: [...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from composer.models import registry
from composer.models.common.retrieval_module import OptimConfig
from composer.training.data import DataConfig
from composer.training.structural_negatives import StructuralNegativeConfig
from composer.training.plateau import PlateauConfig

__all__ = ["RecipeOverrides", "TrainingRecipe", "build_module", "named_recipe", "settings_when_on"]


@dataclass
class RecipeOverrides:
    """Typed changes to a named recipe; ``None`` keeps the named configuration's value.

    Attributes:
        preset: model size preset (``paper``, ``offline``, ``small``, ``tiny``).
        text_model: BERT checkpoint directory or hub name for the text side (not the CLIP family).
        model: model-config overrides, nested dicts for sub-configs (``{"modulator": "mlp"}``,
            ``{"loss": {"mvsa": "nll"}}``); checked against the model's config dataclass.
        lr, epochs, grad_clip, use_mvsa, use_order: :class:`OptimConfig` fields.
        batch_size, max_regions, eval_images, val_images, world_images, world_split, world_held_out_seed,
            world_held_out_pairs, world_held_out_facts, captions, features, num_workers, seed, prune_probability,
            prune_seed, parser, parser_model, hard_negative_captions:
            :class:`DataConfig` fields.
        val_every: epochs between validations.
        mvsa_concepts: phrases per positive caption for the flat model's MVSA.
        il_preset, il: the CLIP family's :class:`ILConfig` preset and field overrides.
        val_every_positives, patience, min_delta, max_positives, min_positives: :class:`PlateauConfig`
            fields (training to the plateau; all off by default).
        structural_negatives: :class:`composer.training.structural_negatives.StructuralNegativeConfig` fields
            (``{"kinds": ("HN-SWAP", "HN-COMP")}``): verified-false caption negatives for any model; None = off.
    """

    preset: str | None = None
    text_model: str | None = None
    model: dict[str, Any] = field(default_factory=dict)
    lr: float | None = None
    epochs: int | None = None
    grad_clip: float | None = None
    use_mvsa: bool | None = None
    use_order: bool | None = None
    batch_size: int | None = None
    max_regions: int | None = None
    eval_images: int | None = None
    val_images: int | None = None
    world_images: int | None = None
    world_split: str | None = None
    world_held_out_seed: int | None = None
    world_held_out_pairs: int | None = None
    world_held_out_facts: int | None = None
    captions: str | None = None
    features: str | None = None
    num_workers: int = 0
    seed: int = 0
    prune_probability: float = 0.0
    prune_seed: int = 0
    parser: str | None = None
    parser_model: str | None = None
    hard_negative_captions: int | None = None
    val_every: int | None = None
    mvsa_concepts: int | None = None
    il_preset: str | None = None
    il: dict[str, Any] = field(default_factory=dict)
    val_every_positives: int | None = None
    patience: int | None = None
    min_delta: float | None = None
    max_positives: int | None = None
    min_positives: int | None = None
    structural_negatives: dict[str, Any] | None = None


@dataclass
class TrainingRecipe:
    """One training run's settings, before the data are read.

    Attributes:
        model: a name in :mod:`composer.models.registry`; dataset: ``world``, ``f30k``, ``coco`` or a file.
        preset, model_overrides: the model config (:meth:`composer.models.registry.ModelSpec.make_config`) less the
            region size, which the feature store fixes.
        optim, data: the optimisation and data configs.
        il: the step schedule (the CLIP family's :class:`composer.models.clip.iterated_learning.ILConfig`) of
            a model trained for a number of steps (``ModelSpec.step_schedule``), else None.
        mvsa_concepts: MVSA phrases per caption of a model with text-level MVSA (the flat model), else None.
        val_every: epochs between validations.
        plateau: validation cadence in positives, patience and budget (:class:`PlateauConfig`; off by default).
    """

    model: str
    dataset: str
    preset: str
    model_overrides: dict[str, Any]
    optim: OptimConfig
    data: DataConfig
    il: Any = None
    mvsa_concepts: int | None = None
    val_every: int = 1
    plateau: PlateauConfig = field(default_factory=PlateauConfig)

    def model_config(self, region_dim: int):
        """The model's config dataclass, its region feature size fixed by the store."""
        return registry.get(self.model).make_config(self.preset, self.model_overrides, region_dim=region_dim)


def named_recipe(model: str, dataset: str = "world", overrides: RecipeOverrides | None = None) -> TrainingRecipe:
    """The named configuration of (``model``, ``dataset``) with ``overrides`` applied."""
    spec = registry.get(model)
    o = overrides or RecipeOverrides()
    named = spec.named_recipes.get(dataset, {})

    def pick(key: str, default=None):
        value = getattr(o, key, None)
        return value if value is not None else named.get(key, default)

    if o.hard_negative_captions and not spec.sampled_negatives:
        raise ValueError(f"{model!r} contrasts the batch's positive pairs only: sampled (hard) caption negatives "
                         "do not reach its loss")
    preset = pick("preset", spec.fallback_preset)
    model_overrides = dict(o.model)
    il = None
    if spec.step_schedule is not None:
        if o.text_model or o.epochs is not None:
            raise ValueError(f"{model!r} trains from scratch on a step schedule: text_model and epochs do not apply "
                             "(use the IL preset, lr and max_steps)")
        il_preset = o.il_preset or ("small" if preset in ("small", "tiny") else "paper")
        il = registry.resolve(spec.step_schedule)(il_preset, **({"lr": o.lr} if o.lr is not None else {}), **o.il)
    else:
        text_model = pick("text_model")
        if text_model is not None:
            model_overrides["text_model"] = text_model
        # fail here, not after the data are read, on a field the model's config does not have
        spec.make_config(preset, model_overrides)
    data = DataConfig(data=dataset, captions=o.captions, features=o.features, seed=o.seed,
                      batch_size=pick("batch_size", 64), max_regions=pick("max_regions", 100),
                      eval_images=pick("eval_images", 1000), val_images=pick("val_images"),
                      num_workers=o.num_workers,
                      world_images=pick("world_images", 4000), world_split=pick("world_split", "compositional"),
                      world_held_out_seed=pick("world_held_out_seed", 0),
                      world_held_out_pairs=pick("world_held_out_pairs", 8),
                      world_held_out_facts=pick("world_held_out_facts", 6),
                      prune_probability=o.prune_probability,
                      prune_seed=o.prune_seed, parser=o.parser, parser_model=o.parser_model,
                      hard_negative_captions=pick("hard_negative_captions", 0),
                      structural_negatives=StructuralNegativeConfig(**(o.structural_negatives or {})))
    # COMPOSER trains with all three losses unless told; the flat model adds MVSA on request (Table 5)
    use_mvsa = o.use_mvsa if o.use_mvsa is not None else "mvsa" in spec.default_losses
    use_order = o.use_order if o.use_order is not None else "order" in spec.default_losses
    if (o.use_mvsa or o.use_order) and not spec.losses or o.use_mvsa and "mvsa" not in spec.losses:
        raise ValueError(f"MVSA and the order loss need concept scores: {model!r} has none")
    if o.use_order and "order" not in spec.losses:
        raise ValueError(f"the order loss needs COMPOSER's concept hierarchy; {model!r} has none")
    optim = OptimConfig(lr=pick("lr", 4e-5), epochs=pick("epochs", 20), warmup_epochs=named.get("warmup_epochs", 2.0),
                        decay_epochs=tuple(named.get("decay_epochs", (10, 15))), grad_clip=pick("grad_clip", 0.0),
                        use_mvsa=use_mvsa, use_order=use_order)
    mvsa_concepts = None
    if spec.mvsa_concepts is not None:
        mvsa_concepts = o.mvsa_concepts or spec.mvsa_concepts
    elif o.mvsa_concepts is not None:
        raise ValueError(f"mvsa_concepts applies to a model with text-level MVSA (the flat model), not {model!r}")
    return TrainingRecipe(model=model, dataset=dataset, preset=preset, model_overrides=model_overrides,
                          optim=optim, data=data, il=il, mvsa_concepts=mvsa_concepts,
                          val_every=pick("val_every", 1),
                          plateau=PlateauConfig(val_every_positives=pick("val_every_positives"),
                                                patience=pick("patience"), min_delta=pick("min_delta", 0.0),
                                                max_positives=pick("max_positives"),
                                                min_positives=pick("min_positives")))


def build_module(recipe: TrainingRecipe, model_cfg, *, load_pretrained: bool = True):
    """The LightningModule that trains ``recipe.model`` with config ``model_cfg`` (its registry entry's;
    ``load_pretrained``: the text encoder's pretrained weights where the config names them)."""
    module = registry.resolve(registry.get(recipe.model).module)
    return module.from_recipe(recipe, model_cfg, load_pretrained=load_pretrained)


# Settings added after runs were recorded: left out of a run's settings while off, so that a run recorded before
# they existed still resumes (its OUT/run.json must equal the new one's)
_OFF_UNLESS_SET = {"data": {"structural_negatives": lambda v: not v.get("kinds")},
                   "il": {"negclip": lambda v: not v, "image_negatives": None, "image_pool_size": None}}


def settings_when_on(recipe_settings: dict) -> dict:
    """``recipe_settings`` (``run_settings``' ``"recipe"``) without the later options that are off: the data's
    structural negatives when they have no kinds, NegCLIP's pool settings when ``negclip`` is off.

    >>> s = {"data": {"seed": 0, "structural_negatives": {"kinds": ()}},
    ...      "il": {"lr": 1.0, "negclip": False, "image_negatives": 1, "image_pool_size": 8}}
    >>> settings_when_on(s)
    {'data': {'seed': 0}, 'il': {'lr': 1.0}}
    """
    out = dict(recipe_settings)
    for section, keys in _OFF_UNLESS_SET.items():
        values = out.get(section)
        if not isinstance(values, dict):
            continue
        values = dict(values)
        gate, *_ = keys
        if keys[gate](values.get(gate, {} if section == "data" else False)):
            for key in keys:
                values.pop(key, None)
        out[section] = values
    return out
