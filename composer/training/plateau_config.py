"""The settings of training to the plateau (:class:`PlateauConfig`), apart from its Lightning callbacks
(:mod:`composer.training.plateau`): a configuration that only describes runs (the study's
:class:`composer.study.config.StudyPlateau` extends it) imports no Lightning through it. (The study's
config still imports Lightning today, through ``composer.training.recipes`` when its runs are checked.)

>>> p = PlateauConfig(val_every_positives=1000, patience=3, max_positives=10_000)
>>> p.enabled, p.steps(p.val_every_positives, 32), p.steps(p.max_positives, 32)
(True, 32, 313)
>>> PlateauConfig(patience=0).enabled
False
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["PlateauConfig"]


@dataclass(frozen=True)
class PlateauConfig:
    """When to validate, which weights to keep and when to stop (all off by default: the paper's schedule).

    Part of the recipe (:class:`composer.training.recipes.TrainingRecipe`), not of the trainer options:
    the budget and the patience decide which weights a run reports, so two runs compared must share them
    (and a resumed run must keep them: ``run.json``).

    Attributes:
        val_every_positives: validate every this many positive pairs trained on (over all processes),
            rounded up to whole steps; None: every ``val_every`` epochs as before.
        patience: stop after this many validations in a row without a gain of more than ``min_delta`` in
            val R@1 (Lightning's EarlyStopping); None or 0: no early stopping.
        min_delta: the gain in val R@1 points that counts as an improvement for ``patience``.
        max_positives: train on at most this many positive pairs (``ceil(max_positives / (batch x
            processes))`` steps); it replaces the recipe's number of epochs (or the CLIP family's schedule
            length) as the end of training. The learning-rate schedule keeps its shape in epochs (steps).
        min_positives: never stop for patience before this many positive pairs (Lightning's ``min_steps``):
            a model that sits at chance before it starts to match (COMPOSER from random weights, issue 17)
            would otherwise be stopped on its first flat stretch; None: no minimum.
    """

    val_every_positives: int | None = None
    patience: int | None = None
    min_delta: float = 0.0
    max_positives: int | None = None
    min_positives: int | None = None

    def __post_init__(self):
        for name in ("val_every_positives", "max_positives", "min_positives"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1 (or None: off), got {v}")
        if self.patience is not None and self.patience < 0:
            raise ValueError(f"patience must be >= 0 (0 or None: no early stopping), got {self.patience}")
        if self.min_delta < 0:
            raise ValueError(f"min_delta must be >= 0, got {self.min_delta}")
        if self.min_positives and self.max_positives and self.min_positives > self.max_positives:
            raise ValueError(f"min_positives ({self.min_positives}) exceeds max_positives ({self.max_positives})")

    @property
    def enabled(self) -> bool:
        """Whether any of it is on: then the run keeps its best weights by validation and records its curve."""
        return bool(self.val_every_positives or self.patience or self.max_positives)

    @staticmethod
    def steps(positives: int, positives_per_step: int) -> int:
        """Whole steps that train at least ``positives`` pairs."""
        return max(1, math.ceil(positives / positives_per_step))

    def settings(self) -> dict | None:
        """What ``run.json`` records (None when off, so that runs from before it existed still resume; the
        minimum only when set, so that plateau runs from before it existed do too)."""
        if not self.enabled:
            return None
        out = asdict(self)
        if out["min_positives"] is None:
            del out["min_positives"]
        return out
