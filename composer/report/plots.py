"""The study's figures (matplotlib, PNG), from its ``results.json``.

* COMPOSER Figure 4: sentence R@1 against the compound divergence of the split, one line per model
  (mean over seeds, error bars = sample std);
* IL-CLIP Figure 3: the training loss of IL-CLIP across generations (each seed; spawns marked);
* IL-CLIP Figure 4: the easy-to-learn probe, in-batch accuracy of a new language agent learning a
  frozen vision agent, against probe steps (mean over seeds, band = std), IL-CLIP vs. codebook-CLIP;
* learning curves: validation R@1 against the positive pairs trained on, several runs (models, seeds) on
  one figure (:func:`plot_learning_curves`; runs trained to the plateau, :mod:`composer.training.curve`).

The data each figure shows is extracted by a pure function (:func:`generation_starts`,
:func:`probe_curves`, :func:`composer.report.tables.window_series`), tested on hand-made results; the
drawing functions only draw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from composer.report.generations import DISTILL_PHASE
from composer.report.tables import Row, mcd_compounds, seed_values, window_series
from composer.training.curve import LearningCurve

__all__ = [
    "curve_series",
    "generation_starts",
    "loss_curves",
    "mean_band",
    "plot_il_loss",
    "plot_learning_curves",
    "plot_probe",
    "plot_r1_vs_cd",
    "probe_curves",
]


def generation_starts(steps: Sequence[int], generations: Sequence[float]) -> list[int]:
    """Steps at which the generation number increases (IL's spawns), from a logged curve.

    >>> generation_starts([0, 1, 2, 3, 4], [0, 0, 1, 1, 2])
    [2, 4]
    """
    out = []
    for k in range(1, min(len(steps), len(generations))):
        g0, g1 = generations[k - 1], generations[k]
        if g0 is not None and g1 is not None and g1 > g0:
            out.append(int(steps[k]))
    return out


def loss_curves(results: Mapping, run: str) -> list[dict]:
    """Each seed's logged training curve of ``run`` (``{"step": [...], "loss": [...], ...}``), seed order."""
    return [c for c in seed_values(results, run, ("train_curve",)) if c and c.get("step")]


def probe_curves(results: Mapping, rows: Sequence[Row]) -> dict[str, list[list[float]]]:
    """label -> each seed's easy-to-learn probe accuracy curve, for the rows whose runs have one.

    >>> res = {"runs": {"a": {"seeds": {"0": {"probe": {"accuracy": [0.1, 0.2]}}}}, "b": {"seeds": {"0": {}}}}}
    >>> probe_curves(res, [Row("A", "a"), Row("B", "b")])
    {'A': [[0.1, 0.2]]}
    """
    out = {}
    for row in rows:
        curves = [p["accuracy"] for p in seed_values(results, row.run, ("probe",)) if p.get("accuracy")]
        if curves:
            out[row.label] = curves
    return out


def mean_band(curves: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (population) std across curves, truncated to the shortest.

    >>> m, s = mean_band([[0.0, 1.0, 5.0], [2.0, 3.0]])
    >>> m.tolist(), s.tolist()
    ([1.0, 2.0], [1.0, 1.0])
    """
    n = min(len(c) for c in curves)
    arr = np.asarray([list(c)[:n] for c in curves], dtype=np.float64)   # (S, n)
    return arr.mean(0), arr.std(0)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(plt, fig, ax, path: str | Path, *, xlabel: str, ylabel: str, title: str, empty: str | None) -> None:
    """Label, grid and save a study plot; ``empty``: the message drawn instead of a legend when nothing was."""
    if empty:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if not empty:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_r1_vs_cd(results: Mapping, rows: Sequence[Row], path: str | Path, *, metric: str = "R@1") -> None:
    """COMPOSER Figure 4: ``metric`` on each window against its compound divergence, one line per model."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = 0
    for k, row in enumerate(rows):
        points = [p for p in window_series(results, row.run, metric) if p.cell.mean is not None]
        if not points:
            continue
        x = [p.compound_divergence for p in points]
        y = [p.cell.mean for p in points]
        err = [p.cell.std or 0.0 for p in points]
        ax.errorbar(x, y, yerr=err, marker="o", ms=4, lw=1.4, capsize=3, color=f"C{k}", label=row.label)
        drawn += 1
    chance = [p.cell.mean for row in rows for p in window_series(results, row.run, "chance_R@1")
              if p.cell.mean is not None]
    if chance and metric == "R@1":
        ax.axhline(float(np.mean(chance)), color="0.5", lw=0.8, ls=":", label="chance")
    xlabel = f"compound divergence of the evaluation split ({mcd_compounds(results)} compounds)"
    _finish(plt, fig, ax, path, xlabel=xlabel,
            ylabel=f"sentence-to-image {metric} (%)", title="R@1 across compound divergence (COMPOSER Fig. 4)",
            empty=None if drawn else "no window results")


def plot_il_loss(curves: Sequence[Mapping], path: str | Path, *, key: str = "contrastive") -> None:
    """IL-CLIP Figure 3: the ``key`` loss against the step for each seed; spawns as vertical lines.

    Steps of the distillation phases have no contrastive loss (only the distillation loss trains), so
    they are left as gaps.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    spawns: set[int] = set()
    for k, curve in enumerate(curves):
        steps = np.asarray(curve["step"], dtype=np.float64)
        values = np.asarray([np.nan if v is None else v for v in curve.get(key) or curve["loss"]], dtype=np.float64)
        phase = curve.get("phase")
        if phase is not None:  # distillation (phase 1) trains another loss: leave a gap
            values = np.where(np.asarray([p == DISTILL_PHASE for p in phase]), np.nan, values)
        ax.plot(steps, values, lw=1.0, color=f"C{k}", alpha=0.85, label=f"seed {curve.get('seed', k)}",
                marker="o" if len(steps) < 60 else None, ms=3)
        if curve.get("generation"):
            spawns.update(generation_starts(curve["step"], curve["generation"]))
    for s in sorted(spawns):
        ax.axvline(s, color="0.5", lw=0.8, ls="--")
    _finish(plt, fig, ax, path, xlabel="training step (dashed: a new language agent is spawned)",
            ylabel=f"{key} loss", title="IL-CLIP training loss across generations (IL-CLIP Fig. 3)",
            empty=None if curves else "no IL-CLIP training curve")


def plot_probe(curves: Mapping[str, Sequence[Sequence[float]]], path: str | Path) -> None:
    """IL-CLIP Figure 4: the probe's in-batch accuracy against its steps, mean over seeds +- std."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for k, (label, runs) in enumerate(curves.items()):
        mean, std = mean_band(runs)
        x = np.arange(1, len(mean) + 1)
        ax.plot(x, mean, lw=1.5, color=f"C{k}", label=f"{label} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
        if len(runs) > 1:
            ax.fill_between(x, mean - std, mean + std, color=f"C{k}", alpha=0.2)
    _finish(plt, fig, ax, path, xlabel="probe step (new language agent, frozen vision agent and codebook)",
            ylabel="in-batch image-to-text accuracy", title="Easy to learn (IL-CLIP Fig. 4)",
            empty=None if curves else "no probe results")


def curve_series(curve: LearningCurve, metric: str = "R@1") -> tuple[list[int], list[float]]:
    """``(positives, values)`` of a learning curve's points that have ``metric``.

    >>> from composer.training.curve import CurvePoint
    >>> curve_series(LearningCurve([CurvePoint(5, 40, 0, {"R@1": 2.0}), CurvePoint(10, 80, 0, {"R@5": 9.0})]))
    ([40], [2.0])
    """
    points = [p for p in curve.points if p.metrics.get(metric) is not None]
    return [p.positives for p in points], [p.metrics[metric] for p in points]


def plot_learning_curves(curves: Mapping[str, Sequence[LearningCurve]], path: str | Path, *,
                         metric: str = "R@1", title: str = "Validation R@1 while training") -> None:
    """Learning curves: ``metric`` on the validation set against the positive pairs trained on, one colour
    per label (a model), one line per run of it (its seeds); each run's best validation is starred."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    drawn, chance = 0, []
    for k, (label, runs) in enumerate(curves.items()):
        for j, curve in enumerate(runs):
            x, y = curve_series(curve, metric)
            if not x:
                continue
            ax.plot(x, y, lw=1.3, color=f"C{k}", alpha=0.9, marker="o" if len(x) < 40 else None, ms=2.5,
                    label=f"{label} ({len(runs)} run{'s' if len(runs) > 1 else ''})" if j == 0 else None)
            best = curve.best(metric)
            if best is not None:
                ax.plot([best.positives], [best.metrics[metric]], marker="*", ms=10, color=f"C{k}", ls="none")
            chance += [p.metrics["chance_R@1"] for p in curve.points if "chance_R@1" in p.metrics]
            drawn += 1
    if chance and metric == "R@1":
        ax.axhline(float(np.mean(chance)), color="0.5", lw=0.8, ls=":", label="chance")
    _finish(plt, fig, ax, path, xlabel="positive pairs trained on (star: the run's best validation)",
            ylabel=f"validation {metric} (%)", title=title, empty=None if drawn else "no learning curve")
