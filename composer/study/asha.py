"""The recipe search at the plateau budget with early termination: Ray Tune's ASHA over each model's grid.

Why: under a plateau profile (:class:`composer.study.config.StudyPlateau`) a search run trains up to the
whole budget of positives, so six full runs per model would cost more than the study itself. ASHA
(asynchronous successive halving, Li et al. 2020, as Ray Tune implements it) cuts at
``asha_grace_positives`` and every ``asha_reduction``-fold step after, keeping the best ``1 / asha_reduction``
of the configurations that reached the cut. Each model has its own Tuner over its own grid, so
configurations are only compared with the same model's, on val R@1, never a test set.

A trial is the study's own run (:func:`composer.study.execute.execute`: ``train()`` to the plateau, then
scored on val) with a callback that reports each validation to Tune
(:class:`composer.training.plateau.ValidationReporter`). A trial ASHA stops leaves its learning curve
(``curve.json``) and no ``study_result.json``; :func:`composer.study.search.search_value` reads the best
val R@1 of each point from either. A killed search resumes: the Tuner is restored from ``OUT/search/tune/MODEL``
(its ASHA state included) and each unfinished trial continues its run folder from its last checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path

from composer.study.config import StudyProfile
from composer.study.execute import RESULT, StudyOptions, execute_on_worker, ray_resources, run_dir
from composer.study.search import ASHA_FILE, SEARCH_SEED, SearchPoint, read_asha_status, search_tasks
from crg.outputs import write_json_atomic

__all__ = ["SearchInterrupted", "check_search_complete", "run_asha_search"]

logger = logging.getLogger(__name__)

METRIC, TIME = "val_R@1", "positives"


class SearchInterrupted(RuntimeError):
    """A model's search ended with trials still pending or running (Tune's answer to a stop signal)."""


def check_search_complete(model: str, grid, finished: set[str], path: Path) -> None:
    """Raise :class:`SearchInterrupted` unless every trial of ``grid`` (Tune's ``ResultGrid``) finished its run
    (its point is in ``finished``: the run wrote its result), was stopped by ASHA or errored. Why: on SIGINT
    ``Tuner.fit()`` saves its state, stops the running trials and *returns*; their status then reads TERMINATED
    like ASHA's cuts, and only the last result's ``done`` flag, which Tune sets when its scheduler stops a trial,
    tells a cut from an interruption (a run that ended by itself is known by its result file: a restored Tuner
    does not keep its ``done``). A study that went on would choose this model's configuration from half-trained
    trials and start the next model's search."""
    unfinished = sum(1 for result in grid if result.config["point"] not in finished and result.error is None
                     and not (result.metrics or {}).get("done"))
    if unfinished:
        raise SearchInterrupted(f"the recipe search of {model} stopped with {unfinished} of {len(grid)} trials "
                                f"unfinished (a stop signal?); its state is saved in {path}: rerun the same "
                                f"command to resume it")


def _trial(config: dict, *, points: dict, profile: StudyProfile, data: dict, out: str, options: StudyOptions,
           threads: int) -> None:
    """One configuration, as a Tune trial: the study run of ``points[config["point"]]`` into ``out``."""
    from ray import tune

    from composer.training.plateau import ValidationReporter

    point: SearchPoint = points[config["point"]]
    (run, seed), = search_tasks([point])
    reporter = ValidationReporter(lambda metrics: tune.report({METRIC: metrics["val_R@1"], TIME: metrics["positives"]}))
    logger.info("%s", execute_on_worker(run, seed, profile, data, Path(out), options, threads, callbacks=[reporter]))


def run_asha_search(points: list[SearchPoint], profile: StudyProfile, data: dict, out: Path,
                    options: StudyOptions) -> None:
    """Train each model's grid under ASHA into ``out`` (``OUT/search``); writes ``out/asha.json``."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    plateau = profile.plateau
    if plateau is None or plateau.asha_grace_positives is None:
        raise ValueError(f"profile {profile.name!r} has no ASHA settings (StudyPlateau.asha_grace_positives)")
    out = Path(out).resolve()
    ray_resources(options)  # Ray started (or joined) as the study's runs find it
    import ray

    total_cpus, total_gpus = ray.cluster_resources().get("CPU", 1), ray.cluster_resources().get("GPU", 0)
    status = read_asha_status(out)
    for model in dict.fromkeys(p.model for p in points):
        pts = {p.name: p for p in points if p.model == model}
        storage = out / "tune"
        trainable = tune.with_resources(
            tune.with_parameters(_trial, points=pts, profile=profile, data=data, out=str(out), options=options,
                                 threads=max(1, int(total_cpus // len(pts)))),
            # all of a model's configurations at once, each a share of the machine: asynchronous ASHA lets
            # the first trial to reach a cut through it, so with two at a time the first two would pass
            # every cut; trials that reach a cut together are compared with each other
            {"cpu": min(1.0, total_cpus / len(pts)), "gpu": min(1.0, total_gpus / len(pts))})
        if tune.Tuner.can_restore(storage / model):  # a killed search: ASHA's state and the unfinished trials
            tuner = tune.Tuner.restore(str(storage / model), trainable, resume_unfinished=True,
                                       restart_errored=True)
        else:
            # max_t one past the budget: the budget (or the patience) ends a run itself, so that its evaluation
            # follows; ASHA only cuts at its rungs (Tune would stop a trial the moment it reports max_t)
            scheduler = ASHAScheduler(time_attr=TIME, metric=METRIC, mode="max", max_t=plateau.max_positives + 1,
                                      grace_period=plateau.asha_grace_positives,
                                      reduction_factor=plateau.asha_reduction)
            tuner = tune.Tuner(trainable, param_space={"point": tune.grid_search(list(pts))},
                               tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=len(pts)),
                               run_config=tune.RunConfig(name=model, storage_path=str(storage), verbose=0))
        logger.info("recipe search (ASHA) of %s: %d configurations", model, len(pts))
        grid = tuner.fit()
        finished = {name for name, point in pts.items()
                    if (run_dir(out, search_tasks([point])[0][0], SEARCH_SEED) / RESULT).exists()}
        check_search_complete(model, grid, finished, storage / model)
        for result in grid:
            name = result.config["point"]
            reached = (result.metrics or {}).get(TIME)
            status[name] = {"model": model, "finished": name in finished,
                            "stopped_at_positives": None if name in finished else reached,
                            "error": None if result.error is None else str(result.error).splitlines()[0]}
        write_json_atomic(out / ASHA_FILE, status)
