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

pytestmark = pytest.mark.slow


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
