"""How each run of a plateau study ended (issue 31): a table of why it stopped, where its best validation
was and how much its last quarter still gained, and one figure of every main model's learning curve.

Why: a comparison of models trained to their plateau is only that when every run did reach one -- stopped
by its patience, or flat over the last quarter of its positives (a gain under :data:`FLAT_GAIN` points of
val R@1). A run that hit the budget still rising is named here, so a reader knows which cells of the
tables are statements about under-training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from composer.training.curve import LearningCurve, last_quarter_start

__all__ = ["CURVES_PLOT", "FLAT_GAIN", "last_quarter_trend", "plateau_rows", "plot_main_curves", "reached_plateau",
           "render_plateau_table"]

FLAT_GAIN = 1.0  # val R@1 points gained over the last quarter under which a run counts as flat
CURVES_PLOT = "learning_curves.png"


def reached_plateau(stopped: str, gain: float | None) -> bool:
    """Stopped by its patience, or flat over its last quarter (issue 31's acceptance).

    >>> reached_plateau("patience", 3.0), reached_plateau("max_positives", 0.4), reached_plateau("max_positives", 2.5)
    (True, True, False)
    """
    return stopped == "patience" or (gain is not None and gain < FLAT_GAIN)


def last_quarter_trend(curve: Sequence[Mapping], metric: str = "R@1") -> tuple[float, float] | None:
    """Least-squares slope of val ``metric`` over the validations of the last quarter of the positives (those at or
    after :func:`composer.training.curve.last_quarter_start`, the points
    :func:`composer.training.curve.last_quarter_gain` leaves out of its baseline), in points per quarter, and its standard error; None with fewer than 3 such validations.

    Why: one validation's R@1 on a few hundred captions has a binomial error of about 3 points, and the
    max-based last-quarter gain rises with every noisy validation taken; a slope fitted over the quarter, with its
    error, tells a still-rising run from a flat one read through noise. Shown beside the gain; the plateau test
    stays issue 31's.

    >>> pts = [{"positives": p, "metrics": {"R@1": r}}
    ...        for p, r in [(10, 1.0), (20, 2.0), (30, 3.0), (32, 3.2), (40, 4.0)]]
    >>> [round(v, 6) for v in last_quarter_trend(pts)]  # 30, 32, 40: one point per 10 positives = 1 per quarter
    [1.0, 0.0]
    """
    from scipy.stats import linregress

    points = [(p["positives"], p["metrics"][metric]) for p in curve if metric in (p.get("metrics") or {})]
    if not points or points[-1][0] <= 0:
        return None
    end = points[-1][0]
    last = [(x / (end / 4), y) for x, y in points if x >= last_quarter_start(end)]  # x in quarters of the run
    if len(last) < 3 or len({x for x, _ in last}) < 2:
        return None
    fit = linregress([x for x, _ in last], [y for _, y in last])
    return float(fit.slope), float(fit.stderr)


def plateau_rows(found: Mapping) -> list[dict]:
    """One row per (run, seed) with a plateau: its stop, best validation and last-quarter gain."""
    rows = []
    for name, entry in found.items():
        for seed, r in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
            p = r.get("plateau")
            if not p:
                continue
            gain = p.get("last_quarter_gain")  # train()'s report, from the same curve
            best = p.get("best") or {}
            rows.append({"run": name, "label": entry["label"], "seed": int(seed), "stopped": p["stopped"],
                         "positives": p["positives"], "best_positives": best.get("positives"),
                         "best_R@1": (best.get("val") or {}).get("R@1"), "gain": gain,
                         "trend": last_quarter_trend(r.get("curve") or []),
                         "plateau": reached_plateau(p["stopped"], gain), "train_seconds": r.get("train_seconds")})
    return rows


def render_plateau_table(found: Mapping) -> str:
    """Markdown: every plateau run, and how many reached their plateau ("" when no run had one)."""
    rows = plateau_rows(found)
    if not rows:
        return ""
    lines = ["### Training to the plateau: how each run ended", "",
             "| run | seed | stopped by | positives | best val R@1 | at positives | last-quarter gain | "
             "last-quarter trend | plateau | training (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gain = "–" if r["gain"] is None else f"{r['gain']:+.1f}"
        best = "–" if r["best_R@1"] is None else f"{r['best_R@1']:.1f}"
        at = "–" if r["best_positives"] is None else f"{r['best_positives']:,}"
        secs = "–" if r["train_seconds"] is None else f"{r['train_seconds']:.0f}"
        trend = "–" if r["trend"] is None else f"{r['trend'][0]:+.1f} ± {r['trend'][1]:.1f}"
        lines.append(f"| {r['label']} | {r['seed']} | {r['stopped']} | {r['positives']:,} | {best} | {at} | {gain} | "
                     f"{trend} | {'yes' if r['plateau'] else '**no**'} | {secs} |")
    reached = sum(r["plateau"] for r in rows)
    lines += ["", f"{reached} of {len(rows)} runs reached their plateau: stopped by their patience, or gaining under "
              f"{FLAT_GAIN:g} point of val R@1 over the last quarter of their positives. A **no** is a run the "
              "budget ended while it still rose: its figures are those of an under-trained model. Trend: the "
              "least-squares slope of val R@1 over the last quarter's validations, in points per quarter, ± its "
              "standard error (one validation's R@1 on the converge profile's 250 val captions has a binomial error "
              "of about 3 points)."]
    return "\n".join(lines) + "\n"


def plot_main_curves(found: Mapping, runs: list[str], path: str | Path) -> None:
    """Every seed's learning curve of each of ``runs`` (the main models) on one figure."""
    from composer.report.plots import plot_learning_curves

    curves = {}
    for name in runs:
        entry = found.get(name)
        if entry is None:
            continue
        seeds = [LearningCurve.from_dict({"points": r["curve"]}) for _, r in sorted(entry["seeds"].items())
                 if r.get("curve")]
        if seeds:
            curves[entry["label"]] = seeds
    plot_learning_curves(curves, path, title="Validation R@1 while training to the plateau")
