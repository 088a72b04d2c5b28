"""The equal-budget recipe search: every model of the study gets the same number of training runs (the grid of
:mod:`composer.training.recipe_grid`, seed 0) at the profile's budget, scored on the ``val`` split only, and keeps
the recipe with the best validation R@1 (``OUT/search/chosen.json``); every run of the study, the ablations too,
starts from its model's chosen recipe.

Each point is an ordinary study run (``OUT/search/runs/POINT/seed0``). Under a plateau profile a run may train
the whole budget, so six full runs per model would cost more than the study: there each model's grid is one Ray
Tune search under ASHA (:func:`run_asha_search`), which stops the weakest configurations at
``asha_grace_positives`` and every ``asha_reduction``-fold step after.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

from composer.report.results import RESULT, run_folder
from composer.report.search import ASHA_FILE, read_asha_status, render_search_table, search_value, undecided_points
from composer.study.config import StudyProfile, StudyRun
from composer.study.execute import StudyOptions, execute_on_worker, ray_resources
from composer.training.recipe_grid import GRID_SIZE, SearchPoint, choose_recipes, search_grid
from composer.training.tune_search import check_search_complete, tune_signal_handlers_restored
from crg.outputs import write_json_atomic, write_text_atomic

__all__ = ["SEARCH_DIR", "SEARCH_SEED", "finish_search", "read_chosen", "run_asha_search", "search_points",
           "search_tasks", "with_chosen_recipe"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- the search as study runs
SEARCH_DIR = "search"
SEARCH_SEED = 0


def search_points(runs: list[StudyRun], profile: StudyProfile) -> list:
    """The search grid of every model the runs train, at the profile's preset."""
    return [p for model in dict.fromkeys(r.model for r in runs) for p in search_grid(model, profile.presets.get(model))]


def search_tasks(points: list) -> list[tuple[StudyRun, int]]:
    return [(StudyRun(p.name, p.model, f"{p.model} ({p.setting})", overrides=p.overrides(), evals=("val",)),
             SEARCH_SEED) for p in points]


def finish_search(out: Path, points: list, profile: StudyProfile) -> dict:
    """Read the search's results, choose each searched model's recipe, write ``search/chosen.json`` and the table.

    A model this search did not cover keeps the choice ``chosen.json`` holds (a study grown by ``--runs`` of a
    new model searches that model alone). Refuses when a run of a model whose choice changed has already
    finished in ``out``: a study is trained from one recipe per model, not a mix.
    """
    val_r1, chance, status = {}, None, read_asha_status(out / SEARCH_DIR)
    for p in points:
        val_r1[p.name], point_chance = search_value(out / SEARCH_DIR, p.name, SEARCH_SEED)
        chance = chance or point_chance
    searched = choose_recipes(val_r1, points)
    path = out / SEARCH_DIR / "chosen.json"
    before = json.loads(path.read_text()) if path.exists() else {"chosen": {}, "val_R@1": {}}
    changed = {model for model, choice in searched.items() if before["chosen"].get(model) != choice}
    if changed:
        finished = sorted(result.parent.parent.name for result in (out / "runs").glob(f"*/seed*/{RESULT}")
                          if json.loads(result.read_text()).get("model") in changed)
        if finished:
            raise SystemExit(f"error: {out} holds study runs of {sorted(changed)} trained before this recipe search "
                             f"({finished[:3]} ...); search in a new --out, or delete {out / 'runs'}")
    chosen = {**before["chosen"], **searched}
    write_json_atomic(path, {"chosen": chosen, "val_R@1": {**before.get("val_R@1", {}), **val_r1},
                             "profile": profile.name})
    all_points = [*points, *(q for model in dict.fromkeys(before["chosen"]) if model not in searched
                             for q in search_grid(model, profile.presets.get(model)))]
    write_text_atomic(out / "tables" / "search.md",
                      render_search_table({**before.get("val_R@1", {}), **val_r1}, all_points, chosen, chance,
                                          {q.name: status.get(q.name, {}).get("stopped_at_positives")
                                           for q in all_points}, columns=GRID_SIZE))
    missing = sorted({p.model for p in points} - set(searched))
    if missing:
        raise SystemExit(f"error: the recipe search has no finished run for {missing}; rerun to retry")
    logger.info("recipe search: %s", {m: c["run"] for m, c in chosen.items()})
    return chosen


