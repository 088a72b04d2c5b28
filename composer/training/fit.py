"""Fit-and-report: train one recipe with checkpoints, logs and exact resume, test it, write ``results.json``.

Every training entry point (``train_composer``, ``train_baseline``) and every run of the study
(:mod:`composer.study.execute`) calls :func:`train`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import lightning as L
import torch

from composer.models.common.config import plain_config
from composer.provenance import git_sha
from composer.training.data import CompositionDataModule
from composer.training.recipes import TrainingRecipe, build_module, settings_when_on
from crg.outputs import prepare_output_dir, release_output_dir, write_json_atomic

if TYPE_CHECKING:
    from composer.training.plateau import PlateauConfig

__all__ = ["OWNED", "PreparedRun", "ProgressLog", "TrainerOptions", "close_process_group", "fit_and_report",
           "prepare_run", "train", "training_precision"]

# what a training run writes in its folder (``--overwrite`` deletes these and nothing else)
OWNED = ("checkpoints", "logs", "tb", "model", "results.json", "curve.json", "curve.csv", "config.yaml")

logger = logging.getLogger(__name__)


@dataclass
class TrainerOptions:
    """How to run the trainer (not what to train).

    Attributes:
        max_steps: stop after this many steps (-1: the schedule's; the CLIP family's steps by default).
        accelerator, devices, num_nodes: Lightning's (``--num-nodes`` > 1 for multi-node DDP).
        precision: Lightning's; None = bf16-mixed on a GPU, 32-true on CPU.
        ckpt_every_n_steps: checkpoint cadence (``OUT/checkpoints/last.ckpt``).
        resume: continue from ``OUT/checkpoints/last.ckpt``.
        deterministic: torch's deterministic algorithms; None = on CPU, not on a GPU. On CPU with two or more
            threads, two runs of the same seed differed in the seventh digit of the loss from the first steps
            without them (a parallel accumulation), and bit-identical with them at no measured cost (150 steps
            of the README job: 60.7 / 64.1 s without, 65.0 / 62.0 s with, 2 cores); on a GPU they cost speed and
            some kernels have none.
        test: evaluate the test split at the end.
        progress: progress bars.
        val_every: epochs between validations; None = the recipe's.
        mode: the output folder policy (:func:`crg.outputs.prepare_output_dir`): ``new`` refuses a folder
            holding another run, ``resume`` continues one with the same settings, ``overwrite`` replaces it.
        log_every_seconds: without a progress bar or a terminal, log step, loss, speed and ETA this often.
        log_every_n_steps: Lightning's logging cadence of the training losses (the CSV log's rows).
    """

    max_steps: int = -1
    accelerator: str = "auto"
    devices: str | int = "auto"
    num_nodes: int = 1
    precision: str | None = None
    ckpt_every_n_steps: int = 200
    resume: bool = False
    deterministic: bool | None = None
    test: bool = True
    progress: bool = True
    val_every: int | None = None
    mode: str = "new"
    log_every_seconds: float = 60.0
    log_every_n_steps: int = 10


class ProgressLog(L.Callback):
    """A log line now and then (step, loss, steps/s, ETA) for long runs with no terminal attached
    (``nohup``, a batch scheduler, output to a file), where a progress bar shows nothing."""

    def __init__(self, every_seconds: float = 60.0):
        self.every = every_seconds
        self._started = self._last = 0.0
        self._first_step = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self._started = self._last = time.monotonic()
        self._first_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        if now - self._last < self.every or not trainer.is_global_zero:
            return
        self._last = now
        done = trainer.global_step - self._first_step
        rate = done / max(now - self._started, 1e-9)
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else trainer.estimated_stepping_batches
        eta = (total - trainer.global_step) / rate if rate > 0 and total and total != float("inf") else float("nan")
        loss = trainer.callback_metrics.get("train/loss")
        logger.info("step %d/%s epoch %d: loss %s, %.2f steps/s, ETA %s", trainer.global_step, total,
                    trainer.current_epoch, f"{float(loss):.4f}" if loss is not None else "-", rate,
                    time.strftime("%H:%M:%S", time.gmtime(eta)) if eta == eta else "?")


def _use_gpu(options: TrainerOptions) -> bool:
    return torch.cuda.is_available() and options.accelerator in ("auto", "gpu", "cuda")


def deterministic_algorithms(options: TrainerOptions) -> bool:
    """``options.deterministic``, else on CPU only (see :class:`TrainerOptions`)."""
    return options.deterministic if options.deterministic is not None else not _use_gpu(options)


def earlier_segments_seconds(timer) -> float:
    """The training seconds of a run's earlier, killed segments, restored from its checkpoint by Lightning's
    ``Timer`` (0 for a run trained in one go). Why: ``train_seconds`` of a resumed run counted only the last
    segment (a search trial resumed near its end reported 226 s for 2,500 steps). Time after a killed
    segment's last checkpoint is not counted: those steps are trained, and counted, again."""
    start, end = timer.start_time("train"), timer.end_time("train")
    this_segment = end - start if start is not None and end is not None else 0.0
    return max(0.0, timer.time_elapsed("train") - this_segment)


