"""The recipe search's results and table (``tables/search.md``): each configuration's validation R@1 from its run
(``OUT/search/runs/POINT/seed0``) or, when ASHA stopped it, its learning curve (``OUT/search/asha.json``, which
:func:`composer.study.search.run_asha_search` writes, says which); :mod:`composer.study.search` chooses from them
and writes the table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from composer.report.results import RESULT, run_folder
from composer.training.curve import read_curve

__all__ = ["ASHA_FILE", "CURVE_METRIC", "curve_reports", "read_asha_status", "render_search_table", "search_value",
           "undecided_points"]

ASHA_FILE = "asha.json"  # OUT/search/asha.json: each point's status under ASHA (run_asha_search)


def read_asha_status(search_dir: Path) -> dict:
    """``{point: {"model", "finished", "stopped_at_positives", "error"}}`` of an ASHA search ({} without one)."""
    path = Path(search_dir) / ASHA_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def undecided_points(names: list[str], status: Mapping[str, dict]) -> list[str]:
    """The points a new search of a model trains: those ``asha.json`` has no outcome for, or an error. A
    finished or cut point keeps its outcome when the search's Tune state is gone (a new Tuner over every point
    would train the cut ones on from their checkpoints, past the rung that cut them).

    >>> undecided_points(["a", "b", "c", "d"], {"a": {"error": None}, "b": {"error": "OOM"}})
    ['b', 'c', 'd']
    """
    return [name for name in names if name not in status or status[name].get("error")]


def search_value(search_dir: Path, point: str, seed: int = 0) -> tuple[float | None, float | None]:
    """The val R@1 of the search's configuration ``point`` (its best validation under a plateau, as the study
    reports it) and chance R@1: from its result when it finished, else from the curve of a trial ASHA stopped;
    (None, None) when it has neither (failed, or not run yet)."""
    directory = run_folder(search_dir, point, seed)
    if (directory / RESULT).exists():
        val = json.loads((directory / RESULT).read_text())["val"]
        return val["R@1"], val.get("chance_R@1")
    if read_asha_status(search_dir).get(point, {}).get("stopped_at_positives") is not None:
        best = read_curve(directory)[0].best() if (directory / "curve.json").exists() else None
        if best is not None:
            return best.metrics["R@1"], best.metrics.get("chance_R@1")
    return None, None


CURVE_METRIC = "R@1"  # the curve's name of what ValidationReporter reports as val_R@1


def curve_reports(search_dir: Path, points: list[str], seed: int = 0) -> dict[str, list[tuple[int, float]]]:
    """Each point's reports to ASHA so far, ``[(positives, val R@1)]``, from its run's learning curve (the
    validations :class:`composer.training.plateau.ValidationReporter` reports); points without a curve
    have none."""
    reports = {}
    for point in points:
        directory = run_folder(search_dir, point, seed)
        if (directory / "curve.json").is_file():
            curve, _ = read_curve(directory)
            reports[point] = [(p.positives, p.metrics[CURVE_METRIC]) for p in curve.points
                              if p.metrics.get(CURVE_METRIC) is not None]
    return reports


def render_search_table(val_r1: Mapping[str, float | None], points: Sequence, chosen: Mapping[str, dict],
                        chance: float | None = None, stopped: Mapping[str, int | None] | None = None, *,
                        columns: int) -> str:
    """The search as Markdown: one line per model, ``columns`` columns of configurations (``points``: each with a
    ``name``, ``model`` and ``setting``, as :class:`composer.training.recipe_grid.SearchPoint`), the chosen one in bold
    (a configuration ASHA stopped: its best val R@1 and where it was stopped)."""
    stopped = stopped or {}
    lines = ["### Recipe search: validation sentence R@1 of each configuration (seed 0)", ""]
    by_model: dict[str, list] = {}
    for p in points:
        by_model.setdefault(p.model, []).append(p)
    lines += ["| model | " + " | ".join(f"config {k + 1}" for k in range(columns)) + " | chosen |",
              "|---|" + "---|" * (columns + 1)]
    for model, pts in by_model.items():
        cells = []
        for p in pts:
            r1 = val_r1.get(p.name)
            text = f"{p.setting}: " + ("failed" if r1 is None else f"{r1:.1f}")
            if stopped.get(p.name):
                text += f" (stopped at {stopped[p.name] / 1000:.0f}K)"
            cells.append(f"**{text}**" if chosen.get(model, {}).get("run") == p.name else text)
        cells += [""] * (columns - len(cells))
        pick = chosen.get(model)
        setting = next((p.setting for p in pts if pick and p.name == pick["run"]), "–")
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {setting} |")
    lines += ["", "Each model: the same number of runs at the profile's steps and batch; lr = learning rate, init = "
              "the std of every randomly initialised weight (BERT-style models; the CLIP family uses CLIP's "
              "width-scaled init, and no random weight of a VSE with a pretrained text side reads it: six learning "
              "rates instead). Scored on the val split only." + (f" Chance R@1: {chance:.1f}." if chance else "")
              + (" Stopped at N: ASHA ended the configuration after N positive pairs; its best validation "
                 "is shown." if any(stopped.values()) else "")]
    return "\n".join(lines) + "\n"
