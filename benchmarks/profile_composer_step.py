"""Where a COMPOSER training step's CPU time goes, and how far the matrix products alone put the floor.

    python benchmarks/profile_composer_step.py                 # the README job's settings before a7d34ce
    python benchmarks/profile_composer_step.py --steps 8       # a quick look

Why: issue 31 asks for twice the positives per second of the padded reference at the same losses. This
measures, for both paths on the same batches (taking turns step by step, one torch thread as a study worker
runs), the thread CPU time of each part of a step (forward, backward, gradient clipping, the fused Adam step),
the fast path's forward by section (Predicate Transformer, Composition Transformer, the images' visual
prefix, the primitives, the modulator, planning, losses), the floating-point work of a step (torch.profiler's
FLOP count of every matrix product, forward and backward), and this machine's single-thread matrix-product
rate on the step's typical shapes. FLOPs / rate is the time the products alone need; what remains is the
rest (indexing, copies, softmax, LayerNorm, GELU, allocation, the framework's per-operator cost).

``--floor-width W`` (default 16) also times the fast path of the same model at width W (every hidden, FFN,
attention and modulation width W, the heads as many): the same batches, the same operators and the same
recursion, with ~(128 / W)^2 times less arithmetic in each product and ~128 / W times less memory per
elementwise operator. What that step still costs is, to a first approximation, what the operators cost
whatever their size (dispatch, autograd, the Python of the recursion): a floor no kernel-level speed-up of
the products removes.

Thread CPU time, not wall time: on a shared machine it is what the step itself spends. Prints a report and
one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench_composer import build_module, machine  # (benchmarks/ is the script directory)
from bench_composer_speed import README_CLIP
from bench_composer_speed import Stepper as SpeedStepper

PARTS = ("forward", "backward", "clip", "optimizer")


class SectionClock:
    """Thread CPU time spent inside named methods (outermost call of each name only), while installed."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self._active: list[str] = []
        self._restore: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, label: str) -> None:
        original = getattr(owner, name)
        clock = self

        @functools.wraps(original)
        def timed(*args, **kwargs):
            started = time.thread_time()
            clock._active.append(label)
            try:
                return original(*args, **kwargs)
            finally:
                clock._active.pop()
                if label not in clock._active:
                    clock.seconds[label] += time.thread_time() - started

        self._restore.append((owner, name, original))
        setattr(owner, name, timed)

    def remove(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()


def install_sections() -> SectionClock:
    import composer.models.composer.model as model_mod
    import composer.models.composer.module as module_mod
    from composer.models.composer.composition_transformer import CompositionTransformer
    from composer.models.composer.film import Modulator
    from composer.models.composer.predicate_transformer import PredicateTransformer

    clock = SectionClock()
    clock.wrap(model_mod, "plan_execution", "planning")
    clock.wrap(PredicateTransformer, "forward", "Predicate Transformer")
    clock.wrap(model_mod.Composer, "_primitives", "primitives")
    clock.wrap(CompositionTransformer, "encode_visual", "visual prefix")
    clock.wrap(CompositionTransformer, "visual_keys", "visual prefix")
    clock.wrap(CompositionTransformer, "forward", "Composition Transformer")
    clock.wrap(Modulator, "bind", "modulator")
    clock.wrap(Modulator, "placeholder_terms", "modulator")
    clock.wrap(module_mod.ComposerModule, "_mvsa", "losses and MVSA sampling")
    clock.wrap(module_mod, "composer_loss", "losses and MVSA sampling")
    return clock


class Stepper(SpeedStepper):
    """The speed benchmark's training step (same module set-up and optimiser), each part timed in thread CPU
    seconds."""

    def __init__(self, module, fast: bool):
        super().__init__(module, fast)
        self.parts: dict[str, list[float]] = {p: [] for p in PARTS}

    def step(self, batch, i: int, timed: bool) -> None:
        import torch

        c0 = time.thread_time()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.module.training_step(batch, i)
        c1 = time.thread_time()
        loss.backward()
        c2 = time.thread_time()
        torch.nn.utils.clip_grad_norm_(self.module.parameters(), README_CLIP)
        c3 = time.thread_time()
        self.optimizer.step()
        c4 = time.thread_time()
        if timed:
            for part, seconds in zip(PARTS, (c1 - c0, c2 - c1, c3 - c2, c4 - c3)):
                self.parts[part].append(seconds)
        self.losses.append(float(loss.detach()))


def step_flops(stepper: Stepper, batches: list, first: int) -> tuple[float, float, int]:
    """(all FLOPs, matrix-product FLOPs, operators) per step, over ``batches`` (torch.profiler's counts)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for i, batch in enumerate(batches):
            stepper.step(batch, first + i, timed=False)
    events = prof.key_averages()
    n = len(batches)
    flops = sum(e.flops for e in events) / n
    products = sum(e.flops for e in events if e.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")) / n
    return flops, products, round(sum(e.count for e in events) / n)


def matmul_rate(repeats: int = 30) -> float:
    """Single-thread float32 GFLOP/s of this machine on the step's typical products: ~1,500 tokens at width
    128 against 128 x 128, 128 x 256 and 256 x 128 weights, forward (x W^T) and both backward products."""
    import torch

    gen = torch.Generator().manual_seed(0)
    cases = []
    for d_in, d_out in ((128, 128), (128, 256), (256, 128), (128, 384)):
        x, w, g = (torch.randn(1500, d_in, generator=gen), torch.randn(d_out, d_in, generator=gen),
                   torch.randn(1500, d_out, generator=gen))
        cases += [(x, w.t()), (g, w), (g.t(), x)]
    flops = sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in cases)
    for a, b in cases:
        a @ b
    times = []
    for _ in range(repeats):
        started = time.thread_time()
        for a, b in cases:
            a @ b
        times.append(time.thread_time() - started)
    return flops / statistics.median(times) / 1e9


def narrow_module(module, width: int):
    """``module``'s COMPOSER at every width ``width`` (same heads, layers, vocabulary and recursion), random init."""
    import dataclasses

    from composer.models.composer.module import ComposerModule

    cfg = module.model_cfg
    cfg = dataclasses.replace(
        cfg, text=dataclasses.replace(cfg.text, hidden_size=width, intermediate_size=2 * width),
        composition=dataclasses.replace(cfg.composition, cross_hidden_size=width, intermediate_size=2 * width,
                                        visual_hidden_size=width, visual_intermediate_size=2 * width),
        modulation=dataclasses.replace(cfg.modulation, hidden_size=width),
        primitive=dataclasses.replace(cfg.primitive, intermediate_size=2 * width))
    return ComposerModule(cfg, module.optim, load_pretrained=False)


def softmax_ms(keys: int, rows: int = 9680, repeats: int = 30) -> tuple[float, float]:
    """(forward, forward + backward) ms of torch's CPU softmax over ``keys`` keys on ``rows`` rows (the CT's
    level-1 attention: 242 items x 4 heads x 10 queries): why the packed layers pad the scores to 16 keys."""
    import torch

    x = torch.randn(rows, keys, generator=torch.Generator().manual_seed(0), requires_grad=True)
    forward, both = [], []
    for _ in range(repeats):
        started = time.thread_time()
        y = x.softmax(-1)
        forward.append(time.thread_time() - started)
        y.backward(torch.ones_like(y))
        both.append(time.thread_time() - started)
    return statistics.median(forward) * 1e3, statistics.median(both) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=23, help="training steps per path")
    ap.add_argument("--warmup", type=int, default=3, help="of which untimed")
    ap.add_argument("--flop-steps", type=int, default=3, help="steps profiled for the FLOP count")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-regions", type=int, default=14)
    ap.add_argument("--world-images", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--floor-width", type=int, default=16, help="also time the fast path at this width (0: skip)")
    args = ap.parse_args(argv)
    if args.steps <= args.warmup or args.warmup < 0 or args.flop_steps < 1:
        ap.error("need --steps > --warmup >= 0 and --flop-steps >= 1")

    import torch

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    from composer.models.composer.config import composer_config
    from composer.models.composer.predicate_transformer import TemplateTokenizer
    from composer.training.data import CompositionDataModule, DataConfig

    load = [os.getloadavg()[0]]
    dm = CompositionDataModule(DataConfig(data="world", batch_size=args.batch_size, max_regions=args.max_regions,
                                          world_images=args.world_images, eval_images=10, seed=args.seed))
    dm.prepare_data()
    dm.setup()
    dm.tokenizer = TemplateTokenizer.from_config(composer_config("small"))
    n_batches = args.steps + args.flop_steps
    if n_batches > dm.steps_per_epoch():
        ap.error(f"--steps + --flop-steps = {n_batches} exceeds the {dm.steps_per_epoch()} batches of an epoch")
    loader = iter(dm.train_dataloader())
    batches = [next(loader) for _ in range(n_batches)]

    steppers = {}
    for fast in (False, True):
        torch.manual_seed(args.seed)
        steppers[fast] = Stepper(build_module("composer", "small", dm.store.feature_dim), fast)
    steppers[True].module.load_state_dict(steppers[False].module.state_dict())
    clock = install_sections()
    sections: dict[str, float] = collections.defaultdict(float)
    try:
        for i, batch in enumerate(batches[:args.steps]):
            timed = i >= args.warmup
            steppers[False].step(batch, i, timed)
            clock.seconds.clear()
            steppers[True].step(batch, i, timed)
            if timed:
                for name, seconds in clock.seconds.items():
                    sections[name] += seconds
    finally:
        clock.remove()
    timed_steps = args.steps - args.warmup
    narrow = None
    if args.floor_width:
        torch.manual_seed(args.seed)
        narrow = Stepper(narrow_module(steppers[True].module, args.floor_width), True)
        for i, batch in enumerate(batches[:args.steps]):
            narrow.step(batch, i, timed=i >= args.warmup)
    flops = {fast: step_flops(steppers[fast], batches[args.steps:], args.steps) for fast in (False, True)}
    rate = matmul_rate()
    softmax = {keys: softmax_ms(keys) for keys in (10, 15, 16, 32)}
    load.append(os.getloadavg()[0])

    result = {"benchmark": "profile_composer_step", "args": vars(args), "machine": machine("cpu"), "load": load,
              "matmul_gflops_per_s": rate, "paths": {}}
    print(f"load average {load[0]:.1f} at start, {load[1]:.1f} at the end; single-thread matrix products "
          f"{rate:.1f} GFLOP/s")
    for fast, label in ((False, "reference"), (True, "fast")):
        st = steppers[fast]
        parts = {p: statistics.median(v) * 1e3 for p, v in st.parts.items()}
        total = statistics.median([sum(v[i] for v in st.parts.values()) for i in range(timed_steps)]) * 1e3
        all_flops, product_flops, ops = flops[fast]
        floor = product_flops / rate / 1e6
        result["paths"][label] = {"ms_per_step": total, "parts_ms": parts, "gflop_per_step": all_flops / 1e9,
                                  "matmul_gflop_per_step": product_flops / 1e9, "operators_per_step": ops,
                                  "matmul_floor_ms": floor}
        print(f"{label:9s}: {total:6.1f} ms CPU / step (" + ", ".join(f"{p} {v:.1f}" for p, v in parts.items())
              + f"); {product_flops / 1e9:.2f} GFLOP in matrix products -> {floor:.1f} ms at the measured rate, "
              f"{total - floor:.1f} ms the rest; {ops:,} operators / step (profiler events, nested included)")
    result["fast_forward_sections_ms"] = {k: v / timed_steps * 1e3 for k, v in sorted(sections.items(),
                                                                                      key=lambda kv: -kv[1])}
    print("fast path forward by section (ms CPU / step): " + ", ".join(
        f"{k} {v:.1f}" for k, v in result["fast_forward_sections_ms"].items()))
    result["softmax_ms"] = {k: {"forward": f, "forward_backward": b} for k, (f, b) in softmax.items()}
    print("torch's CPU softmax on 9,680 rows, ms forward / forward + backward: " + ", ".join(
        f"{k} keys {f:.2f} / {b:.2f}" for k, (f, b) in softmax.items()))
    ref, fast = result["paths"]["reference"], result["paths"]["fast"]
    if narrow is not None:
        floor_ms = statistics.median([sum(v[i] for v in narrow.parts.values()) for i in range(timed_steps)]) * 1e3
        result["narrow"] = {"width": args.floor_width, "ms_per_step": floor_ms}
        print(f"the fast path at width {args.floor_width} (same operators, ~{(128 / args.floor_width) ** 2:.0f}x less "
              f"arithmetic per product): {floor_ms:.1f} ms CPU / step")
    need = ref["ms_per_step"] / 2
    print(f"reference / fast: {ref['ms_per_step'] / fast['ms_per_step']:.2f}x; twice the reference's rate needs "
          f"<= {need:.1f} ms / step, of which the fast path's matrix products alone take {fast['matmul_floor_ms']:.1f}"
          f" ms at the measured rate: {need - fast['matmul_floor_ms']:.1f} ms left for everything else, against "
          f"{fast['ms_per_step'] - fast['matmul_floor_ms']:.1f} ms now")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
