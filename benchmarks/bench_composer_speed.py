"""COMPOSER and the flat model on CPU: the fast path against the padded reference, in one interleaved run.

    python benchmarks/bench_composer_speed.py                       # the README job's settings before a7d34ce, 50 steps, 100 x 500
    python benchmarks/bench_composer_speed.py --steps 6 --eval-images 20 --models composer   # a quick look
    python benchmarks/bench_composer_speed.py --write-docs          # also write the docs/benchmarks.md section

Both paths live in the code: ``model.fast_path = False`` runs the padded reference (every token of every
Composition Transformer layer, each level projecting the images' keys again, evaluation pair by pair with
:func:`composer.models.common.retrieval.score_matrix_pairwise`); ``True`` (the default) the packed layers and
``score_all``. Two modules are built from the same seed, one per path, and trained step by step on the
same batches, taking turns (neighbouring steps see the same machine speed: on a shared machine the speed
drifts by tens of percent over seconds), so their ratio is measured under the same load.

Training: the README job's settings before a7d34ce (the issue's baseline; since then the job trains
``small-minilm`` at batch 64 on 15,000 images): the world of 3,000 images, preset
``small``, batch 32 positives x (1 + 3) pairs, 14 regions + the global one, lr 5e-4, gradients clipped at
1; each module's own ``training_step`` + backward + clipping + its (fused Adam) step, without a Trainer and
without the warm-up schedule (a constant rate: what is compared is two paths on identical weights). Reported:
positives per second (batch size / median step time), thread CPU seconds per step (less sensitive to other
jobs' load than wall time) and the largest difference between the two paths' losses over the steps.

The losses of the two paths differ by float32 rounding only (the packed layers sum in another order), which
Adam at the README's rate amplifies over the steps; the benchmark also runs the reference from weights one
float32 step (``nextafter``) away, untimed, to show the size of that amplification alone.

Evaluation: ``--eval-images`` test images x their 5 captions each, every caption against every image with
the trained fast module's weights in both, ``--eval-rounds`` times alternating; the largest score difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench_composer import build_module, load_eval_set, machine, without_trainer  # (benchmarks/ is the script dir)
from bench_docs import update_section

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## COMPOSER and the flat model on CPU: the fast path against the reference (issue 31)"
MODELS = ("composer", "flat")
LABEL = {"composer": "COMPOSER", "flat": "flat cross-transformer"}
README_LR, README_CLIP = 5e-4, 1.0   # recipes._COMPOSER_WORLD


@dataclass
class PathTiming:
    """One path (reference or fast) of one model."""

    step_seconds: float          # median wall time of the timed steps
    step_cpu_seconds: float      # median thread CPU time of the timed steps
    positives_per_second: float  # batch size / step_seconds
    eval_seconds: float          # median over the evaluation rounds
    eval_cpu_seconds: float      # median thread CPU time of the evaluation rounds
    eval_pairs_per_second: float


@dataclass
class ModelResult:
    reference: PathTiming
    fast: PathTiming
    train_speedup: float         # total reference step time / total fast step time (same steps, interleaved)
    train_cpu_speedup: float
    eval_speedup: float
    eval_cpu_speedup: float
    max_loss_diff: float         # over all steps, warm-up included
    max_loss_diff_nudged: float  # reference against itself from weights one float32 step away (rounding noise)
    loss_diff_by_step: list      # |fast - reference| at each step
    max_score_diff: float
    losses_first_last: list      # the fast path's first and last loss


class Stepper:
    """A module's training step outside a Trainer (forward, loss, backward, clipping, optimiser step)."""

    def __init__(self, module, fast: bool):
        import torch

        module.model.fast_path = fast
        module.train()
        self.module = module
        self.optimizer = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=README_LR,
                                          fused=True)
        without_trainer(module, self.optimizer)
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.losses: list[float] = []

    def step(self, batch, i: int, timed: bool) -> None:
        import torch

        w, c = time.perf_counter(), time.thread_time()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.module.training_step(batch, i)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.module.parameters(), README_CLIP)
        self.optimizer.step()
        if timed:
            self.wall.append(time.perf_counter() - w)
            self.cpu.append(time.thread_time() - c)
        self.losses.append(float(loss.detach()))


def time_eval(module, ev, fast: bool, max_pairs: int):
    """(scores (C, I), wall seconds, thread CPU seconds) of one full cross-scoring by the given path."""
    import torch

    from composer.models.common.retrieval import score_matrix, score_matrix_pairwise

    model = module.model
    model.eval()
    model.fast_path = fast
    started, cpu = time.perf_counter(), time.thread_time()
    with torch.no_grad():
        if fast:
            scores = torch.from_numpy(score_matrix(model, ev.regions, ev.geometry, ev.mask, ev.programs,
                                                   module.tokenizer, max_pairs=max_pairs).scores)
        else:
            scores = score_matrix_pairwise(model, ev.regions, ev.geometry, ev.mask, ev.programs, module.tokenizer,
                                           max_pairs=max_pairs)
    return scores, time.perf_counter() - started, time.thread_time() - cpu


