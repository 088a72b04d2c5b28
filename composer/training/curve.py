"""A run's learning curve: validation retrieval against the positive pairs trained on, one point per validation.

Why positives and not steps or epochs: a step of batch 64 trains twice the pairs of a step of batch 32,
and an epoch of a larger world more than one of a smaller; positives seen (steps x batch size x
processes) put runs of any batch size and world on one axis, which is what the plateau study compares.

The curve is plain data (no torch, no Lightning): :class:`LearningCurve` holds :class:`CurvePoint` s,
writes itself as ``curve.json`` and ``curve.csv`` (atomically), and answers the questions asked of it
(the best point, when patience runs out, how much the last quarter gained). The Lightning side that
fills it during training is :class:`composer.training.plateau.CurveRecorder`.

>>> c = LearningCurve()
>>> for step, r1 in [(10, 5.0), (20, 9.0), (30, 8.0), (40, 9.0)]:
...     c.add(CurvePoint(step=step, positives=step * 32, epoch=0, metrics={"R@1": r1}))
>>> c.best().step, c.values("R@1")
(20, [5.0, 9.0, 8.0, 9.0])
>>> c.add(CurvePoint(step=30, positives=960, epoch=0, metrics={"R@1": 7.0}))  # a resumed run re-validates step 30
>>> [p.step for p in c.points], c.values("R@1")
([10, 20, 30], [5.0, 9.0, 7.0])
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crg.outputs import write_json_atomic, write_text_atomic

__all__ = ["CURVE_CSV", "CURVE_JSON", "CurvePoint", "LearningCurve", "early_stop_index", "flat_metrics",
           "last_quarter_gain", "last_quarter_start", "read_curve", "read_train_curve"]

CURVE_JSON, CURVE_CSV = "curve.json", "curve.csv"


@dataclass
class CurvePoint:
    """One validation during training.

    Attributes:
        step: optimizer steps done when the model was validated.
        positives: positive (image, caption) pairs trained on by then, over all processes.
        epoch: the training epoch (0-based) the validation fell in.
        metrics: the validation set's retrieval figures (``R@1``, ``R@5``, ``R@10``, ``any_true_R@1``, ...).
        train_loss: mean training loss of the steps since the previous validation (None: none logged).
    """

    step: int
    positives: int
    epoch: int
    metrics: dict[str, float]
    train_loss: float | None = None


def flat_metrics(report: Mapping) -> dict[str, float]:
    """A retrieval report's headline figures as one flat dict (single-positive and any-true recall).

    >>> flat_metrics({"sentence": {"R@1": 10.0, "R@5": 30.0}, "sentence_any_true": {"R@1": 12.0},
    ...               "chance_R@1": 2.0, "seconds": 1.5})
    {'R@1': 10.0, 'R@5': 30.0, 'any_true_R@1': 12.0, 'chance_R@1': 2.0}
    """
    out = {k: float(v) for k, v in (report.get("sentence") or {}).items()}
    out.update({f"any_true_{k}": float(v) for k, v in (report.get("sentence_any_true") or {}).items()})
    if report.get("chance_R@1") is not None:
        out["chance_R@1"] = float(report["chance_R@1"])
    return out


@dataclass
class LearningCurve:
    """The points of one run in training order (strictly increasing steps)."""

    points: list[CurvePoint] = field(default_factory=list)

    def add(self, point: CurvePoint) -> None:
        """Append ``point``, first dropping any point at its step or later: a run resumed from an earlier
        checkpoint validates those steps again, and the curve keeps the new values, never two of a step."""
        self.points = [p for p in self.points if p.step < point.step]
        self.points.append(point)

    def truncate(self, step: int) -> None:
        """Keep the points up to ``step`` (what a checkpoint written at ``step`` had seen)."""
        self.points = [p for p in self.points if p.step <= step]

    def values(self, metric: str = "R@1") -> list[float | None]:
        return [p.metrics.get(metric) for p in self.points]

    def best(self, metric: str = "R@1") -> CurvePoint | None:
        """The point with the highest ``metric``, the earliest of equals (as a checkpoint kept on strict
        improvement is); None for an empty curve."""
        best = None
        for p in self.points:
            v = p.metrics.get(metric)
            if v is not None and not math.isnan(v) and (best is None or v > best.metrics[metric]):
                best = p
        return best

    # ------------------------------------------------------------------ storage
    def to_dict(self) -> dict:
        return {"points": [asdict(p) for p in self.points]}

    @classmethod
    def from_dict(cls, data: Mapping) -> LearningCurve:
        return cls([CurvePoint(step=int(p["step"]), positives=int(p["positives"]), epoch=int(p["epoch"]),
                               metrics={k: float(v) for k, v in p["metrics"].items()},
                               train_loss=None if p.get("train_loss") is None else float(p["train_loss"]))
                    for p in data.get("points", [])])

    def to_csv(self) -> str:
        """One row per point: step, positives, epoch, train_loss, then every metric any point has."""
        metrics = list(dict.fromkeys(k for p in self.points for k in p.metrics))
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["step", "positives", "epoch", "train_loss", *metrics])
        for p in self.points:
            w.writerow([p.step, p.positives, p.epoch, "" if p.train_loss is None else p.train_loss,
                        *("" if p.metrics.get(m) is None else p.metrics[m] for m in metrics)])
        return buf.getvalue()

    def write(self, folder: str | Path, **extra) -> None:
        """``folder/curve.json`` (the points and ``extra``, e.g. the run's settings) and ``curve.csv``, each
        written atomically."""
        folder = Path(folder)
        write_json_atomic(folder / CURVE_JSON, {**extra, **self.to_dict()})
        write_text_atomic(folder / CURVE_CSV, self.to_csv())


def read_curve(run: str | Path) -> tuple[LearningCurve, dict]:
    """A run folder's (or a ``curve.json`` file's) curve and the other keys stored with it."""
    path = Path(run)
    if path.is_dir():
        path = path / CURVE_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: train with --val-every-positives or --patience "
                                f"(docs/composer.md, 'Training to the plateau') to record a learning curve")
    data = json.loads(path.read_text(encoding="utf-8"))
    return LearningCurve.from_dict(data), {k: v for k, v in data.items() if k != "points"}


def early_stop_index(values: Sequence[float], patience: int, min_delta: float = 0.0, minimum: int = 0) -> int | None:
    """The validation (0-based) after which early stopping on a rising metric stops, or None if it never
    does: the ``patience``-th validation in a row that does not beat the best so far by more than
    ``min_delta``, at validation ``minimum`` or later (a run's minimum of positives: a new best before it
    withdraws a patience that ran out earlier). The plain reference of what the training's
    :class:`composer.training.plateau.PatienceStopping` (Lightning's ``EarlyStopping(mode="max")``) does.

    >>> early_stop_index([1, 2, 2, 1.5, 3], patience=2)
    3
    >>> early_stop_index([1, 2, 2.05, 2.1], patience=2, min_delta=0.5), early_stop_index([1, 2, 3], patience=1)
    (3, None)
    >>> early_stop_index([10, 9, 9, 12, 11, 11, 11], patience=2, minimum=4)
    5
    """
    if patience < 1:
        raise ValueError(f"patience must be >= 1, got {patience}")
    best, wait = -math.inf, 0
    for k, v in enumerate(values):
        if v - min_delta > best:
            best, wait = v, 0
        else:
            wait += 1
            if wait >= patience and k >= minimum:
                return k
    return None


def last_quarter_start(end: int) -> float:
    """Where the last quarter of ``end`` positives begins: a validation at or after it is in the last quarter.

    >>> last_quarter_start(160_000)
    120000.0
    """
    return end - end / 4


def last_quarter_gain(curve: LearningCurve, metric: str = "R@1") -> float | None:
    """How much the best ``metric`` rose over the last quarter of the positives trained on: the best of
    all points minus the best of the points before the last quarter (None when no point lies before it).
    Under 1 point, the run is flat at its end (issue 31's test for a run not stopped by its patience).

    >>> c = LearningCurve([CurvePoint(s, s * 10, 0, {"R@1": r}) for s, r in [(1, 2.0), (2, 5.0), (3, 5.5), (4, 5.8)]])
    >>> round(last_quarter_gain(c), 3)  # positives 30 and 40 are the last quarter of 40: 5.8 - 5.0
    0.8
    """
    if not curve.points:
        return None
    cut = last_quarter_start(curve.points[-1].positives)
    before = [p.metrics[metric] for p in curve.points if p.positives < cut and metric in p.metrics]
    every = [p.metrics[metric] for p in curve.points if metric in p.metrics]
    if not before:
        return None
    return max(every) - max(before)


def read_train_curve(run: str | Path) -> dict:
    """Per-step training losses of the run folder ``run`` from its last Lightning CSV log
    (``logs/version_N/metrics.csv``; IL-CLIP's generation and phase when logged); {} without one."""
    logs = sorted(Path(run).glob("logs/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
    if not logs:
        return {}
    keys = {"loss": "train/loss", "contrastive": "train/contrastive", "distill": "train/distill",
            "generation": "il/generation", "phase": "il/phase", "match_acc": "train/match_acc"}
    rows: dict[int, dict] = {}
    with logs[-1].open() as f:
        for rec in csv.DictReader(f):
            if rec.get("step"):
                rows.setdefault(int(float(rec["step"])), {}).update(
                    {name: float(rec[col]) for name, col in keys.items() if rec.get(col) not in (None, "")})
    steps = sorted(s for s, r in rows.items() if "loss" in r)
    return {"step": steps, **{name: [rows[s].get(name) for s in steps] for name in keys
                              if any(name in rows[s] for s in steps)}}
