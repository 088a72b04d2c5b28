"""benchmarks/plateau_continuation.py: a run the study's budget ended, continued past it from its final
checkpoint, keeps the study's curve within the budget and trains on at the rate the schedule ended on; the
run trained again from its start to the longer budget repeats the study's curve within the budget
(deterministic CPU training: the longer budget does not touch the budget's schedule).

On the smoke profile's 80-image world with ``tiny`` models (tests/test_study_plateau.py's plateau profile),
patience off in effect, so that the budget ends the run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from composer.study.config import study_runs
from test_study_plateau import BATCH, BUDGET, EVERY, plateau_smoke, world_env  # noqa: F401 -- the fixture

ROOT = Path(__file__).resolve().parents[1]
EXTRA = 16  # positives past the budget: 4 steps at batch 4, two more validations


def _script():
    spec = importlib.util.spec_from_file_location("_script_plateau_continuation",
                                                  ROOT / "benchmarks" / "plateau_continuation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _values(curve):
    return [(p["positives"], p["metrics"]["R@1"]) for p in curve]


def test_a_continued_run_is_the_run_trained_longer(world_env):  # noqa: F811 -- the imported fixture
    from composer.report.results import run_folder
    from composer.study.data import check_study_dir, prepare_data
    from composer.study.execute import StudyOptions, train_and_evaluate
    from crg.outputs import write_json_atomic

    script = _script()
    profile = plateau_smoke(patience=100)
    study = world_env / "continuation_study"
    study.mkdir()
    check_study_dir(study, profile, "world")
    data = prepare_data(profile, study)
    run = study_runs(profile, ["composer"])[0]
    folder = run_folder(study, run.name, 0)
    budget = train_and_evaluate(run, 0, profile, data, folder, StudyOptions(accelerator="cpu"))  # keeps its checkpoints (the study's execute
    write_json_atomic(folder / "study_result.json", budget)     # deletes them)
    assert budget["plateau"]["stopped"] == "max_positives" and budget["plateau"]["positives"] == BUDGET

    resumed = script.continue_run(study, world_env / "resumed", "composer", 0, folder / "checkpoints", EXTRA,
                                  profile=profile)
    again = script.continue_run(study, world_env / "again", "composer", 0, None, EXTRA, profile=profile)
    for r in (resumed, again):
        assert r["plateau"]["max_positives"] == BUDGET + EXTRA and r["plateau"]["positives"] == BUDGET + EXTRA
        assert [p for p, _ in _values(r["curve"])] == list(range(EVERY, BUDGET + EXTRA + 1, EVERY))
        assert script.same_curve_within(budget["curve"], r["curve"], BUDGET)
    assert resumed["steps"] == again["steps"] == (BUDGET + EXTRA) // BATCH
    # the table reads both
    text = script.render([{"run": "composer", "seed": 0, "budget": budget, "continued": resumed}], BUDGET, EXTRA)
    assert "| composer | 0 |" in text and "| yes |" in text


def test_a_checkpoint_copied_elsewhere_keeps_its_best_score(tmp_path):
    torch = pytest.importorskip("torch")
    script = _script()
    old, new = tmp_path / "a" / "checkpoints", tmp_path / "b" / "checkpoints"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    state = {"dirpath": str(old), "best_model_path": str(old / "best.ckpt"), "best_model_score": torch.tensor(7.0),
             "best_k_models": {str(old / "best.ckpt"): torch.tensor(7.0)}}
    torch.save({"state_dict": {}, "callbacks": {"ModelCheckpoint{'monitor': 'val/R@1'}": state,
                                                "CurveRecorder": {"curve": {"points": [str(old)]}}}}, old / "x.ckpt")
    script.moved_checkpoint(old / "x.ckpt", new / "x.ckpt", old, new)
    moved = torch.load(new / "x.ckpt", weights_only=True)["callbacks"]
    ckpt = moved["ModelCheckpoint{'monitor': 'val/R@1'}"]
    assert ckpt["dirpath"] == str(new) and ckpt["best_model_path"] == str(new / "best.ckpt")
    assert list(ckpt["best_k_models"]) == [str(new / "best.ckpt")] and float(ckpt["best_model_score"]) == 7.0
    assert moved["CurveRecorder"] == {"curve": {"points": [str(old)]}}  # other callbacks untouched


def test_the_longer_schedule_is_the_studys_then_constant():
    from composer.study.execute import study_schedule, run_recipe

    script = _script()
    profile = plateau_smoke()
    run = study_runs(profile, ["composer"])[0]
    longer, extra_steps = script.longer_budget(profile, "composer", EXTRA)
    assert extra_steps == EXTRA // BATCH and longer.plateau.max_positives == BUDGET + EXTRA
    recipe = run_recipe(run, 0, profile)
    spe = 7  # steps per epoch: the budget's 10 steps cross an epoch boundary
    ours, _, steps = study_schedule(run, profile)(recipe, spe)
    theirs, max_epochs, longer_steps = script.longer_schedule(run, profile, extra_steps)(recipe, spe)
    assert longer_steps == steps + extra_steps and max_epochs == -1
    rates = [ours.optim.factor(s / spe) for s in range(steps + 1)]
    assert [theirs.optim.factor(s / spe) for s in range(steps + 1)] == rates  # bit for bit
    assert {theirs.optim.factor(s / spe) for s in range(steps, longer_steps + 1)} == {rates[-1]}


def test_rising_only_skips_the_runs_at_their_plateau(tmp_path, capsys):
    from crg.outputs import write_json_atomic

    script = _script()
    study = tmp_path / "study"
    for seed, stopped, gain in ((0, "patience", 5.0), (1, "max_positives", 0.4)):
        write_json_atomic(study / "runs" / "flat" / f"seed{seed}" / "study_result.json",
                          {"plateau": {"stopped": stopped, "last_quarter_gain": gain}})
    write_json_atomic(study / "study.json", {"profile": {"name": "converge"}})
    script.main(["--study", str(study), "--run", "flat", "--seeds", "0,1", "--rising-only", "--out",
                 str(tmp_path / "out")])
    assert "every seed reached its plateau" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="does not exist"):  # a rising run needs its checkpoints
        write_json_atomic(study / "runs" / "flat" / "seed2" / "study_result.json",
                          {"plateau": {"stopped": "max_positives", "last_quarter_gain": 3.0}})
        script.main(["--study", str(study), "--run", "flat", "--seeds", "2", "--rising-only", "--out",
                     str(tmp_path / "out")])