def training_precision(options: TrainerOptions) -> str:
    """``options.precision``, else bf16 on a GPU (the paper's setting on current hardware) and fp32 on CPU."""
    return options.precision or ("bf16-mixed" if _use_gpu(options) else "32-true")


@dataclass
class PreparedRun:
    """A recipe made concrete: its data module, LightningModule, model config and step budget, and the
    recipe as trained (its schedule fitted to the data when :func:`prepare_run` was given ``fit_schedule``)."""

    module: L.LightningModule
    datamodule: CompositionDataModule
    model_config: object
    max_epochs: int
    max_steps: int
    recipe: TrainingRecipe


# (recipe, steps per epoch) -> (recipe with its schedule, max_epochs, max_steps)
ScheduleFit = Callable[[TrainingRecipe, int], tuple[TrainingRecipe, int, int]]


def prepare_run(recipe: TrainingRecipe, *, max_steps: int = -1, fit_schedule: ScheduleFit | None = None) -> PreparedRun:
    """Seed, read (or generate) the data, and build the model for ``recipe``.

    The order is fixed (seed, data, model) so that the model's initial weights are the same for every
    caller. The CLIP family trains for its iterated-learning schedule's steps unless ``max_steps`` is set.
    ``fit_schedule`` sizes the schedule from the training split's steps per epoch before the model is built
    (the study's fixed step budgets); it replaces the rule above.
    """
    L.seed_everything(recipe.data.seed, workers=True)
    dm = CompositionDataModule(recipe.data)
    dm.prepare_data()
    from features.store import FeatureStore

    region_dim = FeatureStore(dm.dataset_spec().require_features()).feature_dim
    max_epochs = recipe.optim.epochs
    if fit_schedule is not None:
        recipe, max_epochs, max_steps = fit_schedule(recipe, dm.steps_per_epoch())
    elif recipe.plateau.max_positives:  # the budget, not the recipe's epochs or schedule length, ends the run
        max_epochs = -1
    elif recipe.il is not None:  # the CLIP family: the schedule's steps, however many epochs they take
        max_epochs, max_steps = -1, max_steps if max_steps > 0 else recipe.il.total_steps
    model_cfg = recipe.model_config(region_dim)
    module = build_module(recipe, model_cfg)
    dm.tokenizer = module.tokenizer
    return PreparedRun(module, dm, model_cfg, max_epochs, max_steps, recipe)


def run_config(recipe: TrainingRecipe, model_cfg, precision: str) -> dict:
    """The ``config`` entry of ``results.json``."""
    out = {"model": plain_config(model_cfg), "optim": asdict(recipe.optim), "data": asdict(recipe.data),
           "precision": precision}
    if recipe.mvsa_concepts is not None:
        out["mvsa_concepts"] = recipe.mvsa_concepts
    if recipe.il is not None:
        out["il"] = asdict(recipe.il)
    if recipe.plateau.enabled:
        out["plateau"] = asdict(recipe.plateau)
    return out


