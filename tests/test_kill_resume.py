"""Everything the library starts, it stops (issue 35): a study's driver killed with SIGKILL while its Ray workers
train takes every process it started down with it (Ray's raylet and workers share the driver's fate; its
dashboard and runtime-env agents, which outlived the driver by more than a minute, are ended by the watcher of
:mod:`composer.study.fate`), so no run goes on training into a folder a rerun then trains again; the rerun
completes the study.

Slow (a local Ray and a smoke study on the 80-image world: about 2-4 minutes on 2 busy cores): marked ``slow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from test_run_study import run_study, world_env  # noqa: F401  (fixtures)




def _alive(pids: set[int]) -> set[int]:
    import psutil

    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.slow
def test_killing_the_study_driver_stops_its_ray_workers_and_the_rerun_completes(world_env, run_study):  # noqa: F811
    import psutil

    root, env, _ = world_env
    _, call = run_study
    out = root / "ray_killed_study"
    args = ("--data", "world", "--out", str(out), "--profile", "smoke", "--runs", "composer,vse,flat", "--jobs", "2")
    proc = subprocess.Popen([sys.executable, "-m", "composer.cli.study", *args], cwd=ROOT,
                            env={**os.environ, **env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    driver = psutil.Process(proc.pid)
    deadline = time.monotonic() + 600
    workers: list[psutil.Process] = []
    while proc.poll() is None and time.monotonic() < deadline:   # until a Ray worker runs a study task
        try:
            family = driver.children(recursive=True)
            workers = [p for p in family if "ray::execute" in " ".join(p.cmdline()) or p.name() == "ray::execute"]
        except psutil.Error:
            family, workers = [], []
        if workers:
            break
        time.sleep(0.5)
    assert workers, "the study ended or timed out before a Ray worker started a run"
    time.sleep(2)
    started = {p.pid for p in driver.children(recursive=True)
               if "composer.study.fate" not in " ".join(p.cmdline())}   # the watcher exits on its own
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    until = time.monotonic() + 60
    while _alive(started) and time.monotonic() < until:
        time.sleep(0.5)
    left = _alive(started)
    try:
        assert not left, f"processes the study started outlived its driver by 60 s: " \
                         f"{[(p, psutil.Process(p).name()) for p in left]}"
    finally:
        for pid in left:  # never leave them to the rest of the test session
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finished = {p.parent.parent.name for p in (out / "runs").glob("*/seed0/study_result.json")}
    time.sleep(3)
    assert {p.parent.parent.name for p in (out / "runs").glob("*/seed0/study_result.json")} == finished
    log = call(*args[:-1], "1")      # the rerun (in this process, one run at a time) trains what is missing
    assert sum(": training" in line for line in log) == 3 - len(finished)
    assert json.loads((out / "results.json").read_text())["study"]["complete"]


# ---------------------------------------------------------------------------- training: kill -9 at random points
def _train_killed(recipe, options, out, kill) -> None:
    """In a forked child (the imports are paid once): train until ``kill`` sends this process SIGKILL."""
    import lightning as L
    import torch

    from composer.training.fit import train

    class SigkillAt(L.Callback):
        def __init__(self, step: int):
            self.step = step

        def on_train_batch_start(self, trainer, *args):
            if trainer.global_step == self.step:
                os.kill(os.getpid(), signal.SIGKILL)

    callbacks = []
    if kill[0] == "step":
        callbacks.append(SigkillAt(kill[1]))
    else:  # in the middle of the kill[1]-th checkpoint write: half of it on disk
        real, calls = torch.save, []

        def dying_save(obj, f, *args, **kwargs):
            calls.append(1)
            if len(calls) < kill[1]:
                return real(obj, f, *args, **kwargs)
            import io
            buffer = io.BytesIO()
            real(obj, buffer)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        torch.save = dying_save
    train(recipe, options, out, callbacks=callbacks)


def _kill_points(n_steps: int) -> list[tuple[str, int]]:
    """Four random steps (seeded: 9, 10, 19, 22 of 36), one before the first checkpoint (step 2) and one in the
    middle of a checkpoint write (the third: step 8's)."""
    import random

    steps = sorted(random.Random(35).sample(range(1, n_steps), 4))
    return [("step", s) for s in steps] + [("step", 2), ("write", 3)]


@pytest.fixture(scope="module")
def tiny_training(tiny_world, tmp_path_factory):
    """The uninterrupted reference: VSE ``tiny`` on the 36-image world, checkpoints every 4 steps."""
    import hashlib

    from composer.training.fit import TrainerOptions, train
    from composer.training.recipes import RecipeOverrides, named_recipe

    recipe = named_recipe("vse", str(tiny_world / "captions.jsonl"), RecipeOverrides(
        preset="tiny", features=str(tiny_world / "features.h5"), batch_size=8, max_regions=6, eval_images=6,
        epochs=2, lr=1e-3))

    def options(**kw):
        return TrainerOptions(accelerator="cpu", progress=False, test=False, ckpt_every_n_steps=4, **kw)

    out = tmp_path_factory.mktemp("reference") / "run"
    results = train(recipe, options(), out)
    digest = hashlib.sha256((out / "model" / "model.safetensors").read_bytes()).hexdigest()
    return recipe, options, results, digest


@pytest.mark.parametrize("point", range(6))
def test_training_killed_at_a_random_point_resumes_to_the_uninterrupted_weights(tiny_training, tmp_path, point):
    import hashlib
    import multiprocessing

    from composer.training.fit import train

    recipe, options, reference, digest = tiny_training
    kill = _kill_points(reference["global_step"])[point]
    out = tmp_path / "run"
    child = multiprocessing.get_context("fork").Process(target=_train_killed, args=(recipe, options(), out, kill))
    child.start()
    child.join(300)
    assert child.exitcode == -signal.SIGKILL, (kill, child.exitcode)
    assert not (out / "results.json").exists()
    resumed = train(recipe, options(resume=True), out)
    assert resumed["global_step"] == reference["global_step"], kill
    assert hashlib.sha256((out / "model" / "model.safetensors").read_bytes()).hexdigest() == digest, kill
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.endswith(".tmp")]
