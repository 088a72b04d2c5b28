"""Training to the plateau: validation at a fixed cadence of positives, the best weights by validation R@1,
early stopping after a set patience, and a budget of positives that is the same for every model.

Why: a model compared at a fixed, short number of steps is a statement about under-training (issue 31).
Each run here validates on the same fixed validation set (the first ``eval_images`` val images and all
their captions) every ``val_every_positives`` positive pairs, keeps the weights of its best validation
(``checkpoints/best.ckpt``), stops when ``patience`` validations in a row have not beaten the best by more
than ``min_delta`` (Lightning's :class:`~lightning.pytorch.callbacks.EarlyStopping`), and never trains on
more than ``max_positives`` pairs. Its learning curve is :mod:`composer.training.curve`.

Everything is off by default (:attr:`PlateauConfig.enabled` False): the paper's fixed schedule, validation
every ``val_every`` epochs and the last weights reported, exactly as before. The settings are
:class:`composer.training.plateau_config.PlateauConfig` (Lightning-free; also importable from here).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from lightning.pytorch.trainer.states import TrainerFn

from composer.training.curve import CurvePoint, LearningCurve, flat_metrics
from composer.training.plateau_config import PlateauConfig

__all__ = ["MONITOR", "CurveRecorder", "PatienceStopping", "PlateauConfig", "StepCheckpoint", "ValidateAtEnd",
           "ValidationReporter", "stop_reason"]

logger = logging.getLogger(__name__)

# what RetrievalModule logs for the validation set's single-positive sentence R@1
MONITOR = "val/R@1"


class CurveRecorder(L.Callback):
    """Adds a :class:`CurvePoint` to ``curve`` at every validation during fitting and writes ``curve.json`` /
    ``curve.csv`` into ``folder`` (global rank 0). The curve, the running training loss and the best
    validation's full report are saved in checkpoints, so a resumed run continues the same curve."""

    def __init__(self, batch_size: int, folder: str | Path | None = None, *, extra: dict | None = None):
        self.batch_size = batch_size
        self.folder = None if folder is None else Path(folder)
        self.extra = extra or {}
        self.curve = LearningCurve()
        self.best_report: dict | None = None
        self.positives_per_step = batch_size
        self._loss_sum, self._loss_count = 0.0, 0

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.positives_per_step = self.batch_size * trainer.world_size  # each process trains its own batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._loss_sum += float(loss)
            self._loss_count += 1

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:  # not trainer.validate()
            return
        report = getattr(pl_module, "results", {}).get("val")
        if report is None or MONITOR not in trainer.callback_metrics:
            return
        step = int(trainer.global_step)
        loss = self._loss_sum / self._loss_count if self._loss_count else None
        self.curve.add(CurvePoint(step=step, positives=step * self.positives_per_step, epoch=int(trainer.current_epoch),
                                  metrics=flat_metrics(report), train_loss=loss))
        self._loss_sum, self._loss_count = 0.0, 0
        best = self.curve.best()
        if best is not None and best.step == step:
            self.best_report = json.loads(json.dumps(report, default=float))  # plain types: weights-only loading
        if trainer.is_global_zero and self.folder is not None:
            self.curve.write(self.folder, positives_per_step=self.positives_per_step, **self.extra)

    def state_dict(self) -> dict:
        return {"curve": self.curve.to_dict(), "best_report": self.best_report,
                "loss_sum": self._loss_sum, "loss_count": self._loss_count}

    def load_state_dict(self, state_dict: dict) -> None:
        self.curve = LearningCurve.from_dict(state_dict.get("curve", {}))
        self.best_report = state_dict.get("best_report")
        self._loss_sum = float(state_dict.get("loss_sum", 0.0))
        self._loss_count = int(state_dict.get("loss_count", 0))


