"""A run's length in steps, with the shape of its learning-rate schedule kept from the named recipe.

The named recipes schedule the learning rate in epochs (warm-up, then /10 steps); :class:`Schedule` gives a run's
length in steps (or epochs) and the shape in fractions of the run, so that a short run keeps the named
configuration's proportions instead of being cut off mid-warm-up, whatever the epoch length.
:meth:`Schedule.fit` is ``train()``'s ``fit_schedule`` (:func:`composer.training.fit.prepare_run`). The study's
profiles give one per model family (:class:`composer.study.config.StudyProfile`). Imports no Lightning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["Schedule"]


@dataclass(frozen=True)
class Schedule:
    """How long one model family trains, and the shape of its learning-rate schedule.

    Attributes:
        steps: optimiser steps; None = ``epochs`` epochs of the training split.
        epochs: used when ``steps`` is None.
        lr, batch_size: None = the named ``world`` recipe's.
        warmup_fraction: linear warm-up over this share of the run.
        decay_fractions: the learning rate is divided by 10 after these shares of the run.

    >>> Schedule(steps=100, warmup_fraction=0.2).total_steps(steps_per_epoch=30)
    100
    """

    steps: int | None = None
    epochs: float | None = None
    lr: float | None = None
    batch_size: int | None = None
    warmup_fraction: float = 0.125
    decay_fractions: tuple[float, ...] = (0.75,)

    def __post_init__(self):
        if (self.steps is None) == (self.epochs is None):
            raise ValueError(f"Schedule: give exactly one of steps and epochs, got {self.steps}, {self.epochs}")
        if (self.steps is not None and self.steps < 1) or (self.epochs is not None and self.epochs <= 0):
            raise ValueError(f"Schedule: steps / epochs must be positive, got {self.steps}, {self.epochs}")
        if not 0 <= self.warmup_fraction <= 1 or any(not 0 < f <= 1 for f in self.decay_fractions):
            raise ValueError(f"Schedule: fractions must lie in [0, 1], got {self.warmup_fraction}, "
                             f"{self.decay_fractions}")

    def total_steps(self, steps_per_epoch: int) -> int:
        """Optimiser steps of the run for a training split of ``steps_per_epoch`` batches."""
        return self.steps if self.steps is not None else max(1, math.ceil(self.epochs * steps_per_epoch))

    def fit(self, recipe, steps_per_epoch: int):
        """``(recipe, epochs, max_steps)``: ``recipe`` (a :class:`composer.training.recipes.TrainingRecipe`) with
        its epoch-based schedule (warm-up, /10 steps) set to this run's steps at ``steps_per_epoch``."""
        max_steps, spe = self.total_steps(steps_per_epoch), steps_per_epoch
        optim = replace(recipe.optim, epochs=max(1, math.ceil(max_steps / spe)),
                        warmup_epochs=self.warmup_fraction * max_steps / spe,
                        decay_epochs=tuple(f * max_steps / spe for f in self.decay_fractions))
        return replace(recipe, optim=optim), optim.epochs, max_steps
