"""The study's report, made from the runs' results alone (``gc-study --report-only`` reruns it): ``results.json``,
the tables (``tables.md``, ``tables/*.md``; :mod:`composer.study.tables`) and the plots
(``plots/*.png``; :mod:`composer.study.plots`)."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import torch

from composer.models.common.config import plain_config
from composer.provenance import git_sha, hardware_description
from composer.study.config import MODELS, StudyProfile, StudyRun
from composer.study.execute import RESULT
from composer.study.search import read_chosen
from crg.outputs import write_json_atomic, write_text_atomic

__all__ = ["PLOT_FILES", "collect", "run_commits", "write_report"]

TABLES_DIR, PLOTS_DIR = "tables", "plots"
PLOT_FILES = ("composer_figure4_r1_vs_cd.png", "il_clip_loss_generations.png", "il_clip_easy_to_learn.png")


def collect(out: Path, profile: StudyProfile, runs: list[StudyRun], seeds: list[int]) -> tuple[dict, list, dict]:
    """Every finished run result under ``out/runs`` (also of runs and seeds not asked for this time), the
    (run, seed) pairs asked for that have none, and the failed ones' last error line."""
    found: dict = {}
    for path in sorted((out / "runs").glob(f"*/seed*/{RESULT}")):
        r = json.loads(path.read_text())
        entry = found.setdefault(r["run"], {"label": r["label"], "model": r["model"], "seeds": {}})
        entry["seeds"][str(r["seed"])] = r
    missing = [(r.name, s) for s in seeds for r in runs
               if s in profile.seeds_for(r, seeds) and str(s) not in found.get(r.name, {}).get("seeds", {})]
    failed = {}
    for name, s in missing:
        error = out / "runs" / name / f"seed{s}" / "error.txt"
        if error.exists():
            lines = error.read_text().strip().splitlines()
            failed[f"{name} seed {s}"] = lines[-1] if lines else "unknown error"
    order = [r.name for r in runs] + sorted(set(found) - {r.name for r in runs})
    return {name: found[name] for name in order if name in found}, missing, failed


def run_commits(found: dict) -> list[str]:
    """The commits the collected runs were trained at, sorted (``unknown`` for a result without one).

    >>> run_commits({"a": {"seeds": {"0": {"git": "fc4bf8f"}, "1": {}}}, "b": {"seeds": {"0": {"git": "fc4bf8f"}}}})
    ['fc4bf8f', 'unknown']
    """
    return sorted({r.get("git", "unknown") for e in found.values() for r in e["seeds"].values()})


def write_report(out: Path, profile: StudyProfile, runs: list[StudyRun], seeds: list[int], data: dict,
                 wall_seconds: float) -> dict:
    """``results.json``, the tables and the plots from whatever runs have finished."""
    from composer.study.plots import loss_curves, plot_il_loss, plot_probe, plot_r1_vs_cd, probe_curves
    from composer.study.convergence import CURVES_PLOT, plot_main_curves, render_plateau_table
    from composer.study.tables import FIGURE4_ROWS, Row, mcd_compounds, render_all

    found, missing, failed = collect(out, profile, runs, seeds)
    previous = {}
    if (out / "results.json").exists():
        previous = json.loads((out / "results.json").read_text()).get("study", {})
    results = {"study": {
        "profile": plain_config(profile), "profile_name": profile.name, "seeds": seeds, "runs": [r.name for r in runs],
        "complete": not missing, "missing": [f"{r} seed {s}" for r, s in missing], "failed": failed,
        # the checkout the report was written from, and the ones the runs were trained at (a resumed study
        # may span commits; a result written before runs recorded their commit counts as "unknown")
        "git": git_sha(), "run_gits": run_commits(found),
        "hardware": hardware_description(), "torch": torch.__version__, "python": platform.python_version(),
        "data": data, "recipes": read_chosen(out),
        "wall_seconds": {**previous.get("wall_seconds", {}),
                         time.strftime("%Y-%m-%dT%H:%M:%S"): round(wall_seconds, 1)},
        "train_seconds_total": round(sum(r.get("train_seconds", 0) for e in found.values()
                                         for r in e["seeds"].values()), 1),
        "eval_seconds_total": round(sum(r.get("eval_seconds", 0) for e in found.values()
                                        for r in e["seeds"].values()), 1)},
        "runs": found}
    write_json_atomic(out / "results.json", results)
    tables = render_all(results)
    for key, text in tables.items():
        write_text_atomic(out / TABLES_DIR / f"{key}.md", text)
    head = (f"# Study results ({profile.name} profile)\n\nSeeds {seeds}; {len(found)} runs; "
            f"git {results['study']['git']} (runs trained at {', '.join(results['study']['run_gits']) or '-'}); "
            f"{results['study']['hardware']}. MCD split: {data['mcd']['num_images']} images, "
            f"{mcd_compounds(results)} compound divergence {data['mcd']['compound_divergence']} "
            f"(random sets {data['mcd']['random_compound_divergence']}; under every definition: "
            f"{data['mcd'].get('compound_divergences', {})}).\n"
            + (f"\nMissing: {', '.join(results['study']['missing'])}.\n" if missing else "")
            + "".join(f"\nFailed: {k}: {v}\n" for k, v in failed.items()) + "\n")
    search_table = out / TABLES_DIR / "search.md"  # written by the recipe search, when there was one
    extra = [search_table.read_text()] if search_table.exists() else []
    plateau_table = render_plateau_table(found)  # a plateau profile: how each run ended
    if plateau_table:
        write_text_atomic(out / TABLES_DIR / "plateau.md", plateau_table)
        extra.insert(0, plateau_table)
    write_text_atomic(out / "tables.md", head + "\n".join([*tables.values(), *extra]))
    plots = out / PLOTS_DIR
    plots.mkdir(parents=True, exist_ok=True)
    plot_r1_vs_cd(results, FIGURE4_ROWS, plots / PLOT_FILES[0])
    plot_il_loss(loss_curves(results, "il_clip"), plots / PLOT_FILES[1])
    plot_probe(probe_curves(results, [Row("IL-CLIP", "il_clip"), Row("Codebook-CLIP", "codebook_clip"),
                                      Row("CLIP", "clip")]), plots / PLOT_FILES[2])
    if plateau_table:
        plot_main_curves(found, [m for m in MODELS if m in found], plots / CURVES_PLOT)
    return results