class ValidationReporter(L.Callback):
    """Calls ``report({"val_R@1": ..., "positives": ...})`` after every validation during fitting: how a
    hyperparameter search (Ray Tune's ASHA, :func:`composer.study.search.run_asha_search`) follows a run without Lightning."""

    def __init__(self, report: Callable[[dict], None]):
        self.report = report

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or MONITOR not in trainer.callback_metrics:
            return
        positives = int(trainer.global_step) * int(trainer.datamodule.cfg.batch_size) * int(trainer.world_size)
        self.report({"val_R@1": float(trainer.callback_metrics[MONITOR]), "positives": positives})


class ValidateAtEnd(L.Callback):
    """Validates after the last step of training when the cadence does not fall on it, so that the curve and
    the best checkpoint see the final weights too (Lightning validates on a step where ``should_stop`` is set)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= trainer.estimated_stepping_batches:
            trainer.should_stop = True


class PatienceStopping(EarlyStopping):
    """Lightning's EarlyStopping on val R@1 (mode max) that also stays stopped when a run it stopped is
    resumed (the stock callback only checks at the next validation, so the run would train on)."""

    def __init__(self, patience: int, min_delta: float = 0.0):
        super().__init__(monitor=MONITOR, mode="max", patience=patience, min_delta=min_delta,
                         check_on_train_epoch_end=False, verbose=True)

    def on_train_start(self, trainer, pl_module) -> None:
        if self.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
            trainer.should_stop = True

    def _run_early_stopping_check(self, trainer) -> None:
        """Lightning's stop is sticky (``should_stop = should_stop or ...``) and its ``min_steps`` only defers it:
        a run whose patience ran out before its minimum stopped at the minimum even when it had beaten its best
        since (converge_long's COMPOSER seed 0, 2026-12-01: patience out at 160,000 positives, a new best at
        184,000 after the /10, stopped at the minimum of 192,000). Up to the minimum the stop is this callback's
        alone (the budget ends at or after it), so an improvement there withdraws it."""
        super()._run_early_stopping_check(trainer)
        minimum = trainer.fit_loop.epoch_loop.min_steps or 0
        if (self.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED and self.wait_count < self.patience
                and trainer.global_step <= minimum):
            trainer.should_stop = False
            self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
            self.stopping_reason_message = None
            self.stopped_epoch = 0


class StepCheckpoint(ModelCheckpoint):
    """The every-N-steps ``last.ckpt``, written after the validation when one follows the step: a checkpoint
    written before a validation would, when resumed, skip that validation (Lightning fast-forwards past it).
    Why not leave that step to the best-by-validation callback: its ``save_last`` writes only when the
    validation is a new best, so without this a run that stopped improving kept a checkpoint up to twice the
    cadence old."""

    def __init__(self, *args, validates_after: Callable[[object], bool], **kwargs):
        super().__init__(*args, **kwargs)
        self.validates_after = validates_after

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.validates_after(trainer):
            return  # a checkpoint due now is written after the validation (on_validation_end)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        every = self._every_n_train_steps  # (a step already saved, or not fitting: _should_skip says so)
        if every >= 1 and trainer.global_step % every == 0 and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


def stop_reason(*, stopping: EarlyStopping | None, global_step: int, budget_steps: int | None,
                max_steps: int | None) -> str:
    """Why training ended: ``patience`` (early stopping), ``max_positives`` (the budget), ``max_steps``
    (``--max-steps``) or ``schedule`` (the recipe's epochs or the CLIP family's steps ran out).

    >>> stop_reason(stopping=None, global_step=100, budget_steps=100, max_steps=None)
    'max_positives'
    >>> stop_reason(stopping=None, global_step=50, budget_steps=100, max_steps=50)
    'max_steps'
    """
    if stopping is not None and stopping.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
        return "patience"
    if budget_steps is not None and global_step >= budget_steps:
        return "max_positives"
    if max_steps is not None and max_steps > 0 and global_step >= max_steps:
        return "max_steps"
    return "schedule"
