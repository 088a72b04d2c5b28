"""A killed ASHA search resumes with the rungs it had (composer.study.asha.ResumableASHA).

Tune restores a search's scheduler as it was created, with empty rungs; the converge study's IL-CLIP search
lost two configurations that way: after the restart each one's first report (64K positives, the chance-level
validation right after a new agent's spawn) was judged at the 48K rung it had passed before, against the
reports since the restart only. The references here are Ray Tune's own scheduler classes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import pytest

pytest.importorskip("ray.tune")

from ray.tune.schedulers import ASHAScheduler, TrialScheduler
from ray.tune.schedulers.async_hyperband import _Bracket

from composer.report.results import run_folder
from composer.report.search import curve_reports
from composer.study.asha import ResumableASHA
from composer.training.curve import CurvePoint, LearningCurve
from composer.training.tune_search import rung_records

GRACE, RF, MAX_T = 16, 3, 161   # milestones 16, 48, 144, as the converge profile's (in thousands of positives)


@dataclass
class FakeTrial:
    """What the scheduler reads of a Tune trial."""

    trial_id: str
    config: dict = field(default_factory=dict)


def _random_reports(rng: random.Random, every: int) -> list[tuple[int, float]]:
    n = rng.randint(1, 20)
    return [(every * (k + 1), round(rng.uniform(0, 80), 1)) for k in range(n)]


def test_rung_records_are_what_rays_bracket_records_for_any_interleaving():
    rng = random.Random(0)
    for case in range(200):
        every = rng.choice([4, 8, 10, 16, 50])   # validations that fall on the milestones, and that jump them
        reports = {f"t{i}": _random_reports(rng, every) for i in range(rng.randint(1, 6))}
        bracket = _Bracket(min_t=GRACE, max_t=MAX_T, reduction_factor=RF, s=0)
        # Ray's own bracket, fed every report (its STOP decisions ignored: records are kept either way)
        queue = [(name, k) for name, rs in reports.items() for k in range(len(rs))]
        rng.shuffle(queue)
        queue.sort(key=lambda item: item[1])   # a trial's reports stay in order; trials interleave
        rng.shuffle(queue)
        order = {name: 0 for name in reports}
        for name, _ in queue:
            t, v = reports[name][order[name]]
            order[name] += 1
            bracket.on_result(FakeTrial(name), t, v)
        expected = {m: dict(recorded) for m, recorded in bracket._rungs}
        assert rung_records(reports, [m for m, _ in bracket._rungs]) == expected, case


def _write_curve(search_dir, point: str, reports: list[tuple[int, float]]) -> None:
    curve = LearningCurve([CurvePoint(step=t, positives=t, epoch=0, metrics={"R@1": v}) for t, v in reports])
    folder = run_folder(search_dir, point, 0)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "curve.json").write_text(json.dumps({"positives_per_step": 1, **curve.to_dict()}))


def _scheduler(cls, search_dir, points):
    kwargs = {"time_attr": "positives", "metric": "val_R@1", "mode": "max", "max_t": MAX_T, "grace_period": GRACE,
              "reduction_factor": RF}
    if cls is ResumableASHA:
        kwargs |= {"search_dir": str(search_dir), "points": points}
    return cls(**kwargs)


# the converge study's IL-CLIP search, in thousands of positives. Before the kill "best" had reached 96 and
# "dip" 56; after it, "best" reports first (104), then "dip" its 64: the chance-level 3.6 right after a new
# agent's spawn, as "best" had at its own 64. Listed in the order the uninterrupted search received them.
BEFORE_KILL = {
    "dip": [(8, 28.0), (16, 36.0), (24, 38.0), (32, 40.4), (40, 39.2), (48, 43.2), (56, 44.8)],
    "best": [(8, 24.8), (16, 38.4), (24, 36.8), (32, 39.6), (40, 39.2), (48, 44.0), (56, 45.6), (64, 3.6),
             (72, 48.4), (80, 46.8), (88, 50.4), (96, 32.8)],
    "weak": [(8, 10.8), (16, 26.4)],
}
AFTER_KILL = [("best", 104, 46.4), ("dip", 64, 3.6), ("dip", 72, 47.0), ("best", 112, 48.4), ("dip", 80, 47.5)]


def _run(scheduler, trials: dict, results) -> list[str]:
    return [scheduler.on_trial_result(None, trials[name], {"positives": t, "val_R@1": v}) for name, t, v in results]


@pytest.mark.parametrize("restart", [False, True])
def test_a_restored_search_decides_as_the_uninterrupted_one(tmp_path, restart):
    points = list(BEFORE_KILL)
    trials = {name: FakeTrial(f"id_{name}", {"point": name}) for name in points}
    uninterrupted = _scheduler(ASHAScheduler, tmp_path, points)
    for trial in trials.values():
        uninterrupted.on_trial_add(None, trial)
    before = [(name, t, v) for name, reports in BEFORE_KILL.items() for t, v in reports]
    before.sort(key=lambda r: r[1])   # stable: at each validation, the trials in BEFORE_KILL's order
    decisions = _run(uninterrupted, trials, before)
    assert decisions.count(TrialScheduler.STOP) == 1   # "weak" cut at 16, below the two others
    expected = _run(uninterrupted, trials, AFTER_KILL)
    assert expected == [TrialScheduler.CONTINUE] * len(AFTER_KILL)   # no new rung reached before 144

    # the restart: the curves on disk hold what the trials reported; Tune gives a scheduler with empty rungs
    for name, reports in BEFORE_KILL.items():
        _write_curve(tmp_path, name, reports)
    resumed = _scheduler(ResumableASHA, tmp_path, points)
    if restart:   # Tune unpickles the scheduler it saved with the search, before any trial was added
        import pickle

        resumed = pickle.loads(pickle.dumps(resumed))
    for trial in trials.values():
        resumed.on_trial_add(None, trial)
        resumed.on_trial_add(None, trial)   # a trial requeued on restore is added again
    assert _run(resumed, trials, AFTER_KILL) == expected
    assert {m: dict(r) for m, r in resumed._brackets[0]._rungs} == {m: dict(r) for m, r in uninterrupted._brackets[0]._rungs}

    plain = _scheduler(ASHAScheduler, tmp_path, points)   # Ray's own scheduler, restored: the failure
    for trial in trials.values():
        plain.on_trial_add(None, trial)
    assert _run(plain, trials, AFTER_KILL)[:2] == [TrialScheduler.CONTINUE, TrialScheduler.STOP]


def test_curve_reports_read_each_points_validations_and_skip_points_without_a_curve(tmp_path):
    _write_curve(tmp_path, "a", [(8, 1.0), (16, 2.5)])
    assert curve_reports(tmp_path, ["a", "never_started"]) == {"a": [(8, 1.0), (16, 2.5)]}
    fresh = _scheduler(ResumableASHA, tmp_path / "empty", ["a"])
    fresh.on_trial_add(None, FakeTrial("id_a", {"point": "a"}))
    assert all(not recorded for _, recorded in fresh._brackets[0]._rungs)   # a new search starts empty


@pytest.mark.slow  # a Ray cluster, three Tune trials, a SIGINT and a restore: about 40 s
def test_a_real_tune_search_killed_and_restored_keeps_its_rungs(tmp_path):
    """Through Ray Tune itself: the scheduler is pickled with the search and unpickled by ``Tuner.restore``,
    the restored trials are added again, and a trial whose first report after the restart is far below the
    others' (IL-CLIP's spawn) is judged at no rung it had passed: it trains to the end."""
    import os
    import signal
    import threading
    import time

    import ray
    from ray import tune

    from composer.training.tune_search import tune_signal_handlers_restored

    search_dir = tmp_path / "search"

    def curve_trial(config):  # defined here so that Ray ships it by value (workers cannot import tests/)
        import json
        import time
        from pathlib import Path

        from ray import tune

        point = config["point"]
        folder = Path(config["search_dir"]) / "runs" / point / "seed0"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "curve.json"
        points = json.loads(path.read_text())["points"] if path.exists() else []
        restarted_at = len(points) + 1 if points else None   # a restarted trial goes on after its last validation
        for step in range(len(points) + 1, 13):
            time.sleep(1.0)
            value = {"best": 50.0, "dip": 60.0, "weak": 10.0}[point] + step
            if point == "dip" and step == restarted_at:
                value = 1.0   # far below every record, at a step that is no rung (2, 6, 18, ...)
            points.append({"step": step, "positives": step, "epoch": 0, "metrics": {"R@1": value}})
            (folder / "curve.json.tmp").write_text(json.dumps({"points": points}))
            (folder / "curve.json.tmp").replace(path)  # atomic: the test's watcher thread reads it meanwhile
            tune.report({"val_R@1": value, "positives": step})

    names = ["best", "dip", "weak"]
    scheduler = ResumableASHA(search_dir=str(search_dir), points=names, time_attr="positives", metric="val_R@1",
                              mode="max", max_t=100, grace_period=2, reduction_factor=3)
    ray.init(num_cpus=3, include_dashboard=False)
    try:
        tuner = tune.Tuner(curve_trial, param_space={"point": tune.grid_search(names),
                                                     "search_dir": str(search_dir)},
                           tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=3),
                           run_config=tune.RunConfig(name="s", storage_path=str(tmp_path / "tune"), verbose=0))
        def validations(name):
            path = search_dir / "runs" / name / "seed0" / "curve.json"
            return len(json.loads(path.read_text())["points"]) if path.exists() else 0

        def interrupt_after_the_first_rung():
            while validations("dip") < 3:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt_after_the_first_rung, daemon=True).start()
        with tune_signal_handlers_restored():  # Tune's handler would outlive the test (the library's guard)
            tuner.fit()
        assert validations("dip") in (3, 4), validations("dip")   # past the rung at 2; the next report is no rung
        restored = tune.Tuner.restore(str(tmp_path / "tune" / "s"), curve_trial, resume_unfinished=True)
        assert isinstance(restored._local_tuner._tune_config.scheduler, ResumableASHA)   # unpickled with the search
        with tune_signal_handlers_restored():
            grid = restored.fit()
    finally:
        ray.shutdown()
    reached = {r.config["point"]: r.metrics["positives"] for r in grid}
    assert reached["dip"] == 12   # its value 1.0 right after the restart was judged at no rung it had passed


def test_tunes_sigint_handler_is_put_back_after_a_search():
    """Tune's fit installs a SIGINT handler and restores the previous one only when a signal arrives: after a
    search, Ctrl-C during the study's runs was swallowed ("ending Ray Tune run") and the study went on."""
    import signal

    from composer.training.tune_search import tune_signal_handlers_restored

    def tunes_handler(sig, frame):  # what ray.tune.tune._setup_signal_catching leaves behind
        pass

    before = signal.getsignal(signal.SIGINT)
    with tune_signal_handlers_restored():
        signal.signal(signal.SIGINT, tunes_handler)
        signal.signal(signal.SIGUSR1, tunes_handler)
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.getsignal(signal.SIGUSR1) is not tunes_handler
    with pytest.raises(RuntimeError), tune_signal_handlers_restored():  # a search that fails restores them too
        signal.signal(signal.SIGINT, tunes_handler)
        raise RuntimeError("a trial's error")
    assert signal.getsignal(signal.SIGINT) is before
