"""The study trained to the plateau (issue 31 item 5): one budget of positives for every model, every run
validated at one cadence and stopped by its patience or the budget, a killed run resumed from its last
checkpoint, and the recipe search at that budget under Ray Tune's ASHA.

Everything runs on the smoke profile's 80-image world with ``tiny`` models, turned into a plateau profile
(:func:`plateau_smoke`): a budget of 40 positives (10 steps at batch 4), validation every 8 positives."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from dataclasses import replace

import pytest

from composer.study.config import PROFILES, Schedule, StudyPlateau, get_profile, study_runs
from kill_switch import KillAt

BUDGET, EVERY, BATCH = 40, 8, 4


def plateau_smoke(**plateau) -> object:
    """The smoke profile with every schedule spanning BUDGET positives at batch BATCH."""
    steps = math.ceil(BUDGET / BATCH)
    return replace(
        PROFILES["smoke"], name="smoke_plateau",
        schedules={"composer": Schedule(steps=steps, batch_size=BATCH, lr=1e-3),
                   "vse": Schedule(steps=steps, batch_size=BATCH, lr=1e-3)},
        il={"t_warm": 2, "t_distill": 1, "t_interact": 2, "generations": 2, "t_extend": 2, "lr_warmup_steps": 1},
        clip_batch_size=BATCH,
        plateau=StudyPlateau(**{"max_positives": BUDGET, "val_every_positives": EVERY, "patience": 3, **plateau}))


def test_a_plateau_profile_refuses_schedules_that_do_not_span_its_budget():
    good = plateau_smoke()
    assert good.plateau.recipe_overrides()["max_positives"] == BUDGET
    with pytest.raises(ValueError, match="must span max_positives"):
        replace(good, schedules={**good.schedules, "vse": Schedule(steps=3, batch_size=BATCH)})
    with pytest.raises(ValueError, match="must span max_positives"):
        replace(good, clip_batch_size=None)  # the CLIP family's batch must be explicit
    with pytest.raises(ValueError, match="must span max_positives"):
        replace(good, il={**good.il, "t_extend": 5})
    with pytest.raises(ValueError, match="asha_grace_positives"):
        StudyPlateau(max_positives=100, val_every_positives=10, patience=2, asha_grace_positives=100)
    converge = get_profile("converge")
    assert converge.plateau is not None and converge.seeds == (0, 1, 2)
    assert {r.name for r in study_runs(converge)} >= {"composer", "vse", "flat", "clip", "codebook_clip", "il_clip"}
    # converge at twice the budget: the same models and validation, the /10 at half of it, and no run may stop
    # before it has trained past the /10 (its curve's last part is then all after the decay)
    long = get_profile("converge_long")
    assert long.runs == converge.runs and long.plateau.max_positives == 2 * converge.plateau.max_positives
    assert long.plateau.val_every_positives == converge.plateau.val_every_positives
    for name in ("composer", "vse"):
        sched = long.schedules[name]
        assert sched.steps * sched.batch_size == long.plateau.max_positives
        assert sched.warmup_fraction * sched.steps == converge.schedules[name].warmup_fraction * converge.schedules[name].steps
        assert max(sched.decay_fractions) * long.plateau.max_positives < long.plateau.min_positives


@pytest.fixture(scope="module")
def world_env(tmp_path_factory):
    """The smoke profile's generated world under its own data and cache directories."""
    root = tmp_path_factory.mktemp("plateau_study")
    env = {"GC_DATA_DIR": str(root / "data"), "GC_CACHE_DIR": str(root / "cache")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield root
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_every_run_trains_to_its_plateau_and_a_killed_run_resumes_its_curve(world_env):
    from composer.study.data import prepare_data
    from composer.report.results import run_folder
    from composer.study.execute import RESULT, StudyOptions, execute
    from composer.study.runner import run_study

    profile = plateau_smoke()
    out = world_env / "study"
    runs = study_runs(profile, ["composer", "vse", "il_clip"])
    results = run_study(out, profile, seeds=[0], runs=runs, options=StudyOptions(accelerator="cpu"))
    assert results["study"]["complete"]
    for name in ("composer", "vse", "il_clip"):
        r = results["runs"][name]["seeds"]["0"]
        plateau, curve = r["plateau"], r["curve"]
        assert plateau["max_positives"] == BUDGET and plateau["positives_per_step"] == BATCH
        assert plateau["stopped"] in ("patience", "max_positives")
        assert r["steps"] <= math.ceil(BUDGET / BATCH) and plateau["positives"] == r["steps"] * BATCH
        # validations every 2 steps (8 positives) and after the last step
        assert [p["step"] for p in curve][:-1] == list(range(2, r["steps"], 2))[:len(curve) - 1]
        assert curve[-1]["step"] == r["steps"]
        best = max(curve, key=lambda p: p["metrics"]["R@1"])
        assert plateau["best"]["val"]["R@1"] == best["metrics"]["R@1"]
        if "val" in r:  # scored after training on the saved model: the best validation's weights
            assert r["val"]["R@1"] == best["metrics"]["R@1"]
    # the figure of every main model's curve
    assert (out / "plots" / "learning_curves.png").stat().st_size > 10_000
    assert "Training to the plateau" in (out / "tables.md").read_text()

    # a run killed after step 5 resumes from its checkpoint of step 4 and ends as an unbroken run does
    data = prepare_data(profile, out)
    vse = study_runs(profile, ["vse"])[0]
    killed = world_env / "killed"
    options = StudyOptions(accelerator="cpu")
    assert "failed" in execute(vse, 0, profile, data, killed, options, callbacks=[KillAt(5)])
    folder = run_folder(killed, vse.name, 0)
    assert (folder / "checkpoints" / "last.ckpt").exists() and not (folder / RESULT).exists()
    execute(vse, 0, profile, data, killed, options)
    resumed = json.loads((folder / RESULT).read_text())
    whole = results["runs"]["vse"]["seeds"]["0"]
    assert sorted(p.name for p in (folder / "logs").iterdir()) == ["version_0", "version_1"]  # resumed, not redone
    assert [p["step"] for p in resumed["curve"]] == [p["step"] for p in whole["curve"]]
    assert resumed["steps"] == whole["steps"] and resumed["plateau"]["stopped"] == whole["plateau"]["stopped"]


@pytest.mark.slow  # six Ray Tune trials, each its own process: minutes on 2 cores
def test_the_search_at_the_budget_runs_under_asha_and_chooses_on_val(world_env):
    import ray

    from composer.study.execute import StudyOptions
    from composer.study.runner import run_study
    from composer.report.search import read_asha_status, search_value
    from composer.training.recipe_grid import search_grid

    profile = plateau_smoke(asha_grace_positives=EVERY, asha_reduction=2)
    out = world_env / "asha"
    import signal

    ray.init(num_cpus=2, include_dashboard=False)  # after world_env: the workers inherit its data directories
    sigint = signal.getsignal(signal.SIGINT)
    try:
        chosen = run_study(out, profile, seeds=[0], runs=study_runs(profile, ["vse"]), search_only=True,
                           search=True, options=StudyOptions(accelerator="cpu", jobs=2))["search"]
    finally:
        ray.shutdown()
    assert signal.getsignal(signal.SIGINT) is sigint  # Ctrl-C stops the study's runs after the search (Tune's handler gone)
    status = read_asha_status(out / "search")
    points = search_grid("vse", profile.presets.get("vse"))
    assert set(status) == {p.name for p in points}
    values = {}
    for p in points:
        s = status[p.name]
        assert s["error"] is None
        if s["finished"]:
            assert s["stopped_at_positives"] is None
        else:  # ASHA ended it at a rung: the grace period or a reduction-fold multiple of it, below the budget
            assert s["stopped_at_positives"] in (EVERY, 2 * EVERY, 4 * EVERY)
        values[p.name] = search_value(out / "search", p.name)[0]
        assert values[p.name] is not None
    assert chosen["vse"]["run"] == max(values, key=lambda n: (values[n], -list(values).index(n)))
    table = (out / "tables" / "search.md").read_text()
    assert all(p.setting in table for p in points)


class _Result:
    """The part of Tune's Result the check reads: the point, the last metrics (Tune's ``done`` flag) and the error."""

    def __init__(self, point: str | None, done: bool | None, error: Exception | None = None):
        self.config = None if point is None else {"point": point}  # Tune's: None until the trial reports
        self.metrics = {} if done is None else {"val_R@1": 10.0, "done": done}
        self.error = error


def test_a_search_that_tune_stopped_early_stops_the_study(tmp_path):
    """Tuner.fit() returns after a stop signal with the running trials stopped and TERMINATED, like ASHA's cuts:
    the study must not choose a configuration from half-trained trials and go on to the next model (seen twice
    on the converge study; the first check counted TERMINATED trials and let the second one through)."""
    from composer.training.tune_search import SearchInterrupted, check_search_complete

    # a run that ended by itself (its result written; a restored Tuner reports done=False), a cut, an error
    done = [_Result("a", False), _Result("b", True), _Result("c", None, RuntimeError("out of memory"))]
    check_search_complete("vse", done, {"a"}, tmp_path)
    with pytest.raises(SearchInterrupted, match=r"composer stopped with 2 of 4 trials unfinished.*rerun"):
        check_search_complete("composer", done[:2] + [_Result("d", False), _Result("e", None)], {"a"}, tmp_path)
    with pytest.raises(SearchInterrupted, match=r"1 of 1"):
        check_search_complete("composer", [_Result("a", False)], set(), tmp_path)  # no result: interrupted
    # stopped before its first report (seen on a loaded machine: the check raised a TypeError instead)
    with pytest.raises(SearchInterrupted, match=r"1 of 2"):
        check_search_complete("composer", [_Result(None, None), _Result(None, None, MemoryError())], set(), tmp_path)


@pytest.mark.slow  # a Ray cluster and four Tune trials: about 30 s
def test_a_real_tune_search_interrupted_by_sigint_is_seen_as_unfinished(tmp_path):
    """The same check against Ray Tune itself: SIGINT in the middle of an ASHA search, Tune returns normally,
    and the check raises; the uninterrupted search passes it (ASHA's cuts included)."""
    import signal
    import threading

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from composer.training.tune_search import SearchInterrupted, check_search_complete

    def reporting_trial(config):  # defined here so that Ray ships it by value (workers cannot import tests/)
        import time

        from ray import tune

        for step in range(1, 60):
            time.sleep(0.2)
            tune.report({"val_R@1": config["point"] * step, "positives": step})

    def search(name, interrupt_after_s=None, concurrent=4):
        scheduler = ASHAScheduler(time_attr="positives", metric="val_R@1", mode="max", max_t=1000, grace_period=2,
                                  reduction_factor=2)
        # the best first, and (uninterrupted) one at a time: each later trial reaches the first rung after a better
        # one and is cut, whatever the machine's load (asynchronous ASHA passes a trial that arrives first)
        tuner = tune.Tuner(reporting_trial, param_space={"point": tune.grid_search([4, 3, 2, 1])},
                           tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=concurrent),
                           run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0))
        if interrupt_after_s is not None:
            threading.Timer(interrupt_after_s, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        return tuner.fit()

    ray.init(num_cpus=4, include_dashboard=False)
    try:
        interrupted = search("interrupted", interrupt_after_s=6.0)
        complete = search("complete", concurrent=1)
    finally:
        ray.shutdown()
    assert interrupted.num_terminated == len(interrupted)  # why counting TERMINATED trials was not enough
    with pytest.raises(SearchInterrupted):
        check_search_complete("toy", interrupted, set(), tmp_path)
    check_search_complete("toy", complete, set(), tmp_path)
    assert sorted(result.metrics["positives"] for result in complete) == [2, 2, 2, 59]  # three cuts count as done


def test_ray_workers_log_the_runs_progress_and_not_lightnings_chatter():
    """A worker's logging: Lightning's INFO lines (seed, model summary) off, the runs' progress lines on."""
    import logging

    from composer.training.log_levels import QUIET_LOGGERS, worker_logging

    import composer.training.fit  # noqa: F401  (Lightning's loggers as they are before the call)

    names = (*QUIET_LOGGERS, "composer.study", "composer.training.fit")
    before = {n: logging.getLogger(n).level for n in names}
    try:
        worker_logging()
        assert logging.getLogger("lightning.pytorch").getEffectiveLevel() == logging.WARNING
        assert logging.getLogger("crg").getEffectiveLevel() == logging.WARNING
        assert logging.getLogger("composer.training.fit").isEnabledFor(logging.INFO)
        assert logging.getLogger("composer.study.search").isEnabledFor(logging.INFO)
        assert not logging.getLogger("composer.models").isEnabledFor(logging.INFO)
        assert {"composer.study", "composer.training.fit"} <= set(logging.root.manager.loggerDict)
        assert "composer" in QUIET_LOGGERS
    finally:
        for n, level in before.items():
            logging.getLogger(n).setLevel(level)


@pytest.mark.slow  # two local Ray starts: about 30 s
def test_a_study_whose_ray_workers_import_other_code_stops_before_any_run(tmp_path, monkeypatch):
    """A local Ray's workers put the driver's working directory first on sys.path: a study started in another
    checkout than the installed one trained in the workers with that checkout's code (seen on the converge
    study, where Tune's trials then failed to unpickle). The check compares the library's source digests."""
    import shutil

    import ray

    import composer
    from composer.provenance import LIBRARY_PACKAGES, code_identity
    from composer.provenance import WorkerCodeMismatch, check_worker_code

    root = Path(composer.__file__).resolve().parents[1]
    other = tmp_path / "other_checkout"
    for name in LIBRARY_PACKAGES:
        shutil.copytree(root / name, other / name, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(other)
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        check_worker_code()  # a copy with the same sources is the same code
    finally:
        ray.shutdown()
    with open(other / "composer" / "study" / "execute.py", "a") as f:
        f.write("\n# edited in the other checkout\n")
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        with pytest.raises(WorkerCodeMismatch, match=rf"from {other}.* than this process \({root}\)"):
            check_worker_code()
    finally:
        ray.shutdown()
    assert code_identity().location == str(root)  # the driver's own code is unchanged


def test_the_last_quarter_trend_is_the_least_squares_slope_with_its_error():
    import numpy as np

    from composer.report.convergence import last_quarter_trend, render_plateau_table

    rng = np.random.default_rng(0)
    positives = np.arange(8_000, 160_001, 8_000)
    r1 = 40 + 20 * (1 - np.exp(-positives / 50_000)) + rng.normal(0, 1.5, len(positives))
    curve = [{"positives": int(p), "metrics": {"R@1": float(r)}} for p, r in zip(positives, r1)]
    slope, se = last_quarter_trend(curve)
    last = positives >= 120_000
    x = positives[last] / 40_000                                     # quarters of the 160,000 positives
    (want_slope, _), cov = np.polyfit(x, r1[last], 1, cov="unscaled")
    residual = r1[last] - np.polyval(np.polyfit(x, r1[last], 1), x)
    want_se = np.sqrt(residual @ residual / (last.sum() - 2) * cov[0, 0])
    assert slope == pytest.approx(want_slope) and se == pytest.approx(want_se)
    assert last_quarter_trend(curve[:3]) is None                     # fewer than 3 validations in the quarter
    found = {"flat": {"label": "Flat", "seeds": {"0": {"plateau": {"stopped": "max_positives", "positives": 160_000,
                                                                    "last_quarter_gain": 2.0, "best": {}},
                                                       "curve": curve}}}}
    assert f"| {slope:+.1f} ± {se:.1f} | **no** |" in render_plateau_table(found)


def test_half_trained_runs_are_resumed_before_fresh_ones_are_started(tmp_path):
    """A plateau study starts with the runs a kill left with a last checkpoint, each group in the study's order
    (their results come soonest); a fixed-budget profile, whose checkpoints are overwritten, keeps its order."""
    from composer.report.results import run_folder
    from composer.study.execute import resumed_first

    plateau, fixed = get_profile("converge_long"), get_profile("cpu")
    assert plateau.plateau is not None and fixed.plateau is None
    runs = {run.name: run for run in study_runs(plateau)}
    todo = [(runs[name], seed) for seed in (1, 2) for name in ("composer", "vse", "flat", "codebook_clip")]
    for name, seed in (("codebook_clip", 2), ("vse", 1), ("flat", 2)):
        (run_folder(tmp_path, name, seed) / "checkpoints").mkdir(parents=True)
        (run_folder(tmp_path, name, seed) / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run_folder(tmp_path, "composer", 1) / "checkpoints").mkdir(parents=True)  # a folder without a checkpoint

    order = [(run.name, seed) for run, seed in resumed_first(todo, plateau, tmp_path)]
    assert order == [("vse", 1), ("flat", 2), ("codebook_clip", 2),
                     ("composer", 1), ("flat", 1), ("codebook_clip", 1), ("composer", 2), ("vse", 2)]
    assert resumed_first(todo, fixed, tmp_path) == todo
