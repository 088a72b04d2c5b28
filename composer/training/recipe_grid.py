"""The configurations a recipe search tries around a model's named recipe: :data:`GRID_SIZE` for every model, so
that no model is compared on a recipe tuned for another (the flat model sat at chance on COMPOSER's schedule,
issue 17). The BERT-style models: three learning rates around the named one x two init stds (where a randomly
initialised weight reads it: :func:`init_is_searched`); the others six learning rates. The study's recipe search
(:mod:`composer.study.search`) trains them and keeps the best by validation (:func:`choose_recipes`);
docs/evaluation.md ("The recipe search") gives the grid.

>>> [p.name for p in search_grid("composer")][:2]
['composer_lr1.7e-04_init0.02', 'composer_lr1.7e-04_init0.1']
>>> len(search_grid("il_clip")) == len(search_grid("vse")) == GRID_SIZE
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from composer.models import registry

__all__ = ["CLIP_LR_FACTORS", "GRID_SIZE", "INIT_STDS", "LR_FACTORS", "SearchPoint", "choose_recipes",
           "init_is_searched", "named_lr", "search_grid"]

GRID_SIZE = 6
LR_FACTORS = (1 / 3, 1.0, 3.0)                       # x the named recipe's, for the BERT-style models
INIT_STDS = (0.02, 0.1)                              # BERT's initializer_range; the small preset's
CLIP_LR_FACTORS = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)    # x the named recipe's, where no init std is searched


@dataclass(frozen=True)
class SearchPoint:
    """One configuration of the search: a model, its learning rate and (BERT-style models) its init std."""

    model: str
    lr: float
    init: float | None = None

    @property
    def name(self) -> str:
        """The run's name and folder (``composer_lr1.7e-04_init0.02``)."""
        init = "" if self.init is None else f"_init{self.init:g}"
        return f"{self.model}_lr{self.lr:.1e}{init}"

    @property
    def setting(self) -> str:
        """What the point sets, for tables (``lr 1.7e-04, init 0.02``)."""
        return f"lr {self.lr:.1e}" + ("" if self.init is None else f", init {self.init:g}")

    def overrides(self) -> dict[str, Any]:
        """:class:`composer.training.recipes.RecipeOverrides` fields of this point."""
        out: dict[str, Any] = {"lr": self.lr}
        if self.init is not None:
            out["model"] = {"text": {"initializer_range": self.init}}
        return out


def named_lr(model: str) -> float:
    """The learning rate of ``model``'s named ``world`` recipe (the grid's centre)."""
    from composer.training.recipes import RecipeOverrides, named_recipe

    recipe = named_recipe(model, "world", RecipeOverrides())
    return recipe.il.lr if recipe.il is not None else recipe.optim.lr


def init_is_searched(model: str, preset: str | None = None) -> bool:
    """Whether the init std (``text.initializer_range``) reaches a weight ``model`` trains from random init.

    >>> [init_is_searched(m, p) for m, p in [("vse", "small"), ("vse", "small-minilm"), ("flat", "small-minilm")]]
    [True, False, True]
    """
    spec = registry.get(model)
    if spec.step_schedule is not None:  # the CLIP family: its agents' own initialisation, no text encoder
        return False
    if spec.init_reaches_text_only and preset is not None:  # VSE: only its text encoder, unless pretrained
        return spec.make_config(preset).text_model is None
    return True


def search_grid(model: str, preset: str | None = None) -> list[SearchPoint]:
    """The :data:`GRID_SIZE` configurations ``model`` (at ``preset``; None = its named recipe's) is trained
    with (module docstring)."""
    base = named_lr(model)
    if not init_is_searched(model, preset):
        return [SearchPoint(model, _round(base * f)) for f in CLIP_LR_FACTORS]
    return [SearchPoint(model, _round(base * f), init) for f in LR_FACTORS for init in INIT_STDS]


def _round(x: float) -> float:
    """Two significant digits, so names and configs read cleanly (1.7e-04, not 1.6666e-04)."""
    return float(f"{x:.1e}")


def choose_recipes(val_r1: Mapping[str, float | None], points: list[SearchPoint]) -> dict[str, dict]:
    """Per model, the point with the highest validation R@1 (the first in grid order on a tie; a point that
    failed or has no result is never chosen), as ``{model: {"lr", "init", "val_R@1", "run"}}``.

    >>> pts = [SearchPoint("vse", 1e-3, 0.02), SearchPoint("vse", 3e-3, 0.02), SearchPoint("clip", 5e-4)]
    >>> choose_recipes({pts[0].name: 10.0, pts[1].name: 12.0, pts[2].name: None}, pts)
    {'vse': {'lr': 0.003, 'init': 0.02, 'val_R@1': 12.0, 'run': 'vse_lr3.0e-03_init0.02'}}
    """
    best: dict[str, tuple[float, SearchPoint]] = {}
    for p in points:
        r1 = val_r1.get(p.name)
        if r1 is None or not math.isfinite(r1):
            continue
        if p.model not in best or r1 > best[p.model][0]:
            best[p.model] = (r1, p)
    return {m: {"lr": p.lr, "init": p.init, "val_R@1": r1, "run": p.name} for m, (r1, p) in best.items()}