def fit_and_report(run: PreparedRun, options: TrainerOptions, out: Path, *, results: dict,
                   val_every: int = 1, callbacks: Sequence[L.Callback] = ()) -> dict:
    """Fit with checkpoints, CSV + TensorBoard logs and resume; test; write ``OUT/results.json``.

    By default the final weights are checkpointed after training (``checkpoints/last.ckpt``) and are the
    ones saved (``OUT/model``) and tested. With the recipe's plateau settings on
    (:class:`composer.training.plateau.PlateauConfig`: a validation cadence in positives, a patience, a
    budget of positives) the run validates at that cadence, records its learning curve (``OUT/curve.json``),
    stops on patience or budget, and the weights of its best validation (``checkpoints/best.ckpt``) are
    the ones saved and tested; ``results["plateau"]`` says where they came from and why training stopped.
    ``results`` holds the run's own keys (its config); timing, git, hardware, the checkpoint, val and test
    are added. ``callbacks`` are added to the trainer's (e.g. a hyperparameter search's reporter).
    """
    from lightning.pytorch.callbacks import ModelCheckpoint, Timer
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    module, dm = run.module, run.datamodule
    plateau = run.recipe.plateau
    gpu = _use_gpu(options)
    if plateau.enabled:
        control = _PlateauControl(plateau, run, options, out, val_every=options.val_every or val_every)
        callbacks = [*control.callbacks, *callbacks]
        cadence = control.trainer_cadence()
    else:  # the paper's fixed schedule: the last weights, validation every ``val_every`` epochs
        control = None
        ckpt = ModelCheckpoint(dirpath=out / "checkpoints", save_last=True,
                               every_n_train_steps=options.ckpt_every_n_steps, save_top_k=1, monitor=None)
        callbacks = [ckpt, *callbacks]
        cadence = {"check_val_every_n_epoch": options.val_every or val_every}
    if not options.progress or not sys.stderr.isatty():
        callbacks.append(ProgressLog(options.log_every_seconds))
    timer = Timer(verbose=False)  # its training seconds ride in every checkpoint: a resumed run adds them up
    callbacks.append(timer)
    from composer.training.checkpoint_io import AtomicCheckpointIO, resume_checkpoint

    trainer = L.Trainer(
        plugins=[AtomicCheckpointIO()],  # a full disk or a kill never truncates last.ckpt
        default_root_dir=out, max_epochs=run.max_epochs, max_steps=run.max_steps, accelerator=options.accelerator,
        devices=options.devices, num_nodes=options.num_nodes, precision=training_precision(options),
        strategy="ddp" if gpu and torch.cuda.device_count() > 1 else "auto",
        logger=[CSVLogger(out, name="logs"), TensorBoardLogger(out, name="tb")], callbacks=callbacks,
        enable_progress_bar=options.progress, deterministic=deterministic_algorithms(options), num_sanity_val_steps=0,
        use_distributed_sampler=False,  # the training batch sampler shards itself (EpochBatchSampler)
        gradient_clip_val=module.optim.grad_clip or None, log_every_n_steps=options.log_every_n_steps,
        **cadence)
    if control is not None:
        control.fit_to(trainer)
    started = time.perf_counter()
    last = out / "checkpoints" / "last.ckpt"
    resume_from = None
    if options.resume:  # last.ckpt, or the intact checkpoint beside a damaged one (warned), or a clear error
        found = resume_checkpoint(last.parent, last.name)
        if found is not None:
            resume_from = str(found)
        else:
            logger.warning("--resume: %s has no checkpoint yet (the run stopped before its first one): training "
                           "from the start", out)
    trainer.fit(module, datamodule=dm, ckpt_path=resume_from, weights_only=True)  # never unpickle
    trainer.save_checkpoint(last, weights_only=False)  # the end of training (and optimiser state): for --resume
    reported = last
    if control is not None:
        reported = control.restore_best(module)   # the best validation's weights are the run's model
    if trainer.is_global_zero:  # the reported weights as a saved model: gc-evaluate --model OUT/model
        from composer.training.checkpoint import export_pretrained

        export_pretrained(reported, out / "model")
    results.update({"train_seconds": round(time.perf_counter() - started + earlier_segments_seconds(timer), 1),
                    "git": git_sha(),
                    "hardware": torch.cuda.get_device_name(0) if gpu else f"CPU ({torch.get_num_threads()} threads)",
                    "checkpoint": str(reported.relative_to(out)), "model_dir": "model",
                    "global_step": int(trainer.global_step)})
    if control is not None:
        results.update(control.report(trainer))
    if dm.structural is not None:  # what training could draw from (issue 36): kept by kind, dropped by reason
        logger.info(dm.structural.describe())
        results["structural_negatives"] = dm.structural.stats.as_dict()
    if options.test:
        trainer.test(module, datamodule=dm)
        results["test"] = module.results.get("test")
        for role in dm.eval_roles():  # the compositional world's systematic and productivity sets
            trainer.test(module, dataloaders=dm.eval_dataloader(role))
            results[role] = module.results.get(role)
        if trainer.is_global_zero:
            from composer.evaluation.text_pairs import add_twin_scores

            add_twin_scores(module, dm, results)
    if control is not None and control.recorder.best_report is not None:
        results["val"] = control.recorder.best_report  # the validation the reported weights were chosen on
    elif "val" in module.results:
        results["val"] = module.results["val"]
    if trainer.is_global_zero:
        write_json_atomic(out / "results.json", results)
    return results


