"""Batch size, learning rate and the cross-encoders' plateau: train one study model at several (batch, steps)
schedules of the cpu profile and print its val R@1 and its training curve (issue 17).

    python experiments/run_study.py --data world --out runs/study_cpu --profile cpu --runs vse --seeds 0  # data
    python benchmarks/study_plateau.py --study-dir runs/study_cpu --seeds 1,2 \\
        --schedules 32x300,16x600,64x150 --lr 1.5e-3 --init 0.1       # about 25 minutes on 2 cores

Why: trained from random weights, COMPOSER and the flat model sit on a plateau where the match loss stays
near ln 4 (the four candidates scored alike) before they learn to match; whether a seed leaves it within
the cpu profile's budget decides whether the study measures the model or its luck. Every schedule here
sees the same number of positives (batch x steps), so a difference is the gradient noise's, not the data's.

Each (schedule, seed) is the study's run (:func:`composer.study.execute.train_and_evaluate`) with the cpu
profile's COMPOSER schedule (warm-up over the first 20 %, /10 after 75 %) at that batch and length, the
given learning rate and init std, scored on the first ``eval_images`` val images only. The curve is the
training match accuracy (positive scored above its three negatives; chance 0.25) averaged over twelfths of
the run. Runs go to ``OUT/plateau/`` (default: inside the study directory); a finished run is read back.
Run it from the repository root (the study's data paths are relative to it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path


def parse_schedules(text: str) -> list[tuple[int, int]]:
    """``"32x300,64x150"`` -> ``[(32, 300), (64, 150)]`` (batch x steps)."""
    out = []
    for item in text.split(","):
        batch, _, steps = item.partition("x")
        if not (batch.isdigit() and steps.isdigit()):
            raise SystemExit(f"--schedules: {item!r} is not BATCHxSTEPS")
        out.append((int(batch), int(steps)))
    return out


def twelfths(values: list[float]) -> list[float]:
    """Means over twelve equal stretches of a curve."""
    n = max(1, len(values) // 12)
    return [sum(values[i:i + n]) / len(values[i:i + n]) for i in range(0, len(values), n)][:12]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study-dir", required=True, help="a cpu-profile study directory (its data/ is used)")
    ap.add_argument("--out", default=None, help="where the runs go (default: STUDY_DIR/plateau)")
    ap.add_argument("--model", default="composer", choices=("composer", "flat"))
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--schedules", default="32x300,16x600,64x150")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--init", type=float, default=0.1, help="initializer_range of every random weight")
    ap.add_argument("--preset", default=None, help="model size preset (default: the cpu profile's, small); "
                    "small-minilm = the pretrained MiniLM text side")
    args = ap.parse_args(argv)

    from composer.study.config import get_profile, study_runs
    from composer.study.data import prepare_data
    from composer.study.execute import StudyOptions, train_and_evaluate
    from crg.outputs import write_json_atomic

    study = Path(args.study_dir)
    data_file = study / "data" / "study_data.json"
    if not data_file.exists():
        raise SystemExit(f"{data_file} is missing: prepare the study's data first (module docstring)")
    out = Path(args.out) if args.out else study / "plateau"
    base = get_profile("cpu")
    data = prepare_data(base, study)  # study_data.json read, its paths resolved against the folder
    if args.preset:
        base = replace(base, presets={**base.presets, args.model: args.preset})
    print(f"{args.model} ({args.preset or 'the profile preset'}), lr {args.lr:g}, init {args.init:g}; "
          f"load average at start {os.getloadavg()[0]:.1f}\n")
    print("| batch x steps | seed | val R@1 | train s | training match accuracy by twelfths of the run |")
    print("|---|---|---|---|---|")
    run = replace(study_runs(base, [args.model])[0], evals=("val",),
                  overrides={"lr": args.lr, "model": {"text": {"initializer_range": args.init}}})
    preset = f"_{args.preset}" if args.preset else ""
    for batch, steps in parse_schedules(args.schedules):
        profile = replace(base, schedules={**base.schedules, "composer": replace(
            base.schedules["composer"], steps=steps, batch_size=batch)})
        for seed in map(int, args.seeds.split(",")):
            run_dir = out / f"{args.model}{preset}_b{batch}x{steps}_lr{args.lr:g}_init{args.init:g}" / f"seed{seed}"
            done = run_dir / "result.json"
            if done.exists():
                result = json.loads(done.read_text())
            else:
                run_dir.mkdir(parents=True, exist_ok=True)
                started = time.perf_counter()
                result = train_and_evaluate(run, seed, profile, data, run_dir, StudyOptions())
                result["wall_seconds"] = round(time.perf_counter() - started, 1)
                write_json_atomic(done, result)
            acc = result["train_curve"].get("match_acc") or []
            curve = " ".join(f"{a:.2f}" for a in twelfths(acc))
            print(f"| {batch} x {steps} | {seed} | {result['val']['R@1']:.1f} | {result['train_seconds']:.0f} | "
                  f"{curve} |", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
