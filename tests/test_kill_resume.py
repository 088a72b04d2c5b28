"""Everything the library starts, it stops (issue 35): a study's driver killed with SIGKILL while its Ray workers
train takes every process it started down with it (Ray's raylet and workers share the driver's fate; its
dashboard and runtime-env agents, which outlived the driver by more than a minute, are ended by the watcher of
:mod:`crg.fate`), so no run goes on training into a folder a rerun then trains again; the rerun
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
    family = driver.children(recursive=True)
    watchers = {p.pid for p in family if "crg.fate" in " ".join(p.cmdline())}
    started = {p.pid for p in family} - watchers   # the watcher exits on its own, once done
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
    assert watchers and not _alive(watchers)
    finished = {p.parent.parent.name for p in (out / "runs").glob("*/seed0/study_result.json")}
    time.sleep(3)
    assert {p.parent.parent.name for p in (out / "runs").glob("*/seed0/study_result.json")} == finished
    log = call(*args[:-1], "1")      # the rerun (in this process, one run at a time) trains what is missing
    assert sum(": training" in line for line in log) == 3 - len(finished)
    assert json.loads((out / "results.json").read_text())["study"]["complete"]


def test_the_watcher_ends_what_a_killed_process_started_and_then_itself():
    """crg.fate without Ray: a process that started a grandchild in its own session (as Ray's agents
    are) is killed with SIGKILL; the watcher ends the grandchild, then exits."""
    from crg.fate import watch

    script = ("import subprocess, time; subprocess.Popen(['sleep', '300'], start_new_session=True); "
              "time.sleep(300)")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL)
    import psutil

    deadline = time.monotonic() + 30
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.1)
    (sleeper,) = psutil.Process(parent.pid).children()
    watcher = watch(parent.pid)
    assert watch(parent.pid) is None                       # one watcher per process
    time.sleep(3)                                          # it has seen the sleeper by now (every second)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    try:
        watcher.wait(30)
        assert not _alive({sleeper.pid}), "the grandchild outlived its killed parent"
    finally:
        if _alive({sleeper.pid}):
            sleeper.kill()
    assert watcher.returncode == 0


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
    """The uninterrupted reference: VSE ``tiny`` on the 36-image world, checkpoints every 4 steps; one torch thread
    for the module's runs. Why: the tests fork children that train, and a child forked after its parent ran a
    multi-threaded product hangs in its own first one (torch's CPU wheel uses GNU OpenMP, which is not fork-safe).
    The whole suite ran on one thread anyway, set at import by test_negclip.py and test_structural_negatives.py,
    which hid it: this module alone, on two cores, hung until its 300 s join."""
    import hashlib

    import torch

    from composer.training.fit import TrainerOptions, train
    from composer.training.recipes import RecipeOverrides, named_recipe

    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    recipe = named_recipe("vse", str(tiny_world / "captions.jsonl"), RecipeOverrides(
        preset="tiny", features=str(tiny_world / "features.h5"), batch_size=8, max_regions=6, eval_images=6,
        epochs=2, lr=1e-3))

    def options(**kw):
        return TrainerOptions(accelerator="cpu", progress=False, test=False, ckpt_every_n_steps=4, **kw)

    out = tmp_path_factory.mktemp("reference") / "run"
    results = train(recipe, options(), out)
    digest = hashlib.sha256((out / "model" / "model.safetensors").read_bytes()).hexdigest()
    yield recipe, options, results, digest
    torch.set_num_threads(threads)


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


def _train_slowly_then_killed(recipe, options, out, step: int, pause: float):
    import time

    import lightning as L

    from composer.training.fit import train

    class Slow(L.Callback):
        def on_train_batch_end(self, *args):
            time.sleep(pause)

    class SigkillAt(L.Callback):
        def on_train_batch_start(self, trainer, *args):
            if trainer.global_step == step:
                os.kill(os.getpid(), signal.SIGKILL)

    train(recipe, options, out, callbacks=[Slow(), SigkillAt()])


def test_a_resumed_run_counts_the_training_seconds_of_its_killed_segments(tiny_training, tmp_path):
    """``train_seconds`` of a resumed run is the sum over its segments up to each one's last checkpoint (it was the
    last segment's alone: a converge search trial resumed near its end reported 226 s for 2,500 steps)."""
    import multiprocessing
    import time

    import torch

    from composer.training.fit import train

    recipe, options, reference, _ = tiny_training
    out = tmp_path / "run"
    child = multiprocessing.get_context("fork").Process(target=_train_slowly_then_killed,
                                                         args=(recipe, options(), out, 10, 0.5))
    child.start()
    child.join(300)
    assert child.exitcode == -signal.SIGKILL
    state = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    saved = next(v for k, v in state["callbacks"].items() if k.startswith("Timer"))["time_elapsed"]["train"]
    assert saved >= 8 * 0.5  # 8 slow steps before the checkpoint at step 8
    started = time.perf_counter()
    resumed = train(recipe, options(resume=True), out)
    wall = time.perf_counter() - started
    assert resumed["global_step"] == reference["global_step"]
    assert resumed["train_seconds"] > wall  # more than this segment: the killed one's seconds are in it
    assert saved <= resumed["train_seconds"] <= saved + wall + 0.2


# ---------------------------------------------------------------------------- graph and split commands
def _without_timings(value):
    """A JSON value without its wall-clock entries (``*seconds*``, ``*per_second``) and how much came from a cache (a rerun reads
    the parses and graphs the killed run cached), which differ run to run; the results stay."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if "seconds" not in k and not k.endswith("per_second")
                and k not in ("graph_cache_hits", "num_parsed", "num_from_cache")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _outputs(out) -> dict:
    """What a graph or split command wrote, comparable across runs: bytes of the data files, gzip files by
    content (their header holds a time), JSON reports without timings."""
    import gzip

    found = {}
    for p in sorted(out.iterdir()):
        if p.name == "run.json" or p.name.startswith("."):
            continue
        if p.name.endswith(".json.gz"):
            found[p.name] = _without_timings(json.loads(gzip.decompress(p.read_bytes())))
        elif p.suffix == ".gz":
            found[p.name] = gzip.decompress(p.read_bytes())
        elif p.suffix == ".json":
            found[p.name] = _without_timings(json.loads(p.read_text()))
        else:
            found[p.name] = p.read_bytes()
    return found


def _kill_and_rerun(argv: list[str], out, rerun_flag, points: int = 5, *, outputs=_outputs, env=None):
    """Run ``argv`` once whole (the reference), then ``points`` times killed with SIGKILL at a seeded random
    moment of its wall time, each followed by the rerun a user would type (``rerun_flag(out)``); every rerun's
    outputs must be the reference's. Returns the kill moments (s) and the killed runs' exit statuses."""
    import random
    import shutil

    env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    ref = out.parent / "reference"
    for folder in (ref, out.parent / "warm"):  # the second run's time (parse and graph caches warm) sets the moments
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", *argv, "--out", str(folder)], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        wall = time.monotonic() - started
    reference = outputs(ref)
    assert outputs(out.parent / "warm") == reference
    rng = random.Random(35)
    moments, statuses = [], []
    for _ in range(points):
        shutil.rmtree(out, ignore_errors=True)
        moment = rng.uniform(0.3, 1.0) * wall
        proc = subprocess.Popen([sys.executable, "-m", *argv, "--out", str(out)], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(moment)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        moments.append(round(moment, 2))
        statuses.append(proc.returncode)
        again = subprocess.run([sys.executable, "-m", *argv, "--out", str(out), *rerun_flag(out)], cwd=ROOT, check=False,
                               env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, (moment, again.stderr[-2000:])
        assert outputs(out) == reference, moment
    return moments, statuses


@pytest.mark.slow
def test_build_crg_killed_at_five_random_moments_resumes_to_the_uninterrupted_graph(tmp_path):
    toy = ROOT / "crg" / "data" / "toy_captions.jsonl"
    argv = ["crg.cli.build_crg", "--captions", str(toy), "--dump", "--quiet"]
    moments, statuses = _kill_and_rerun(argv, tmp_path / "out",
                                        lambda out: ["--resume"] if (out / "run.json").exists() else [])
    print("build_crg kill moments (s), exit statuses:", moments, statuses)
    assert -signal.SIGKILL in statuses, (moments, statuses)   # at least one kill came before the end


@pytest.mark.slow
def test_make_mcd_split_killed_at_five_random_moments_reruns_to_the_uninterrupted_split(tiny_world, tmp_path):
    corpus = str(tiny_world / "captions.jsonl")
    argv = ["crg.cli.make_mcd_split", "--train", corpus, "--train-split", "train", "--candidates", corpus,
            "--candidate-splits", "test", "--parser", "world", "--num-images", "2",
            "--num-random", "3", "--quiet"]
    # make_mcd_split always starts over (it cannot resume): the rerun replaces what the killed run left
    moments, statuses = _kill_and_rerun(argv, tmp_path / "out",
                                        lambda out: ["--overwrite"] if out.exists() else [])
    print("make_mcd_split kill moments (s), exit statuses:", moments, statuses)
    assert -signal.SIGKILL in statuses, (moments, statuses)


def _study_outputs(out) -> dict:
    """Each run's ``study_result.json`` without timings and the training process's id, and the study's
    completeness."""
    runs = {p.parent.parent.name: _without_timings({k: v for k, v in json.loads(p.read_text()).items() if k != "pid"})
            for p in sorted((out / "runs").glob("*/seed0/study_result.json"))}
    return {"runs": runs, "complete": json.loads((out / "results.json").read_text())["study"]["complete"]}


@pytest.mark.slow
def test_the_study_killed_at_five_random_moments_reruns_to_the_uninterrupted_results(world_env):  # noqa: F811
    root, env, _ = world_env
    argv = ["composer.cli.study", "--data", "world", "--profile", "smoke", "--runs", "composer,vse,flat", "--jobs", "1"]
    moments, statuses = _kill_and_rerun(argv, root / "kill5" / "out", lambda out: [], outputs=_study_outputs,
                                        env=env)
    print("study kill moments (s), exit statuses:", moments, statuses)
    assert -signal.SIGKILL in statuses, (moments, statuses)