class _PlateauControl:
    """The callbacks and trainer settings of a run trained to its plateau (:mod:`composer.training.plateau`),
    and what its ``results.json`` says about it."""

    def __init__(self, plateau: PlateauConfig, run: PreparedRun, options: TrainerOptions, out: Path, *,
                 val_every: int):
        from lightning.pytorch.callbacks import ModelCheckpoint

        from composer.training.plateau import (MONITOR, CurveRecorder, PatienceStopping, StepCheckpoint,
                                               ValidateAtEnd)

        self.plateau, self.run, self.out, self.val_every = plateau, run, out, val_every
        self.batch_size = run.recipe.data.batch_size
        self.cap_steps = run.max_steps  # --max-steps, or the CLIP family's schedule without a budget
        self.user_max_steps = options.max_steps if options.max_steps > 0 else None  # --max-steps alone
        self.positives_per_step = self.batch_size
        self.val_steps: int | None = None
        self.budget_steps: int | None = None
        self.min_steps: int | None = None
        self._set_steps(1)
        self.recorder = CurveRecorder(self.batch_size, out, extra={"model": run.recipe.model,
                                                                  "plateau": asdict(plateau)})
        self.stopping = PatienceStopping(plateau.patience, plateau.min_delta) if plateau.patience else None
        # after each validation: best.ckpt when val R@1 improved, and last.ckpt (the state after the validation)
        self.best = ModelCheckpoint(dirpath=out / "checkpoints", filename="best", monitor=MONITOR, mode="max",
                                    save_top_k=1, save_last=True, save_on_train_epoch_end=False,
                                    enable_version_counter=False)
        periodic = StepCheckpoint(dirpath=out / "checkpoints", save_last=True, save_top_k=0, monitor=None,
                                  every_n_train_steps=options.ckpt_every_n_steps, enable_version_counter=False,
                                  validates_after=self.validates_after)
        self.callbacks = [self.recorder, *([self.stopping] if self.stopping else []), ValidateAtEnd(), self.best,
                          periodic]

    def _set_steps(self, world_size: int) -> None:
        self.positives_per_step = self.batch_size * world_size
        p = self.plateau
        self.val_steps = p.steps(p.val_every_positives, self.positives_per_step) if p.val_every_positives else None
        self.budget_steps = p.steps(p.max_positives, self.positives_per_step) if p.max_positives else None
        self.min_steps = p.steps(p.min_positives, self.positives_per_step) if p.min_positives else None

    def trainer_cadence(self) -> dict:
        """Lightning's validation settings: every ``val_steps`` steps across epochs, else every ``val_every``
        epochs."""
        if self.val_steps is not None:
            return {"val_check_interval": self.val_steps, "check_val_every_n_epoch": None}
        return {"check_val_every_n_epoch": self.val_every}

    def fit_to(self, trainer: L.Trainer) -> None:
        """Positives per step count every process: steps of the cadence and the budget for this trainer's."""
        self._set_steps(trainer.world_size)
        if self.val_steps is not None:
            trainer.val_check_interval = self.val_steps
        if self.budget_steps is not None:
            cap = self.cap_steps if self.cap_steps > 0 else self.budget_steps
            trainer.fit_loop.epoch_loop.max_steps = min(cap, self.budget_steps)
        if self.min_steps is not None:  # patience may not stop the run before its minimum
            trainer.fit_loop.epoch_loop.min_steps = self.min_steps

    def validates_after(self, trainer: L.Trainer) -> bool:
        """Whether a validation follows the step just done (the cadence, or the last step)."""
        step = trainer.global_step
        if step >= trainer.estimated_stepping_batches:
            return True
        if self.val_steps is not None:
            return step % self.val_steps == 0
        return step % max(1, trainer.num_training_batches * self.val_every) == 0

    def restore_best(self, module: L.LightningModule) -> Path:
        """Load the best validation's weights into ``module``; returns that checkpoint (``last.ckpt`` when
        no validation ran)."""
        best = self.out / "checkpoints" / "best.ckpt"
        if not best.exists():
            logger.warning("%s: no validation ran, so no best checkpoint: reporting the last weights", self.out)
            return self.out / "checkpoints" / "last.ckpt"
        state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"]
        module.load_state_dict(state)
        return best

    def report(self, trainer: L.Trainer) -> dict:
        """``results.json``'s ``plateau`` (settings, why and where training stopped, the best validation) and
        ``curve`` entries."""
        from composer.training.curve import last_quarter_gain
        from composer.training.plateau import stop_reason

        curve = self.recorder.curve
        best = curve.best()
        step = int(trainer.global_step)
        summary = {**asdict(self.plateau), "positives_per_step": self.positives_per_step,
                   "val_every_steps": self.val_steps, "budget_steps": self.budget_steps,
                   "stopped": stop_reason(stopping=self.stopping, global_step=step, budget_steps=self.budget_steps,
                                          max_steps=self.user_max_steps),
                   "steps": step, "positives": step * self.positives_per_step, "validations": len(curve.points),
                   "best": None if best is None else {"step": best.step, "positives": best.positives,
                                                      "epoch": best.epoch, "val": best.metrics},
                   "last_quarter_gain": last_quarter_gain(curve)}
        return {"plateau": summary, "curve": curve.to_dict()["points"], "curve_file": "curve.json"}


