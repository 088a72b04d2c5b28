"""The whole study: its data once per study directory (:mod:`composer.study.data`), every unfinished (run, seed)
trained by ``train()`` and evaluated on its saved model, here or on Ray (:mod:`composer.study.execute`), and the
report from whatever has finished (:mod:`composer.report`: ``results.json``, then the tables and plots).

``gc-study`` (composer/cli/study.py, ``experiments/run_study.py``) parses its arguments and calls
:func:`run_study`. Each run writes its ``study_result.json`` atomically when it is done; a rerun skips finished
runs and trains the others (a folder left half-trained by a kill is resumed from its last checkpoint under a
plateau profile, else trained from its beginning), so a killed study resumes where it stopped (seeds and runs
may grow between invocations; other profile settings may not).
"""

from __future__ import annotations

import logging
from pathlib import Path

from composer.models.common.config import plain_config
from composer.report.render import render_report
from composer.report.results import write_results
from composer.study.config import StudyProfile, StudyRun
from composer.study.data import check_study_dir, prepare_data
from composer.study.execute import StudyOptions, run_tasks
from composer.study.search import (SEARCH_DIR, adopt_recipes, finish_search, read_chosen, run_asha_search,
                                   search_points, search_tasks, with_chosen_recipe)
from crg.outputs import InvocationClock

__all__ = ["run_study", "study_tasks"]

logger = logging.getLogger(__name__)


def study_tasks(runs: list[StudyRun], seeds: list[int], profile: StudyProfile) -> list[tuple[StudyRun, int]]:
    """The (run, seed) pairs of the study, seed-major: one seed of everything first."""
    return [(run, seed) for seed in seeds for run in runs if seed in profile.seeds_for(run, seeds)]


def run_study(out: str | Path, profile: StudyProfile, *, seeds: list[int], runs: list[StudyRun],
              options: StudyOptions, report_only: bool = False, data: str = "world", search: bool = False,
              search_only: bool = False, recipes_from: str | Path | None = None) -> dict:
    """Prepare the data, train and evaluate every unfinished (run, seed), and write the report.

    ``search`` first runs the equal-budget recipe search (composer/study/search.py) into ``out/search``
    and trains the study from the chosen recipes (``search_only``: the search alone); ``recipes_from``: from
    another study's chosen recipes instead (:func:`composer.study.search.adopt_recipes`). ``report_only``
    trains nothing. Returns ``results.json``'s content (``{"search": chosen}`` for the search alone).
    """
    if options.jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {options.jobs}")
    if recipes_from is not None and (search or search_only):
        raise ValueError("recipes_from and a recipe search exclude each other: the study's recipes come from one")
    out = Path(out).resolve()  # absolute: Ray workers and restored Tune trials may start in another directory
    out.mkdir(parents=True, exist_ok=True)
    check_study_dir(out, profile, data)
    with InvocationClock(out) as clock:
        logger.info("study %s: profile %s, seeds %s, %d runs", out, profile.name, seeds, len(runs))
        study_data = prepare_data(profile, out)
        if search or search_only:
            points = search_points(runs, profile)
            if not report_only and profile.plateau is not None and profile.plateau.asha_grace_positives is not None:
                run_asha_search(points, profile, study_data, out / SEARCH_DIR, options)
            elif not report_only:
                run_tasks(search_tasks(points), profile, study_data, out / SEARCH_DIR, options)
            chosen = finish_search(out, points, profile)
            if search_only:
                return {"search": chosen}
        if recipes_from is not None:
            adopt_recipes(out, Path(recipes_from))
        chosen = read_chosen(out)
        runs = [with_chosen_recipe(r, chosen) for r in runs]
        tasks = study_tasks(runs, seeds, profile)
        if not report_only:
            run_tasks(tasks, profile, study_data, out, options)
        results = write_results(out, profile=plain_config(profile), seeds=seeds, runs=[r.name for r in runs],
                                expected=[(r.name, s) for r, s in tasks], data=study_data, recipes=chosen,
                                wall_seconds=clock.segments())
        render_report(out, results)
        return results
