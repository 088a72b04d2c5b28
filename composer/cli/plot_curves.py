"""Draw the learning curves of training runs on one figure: validation R@1 against positive pairs trained on.

    python -m composer.cli.plot_curves runs/composer runs/vse --out curves.png
    python -m composer.cli.plot_curves COMPOSER=runs/c_s0 COMPOSER=runs/c_s1 VSE=runs/v_s0 --out curves.png

Each RUN is a run folder trained to the plateau (``--val-every-positives`` / ``--patience``: it holds
``curve.json``) or a ``curve.json`` file; ``LABEL=RUN`` names its line, and runs with the same label (the
seeds of one model) share a colour. Without a label a run is named by its model and folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["build_argparser", "main"]


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m composer.cli.plot_curves", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="[LABEL=]RUN", help="run folders (or curve.json files)")
    ap.add_argument("--out", required=True, help="the figure (.png, .pdf, .svg)")
    ap.add_argument("--metric", default="R@1", help="validation metric to draw (R@1, R@5, any_true_R@1, ...)")
    ap.add_argument("--title", default="Validation R@1 while training", help="the figure's title")
    return ap


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    from composer.report.plots import plot_learning_curves
    from composer.training.curve import read_curve

    curves: dict = {}
    for spec in args.runs:
        label, sep, run = spec.partition("=")
        if not sep:
            label, run = "", spec
        try:
            curve, extra = read_curve(run)
        except FileNotFoundError as err:
            raise SystemExit(f"error: {err}") from None
        if not label:
            folder = Path(run) if Path(run).is_dir() else Path(run).parent
            label = f"{extra.get('model', '?')} ({folder.name})"
        curves.setdefault(label, []).append(curve)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    plot_learning_curves(curves, args.out, metric=args.metric,
                         title=args.title if args.metric == "R@1" else f"Validation {args.metric} while training")
    print(f"{args.out}: {sum(map(len, curves.values()))} learning curves ({', '.join(curves)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