def run_settings(recipe: TrainingRecipe, options: TrainerOptions) -> dict:
    """What decides a run's results: a resumed run must have the same (``OUT/run.json``). The plateau
    settings appear only when on, so that a run from before they existed still resumes."""
    settings = {"recipe": {"model": recipe.model, "dataset": recipe.dataset, "preset": recipe.preset,
                           "model_overrides": recipe.model_overrides, "optim": asdict(recipe.optim),
                           "data": asdict(recipe.data), "il": None if recipe.il is None else asdict(recipe.il),
                           "mvsa_concepts": recipe.mvsa_concepts},
                "precision": training_precision(options)}
    if recipe.plateau.enabled:
        settings["recipe"]["plateau"] = recipe.plateau.settings()
    settings["recipe"] = settings_when_on(settings["recipe"])  # structural / NegCLIP options only when on
    return settings


def is_first_process() -> bool:
    """Whether this process is global rank 0, as its launcher says before any process group exists: the
    one started by hand is, as Lightning's first DDP process is. The processes Lightning starts for the
    other devices (``LOCAL_RANK``) or nodes (``NODE_RANK``), torchrun's (``RANK``) and SLURM's
    (``SLURM_PROCID``) say which they are."""
    return all(int(os.environ.get(name) or 0) == 0 for name in ("RANK", "SLURM_PROCID", "NODE_RANK", "LOCAL_RANK"))


def train(recipe: TrainingRecipe, options: TrainerOptions, out: str | Path,
          callbacks: Sequence[L.Callback] = (), *, fit_schedule: ScheduleFit | None = None,
          on_trained: Callable[[PreparedRun], None] | None = None) -> dict:
    """Train ``recipe`` into the run folder ``out``; returns what ``results.json`` holds.

    The folder policy (:func:`crg.outputs.prepare_output_dir`) is applied before any data are read:
    ``options.mode`` ``new`` refuses a folder holding another run, ``resume`` continues a run with the
    same settings, ``overwrite`` deletes the old run's files first. ``fit_schedule`` sizes the schedule
    from the data (:func:`prepare_run`; the study's fixed step budgets); ``on_trained`` is called with the
    trained run (its module and data module) after ``results.json`` is written, e.g. to evaluate more.
    """
    out = Path(out)
    mode = "resume" if options.resume else options.mode
    if is_first_process():  # under DDP the other processes find the folder prepared
        prepare_output_dir(out, command=f"train {recipe.model}", settings=run_settings(recipe, options), mode=mode,
                           owned=OWNED)
    try:
        logger.info("git %s; recipe %s; trainer %s", git_sha(), recipe, options)
        run = prepare_run(recipe, max_steps=options.max_steps, fit_schedule=fit_schedule)
        results = {"model": recipe.model,
                   "config": run_config(run.recipe, run.model_config, training_precision(options))}
        results = fit_and_report(run, options, out, results=results, val_every=run.recipe.val_every,
                                 callbacks=callbacks)
        if on_trained is not None:
            on_trained(run)
        return results
    finally:  # the folder is free for the next writer once this run is done (a study trains many in one process)
        release_output_dir(out)
        close_process_group()


def close_process_group() -> None:
    """Destroy the process group a DDP trainer opened (Lightning leaves it open for the next trainer).
    Left open, gloo's worker threads are torn down with the interpreter and abort it (SIGABRT, exit code
    -6) after the run's results were written; a later trainer opens a new group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
