"""What the fused Adam / AdamW kernels save on CPU, and that they update the weights as the default does.

    python benchmarks/bench_optimizer.py              # about a minute on 2 cores
    python benchmarks/bench_optimizer.py --threads 1  # as a study worker runs (two jobs, one core each)

For each model of the study at the ``small`` preset (the sizes the cpu profile trains), the optimiser the
library builds for it (Adam for COMPOSER, the flat model and VSE; AdamW with open_clip's decay groups for the
CLIP family) is stepped on fixed random gradients, ``fused=False`` (torch's default multi-tensor path) and
``fused=True`` back to back, alternating, ``--steps`` times each; the table gives the median seconds per
``step()`` and their ratio. Then both optimisers start from the same weights and take ``--check-steps`` steps
on the same gradients: the largest absolute weight difference says the two paths are the same update, rounded
differently. What share of a whole training step the optimiser is comes from benchmarks/bench_composer.py's
step times (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

from bench_composer import build_module, machine

MODELS = ("composer", "flat", "vse", "clip")


def optimizer_for(module, fused: bool):
    """The library's optimiser of ``module`` with the fused kernels on or off."""
    opt = module.make_optimizer()
    groups = [{k: v for k, v in g.items() if k not in ("fused", "foreach")} for g in opt.param_groups]
    return type(opt)(groups, fused=fused, foreach=None if fused else True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--check-steps", type=int, default=50)
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine("cpu").items())
          + f"; torch threads {torch.get_num_threads()}; load average at start {os.getloadavg()[0]:.1f}\n")
    print("| model | optimiser | params | foreach s / step | fused s / step | foreach / fused | max weight diff after "
          f"{args.check_steps} steps |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        torch.manual_seed(0)
        module = build_module(name, "small", region_dim=2048)
        params = [p for p in module.parameters() if p.requires_grad]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-2
        opts = {False: optimizer_for(module, False), True: optimizer_for(module, True)}
        times = {False: [], True: []}
        for i in range(args.steps + 2):
            for fused, opt in opts.items():
                started = time.perf_counter()
                opt.step()
                if i >= 2:  # the first steps allocate the moments
                    times[fused].append(time.perf_counter() - started)

        # the same update: two copies from the same weights, the same gradients, one optimiser each
        a, b = copy.deepcopy(module), copy.deepcopy(module)
        oa, ob = optimizer_for(a, False), optimizer_for(b, True)
        gen = torch.Generator().manual_seed(1)
        pa = [p for p in a.parameters() if p.requires_grad]
        pb = [p for p in b.parameters() if p.requires_grad]
        for _ in range(args.check_steps):
            for x, y in zip(pa, pb):
                g = torch.randn(x.shape, generator=gen) * 1e-2
                x.grad, y.grad = g.clone(), g.clone()
            oa.step()
            ob.step()
        diff = max((x - y).abs().max().item() for x, y in zip(pa, pb))
        slow, fast = statistics.median(times[False]), statistics.median(times[True])
        print(f"| {name} | {type(opts[True]).__name__} | {sum(p.numel() for p in params) / 1e6:.1f}M | {slow:.4f} | "
              f"{fast:.4f} | {slow / fast:.1f} | {diff:.1e} |")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
