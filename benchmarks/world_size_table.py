"""Data before epochs (issue 31 item 2): validation R@1 against the number of training images, at a fixed
number of steps, for VSE and COMPOSER -- the table the study's world is chosen from.

    python benchmarks/world_size_table.py --out runs/world_size            # the full table (~1.5 h, 2 cores)
    python benchmarks/world_size_table.py --out runs/world_size --models vse --train-images 1800,9000

Each (model, size) is an ordinary training run (``composer.training.fit.train``) in its own folder
``OUT/runs/<model>-<train images>``: the cpu study profile's preset and batch size for the model, the
compositional world of the size whose training split holds that many images (the world's own train share,
``CompositionalConfig.split_fractions``), validation on the first ``--eval-images`` val images every
``--val-every-positives`` positives (the plateau flags, patience off: every run trains all its steps, and
its curve is kept), and a budget of ``--steps`` steps for every size. A finished run (``results.json``)
is read back, an interrupted one resumed (``--resume``'s checkpoint), so the command can be rerun.

Why a schedule in steps: the world recipe's learning-rate schedule is in epochs (when the table was measured: warm-up 0.4 epoch, /10 at
epoch 2), so at 36K images a 2,000-step run would still be warming up and at 1.8K images it would decay
after 560 steps -- the size would change the schedule, not only the data. Here the cpu profile's schedule
shape (its warm-up share and /10 points, ``composer.training.schedule.Schedule``) is laid over ``--steps``
whatever the epoch length, as the study's ``study_schedule`` does: the recipe's epoch-based fields are set to
the fractions of an epoch those steps are.

Outputs: ``OUT/table.md`` (rows: model; columns: training images; cells: val R@1 at the end and the best,
and the gain over the curve's last quarter of positives) and ``OUT/curves.png`` (every run's curve,
``composer.report.plots.plot_learning_curves``).

Default ``--steps`` 1,000: at the step times of the ``small-minilm`` presets at batch 64 on 2 cores (COMPOSER
0.77 s, VSE 0.56 s), six runs of 1,000 steps plus their validations fit about 1.5 h (``docs/benchmarks.md``,
"World size against validation R@1 at a fixed number of steps", says how it was chosen).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from crg.outputs import write_json_atomic, write_text_atomic

LABELS = {"composer": "COMPOSER", "vse": "VSE", "flat": "flat"}
DEFAULT_STEPS = 1000
CELL_JSON = "table_run.json"  # beside a finished run: the training images its world held


@dataclass(frozen=True)
class TableConfig:
    """What every run of the table shares (a change of any of them is another table).

    Attributes:
        models: registry names, one row each.
        train_images: training-split sizes, one column each.
        steps: optimiser steps of every run, whatever the size.
        val_every_positives: validation cadence in positives (the same for every model and size).
        eval_images: val images scored (all their captions): the same number at every size.
        profile: the study profile whose presets, batch sizes and schedule shapes the runs take.
        seed: data order and initial weights.
        accelerator: Lightning's (``auto``: a GPU when there is one).
        preset, batch_size: one preset / batch for every model instead of the profile's (the tests' tiny runs).
    """

    models: tuple[str, ...] = ("vse", "composer")
    train_images: tuple[int, ...] = (1800, 9000, 36000)
    steps: int = DEFAULT_STEPS
    val_every_positives: int = 6400
    eval_images: int = 100
    profile: str = "cpu"
    seed: int = 0
    accelerator: str = "auto"
    preset: str | None = None
    batch_size: int | None = None

    def __post_init__(self):
        if self.steps < 1 or self.val_every_positives < 1 or self.eval_images < 1:
            raise ValueError(f"--steps, --val-every-positives and --eval-images must be >= 1, got {self.steps}, "
                             f"{self.val_every_positives}, {self.eval_images}")
        if not self.train_images or min(self.train_images) < 1 or not self.models:
            raise ValueError(f"need at least one model and positive --train-images, got {self.models}, "
                             f"{self.train_images}")


def train_share() -> float:
    """The compositional world's share of images in its training split (read from its config)."""
    from features.world.compositional import ROLES, CompositionalConfig

    return CompositionalConfig().split_fractions[ROLES.index("train")]


