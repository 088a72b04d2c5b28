"""One run of the study, and the map over runs.

A run (a :class:`composer.study.config.StudyRun` and a seed) is trained by the same
:func:`composer.training.fit.train` a user calls, into its run folder ``OUT/runs/RUN/seedS/`` (checkpoints,
``model/``, ``results.json``), with the profile's budget; then the study's evaluations
(:func:`composer.evaluation.suite.evaluate_suite`: test sets, MCD split, windows, phrases, hard negatives, the
CLIP family's probe) score the **saved** model (``model/``, loaded by :func:`composer.models.registry.load_pretrained`
as ``gc-evaluate`` loads it) and are written to ``study_result.json``, the run's mark of being finished.

:func:`run_tasks` runs the unfinished ones, the half-trained first (:func:`resumed_first`): in this process for
one job, else as Ray tasks (a local Ray of this machine's cores, or the cluster at ``address``; one GPU per run
where there is one).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from composer.models import registry
from composer.models.common.config import plain_config
from composer.provenance import git_sha, hardware_description
from composer.report.results import ERROR, RESULT, run_folder
from composer.study.config import StudyProfile, StudyRun, il_overrides, schedule_for
from composer.study.data import PRUNE_SEED
from composer.training.curve import read_train_curve
from composer.training.recipes import RecipeOverrides, TrainingRecipe, named_recipe
from crg.outputs import write_json_atomic, write_text_atomic

__all__ = ["RESULT", "StudyOptions", "ray_resources", "resumed_first", "run_recipe", "run_tasks", "study_schedule",
           "train_and_evaluate"]

logger = logging.getLogger(__name__)

# glibc's malloc for the study's Ray workers, unless the environment sets it: blocks under 32 MB from the heap and
# 256 MB of free heap kept, instead of returning freed tensors' memory to the kernel and faulting it in again at
# the next step. On the project's 2-core VM, once its free memory had gone back to the host, that re-faulting took
# 70-90 % of the workers' CPU in the kernel (perf: clear_page_erms under page faults from torch's fill and empty)
# and COMPOSER trained at 0.33 steps/s instead of 1.0 (docs/benchmarks.md, "Page faults in the study's workers").
# Allocation only: the numbers are the same.
WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "268435456"}


@dataclass
class StudyOptions:
    """How the runs are trained (not what): Lightning's accelerator and precision (None = bf16-mixed on a
    GPU, 32-true on CPU), whether to keep each run's weights (``model/``, a ``save_pretrained`` folder),
    and where the runs execute (``jobs`` at a time; ``address``: a Ray cluster's)."""

    accelerator: str = "auto"
    precision: str | None = None
    keep_weights: bool = False
    jobs: int = 1
    address: str | None = None


# ---------------------------------------------------------------------------- the run's recipe
def run_recipe(run: StudyRun, seed: int, profile: StudyProfile) -> TrainingRecipe:
    """The world's named recipe of ``run.model`` with the profile's sizes and the run's typed overrides."""
    overrides = dict(run.overrides)
    sizes: dict = {"seed": seed, **profile.world_data(),
                   "eval_images": profile.eval_images, "num_workers": profile.num_workers,
                   "prune_probability": run.prune, "prune_seed": PRUNE_SEED, "parser": run.parser}
    if profile.max_regions is not None:
        sizes["max_regions"] = profile.max_regions
    if profile.plateau is not None:  # validation cadence, patience and the one budget of positives
        sizes.update(profile.plateau.recipe_overrides())
    if run.model in profile.presets:
        sizes["preset"] = profile.presets[run.model]
    if registry.get(run.model).step_schedule is None:
        sched = schedule_for(profile, run.model)
        sizes.update({k: v for k, v in {"lr": sched.lr, "batch_size": sched.batch_size}.items() if v is not None})
    else:
        if profile.clip_batch_size is not None:
            sizes["batch_size"] = profile.clip_batch_size
        sizes["il"] = il_overrides(profile, run)  # IL's step schedule (the plain kinds: its total steps)
    return named_recipe(run.model, "world", RecipeOverrides(**{**sizes, **overrides}))


def study_schedule(run: StudyRun, profile: StudyProfile):
    """``train()``'s ``fit_schedule`` for the run: the profile's :class:`composer.training.schedule.Schedule`
    (the named schedule's shape compressed into its steps); IL's step schedule as it is (the plain kinds: its
    total steps)."""

    def fit_schedule(recipe: TrainingRecipe, spe: int) -> tuple[TrainingRecipe, int, int]:
        if recipe.il is not None:
            return recipe, -1, recipe.il.total_steps
        return schedule_for(profile, run.model).fit(recipe, spe)

    return fit_schedule


# ---------------------------------------------------------------------------- one run
def train_and_evaluate(run: StudyRun, seed: int, profile: StudyProfile, data: dict, out: Path,
                       options: StudyOptions, callbacks=(), fit_schedule=None) -> dict:
    """Train one run for one seed with ``train()`` into ``out`` and evaluate its saved model; returns the
    study's result (written by the caller). A folder a kill left half-trained is resumed from its last
    checkpoint (runs to the plateau are long), or overwritten when that cannot be done (a fixed-budget
    run, other settings, a checkpoint cut short). ``data``: the study's (:func:`composer.study.data.prepare_data`);
    ``callbacks`` go to the trainer (the search's reporter); ``fit_schedule``: ``train()``'s (None: the study's,
    :func:`study_schedule`; benchmarks/plateau_continuation.py passes a longer one)."""
    from composer.evaluation.eval_sets import EvalSets
    from composer.evaluation.suite import evaluate_suite
    from composer.training.fit import TrainerOptions, train

    trained = {}
    recipe, schedule = run_recipe(run, seed, profile), fit_schedule or study_schedule(run, profile)
    sets = EvalSets.shared(profile.world_data(), profile.eval_images, data["world"]["features"],  # read before training
                           data["hard_negatives"]["path"], PRUNE_SEED)

    def fit_in(mode: str) -> dict:
        trainer_options = TrainerOptions(
            accelerator=options.accelerator, devices=1, precision=options.precision, test=False, progress=False,
            # a fixed budget: no validation while training, scored after (the search: on val); to the plateau:
            # validation at the profile's cadence of positives
            val_every=10 ** 9, mode=mode, resume=mode == "resume", log_every_n_steps=profile.log_every_n_steps,
            log_every_seconds=60 if profile.plateau else 10 ** 9)
        return train(recipe, trainer_options, out, callbacks, fit_schedule=schedule,
                     on_trained=lambda prepared: trained.update(run=prepared))

    if resumes(profile, out):
        try:
            fit = fit_in("resume")
        except Exception as err:  # noqa: BLE001 -- other settings, or a checkpoint a kill cut short
            logger.warning("%s seed %d: cannot resume %s (%s): training from the start", run.name, seed, out, err)
            fit = fit_in("overwrite")
    else:
        fit = fit_in("overwrite")
    prepared = trained["run"]
    module, dm, recipe = prepared.module, prepared.datamodule, prepared.recipe
    # the study's evaluations score the saved model, as gc-evaluate would load it
    saved = registry.load_pretrained(out / fit["model_dir"])
    device = next(module.model.parameters()).device
    saved.model.to(device).train(module.model.training)
    module.model = saved.model
    configs = {"model": plain_config(prepared.model_config), "optim": plain_config(recipe.optim),
               "data": plain_config(recipe.data), "il": None if recipe.il is None else plain_config(recipe.il),
               "overrides": run.overrides, "steps_per_epoch": dm.steps_per_epoch()}
    result = {"run": run.name, "model": run.model, "label": run.label, "seed": seed, "steps": fit["global_step"],
              "train_seconds": fit["train_seconds"], "git": git_sha(), "hardware": hardware_description(),
              "device": str(device), "num_parameters": int(sum(p.numel() for p in saved.model.parameters())),
              "config": configs, "prune": run.prune, "parser": run.parser, "model_dir": fit["model_dir"],
              "pid": os.getpid()}
    started = time.perf_counter()
    result.update(evaluate_suite(module, dm, saved.tokenizer, sets, data["mcd"], profile.evals_for(run),
                                 eval_images=profile.eval_images, max_pairs=profile.max_pairs,
                                 phrases_per_caption=profile.phrases_per_caption, probe_steps=profile.probe_steps,
                                 probe_lr=profile.probe_lr, prune=run.prune, parser=run.parser))
    result["eval_seconds"] = round(time.perf_counter() - started, 1)
    if "structural_negatives" in fit:  # the structural negatives training could draw from, by kind
        result["structural_negatives"] = fit["structural_negatives"]
    if "plateau" in fit:  # where the reported weights come from, why training stopped, the learning curve
        result.update(plateau=fit["plateau"], curve=fit["curve"])
    result["train_curve"] = read_train_curve(out)
    result["train_curve"]["seed"] = seed
    return result


def execute_on_worker(*args, **kwargs) -> str:
    """:func:`execute` in a Ray worker, with :func:`composer.training.log_levels.worker_logging`."""
    from composer.training.log_levels import worker_logging

    worker_logging()
    return execute(*args, **kwargs)


def execute(run: StudyRun, seed: int, profile: StudyProfile, data: dict, out: Path, options: StudyOptions,
            threads: int | None = None, callbacks=(), fit_schedule=None) -> str:
    """Train, evaluate and record one (run, seed) in its folder; returns a log line. A run that raises (a
    non-finite loss, say) leaves its traceback in ``error.txt`` and no result: the study goes on, the
    report lists it as failed and a rerun tries it again."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    directory = run_folder(out, run.name, seed)
    (directory / ERROR).unlink(missing_ok=True)
    try:
        result = train_and_evaluate(run, seed, profile, data, directory, options, callbacks, fit_schedule)
    except Exception:  # one broken run must not stop the study: record it and go on
        write_text_atomic(directory / ERROR, traceback.format_exc())
        logger.exception("%s seed %d failed; traceback in %s", run.name, seed, directory / ERROR)
        return f"{run.name} seed {seed}: failed (error.txt)"
    shutil.rmtree(directory / "checkpoints", ignore_errors=True)  # optimiser state: the result is final
    if not options.keep_weights:
        shutil.rmtree(directory / result["model_dir"], ignore_errors=True)
    write_json_atomic(directory / RESULT, result)
    r1 = {key: f"{result[key]['R@1']:.1f}" if key in result else "-" for key in ("test", "mcd")}
    return (f"{run.name} seed {seed}: {result['steps']} steps in {result['train_seconds']:.0f} s, evaluation "
            f"{result['eval_seconds']:.0f} s; test R@1 {r1['test']}, MCD R@1 {r1['mcd']}")


# ---------------------------------------------------------------------------- the map over runs
def ray_resources(options: StudyOptions) -> tuple[int, int]:
    """Start Ray here (or join ``options.address``) unless it runs, and check that its workers import this
    code; returns the CPUs and GPUs of one of ``jobs`` runs at a time (:func:`crg.ray_engine.task_resources`)."""
    import ray

    from composer.provenance import check_worker_code
    from crg.ray_engine import join_ray, task_resources

    if not ray.is_initialized():
        passed = ("PYTHONPATH", "GC_DATA_DIR", "GC_CACHE_DIR", *WORKER_MALLOC)
        env = {**WORKER_MALLOC, **{k: os.environ[k] for k in passed if k in os.environ}}
        env["RAY_CHDIR_TO_TRIAL_DIR"] = "0"  # Tune's trials keep the study's working directory (relative paths)
        join_ray(options.address, env)
        check_worker_code()
    return task_resources(options.jobs)


def resumes(profile: StudyProfile, directory: Path) -> bool:
    """Whether the run in ``directory`` goes on from its last checkpoint: to the plateau, runs are long and a
    kill leaves them half-trained; a fixed-budget run's checkpoint is overwritten instead."""
    return profile.plateau is not None and (directory / "checkpoints" / "last.ckpt").exists()


def resumed_first(todo: list[tuple[StudyRun, int]], profile: StudyProfile, out: Path) -> list[tuple[StudyRun, int]]:
    """``todo`` with the runs that :func:`resumes` first, each group in its given order (a stable sort).

    Why: a resumed run is nearer its end than a fresh one; finishing it first means a machine that goes away
    loses the fewest finished results.
    """
    return sorted(todo, key=lambda task: not resumes(profile, run_folder(out, task[0].name, task[1])))


def run_tasks(tasks: list[tuple[StudyRun, int]], profile: StudyProfile, data: dict, out: Path,
              options: StudyOptions) -> None:
    """Train and evaluate every (run, seed) without a ``study_result.json``; the finished ones are skipped.

    One job without an address runs them here, one after another; otherwise each is a Ray task of
    ``cores / jobs`` CPUs (and a GPU where Ray has one), ``jobs`` at a time on this machine (Ray started
    here unless it is already), or spread over the cluster at ``options.address``.
    """
    todo = []
    for k, (run, seed) in enumerate(tasks, 1):
        if (run_folder(out, run.name, seed) / RESULT).exists():
            logger.info("[%d/%d] %s seed %d: done before, skipped", k, len(tasks), run.name, seed)
        else:
            todo.append((run, seed))
    todo = resumed_first(todo, profile, out)
    if options.jobs == 1 and options.address is None:
        for k, (run, seed) in enumerate(todo, 1):
            logger.info("[%d/%d] %s seed %d: training", k, len(todo), run.name, seed)
            logger.info("[%d/%d] %s", k, len(todo), execute(run, seed, profile, data, out, options))
        return
    import ray

    cpus, gpus = ray_resources(options)
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(execute_on_worker)
    pending = {}
    for k, (run, seed) in enumerate(todo, 1):
        logger.info("[%d/%d] %s seed %d: training (Ray task)", k, len(todo), run.name, seed)
        pending[remote.remote(run, seed, profile, data, out, options, cpus)] = (run, seed)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        run, seed = pending.pop(done[0])
        try:
            logger.info("%s", ray.get(done[0]))
        except Exception as err:  # the worker died (killed, out of memory): no result; a rerun tries again
            logger.error("%s seed %d: the Ray task failed: %s", run.name, seed, err)
            write_text_atomic(run_folder(out, run.name, seed) / ERROR, f"Ray task failed\n{err}\n")
