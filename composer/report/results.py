"""A study folder's results, gathered into ``results.json``: every finished run's ``study_result.json`` under
``OUT/runs/RUN/seedS/`` (the layout the study writes and this package reads), which planned (run, seed) pairs
have none, and why the failed ones failed (their ``error.txt``)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from composer.provenance import git_sha, hardware_description
from crg.outputs import write_json_atomic

__all__ = ["ERROR", "RESULT", "collect", "run_commits", "run_folder", "write_results"]

RESULT = "study_result.json"  # a run's evaluations, beside train()'s results.json; written last: the run is done
ERROR = "error.txt"           # the traceback of a run that failed (and no RESULT)


def run_folder(out: Path, run: str, seed: int) -> Path:
    """Where the study trains ``run`` for ``seed``: ``OUT/runs/RUN/seedS``."""
    return Path(out) / "runs" / run / f"seed{seed}"


def collect(out: Path, runs: list[str], expected: list[tuple[str, int]]) -> tuple[dict, list, dict]:
    """Every finished run result under ``out/runs`` (also of runs and seeds not asked for this time, after
    ``runs`` in their order), the ``expected`` (run, seed) pairs that have none, and the failed ones' last
    error line."""
    found: dict = {}
    for path in sorted((Path(out) / "runs").glob(f"*/seed*/{RESULT}")):
        r = json.loads(path.read_text())
        entry = found.setdefault(r["run"], {"label": r["label"], "model": r["model"], "seeds": {}})
        entry["seeds"][str(r["seed"])] = r
    missing = [(name, s) for name, s in expected if str(s) not in found.get(name, {}).get("seeds", {})]
    failed = {}
    for name, s in missing:
        error = run_folder(out, name, s) / ERROR
        if error.exists():
            lines = error.read_text().strip().splitlines()
            failed[f"{name} seed {s}"] = lines[-1] if lines else "unknown error"
    order = list(runs) + sorted(set(found) - set(runs))
    return {name: found[name] for name in order if name in found}, missing, failed


def run_commits(found: dict) -> list[str]:
    """The commits the collected runs were trained at, sorted (``unknown`` for a result without one).

    >>> run_commits({"a": {"seeds": {"0": {"git": "fc4bf8f"}, "1": {}}}, "b": {"seeds": {"0": {"git": "fc4bf8f"}}}})
    ['fc4bf8f', 'unknown']
    """
    return sorted({r.get("git", "unknown") for e in found.values() for r in e["seeds"].values()})


def write_results(out: Path, *, profile: dict, seeds: list[int], runs: list[str], expected: list[tuple[str, int]],
                  data: dict, recipes: dict | None, wall_seconds: dict[str, float]) -> dict:
    """``OUT/results.json`` from whatever runs have finished, and its content.

    ``profile``: the study's profile as plain values; ``runs``: its run names in order; ``expected``: the
    (run, seed) pairs it plans; ``data``: its data's description (``OUT/data/study_data.json``); ``recipes``:
    the recipe search's choice (None: the named recipes); ``wall_seconds``: every invocation's wall seconds by
    its start (killed ones too: :class:`crg.outputs.InvocationClock`), kept beside those an earlier
    ``results.json`` holds.
    """
    import torch

    out = Path(out)
    found, missing, failed = collect(out, runs, expected)
    previous = {}
    if (out / "results.json").exists():
        previous = json.loads((out / "results.json").read_text()).get("study", {})

    def total(key: str) -> float:
        return round(sum(r.get(key, 0) for e in found.values() for r in e["seeds"].values()), 1)

    results = {"study": {
        "profile": profile, "profile_name": profile["name"], "seeds": seeds, "runs": list(runs),
        "complete": not missing, "missing": [f"{r} seed {s}" for r, s in missing], "failed": failed,
        # the checkout the report was written from, and the ones the runs were trained at (a resumed study
        # may span commits; a result written before runs recorded their commit counts as "unknown")
        "git": git_sha(), "run_gits": run_commits(found),
        "hardware": hardware_description(), "torch": torch.__version__, "python": platform.python_version(),
        "data": data, "recipes": recipes,
        "wall_seconds": {**previous.get("wall_seconds", {}), **wall_seconds},
        "train_seconds_total": total("train_seconds"), "eval_seconds_total": total("eval_seconds")},
        "runs": found}
    write_json_atomic(out / "results.json", results)
    return results
