"""Training to the plateau: validation by positives, early stopping after ``patience`` validations without a
gain, the best-by-validation weights exported and tested, the learning curve (``curve.json``) resumable, the
budget of positives, and the default path untouched.

Validation R@1 is scripted per step (a fake on top of the real evaluation) so that when early stopping must
fire, and which validation is the best, are known in advance; the training itself is real (VSE ``tiny`` on
the 36-image world)."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from safetensors.torch import load_file

from composer.models.common.retrieval_module import RetrievalModule
from composer.training.curve import CurvePoint, LearningCurve, early_stop_index, read_curve
from composer.training.fit import TrainerOptions, train
from composer.training.plateau import PlateauConfig
from composer.training.recipes import RecipeOverrides, named_recipe
from kill_switch import Killed

BATCH = 8


def _recipe(world, **plateau):
    return named_recipe("vse", str(world / "captions.jsonl"), RecipeOverrides(
        preset="tiny", features=str(world / "features.h5"), batch_size=BATCH, max_regions=6, eval_images=6,
        epochs=2, lr=1e-3, **plateau))


def _options(**kw):
    return TrainerOptions(accelerator="cpu", progress=False, **kw)


@pytest.fixture()
def scripted_val(monkeypatch):
    """``install(f)``: during fitting, the validation report's R@1 is ``f(global_step)`` (the rest is real)."""

    def install(r1_at_step):
        real = RetrievalModule.evaluate_retrieval

        def fake(self, eval_set):
            report = real(self, eval_set)
            if eval_set.name == "val" and self.trainer is not None and self.trainer.state.fn == "fit":
                report["sentence"]["R@1"] = float(r1_at_step(int(self.global_step)))
            return report

        monkeypatch.setattr(RetrievalModule, "evaluate_retrieval", fake)

    return install


class StepLosses(L.Callback):
    """Every training step's loss, by step."""

    def __init__(self):
        self.losses: dict[int, float] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses[int(trainer.global_step)] = float(outputs["loss"])


class KillAtValidation(L.Callback):
    """Raises at the end of the validation of ``step``: after the curve has been written, before that
    validation's checkpoint (checkpoint callbacks run last), as a kill during it would leave the folder."""

    def __init__(self, step: int):
        self.step = step

    def on_validation_end(self, trainer, pl_module):
        if trainer.global_step == self.step:
            raise Killed(f"killed in the validation of step {self.step}")


# ---------------------------------------------------------------------------- pure parts
def test_plateau_settings_are_checked_and_steps_round_up():
    assert not PlateauConfig().enabled and PlateauConfig(max_positives=1).enabled
    assert PlateauConfig.steps(100, 32) == 4 and PlateauConfig.steps(96, 32) == 3
    for bad in ({"patience": -1}, {"max_positives": 0}, {"val_every_positives": 0}, {"min_delta": -0.5}):
        with pytest.raises(ValueError):
            PlateauConfig(**bad)


def test_the_curve_keeps_one_point_per_step_and_survives_a_round_trip(tmp_path):
    curve = LearningCurve()
    for step, r1 in [(5, 1.0), (10, 3.0), (15, 2.0)]:
        curve.add(CurvePoint(step, step * BATCH, 0, {"R@1": r1, "R@5": 2 * r1}, train_loss=1.0 / step))
    curve.add(CurvePoint(10, 80, 0, {"R@1": 4.0}))            # a resumed run re-validates step 10
    assert [p.step for p in curve.points] == [5, 10] and curve.best().metrics["R@1"] == 4.0
    curve.write(tmp_path, model="vse")
    back, extra = read_curve(tmp_path)
    assert back == curve and extra == {"model": "vse"}
    assert (tmp_path / "curve.csv").read_text().splitlines() == [
        "step,positives,epoch,train_loss,R@1,R@5", "5,40,0,0.2,1.0,2.0", "10,80,0,,4.0,"]
    with pytest.raises(FileNotFoundError, match="--val-every-positives"):
        read_curve(tmp_path / "nothing")