def run_model(name: str, args, region_dim: int, batches: list, ev) -> ModelResult:
    import torch

    modules = {}
    for fast in (False, True):
        torch.manual_seed(args.seed)
        modules[fast] = build_module(name, "small", region_dim)
    modules[True].load_state_dict(modules[False].state_dict())
    steppers = {fast: Stepper(modules[fast], fast) for fast in (False, True)}
    # the calibration: the reference path from weights one float32 step (ulp) away, to show how far float32
    # rounding alone moves the losses over these steps at this learning rate
    torch.manual_seed(args.seed)
    nudged = build_module(name, "small", region_dim)
    nudged.load_state_dict({k: torch.nextafter(v, torch.full_like(v, float("inf"))) if v.is_floating_point() else v
                            for k, v in modules[False].state_dict().items()})
    nudged_stepper = Stepper(nudged, False)
    for i, batch in enumerate(batches):
        for fast in (False, True):  # the two paths back to back on each batch
            steppers[fast].step(batch, i, timed=i >= args.warmup)
        nudged_stepper.step(batch, i, timed=False)
        if (i + 1) % 10 == 0:
            print(f"  {LABEL[name]} step {i + 1}/{len(batches)}: reference "
                  f"{statistics.median(steppers[False].wall[-10:]):.3f} s, fast "
                  f"{statistics.median(steppers[True].wall[-10:]):.3f} s", flush=True)
    ref, fast = steppers[False], steppers[True]
    diffs = [abs(a - b) for a, b in zip(ref.losses, fast.losses)]
    nudged_diff = max(abs(a - b) for a, b in zip(ref.losses, nudged_stepper.losses))
    del nudged, nudged_stepper

    modules[False].load_state_dict(modules[True].state_dict())  # score with the same (trained) weights
    n_pairs = ev.num_images * len(ev.programs)
    eval_s: dict[bool, list[float]] = {False: [], True: []}
    eval_cpu: dict[bool, list[float]] = {False: [], True: []}
    scores = {}
    for _ in range(args.eval_rounds):
        for f in (False, True):
            scores[f], seconds, cpu = time_eval(modules[f], ev, f, args.eval_max_pairs)
            eval_s[f].append(seconds)
            eval_cpu[f].append(cpu)
    score_diff = float((scores[True] - scores[False]).abs().max())

    def timing(st: Stepper, f: bool) -> PathTiming:
        step = statistics.median(st.wall)
        ev_s = statistics.median(eval_s[f])
        return PathTiming(step, statistics.median(st.cpu), args.batch_size / step, ev_s,
                          statistics.median(eval_cpu[f]), n_pairs / ev_s)

    return ModelResult(reference=timing(ref, False), fast=timing(fast, True),
                       train_speedup=sum(ref.wall) / sum(fast.wall), train_cpu_speedup=sum(ref.cpu) / sum(fast.cpu),
                       eval_speedup=sum(eval_s[False]) / sum(eval_s[True]),
                       eval_cpu_speedup=sum(eval_cpu[False]) / sum(eval_cpu[True]), max_loss_diff=max(diffs),
                       max_loss_diff_nudged=nudged_diff, loss_diff_by_step=[float(f"{d:.2e}") for d in diffs],
                       max_score_diff=score_diff, losses_first_last=[fast.losses[0], fast.losses[-1]])


