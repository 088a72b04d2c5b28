"""COMPOSER and the flat model at the paper's sizes: measured on this CPU, projected to one 80 GB H100.

    python benchmarks/bench_paper_config.py                      # about 10 minutes on 2 cores
    python benchmarks/bench_paper_config.py --markdown           # also print the docs/benchmarks.md table

Sizes: the ``paper`` preset (PT 6 BERT-base layers, CT 5, 1024-d co-attention, 768-d streams), random
weights (nothing downloaded; timing and memory do not depend on the weights), 100 regions + the global
one, 2048-d features + 5-d geometry. Captions: ``--captions`` random Flickr30K test captions (seed 0),
parsed with the default spaCy parser, as in benchmarks/count_composer.py (whose helpers this reuses).

Measured here, per model:

* **FLOPs** (``torch.utils.flop_counter.FlopCounterMode``, 2 per multiply-add, attention included):
  the evaluation forward of one (image, caption) pair (count_composer's ``pair_gflops``: the per-image
  prefix counted once per pair, an upper bound for chunked scoring), and one training step -- forward,
  the training loss (COMPOSER: match + MVSA + order; flat: match) and backward -- on a batch of
  ``--positives`` positives in the training layout (each with 2 caption negatives and 1 image negative:
  4 pairs per positive, 2 distinct images and 3 distinct captions per positive).
* **Activation memory**: the bytes of every tensor autograd saves for backward during that training
  step's forward and loss, counted once per storage (``torch.autograd.graph.saved_tensors_hooks``,
  deduplicated by storage pointer), in fp32 and under CPU bf16 autocast. This is the memory a training
  step holds on top of weights, gradients and optimiser state at the peak (the start of backward); it
  leaves out the transient buffers of single kernels and the allocator's rounding.
* **CPU time**: the wall time of that training step (forward + loss + backward, fp32) and of scoring
  ``--eval-pairs`` pairs of one image (no grad, fp32), with the torch thread count printed.

Projected to one H100 SXM 80 GB (labelled as projections): a batch-64 training step (64 positives =
256 pairs, the paper's batch and ViLBERT's 4-way sampling) and the 5,000,000-pair evaluation of the
Flickr30K 1K test (1,000 images x 5,000 captions). Time = FLOPs / sustained throughput, with the
sustained throughput a fraction (``--mfu``, default 0.25; range 0.10-0.40) of the H100's dense bf16
peak (989 TFLOP/s). Memory = weights + gradients (fp32) + Adam's two moments (fp32) + the bf16 weight
copies autocast caches + the measured bf16 activation bytes per positive x 64, plus 20 % for allocator
rounding and kernel workspaces.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from count_composer import paper_config, pair_gflops, sample_programs  # the FLOP counts of docs/composer.md

ROOT = Path(__file__).resolve().parents[1]
H100_BF16_DENSE_TFLOPS = 989.0     # H100 SXM5, dense (no sparsity) bf16 tensor-core peak
EVAL_PAIRS = 1000 * 5000           # Flickr30K 1K test: every caption against every image
PAPER_BATCH = 64                   # positives per step (Appendix C); 4 pairs each
OP_LATENCY_S = 15e-6               # eager PyTorch per-operator overhead (Python, dispatcher, launch) on a GPU host


LABELS = {"composer": "COMPOSER"}  # the table's row labels (the registry name otherwise)


def build(kind: str, cfg):
    from composer.models import registry

    torch.manual_seed(0)
    return registry.get(kind).build_model(cfg, load_pretrained=False)


def regions_batch(images: int, regions: int, dim: int, seed: int = 0):
    """(I, R, Dr) post-ReLU features, (I, R, 5) geometry of boxes in a 500 x 375 image, (I, R) mask."""
    from features.geometry import box_geometry

    gen = torch.Generator().manual_seed(seed)
    feats = torch.relu(torch.randn(images, regions, dim, generator=gen))
    geo = []
    for _ in range(images):
        xy = torch.rand(regions, 2, generator=gen) * torch.tensor([400.0, 300.0])
        boxes = torch.cat([xy, xy + torch.rand(regions, 2, generator=gen) * 100], 1).numpy()
        geo.append(torch.from_numpy(box_geometry(boxes, 500, 375)))
    return feats, torch.stack(geo), torch.ones(images, regions, dtype=torch.bool)


def training_layout(positives: int):
    """(pair_image, pair_caption) (B, 4): positive, 2 caption negatives (positive image), 1 image negative."""
    b = positives
    pair_image = [[i, i, i, b + i] for i in range(b)]
    pair_caption = [[i, b + 2 * i, b + 2 * i + 1, i] for i in range(b)]
    return torch.tensor(pair_image), torch.tensor(pair_caption)


def training_loss(kind: str, model, cfg, programs, feats, geo, mask, pair_image, pair_caption):
    """ComposerModule's loss (match + MVSA + order) or FlatModule's (match), as in training."""
    from composer.models import registry
    from composer.models.composer.losses import OrderScores, composer_loss
    from composer.models.composer.negative_sampling import mvsa_scores
    from composer.models.composer.program import ProgramBatch

    tok = model.make_tokenizer()
    b, k1 = pair_image.shape
    pi, pc = pair_image.reshape(-1), pair_caption.reshape(-1)
    if not registry.get(kind).concept_tree:  # the flat model: the sentence's text, l_MATCH only
        enc = tok.encode_sentences([p.texts[p.root] for p in programs])
        scores = model(feats, geo, mask, enc.ids, enc.mask, pi, pc).scores
        return composer_loss(scores.view(b, k1), None, None, cfg.loss).total
    out = model(feats, geo, mask, ProgramBatch.collate(programs, tok), pi, pc)
    n = out.node_scores.shape[1]
    mvsa = mvsa_scores(out.node_scores.view(b, k1, n), out.concept_mask().view(b, k1, n), 2,
                       torch.Generator().manual_seed(0))
    edges = out.edge_scores()
    e = edges.parent.shape[1]
    order = OrderScores(edges.parent.view(b, k1, e)[:, 0], edges.child.view(b, k1, e)[:, 0],
                        edges.mask.view(b, k1, e)[:, 0])
    return composer_loss(out.root_scores.view(b, k1), mvsa, order, cfg.loss).total


def saved_activation_bytes(model, fn) -> tuple[int, int]:
    """``(activation bytes, weight-copy bytes)``: the distinct storages autograd saves for backward while
    ``fn()`` runs, less the model's parameters (a linear layer saves its weight); under autocast, the bf16
    copies of the weights (tensors shaped like a parameter) are counted apart."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() >= 2}
    seen: dict[int, tuple[int, bool]] = {}

    def pack(t: torch.Tensor):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen.setdefault(s.data_ptr(), (s.nbytes(), t.dtype != torch.float32 and tuple(t.shape) in shapes))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn()
    del loss
    return (sum(n for n, w in seen.values() if not w), sum(n for n, w in seen.values() if w))