def world_images_for(train_images: int, share: float | None = None) -> int:
    """The world size whose training split holds ``train_images`` images.

    >>> world_images_for(1800, 0.6), world_images_for(36000, 0.6), world_images_for(10, 0.6)
    (3000, 60000, 17)
    """
    share = train_share() if share is None else share
    return math.ceil(round(train_images / share, 6))


def run_name(model: str, train_images: int) -> str:
    return f"{model}-{train_images}"


def step_schedule(optim, steps: int, steps_per_epoch: int, warmup_fraction: float, decay_fractions):
    """``optim`` (an epoch-based :class:`OptimConfig`) with its warm-up and /10 points laid over ``steps``
    steps: the same schedule in steps whatever the epoch length.

    >>> from composer.models.common.retrieval_module import OptimConfig
    >>> o = step_schedule(OptimConfig(), 1000, 50, 0.2, (0.75,))
    >>> o.warmup_epochs, o.decay_epochs, o.epochs, o.factor(100 / 50), o.factor(750 / 50)
    (4.0, (15.0,), 20, 0.5, 0.1)
    """
    return replace(optim, epochs=max(1, math.ceil(steps / steps_per_epoch)),
                   warmup_epochs=warmup_fraction * steps / steps_per_epoch,
                   decay_epochs=tuple(f * steps / steps_per_epoch for f in decay_fractions))


def table_recipe(cfg: TableConfig, model: str, train_images: int):
    """``(recipe, train images counted)``: the world recipe of ``model`` at the profile's sizes on the world
    with ``train_images`` training images, trained ``cfg.steps`` steps on a schedule in steps and validated
    every ``cfg.val_every_positives`` positives."""
    from composer.study.config import get_profile, schedule_for
    from composer.training.data import CompositionDataModule
    from composer.training.plateau import PlateauConfig
    from composer.training.recipes import RecipeOverrides, named_recipe

    profile = get_profile(cfg.profile)
    sched = schedule_for(profile, model)
    world = {**profile.world_data(), "world_images": world_images_for(train_images)}
    overrides = RecipeOverrides(
        preset=cfg.preset or profile.presets.get(model), batch_size=cfg.batch_size or sched.batch_size,
        lr=sched.lr, eval_images=cfg.eval_images, max_regions=profile.max_regions, seed=cfg.seed, **world)
    recipe = named_recipe(model, "world", overrides)
    dm = CompositionDataModule(recipe.data)  # generates the world on first use (cached under GC_DATA_DIR)
    dm.prepare_data()
    spe = dm.steps_per_epoch()  # the one RetrievalModule.configure_optimizers divides by
    counted = len(dm.train_images)
    optim = step_schedule(recipe.optim, cfg.steps, spe, sched.warmup_fraction, sched.decay_fractions)
    plateau = PlateauConfig(val_every_positives=cfg.val_every_positives,
                            max_positives=cfg.steps * recipe.data.batch_size)
    return replace(recipe, optim=optim, plateau=plateau), counted


def run_one(cfg: TableConfig, model: str, train_images: int, folder: Path) -> dict:
    """Train (or resume, or read back) one cell's run; returns its ``results.json``."""
    from composer.training.fit import TrainerOptions, train
    from crg.outputs import read_manifest

    done = folder / "results.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    recipe, counted = table_recipe(cfg, model, train_images)
    resume = read_manifest(folder) is not None if folder.is_dir() else False
    options = TrainerOptions(accelerator=cfg.accelerator, progress=False, test=False, resume=resume)
    started = time.perf_counter()
    results = train(recipe, options, folder)
    seconds = time.perf_counter() - started
    write_json_atomic(folder / CELL_JSON, {"train_images_counted": counted, "world_images": recipe.data.world_images,
                                           "seconds_this_call": seconds})
    logging.getLogger(__name__).info("%s: %d training images, %.0f s", folder.name, counted, seconds)
    return results


@dataclass
class Cell:
    """One run's figures, from its learning curve."""

    end: float
    best: float
    best_positives: int
    last_quarter_gain: float | None
    chance: float | None
    points: int


def cell_from_curve(curve) -> Cell:
    from composer.training.curve import last_quarter_gain

    best = curve.best()
    last = curve.points[-1]
    return Cell(end=last.metrics["R@1"], best=best.metrics["R@1"], best_positives=best.positives,
                last_quarter_gain=last_quarter_gain(curve), chance=last.metrics.get("chance_R@1"),
                points=len(curve.points))