def adopt_recipes(out: Path, source: Path) -> dict:
    """Train the study in ``out`` from the recipes another study's search chose: ``source/search/chosen.json``, or
    ``source`` itself when it is such a file (a search's choice kept apart from its folder, as docs/studies/ keeps
    the converge search's, so that the study can be run again where the search's folder is gone).

    Why: a study at a longer budget or on more seeds can start from an equal-budget search already run, instead of
    a new one (the search's choice is then the shorter budget's; ``chosen.json`` records where it came from). A
    study that already holds another choice is refused, so one study never mixes recipes.
    """
    src = Path(source) if Path(source).is_file() else Path(source) / SEARCH_DIR / "chosen.json"
    path = out / SEARCH_DIR / "chosen.json"
    mine = json.loads(path.read_text()) if path.exists() else None
    if not src.is_file():
        if mine is not None and mine.get("from"):
            logger.warning("%s is gone: the study keeps the recipes it adopted from it (%s)", src, path)
            return mine["chosen"]
        raise SystemExit(f"error: {src} does not exist: --recipes-from must name a study folder whose recipe "
                         f"search finished, or its search/chosen.json")
    theirs = json.loads(src.read_text())
    if not isinstance(theirs.get("chosen"), dict) or not all(
            isinstance(c, dict) and "lr" in c for c in theirs["chosen"].values()):
        raise SystemExit(f"error: {src} is not a recipe search's chosen.json: it needs "
                         f'{{"chosen": {{MODEL: {{"lr": ..., "init": ...}}}}}}')
    if mine is not None:
        if mine["chosen"] != theirs["chosen"]:
            raise SystemExit(f"error: {path} holds another recipe choice than {src}; use a new --out")
        return mine["chosen"]
    write_json_atomic(path, {**theirs, "from": str(Path(source).resolve())})  # the folder, or the file itself
    logger.info("recipes from %s: %s", src, {m: c["run"] for m, c in theirs["chosen"].items()})
    return theirs["chosen"]


def read_chosen(out: Path) -> dict | None:
    """The recipes the search chose for this study directory, or None (the named recipes)."""
    path = out / SEARCH_DIR / "chosen.json"
    return json.loads(path.read_text())["chosen"] if path.exists() else None


def with_chosen_recipe(run: StudyRun, chosen: dict | None) -> StudyRun:
    """``run`` starting from its model's chosen recipe; the run's own overrides (an ablation's) win.

    >>> run = StudyRun("composer_mlp", "composer", "x", overrides={"model": {"modulator": "mlp"}})
    >>> with_chosen_recipe(run, {"composer": {"lr": 1e-3, "init": 0.02}}).overrides
    {'lr': 0.001, 'model': {'text': {'initializer_range': 0.02}, 'modulator': 'mlp'}}
    """
    if not chosen or run.model not in chosen:
        return run
    base = SearchPoint(run.model, chosen[run.model]["lr"], chosen[run.model].get("init")).overrides()
    merged = {**base, **run.overrides}
    if "model" in base and "model" in run.overrides:
        merged["model"] = {**base["model"], **run.overrides["model"]}
    return replace(run, overrides=merged)


# ---------------------------------------------------------------------------- the search under ASHA (Ray Tune)
METRIC, TIME = "val_R@1", "positives"


def _trial(config: dict, *, points: dict, profile: StudyProfile, data: dict, out: str, options: StudyOptions,
           threads: int) -> None:
    """One configuration, as a Tune trial: the study run of ``points[config["point"]]`` into ``out``."""
    from ray import tune

    from composer.training.plateau import ValidationReporter

    (run, seed), = search_tasks([points[config["point"]]])
    reporter = ValidationReporter(tune.report)  # {METRIC: val R@1, TIME: positives} after each validation
    logger.info("%s", execute_on_worker(run, seed, profile, data, Path(out), options, threads, callbacks=[reporter]))


def run_asha_search(points: list[SearchPoint], profile: StudyProfile, data: dict, out: Path,
                    options: StudyOptions) -> None:
    """Train each model's grid under ASHA into ``out`` (``OUT/search``); writes ``out/asha.json``."""
    from ray import tune

    from composer.study.asha import ResumableASHA

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
        undecided = undecided_points(list(pts), status)
        if tune.Tuner.can_restore(storage / model):  # a killed search: ASHA's state and the unfinished trials
            tuner = tune.Tuner.restore(str(storage / model), trainable, resume_unfinished=True,
                                       restart_errored=True)
        elif not undecided:
            continue
        else:  # a new search (or one whose Tune state is gone: the points asha.json has not decided)
            # max_t one past the budget: the budget (or the patience) ends a run itself, so that its evaluation
            # follows; ASHA only cuts at its rungs (Tune would stop a trial the moment it reports max_t)
            scheduler = ResumableASHA(search_dir=str(out), points=list(pts), time_attr=TIME, metric=METRIC,
                                      mode="max", max_t=plateau.max_positives + 1,
                                      grace_period=plateau.asha_grace_positives,
                                      reduction_factor=plateau.asha_reduction)
            tuner = tune.Tuner(trainable, param_space={"point": tune.grid_search(undecided)},
                               tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=len(pts)),
                               run_config=tune.RunConfig(name=model, storage_path=str(storage), verbose=0))
        logger.info("recipe search (ASHA) of %s: %d configurations", model, len(pts))
        with tune_signal_handlers_restored():
            grid = tuner.fit()
        finished = {name for name in pts if (run_folder(out, name, SEARCH_SEED) / RESULT).exists()}
        check_search_complete(model, grid, finished, storage / model)
        for result in grid:
            name = (result.config or {}).get("point")
            if name is None:  # an error before its first report: no result and no curve, a "failed" point
                continue
            reached = (result.metrics or {}).get(TIME)
            status[name] = {"model": model, "finished": name in finished,
                            "stopped_at_positives": None if name in finished else reached,
                            "error": None if result.error is None else str(result.error).splitlines()[0]}
        write_json_atomic(out / ASHA_FILE, status)