def test_the_curves_of_several_runs_make_one_figure(tmp_path):
    from composer.cli import plot_curves

    for name, slope in [("a", 1.0), ("b", 2.0), ("c", 0.5)]:
        LearningCurve([CurvePoint(s, s * 32, 0, {"R@1": slope * s, "chance_R@1": 2.0}) for s in (10, 20, 30)]
                      ).write(tmp_path / name, model=name)
    out = tmp_path / "fig" / "curves.png"
    assert plot_curves.main([f"A={tmp_path / 'a'}", f"A={tmp_path / 'b' / 'curve.json'}", str(tmp_path / "c"),
                             "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    with pytest.raises(SystemExit, match="missing does not exist: train with --val-every-positives"):
        plot_curves.main([str(tmp_path / "missing"), "--out", str(out)])


# ---------------------------------------------------------------------------- early stopping and the best weights
@pytest.mark.parametrize("values, patience, min_delta, stop_at", [
    ([10, 20, 15, 20, 18, 30, 40], 3, 0.0, 4),     # 15, 20 (a tie is no gain), 18: three without a gain
    ([10, 20, 20.5, 21, 30, 40, 50], 2, 1.0, 3),   # gains of 0.5 and 1.0 are not above min_delta 1
])
def test_early_stopping_fires_after_patience_validations_without_a_gain(tiny_world, tmp_path, scripted_val, values,
                                                                        patience, min_delta, stop_at):
    every = 5  # steps: 40 positives at batch 8
    scripted_val(lambda step: values[step // every - 1])
    assert early_stop_index(values, patience, min_delta) == stop_at   # the plain reference agrees
    out = tmp_path / "run"
    recipe = _recipe(tiny_world, val_every_positives=every * BATCH, patience=patience, min_delta=min_delta,
                     max_positives=10_000)
    results = train(recipe, _options(test=True), out)

    plateau = results["plateau"]
    assert plateau["stopped"] == "patience"
    assert results["global_step"] == plateau["steps"] == every * (stop_at + 1)
    curve, _ = read_curve(out)
    assert [p.step for p in curve.points] == [every * (k + 1) for k in range(stop_at + 1)]
    assert [p.positives for p in curve.points] == [p.step * BATCH for p in curve.points]
    assert curve.values("R@1") == [float(v) for v in values[:stop_at + 1]]
    assert all(p.train_loss is not None and p.train_loss > 0 for p in curve.points)
    assert results["curve"] == curve.to_dict()["points"]

    best_step = every * (values.index(max(values[:stop_at + 1])) + 1)
    assert plateau["best"]["step"] == best_step and plateau["best"]["positives"] == best_step * BATCH
    assert results["checkpoint"] == "checkpoints/best.ckpt"
    assert results["val"]["sentence"]["R@1"] == max(values[:stop_at + 1])

    # the exported model is the best validation's weights, not the last ones
    best = torch.load(out / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    last = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert best["global_step"] == best_step and last["global_step"] == results["global_step"]
    exported = load_file(out / "model" / "model.safetensors")
    assert all(torch.equal(v, best["state_dict"][f"model.{k}"]) for k, v in exported.items())
    if best_step != results["global_step"]:  # (with min_delta the best may be the last: 21 beats 20.5)
        assert any(not torch.equal(v, last["state_dict"][f"model.{k}"]) for k, v in exported.items())

    from composer.training.checkpoint import load_checkpoint

    assert load_checkpoint(out).global_step == best_step     # a run folder names the weights the run reports
    from composer.cli.evaluate import load_model

    assert load_model(out / "model").global_step == best_step  # and so does its saved model, for gc-evaluate

    # train() let go of the folder when it returned: another process may write there (a study trains many
    # runs in one process, each in its own folder)
    import fcntl
    import subprocess
    import sys

    take = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)")
    lock = out.parent / f".{out.name}.lock"
    assert lock.exists() and fcntl  # the lock train() held lies beside the folder
    assert subprocess.run([sys.executable, "-c", take, str(lock)], capture_output=True).returncode == 0

    # resuming a run its patience stopped trains no further
    again = train(recipe, _options(test=False, resume=True), out)
    assert again["global_step"] == results["global_step"] and read_curve(out)[0] == curve


def test_patience_does_not_stop_a_run_before_its_minimum_positives(tiny_world, tmp_path, scripted_val):
    """A flat start (the slow start of a model that sits at chance first) exhausts the patience at the
    third validation; with a minimum of 8 validations' positives the run trains on and then stops."""
    every = 5
    values = [10, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9]
    scripted_val(lambda step: values[min(step // every - 1, len(values) - 1)])
    plain = train(_recipe(tiny_world, val_every_positives=every * BATCH, patience=2, max_positives=10_000),
                  _options(), tmp_path / "plain")
    assert plain["plateau"]["stopped"] == "patience" and plain["global_step"] == 3 * every
    held = train(_recipe(tiny_world, val_every_positives=every * BATCH, patience=2, max_positives=10_000,
                         min_positives=8 * every * BATCH), _options(), tmp_path / "held")
    assert held["plateau"]["stopped"] == "patience" and held["global_step"] == 8 * every
    assert held["plateau"]["min_positives"] == 8 * every * BATCH
    with pytest.raises(ValueError, match="exceeds max_positives"):
        PlateauConfig(min_positives=10, max_positives=5)


@pytest.mark.parametrize("values, stop_at", [
    ([10, 9, 9, 12, 11, 11, 11, 11, 11], 6),     # patience out at the 3rd, a new best at the 4th, out again at the 6th
    ([10, 9, 9, 9, 12, 11, 11, 11, 11], 7),      # the new best at the minimum itself (the 5th)
    ([10, 9, 9, 9, 9, 9, 9, 9, 9], 5),           # no new best: the stop waits for the minimum, as before
])
def test_a_new_best_before_the_minimum_withdraws_the_patience_stop(tiny_world, tmp_path, scripted_val, values,
                                                                    stop_at):
    """Patience 2, a minimum of 5 validations' positives. Lightning's stop is sticky: a run whose patience ran out
    before its minimum stopped at the minimum even after a new best (converge_long, 2026-12-01). The stop
    comes at the first validation from the minimum on that ends ``patience`` validations without a gain
    (``stop_at`` and ``minimum`` count validations from 1)."""
    every, patience, minimum = 5, 2, 5
    scripted_val(lambda step: values[min(step // every - 1, len(values) - 1)])
    assert early_stop_index(values, patience, minimum=minimum - 1) + 1 == stop_at   # the plain reference agrees
    run = train(_recipe(tiny_world, val_every_positives=every * BATCH, patience=patience, max_positives=10_000,
                        min_positives=minimum * every * BATCH), _options(), tmp_path / "run")
    assert run["plateau"]["stopped"] == "patience" and run["global_step"] == stop_at * every
    assert run["plateau"]["best"]["step"] == every * (values.index(max(values[:stop_at])) + 1)


# ---------------------------------------------------------------------------- the budget and resume
def test_the_budget_sets_the_steps_and_a_killed_run_continues_the_same_curve(tiny_world, tmp_path, scripted_val):
    scripted_val(lambda step: float(step % 7))       # any fixed function of the step: equal runs, equal curves
    # 23 steps (184 / 8), validations every 5 and after the last step; no patience: the budget ends it
    recipe = _recipe(tiny_world, val_every_positives=40, max_positives=184)
    opts = dict(test=False, ckpt_every_n_steps=5)  # the step checkpoints fall on validation steps
    full = train(recipe, _options(**opts), tmp_path / "full")
    assert full["global_step"] == 23 and full["plateau"]["stopped"] == "max_positives"
    reference, _ = read_curve(tmp_path / "full")
    assert [p.step for p in reference.points] == [5, 10, 15, 20, 23]

    for name, kill in [("mid_stretch", KillAt(13)), ("in_validation", KillAtValidation(15))]:
        out = tmp_path / name
        with pytest.raises(Killed):
            train(recipe, _options(**opts), out, callbacks=[kill])
        written, _ = read_curve(out)
        assert written.points[-1].step in (10, 15)     # what the killed run had recorded
        resumed = train(recipe, _options(resume=True, **opts), out)
        curve, _ = read_curve(out)
        assert curve == reference, name               # no point lost, none twice, the same values and losses
        assert resumed["global_step"] == 23 and resumed["plateau"]["best"] == full["plateau"]["best"]


def test_a_step_checkpoint_due_at_a_validation_is_written_after_it(tiny_world, tmp_path, scripted_val):
    # the best validation is the first; the step checkpoints fall on validation steps (5, 10, 15): each is written
    # after its validation, not left to the best-by-validation callback (which writes last.ckpt on a new best only)
    scripted_val(lambda step: 10.0 if step == 5 else 5.0)
    recipe = _recipe(tiny_world, val_every_positives=40, max_positives=184)
    out = tmp_path / "run"
    with pytest.raises(Killed):
        train(recipe, _options(test=False, ckpt_every_n_steps=5), out, callbacks=[KillAt(17)])
    last = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    best = torch.load(out / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    assert best["global_step"] == 5 and last["global_step"] == 15
    curve, _ = read_curve(out)
    assert [p.step for p in curve.points] == [5, 10, 15]       # written after the validation it holds


class KillAt(L.Callback):
    """Raises at the start of the batch after step ``step`` (its checkpoint, if any, is written by then)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step == self.step:
            raise Killed(f"killed after step {self.step}")


# ---------------------------------------------------------------------------- the default path
def test_without_plateau_settings_training_is_unchanged(tiny_world, tmp_path):
    """Off by default: no curve, no best checkpoint, the last weights reported; and the plateau machinery
    itself (its callbacks and checkpoints, a validation only after the last step) leaves every training
    loss as it was."""
    plain, plain_losses = tmp_path / "plain", StepLosses()
    results = train(_recipe(tiny_world), _options(test=False), plain, callbacks=[plain_losses])
    assert "plateau" not in results and results["checkpoint"] == "checkpoints/last.ckpt"
    assert not (plain / "curve.json").exists() and not (plain / "checkpoints" / "best.ckpt").exists()
    assert "plateau" not in json.loads((plain / "run.json").read_text())["settings"]["recipe"]

    steps = results["global_step"]
    watched, watched_losses = tmp_path / "watched", StepLosses()
    results = train(_recipe(tiny_world, max_positives=steps * BATCH, val_every_positives=10 ** 6),
                    _options(test=False), watched, callbacks=[watched_losses])
    assert results["global_step"] == steps and results["plateau"]["validations"] == 1
    assert watched_losses.losses == plain_losses.losses and len(plain_losses.losses) == steps