def markdown_table(cfg: TableConfig, cells: dict[tuple[str, int], Cell], counted: dict[int, int]) -> str:
    """The table: one row per model, one column per training-set size."""
    head = "| model | " + " | ".join(f"{n:,} training images" for n in cfg.train_images) + " |"
    rows = [head, "|---|" + "---|" * len(cfg.train_images)]
    for model in cfg.models:
        out = []
        for n in cfg.train_images:
            c = cells.get((model, n))
            if c is None:
                out.append("-")
                continue
            gain = "-" if c.last_quarter_gain is None else f"{c.last_quarter_gain:+.1f}"
            out.append(f"{c.end:.1f} / {c.best:.1f} ({gain})")
        rows.append(f"| {LABELS.get(model, model)} | " + " | ".join(out) + " |")
    chance = sorted({c.chance for c in cells.values() if c.chance is not None})
    notes = [
        f"Validation R@1 (%) after {cfg.steps:,} steps: at the end / best (gain of the best over the curve's last "
        f"quarter of positives), {cfg.eval_images} val images and all their captions, validated every "
        f"{cfg.val_every_positives:,} positives; profile `{cfg.profile}`'s presets and batch sizes, seed {cfg.seed}."
        + (f" Chance R@1 {', '.join(f'{c:.1f}' for c in chance)}." if chance else ""),
        "Training images counted in each world's training split: "
        + ", ".join(f"{n:,} -> {counted[n]:,}" if counted.get(n) else f"{n:,} -> ?" for n in cfg.train_images) + ".",
    ]
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"


def build_table(cfg: TableConfig, out: Path) -> dict[tuple[str, int], Cell]:
    """Run (or read back) every cell, then write ``OUT/table.md`` and ``OUT/curves.png``."""
    from composer.report.plots import plot_learning_curves
    from composer.training.curve import read_curve

    out.mkdir(parents=True, exist_ok=True)
    cells, curves, counted = {}, {}, {}
    for n in cfg.train_images:
        for model in cfg.models:
            folder = out / "runs" / run_name(model, n)
            started = time.perf_counter()
            run_one(cfg, model, n, folder)
            curve, extra = read_curve(folder)
            cells[(model, n)] = cell_from_curve(curve)
            curves[f"{LABELS.get(model, model)}, {n:,} images"] = [curve]
            print(f"{folder.name}: {cells[(model, n)]} ({time.perf_counter() - started:.0f} s)", flush=True)
        counted[n] = _counted(out / "runs" / run_name(cfg.models[0], n))
    text = markdown_table(cfg, cells, counted)
    write_text_atomic(out / "table.md", text)
    plot_learning_curves(curves, out / "curves.png",
                         title=f"Validation R@1 by training-set size ({cfg.steps:,} steps)")
    print(text, flush=True)
    return cells


def _counted(folder: Path) -> int | None:
    """Training images the run's world held in its training split (None when not recorded)."""
    try:
        return json.loads((folder / CELL_JSON).read_text(encoding="utf-8"))["train_images_counted"]
    except (OSError, ValueError, KeyError):
        return None


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder of the runs, table.md and curves.png")
    ap.add_argument("--models", default="vse,composer")
    ap.add_argument("--train-images", default="1800,9000,36000", help="training-split sizes (comma-separated)")
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="steps of every run")
    ap.add_argument("--val-every-positives", type=int, default=TableConfig.val_every_positives)
    ap.add_argument("--eval-images", type=int, default=TableConfig.eval_images)
    ap.add_argument("--profile", default="cpu", help="study profile whose presets and batch sizes the runs take")
    ap.add_argument("--preset", help="one model preset for every model instead of the profile's (tests: tiny)")
    ap.add_argument("--batch-size", type=int, help="one batch size for every model instead of the profile's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--accelerator", default="auto")
    return ap


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    try:
        cfg = TableConfig(models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
                          train_images=tuple(int(n) for n in args.train_images.split(",") if n.strip()),
                          steps=args.steps, val_every_positives=args.val_every_positives,
                          eval_images=args.eval_images, profile=args.profile, seed=args.seed,
                          accelerator=args.accelerator, preset=args.preset, batch_size=args.batch_size)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    from composer.models import registry

    for m in cfg.models:
        registry.get(m)  # an unknown model fails here, before any world is generated
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    build_table(cfg, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