class OpCounter(TorchDispatchMode):
    """Counts the aten operators that compute (views excluded): about one GPU kernel launch each."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not getattr(func, "is_view", False):
            self.ops += 1
        return func(*args, **(kwargs or {}))


def measure(kind: str, programs, args) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    cfg = paper_config(6, 5, "first")
    model = build(kind, cfg).train()
    params = sum(p.numel() for p in model.parameters())
    b = args.positives
    feats, geo, mask = regions_batch(2 * b, args.regions, cfg.visual.region_dim)
    pair_image, pair_caption = training_layout(b)
    batch_programs = programs[:3 * b]

    def step():
        loss = training_loss(kind, model, cfg, batch_programs, feats, geo, mask, pair_image, pair_caption)
        loss.backward()
        model.zero_grad(set_to_none=True)

    step()  # warm-up
    started = time.perf_counter()
    step()
    step_seconds = time.perf_counter() - started
    with FlopCounterMode(display=False) as counter:
        step()
    train_gflops = counter.get_total_flops() / 1e9

    with OpCounter() as ops:
        step()
    act, copies = {}, {}
    for precision in ("fp32", "bf16"):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            act[precision], copies[precision] = saved_activation_bytes(model, lambda: training_loss(
                kind, model, cfg, batch_programs, feats, geo, mask, pair_image, pair_caption))

    # evaluation: one image against eval_pairs captions (the test captions, cycled), fp32, no grad
    from composer.models.composer.program import ProgramBatch

    model.eval()
    n = args.eval_pairs
    eval_programs = [programs[i % len(programs)] for i in range(n)]
    one = regions_batch(1, args.regions, cfg.visual.region_dim, seed=1)
    zeros, caps = torch.zeros(n, dtype=torch.long), torch.arange(n)
    batch = ProgramBatch.collate(eval_programs, model.make_tokenizer())
    with torch.no_grad():
        model.score_pairs(*one, batch, zeros[:4], caps[:4])  # warm-up
        started = time.perf_counter()
        model.score_pairs(*one, batch, zeros, caps)
        eval_seconds = time.perf_counter() - started
    eval_gflops_single = pair_gflops(cfg, programs[:args.flop_captions], args.regions, kind)
    return {"params": params, "train_positives": b, "train_pairs": 4 * b, "train_step_seconds": step_seconds,
            "train_gflops_per_positive": train_gflops / b, "train_step_ops": ops.ops,
            "activation_bytes_per_positive": {k: v / b for k, v in act.items()},
            "autocast_weight_copy_bytes": copies["bf16"], "eval_pairs": n, "eval_seconds": eval_seconds,
            "eval_pairs_per_second": n / eval_seconds, "eval_gflops_per_pair": eval_gflops_single,
            "cpu_train_gflops_per_second": train_gflops / step_seconds}


def project(m: dict, mfu: float) -> dict:
    sustained = H100_BF16_DENSE_TFLOPS * 1e12 * mfu
    p = m["params"]
    static = p * 4 * 4 + p * 2               # fp32 weights, grads, Adam m and v; autocast's bf16 weight copies
    act = m["activation_bytes_per_positive"]["bf16"] * PAPER_BATCH
    # eager PyTorch launches one kernel per operator; the level-by-level recursion has many of them whatever the
    # batch (a batch-64 step runs the same levels as a 4-positive one), so the step costs at least their latency
    return {"step_seconds": m["train_gflops_per_positive"] * 1e9 * PAPER_BATCH / sustained
            + m["train_step_ops"] * OP_LATENCY_S,
            "step_launch_seconds": m["train_step_ops"] * OP_LATENCY_S,
            "step_memory_gib": (static + act) * 1.2 / 2**30, "static_gib": static / 2**30,
            "activation_gib": act / 2**30,
            "eval_seconds": m["eval_gflops_per_pair"] * 1e9 * EVAL_PAIRS / sustained}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared" / "data" / "flickr30k" / "captions.jsonl"))
    ap.add_argument("--captions", type=int, default=64, help="random test captions (seed 0)")
    ap.add_argument("--flop-captions", type=int, default=32, help="captions the per-pair eval FLOPs average over")
    ap.add_argument("--positives", type=int, default=4, help="positives of the measured training step")
    ap.add_argument("--regions", type=int, default=101, help="regions per image (100 + the global one)")
    ap.add_argument("--eval-pairs", type=int, default=64, help="pairs of the timed evaluation call")
    ap.add_argument("--mfu", type=float, default=0.25, help="projected sustained fraction of the H100's bf16 peak")
    ap.add_argument("--models", default="composer,flat")
    ap.add_argument("--markdown", action="store_true", help="print the docs/benchmarks.md table")
    ap.add_argument("--json", help="write the measurements and projections here")
    args = ap.parse_args(argv)
    if not Path(args.corpus).exists():
        raise SystemExit(f"{args.corpus} not found: pass --corpus with Flickr30K captions")
    env = {"machine": platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
           "torch_threads": torch.get_num_threads(), "load_average_start": round(os.getloadavg()[0], 1)}
    print(json.dumps(env), flush=True)
    programs = sample_programs(Path(args.corpus), args.captions, 0)
    print(f"captions: mean height {statistics.mean(p.height for p in programs):.2f}, "
          f"{statistics.mean(sum(t is not None for t in p.templates) for p in programs):.1f} composed concepts",
          flush=True)
    out = {"env": env, "mfu": args.mfu, "models": {}}
    for kind in args.models.split(","):
        started = time.perf_counter()
        m = measure(kind, programs, args)
        m["projected"] = {str(f): project(m, f) for f in (0.10, args.mfu, 0.40)}
        out["models"][kind] = m
        print(kind, json.dumps(m, indent=1), f"({time.perf_counter() - started:.0f} s)", flush=True)
    env["load_average_end"] = round(os.getloadavg()[0], 1)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if args.markdown:
        print(markdown(out, args))
    return 0


def _hms(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.1f} s"


def markdown(out: dict, args) -> str:
    rows = []
    lo, mid, hi = (str(f) for f in (0.10, args.mfu, 0.40))
    for kind, m in out["models"].items():
        name = LABELS.get(kind, kind)
        pr = m["projected"]
        rows += [
            f"| {name} | parameters | {m['params'] / 1e6:.1f}M | |",
            f"| {name} | GFLOPs per pair, evaluation forward (measured) | {m['eval_gflops_per_pair']:.2f} | |",
            f"| {name} | GFLOPs per positive (4 pairs), training step fwd + loss + bwd (measured) | "
            f"{m['train_gflops_per_positive']:.1f} | |",
            f"| {name} | activation memory per positive, fp32 / bf16 autocast (measured) | "
            f"{m['activation_bytes_per_positive']['fp32'] / 2**20:.0f} / "
            f"{m['activation_bytes_per_positive']['bf16'] / 2**20:.0f} MiB | |",
            f"| {name} | training step, {m['train_positives']} positives ({m['train_pairs']} pairs), fp32 | "
            f"{m['train_step_seconds']:.1f} s ({m['cpu_train_gflops_per_second']:.0f} GFLOP/s) | |",
            f"| {name} | batch-64 training step (256 pairs), bf16-mixed: time | "
            f"{m['train_step_seconds'] / m['train_positives'] * 64:.0f} s (scaled) | "
            f"**{pr[mid]['step_seconds']:.2f} s** ({pr[hi]['step_seconds']:.2f}-{pr[lo]['step_seconds']:.2f}) |",
            f"| {name} | batch-64 training step: memory | | **{pr[mid]['step_memory_gib']:.1f} GiB** of 80 "
            f"(weights + grads + Adam {pr[mid]['static_gib']:.1f}, activations {pr[mid]['activation_gib']:.1f}) |",
            f"| {name} | evaluation, {m['eval_pairs']} pairs of one image, fp32 | {m['eval_seconds']:.1f} s "
            f"({m['eval_pairs_per_second']:.1f} pairs/s) | |",
            f"| {name} | 5M-pair evaluation (1K x 5K) | {_hms(EVAL_PAIRS / m['eval_pairs_per_second'])} (scaled) | "
            f"**{_hms(pr[mid]['eval_seconds'])}** ({_hms(pr[hi]['eval_seconds'])}-{_hms(pr[lo]['eval_seconds'])}) |",
        ]
    return ("| model | quantity | measured on this CPU | projected, one H100 80 GB |\n|---|---|---|---|\n"
            + "\n".join(rows))


if __name__ == "__main__":
    sys.exit(main())