def report_text(args, info: dict, results: dict[str, ModelResult], command: str) -> str:
    m = info["machine"]
    lines = [SECTION, "",
             f"`{command}` on {m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['torch_threads']} torch "
             f"threads; load average {info['load'][0]:.1f} at start and {info['load'][1]:.1f} at the end (the "
             "machine was shared with other jobs: wall times are noisy, the ratios come from the two paths "
             "taking turns step by step in one run).", "",
             f"The README job's settings before a7d34ce (the issue's baseline): generated world ({args.world_images:,} images), preset `small`, batch "
             f"{args.batch_size} positives x (1 + {info['negatives']}) pairs, {info['regions']} regions, Adam at "
             f"{README_LR} with gradients clipped at {README_CLIP}; {args.warmup} warm-up + "
             f"{args.steps - args.warmup} timed steps per path. Evaluation: {info['eval_images']} test images x "
             f"{info['eval_captions']} captions, full cross-scoring, median of {args.eval_rounds} rounds.", "",
             "| model | path | s / step | CPU s / step | positives / s | eval s | eval CPU s | eval pairs / s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        for label, t in (("reference (padded)", r.reference), ("fast", r.fast)):
            lines.append(f"| {LABEL[name]} | {label} | {t.step_seconds:.3f} | {t.step_cpu_seconds:.3f} | "
                         f"{t.positives_per_second:.1f} | {t.eval_seconds:.1f} | {t.eval_cpu_seconds:.1f} | "
                         f"{t.eval_pairs_per_second:,.0f} |")
    lines.append("")
    for name, r in results.items():
        first_over = next((i for i, d in enumerate(r.loss_diff_by_step) if d > 1e-5), None)
        lines.append(f"{LABEL[name]}: training **{r.train_speedup:.2f}x** positives per second (CPU time "
                     f"{r.train_cpu_speedup:.2f}x), evaluation **{r.eval_speedup:.2f}x** (CPU time "
                     f"{r.eval_cpu_speedup:.2f}x); largest loss difference "
                     f"over the {args.steps} steps {r.max_loss_diff:.1e} ("
                     + ("never above 1e-5" if first_over is None else f"first above 1e-5 at step {first_over + 1}")
                     + f"; losses {r.losses_first_last[0]:.3f} -> {r.losses_first_last[1]:.3f}), against "
                     f"{r.max_loss_diff_nudged:.1e} between the reference and itself started from weights one "
                     f"float32 step away (float32 rounding alone); largest score difference {r.max_score_diff:.1e}.")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    ap.add_argument("--steps", type=int, default=50, help="training steps per path (losses compared over all)")
    ap.add_argument("--warmup", type=int, default=3, help="of which untimed")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-regions", type=int, default=14)
    ap.add_argument("--world-images", type=int, default=3000)
    ap.add_argument("--eval-images", type=int, default=100)
    ap.add_argument("--eval-rounds", type=int, default=2)
    ap.add_argument("--eval-max-pairs", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default, as the README job)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if not names or set(names) - set(MODELS):
        ap.error(f"--models: choose from {','.join(MODELS)}")
    if args.steps <= args.warmup or args.warmup < 0 or args.eval_rounds < 1:
        ap.error("need --steps > --warmup >= 0 and --eval-rounds >= 1")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from composer.models.composer.config import composer_config
    from composer.models.composer.predicate_transformer import TemplateTokenizer
    from composer.training.data import CompositionDataModule, DataConfig

    info: dict = {"machine": machine("cpu"), "load": [os.getloadavg()[0]]}
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info["machine"].items())
          + f"; load average at start {info['load'][0]:.1f}")
    dm = CompositionDataModule(DataConfig(data="world", batch_size=args.batch_size, max_regions=args.max_regions,
                                          world_images=args.world_images, eval_images=args.eval_images,
                                          seed=args.seed))
    dm.prepare_data()
    dm.setup()
    dm.tokenizer = TemplateTokenizer.from_config(composer_config("small"))
    if args.steps > dm.steps_per_epoch():
        ap.error(f"--steps {args.steps} exceeds the {dm.steps_per_epoch()} batches of an epoch")
    loader = iter(dm.train_dataloader())
    batches = [next(loader) for _ in range(args.steps)]
    ev = load_eval_set(dm, args.eval_images, "cpu")
    info.update(regions=int(batches[0].regions.shape[1]), negatives=int(batches[0].pair_image.shape[1] - 1),
                eval_images=ev.num_images, eval_captions=len(ev.programs))

    results = {}
    for name in names:
        results[name] = r = run_model(name, args, dm.store.feature_dim, batches, ev)
        print(f"{LABEL[name]}: training {r.reference.positives_per_second:.1f} -> {r.fast.positives_per_second:.1f} "
              f"positives/s ({r.train_speedup:.2f}x wall, {r.train_cpu_speedup:.2f}x CPU), evaluation "
              f"{r.reference.eval_seconds:.1f} -> {r.fast.eval_seconds:.1f} s ({r.eval_speedup:.2f}x wall, "
              f"{r.eval_cpu_speedup:.2f}x CPU); max loss "
              f"diff {r.max_loss_diff:.1e}, max score diff {r.max_score_diff:.1e}", flush=True)
    info["load"].append(os.getloadavg()[0])
    print(json.dumps({"benchmark": "bench_composer_speed", "args": vars(args), **info,
                      "results": {n: asdict(r) for n, r in results.items()}}))
    if args.write_docs:
        argv_shown = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write-docs"]
        command = " ".join(["python benchmarks/bench_composer_speed.py", *argv_shown])
        update_section(SECTION, report_text(args, info, results, command), DOCS)
        print(f"wrote the '{SECTION}' section of {DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
