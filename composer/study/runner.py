"""The study's orchestration: data once per study directory, every (run, seed) trained and evaluated in
resumable worker processes, and the report (``results.json``, tables, plots) from whatever has finished.

``gc-study`` (composer/cli/study.py, ``experiments/run_study.py``) parses its arguments and calls
:func:`run_study`. Each run writes its ``result.json`` atomically when it finishes; a rerun skips finished
runs, so a killed study resumes where it stopped (seeds and runs may grow between invocations; other
profile settings may not).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from composer.models.common.config import plain_config
from composer.models import registry
from composer.provenance import git_sha, hardware_description
from composer.study.config import StudyProfile, StudyRun, il_overrides, schedule_for
from composer.training.fit import TrainerOptions, add_twin_scores, deterministic_algorithms, training_precision
from composer.training.recipes import RecipeOverrides, TrainingRecipe, named_recipe

__all__ = ["EvalSets", "StudyOptions", "run_study", "build_run", "check_study_dir", "collect", "prepare_data",
           "run_recipe", "run_tasks",
           "spawn_workers", "train_and_evaluate", "write_report"]

# Every graph of the study is built as its training graphs are: from the world's gold trees (docs/world.md,
# "Gold parses"), also the MCD split's, the hard negatives' and the windows'.
STUDY_PARSER = "world"

logger = logging.getLogger(__name__)

TABLES_DIR, PLOTS_DIR = "tables", "plots"
PLOT_FILES = ("composer_figure4_r1_vs_cd.png", "il_clip_loss_generations.png", "il_clip_easy_to_learn.png")
PRUNE_SEED = 0  # Table 7's degraded parses are data: the same for every model seed


@dataclass
class StudyOptions:
    """How the runs are trained (not what): Lightning's accelerator and precision (None = bf16-mixed on a
    GPU, 32-true on CPU), and whether to keep each run's weights (``model.pt``)."""

    accelerator: str = "auto"
    precision: str | None = None
    keep_weights: bool = False


# ---------------------------------------------------------------------------- small helpers
def write_json_atomic(path: Path, obj) -> None:
    """Write JSON through a temporary file and a rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_dir(out: Path, run: StudyRun, seed: int) -> Path:
    return out / "runs" / run.name / f"seed{seed}"


# ---------------------------------------------------------------------------- the study's data
def _profile_fingerprint(profile: StudyProfile) -> dict:
    d = plain_config(profile)
    for key in ("seeds", "runs", "jobs"):  # what may change between invocations of one study
        d.pop(key)
    return d


def check_study_dir(out: Path, profile: StudyProfile, data: str) -> None:
    """Refuse to mix profiles in one directory (seeds and runs may grow)."""
    path = out / "study.json"
    want = {"data": data, "profile": _profile_fingerprint(profile)}
    if path.exists():
        have = json.loads(path.read_text())
        if have != want:
            differ = sorted(k for k in set(have["profile"]) | set(want["profile"])
                            if have["profile"].get(k) != want["profile"].get(k))
            raise SystemExit(f"error: {out} holds a study with other settings (profile {have['profile']['name']!r}, "
                             f"data {have['data']!r}; differing: {differ or ['data']}); use another --out, or "
                             f"delete {out} to start over")
    else:
        write_json_atomic(path, want)


def prepare_data(profile: StudyProfile, out: Path) -> dict:
    """The world, its MCD split and windows, and the hard-negative set (once per study directory)."""
    path = out / "data" / "study_data.json"
    if path.exists():
        return json.loads(path.read_text())
    started = time.perf_counter()
    from composer.study.evaluation import world_hard_negative_set
    from composer.training.data import CompositionDataModule, DataConfig
    from crg.graph_cache import get_or_build_graph
    from features.catalog import resolve_dataset

    spec = resolve_dataset("world", **profile.world_data())
    logger.info("world: %s", spec.world_dir)
    mcd = make_mcd_windows(profile, spec, out / "data" / "mcd")

    test_graph, _ = get_or_build_graph(spec.captions, list(spec.test_splits), parser_name=STUDY_PARSER, progress=False)
    dm = CompositionDataModule(DataConfig(data="world", **profile.world_data()))
    dm.graphs["test"] = test_graph
    chosen = dm.eval_set("test", profile.hn_images)
    captions = [(test_graph.image_ids[test_graph.caption_image[c]], test_graph.caption_texts[c])
                for c in chosen.captions]
    pool = dm.eval_set("test", 10 ** 9).image_ids  # distractors: held-out test images only
    hn_set, hn_summary = world_hard_negative_set(spec.world_dir, captions, distractor_pool=pool,
                                                 per_type=profile.hn_per_type,
                                                 distractor_images=profile.hn_distractors, seed=0)
    hn_path = out / "data" / "hard_negatives.json"
    write_json_atomic(hn_path, hn_set)
    logger.info("hard negatives: %d captions of %d test images, %d negatives %s", len(captions),
                len(chosen.image_ids), hn_summary["negatives"], hn_summary["negatives_by_type"])
    data = {"world": {"dir": str(spec.world_dir), "captions": str(spec.captions), "features": str(spec.features),
                      "images": profile.world_images},
            "mcd": mcd, "hard_negatives": {"path": str(hn_path), **hn_summary},
            "seconds": round(time.perf_counter() - started, 1)}
    write_json_atomic(path, data)
    return data


def candidate_split_labels(spec, roles) -> list[str]:
    """The world's split labels of the MCD candidates' roles: ``val``, ``test`` (every test set: on the
    compositional world ``test_iid``, ``test_systematic`` and ``test_productivity``) or a label itself.

    >>> from features.catalog import DatasetSpec
    >>> spec = DatasetSpec("world", Path("c"), None, test_splits=("test_iid",),
    ...                    eval_splits={"systematic": ("test_systematic",)})
    >>> candidate_split_labels(spec, ("val", "test"))
    ['val', 'test_iid', 'test_systematic']
    """
    by_role = {"train": list(spec.train_splits), "val": list(spec.val_splits),
               "test": [*spec.test_splits, *(s for labels in spec.eval_splits.values() for s in labels)]}
    return list(dict.fromkeys(label for role in roles for label in by_role.get(role, [role])))


def make_mcd_windows(profile: StudyProfile, spec, out: Path) -> dict:
    """The MCD split of the candidate splits against the train split, and ``num_windows`` windows
    evenly spaced over the range of window divergences, with the project's splitter."""
    from crg.compounds import SEMANTIC, semantic_annotations
    from crg.corpus import read_corpus
    from crg.graph_cache import get_or_build_graph
    from crg.mcd import MCDConfig, build_problem, eligible_candidates, make_mcd_split
    from crg.mcd_output import GraphOptions, MCDCorpora, write_mcd_split

    captions = spec.captions
    candidate_splits = candidate_split_labels(spec, profile.mcd_candidate_splits)
    graph, _ = get_or_build_graph(captions, None, parser_name=STUDY_PARSER, progress=False)
    splits = np.asarray(graph.image_splits, dtype=object)
    annotations = (semantic_annotations(read_corpus(captions).images, str(captions))
                   if profile.mcd_compounds == SEMANTIC else None)
    problem = build_problem(graph, graph, train_images=np.flatnonzero(np.isin(splits, list(spec.train_splits))),
                            candidate_images=np.flatnonzero(np.isin(splits, candidate_splits)),
                            compounds=profile.mcd_compounds, annotations=annotations)
    eligible = int(eligible_candidates(problem)[0].sum())
    k = min(profile.mcd_images, max(1, eligible // 2))  # leave room to slide the window
    if k < profile.mcd_images:
        logger.warning("MCD split: %d eligible candidates; using %d images instead of %d", eligible, k,
                       profile.mcd_images)
    scan = make_mcd_split(problem, MCDConfig(num_images=k, num_random=0))
    lo, hi = float(scan.curve_compound.min()), float(scan.curve_compound.max())
    targets = sorted({round(float(t), 3) for t in np.linspace(lo, hi, profile.num_windows)})
    written = write_mcd_split(MCDCorpora(str(captions), list(spec.train_splits), candidate_splits=candidate_splits),
                              out, MCDConfig(num_images=k, target_cds=tuple(targets), progress=False),
                              graphs=GraphOptions(parser_name=STUDY_PARSER, progress=False),
                              compounds=profile.mcd_compounds)
    report = written.report
    windows = [{"target": t["target"], "compound_divergence": t["compound_divergence"],
                "atom_divergence": t["atom_divergence"], "window_start": t["window_start"],
                "num_images": t["num_images"], "path": str(Path(d) / "eval.jsonl")}
               for t, d in zip(report["targets"], written.target_dirs)]
    return {"dir": str(out), "path": str(out / "eval.jsonl"), "num_images": k, "eligible": eligible,
            "compounds": profile.mcd_compounds, "compound_divergence": report["compound_divergence"],
            "atom_divergence": report["atom_divergence"], "compound_divergences": report["compound_divergences"],
            "random_compound_divergence": report["random_compound_divergence"],
            "ranking_direction": report["ranking_direction"], "windows": windows}


class EvalSets:
    """The evaluation sets of one process, loaded on first use per (parser, parse pruning, regions per image)."""

    def __init__(self, profile: StudyProfile, data: dict):
        self.profile, self.data = profile, data
        self._cache: dict = {}
        self.hn_set = json.loads(Path(data["hard_negatives"]["path"]).read_text())

    def _get(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def test(self, prune: float, max_regions: int, parser: str = STUDY_PARSER):
        from composer.evaluation.eval_sets import load_eval_data

        return self._get(("test", parser, prune, max_regions), lambda: load_eval_data(
            "world", split="test", eval_images=self.profile.eval_images, max_regions=max_regions,
            **self.profile.world_data(), parser=parser,
            prune_probability=prune, prune_seed=PRUNE_SEED))

    def split_file(self, path: str, num_images: int, prune: float, max_regions: int, parser: str = STUDY_PARSER):
        from composer.evaluation.eval_sets import load_eval_data

        return self._get(("file", path, parser, prune, max_regions), lambda: load_eval_data(
            path, split="all", features=self.data["world"]["features"], eval_images=num_images,
            max_regions=max_regions, parser=parser, prune_probability=prune, prune_seed=PRUNE_SEED))

    def hn_programs(self, prune: float, parser: str = STUDY_PARSER) -> dict:
        from composer.evaluation.hard_negatives import eval_pairs
        from composer.evaluation.text_pairs import programs_for_texts

        texts = [t for _, t in eval_pairs(self.hn_set)]
        return self._get(("hn", parser, prune), lambda: programs_for_texts(texts, parser_name=parser,
                                                                           prune_probability=prune,
                                                                           prune_seed=PRUNE_SEED))


# ---------------------------------------------------------------------------- one run
def run_recipe(run: StudyRun, seed: int, profile: StudyProfile) -> TrainingRecipe:
    """The world's named recipe of ``run.model`` with the profile's sizes and the run's typed overrides."""
    overrides = dict(run.overrides)
    sizes: dict = {"seed": seed, **profile.world_data(),
                   "eval_images": profile.eval_images, "num_workers": profile.num_workers,
                   "prune_probability": run.prune, "prune_seed": PRUNE_SEED, "parser": run.parser}
    if profile.max_regions is not None:
        sizes["max_regions"] = profile.max_regions
    if run.model in profile.presets:
        sizes["preset"] = profile.presets[run.model]
    if registry.get(run.model).step_schedule is None:
        sched = schedule_for(profile, run.model)
        sizes.update({k: v for k, v in {"lr": sched.lr, "batch_size": sched.batch_size}.items() if v is not None})
    else:
        if profile.clip_batch_size is not None:
            sizes["batch_size"] = profile.clip_batch_size
        sizes["il"] = il_overrides(profile, run)  # IL's step schedule (the plain kinds: its total steps)
    return named_recipe(run.model, "world", RecipeOverrides(**{**sizes, **overrides}))


def build_run(run: StudyRun, seed: int, profile: StudyProfile) -> tuple:
    """The run's LightningModule and data module, its schedule fitted to the profile's length.

    Returns ``(module, datamodule, configs, max_epochs, max_steps)``.
    """
    from composer.training.fit import prepare_run

    steps_per_epoch = {}

    def fit_schedule(recipe: TrainingRecipe, spe: int) -> tuple[TrainingRecipe, int, int]:
        steps_per_epoch["train"] = spe
        if recipe.il is not None:  # IL's step schedule (the plain kinds: its total steps, one warm-up)
            return recipe, -1, recipe.il.total_steps
        # the named schedule's shape (warm-up, /10 steps) over the profile's number of steps
        sched = schedule_for(profile, run.model)
        max_steps = sched.total_steps(spe)
        optim = replace(recipe.optim, epochs=max(1, math.ceil(max_steps / spe)),
                        warmup_epochs=sched.warmup_fraction * max_steps / spe,
                        decay_epochs=tuple(f * max_steps / spe for f in sched.decay_fractions))
        return replace(recipe, optim=optim), optim.epochs, max_steps

    prepared = prepare_run(run_recipe(run, seed, profile), fit_schedule=fit_schedule)
    recipe = prepared.recipe
    configs = {"model": plain_config(prepared.model_config), "optim": plain_config(recipe.optim),
               "data": plain_config(recipe.data), "il": None if recipe.il is None else plain_config(recipe.il),
               "overrides": run.overrides, "steps_per_epoch": steps_per_epoch["train"]}
    return prepared.module, prepared.datamodule, configs, prepared.max_epochs, prepared.max_steps


def read_train_curve(metrics_csv: Path) -> dict:
    """Per-step training losses from a Lightning CSV log (IL-CLIP's generation and phase when logged)."""
    keys = {"loss": "train/loss", "contrastive": "train/contrastive", "distill": "train/distill",
            "generation": "il/generation", "phase": "il/phase", "match_acc": "train/match_acc"}
    rows: dict[int, dict] = {}
    if not metrics_csv.exists():
        return {}
    with metrics_csv.open() as f:
        for rec in csv.DictReader(f):
            if not rec.get("step"):
                continue
            row = rows.setdefault(int(float(rec["step"])), {})
            for name, col in keys.items():
                if rec.get(col) not in (None, ""):
                    row[name] = float(rec[col])
    steps = sorted(s for s, r in rows.items() if "loss" in r)
    curve = {"step": steps}
    for name in keys:
        if any(name in rows[s] for s in steps):
            curve[name] = [rows[s].get(name) for s in steps]
    return curve


def _cycle(loader):
    while True:
        yield from loader


def train_and_evaluate(run: StudyRun, seed: int, profile: StudyProfile, sets: EvalSets, out: Path,
                       options: StudyOptions) -> dict:
    """Train one run for one seed and evaluate it; returns its result (written by the caller)."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from composer.evaluation.phrase_retrieval import evaluate_phrase_retrieval
    from composer.evaluation.text_pairs import hard_negative_accuracy
    from composer.study.evaluation import flat_report, sentence_retrieval

    module, dm, configs, max_epochs, max_steps = build_run(run, seed, profile)
    trainer = L.Trainer(
        default_root_dir=out, max_epochs=max_epochs, max_steps=max_steps, accelerator=options.accelerator, devices=1,
        precision=training_precision(TrainerOptions(accelerator=options.accelerator, precision=options.precision)),
        deterministic=deterministic_algorithms(TrainerOptions(accelerator=options.accelerator)),
        logger=CSVLogger(out, name="logs"),
        enable_checkpointing=False, limit_val_batches=0, num_sanity_val_steps=0, enable_progress_bar=False,
        enable_model_summary=False, log_every_n_steps=profile.log_every_n_steps,
        gradient_clip_val=module.optim.grad_clip or None)
    started = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    train_seconds = time.perf_counter() - started

    model, tok = module.model, module.tokenizer
    device = next(model.parameters()).device
    max_regions, mp = dm.cfg.max_regions, profile.max_pairs
    evals = profile.evals_for(run)
    result = {"run": run.name, "model": run.model, "label": run.label, "seed": seed, "steps": int(trainer.global_step),
              "train_seconds": round(train_seconds, 1), "git": git_sha(), "hardware": hardware_description(),
              "device": str(device),
              "num_parameters": int(sum(p.numel() for p in model.parameters())), "config": configs,
              "prune": run.prune, "parser": run.parser, "eval_seconds_by": {}}
    started = time.perf_counter()

    def timed(name, fn):
        t = time.perf_counter()
        value = fn()
        result["eval_seconds_by"][name] = round(time.perf_counter() - t, 1)
        return value

    if "val" in evals:  # the recipe search's criterion
        result["val"] = timed("val", lambda: flat_report(module.evaluate_retrieval(
            dm.retrieval_set("val", profile.eval_images))))
    if "test" in evals:  # in-domain test and, on the compositional world, the systematic (productivity) set
        for role in ("test", *(r for r in dm.eval_roles() if r != "productivity" or "productivity" in evals)):
            result[role] = timed(role, lambda: flat_report(module.evaluate_retrieval(
                dm.retrieval_set(role, profile.eval_images))))
        if "systematic" in result:  # the generalisation gap, per seed (the tables average it)
            result["gap"] = generalisation_gap(result["test"], result["systematic"])
        timed("twins", lambda: add_twin_scores(module, dm, result))
    test = sets.test(run.prune, max_regions, run.parser) if "phrase" in evals else None
    mcd = sets.data["mcd"]
    if "mcd" in evals:
        split = sets.split_file(mcd["path"], mcd["num_images"], run.prune, max_regions, run.parser)
        result["mcd"] = {**timed("mcd", lambda: sentence_retrieval(model, tok, split, device=device, max_pairs=mp)),
                         "compound_divergence": mcd["compound_divergence"]}
    if "windows" in evals:
        def windows():
            rows = []
            for w in mcd["windows"]:
                split = sets.split_file(w["path"], w["num_images"], run.prune, max_regions, run.parser)
                rows.append({**{k: w[k] for k in ("target", "compound_divergence", "atom_divergence", "window_start")},
                             **sentence_retrieval(model, tok, split, device=device, max_pairs=mp)})
            return rows
        result["windows"] = timed("windows", windows)
    if "phrase" in evals:
        result["phrase"] = timed("phrase", lambda: evaluate_phrase_retrieval(
            model, test.regions.to(device), test.geometry.to(device), test.region_mask.to(device), tok, test.graph,
            test.image_ids, truth=test.truth, captions=test.captions, per_caption=profile.phrases_per_caption,
            seed=0, max_pairs=mp))
    if "hard_negatives" in evals:
        programs = sets.hn_programs(run.prune, run.parser)
        result["hard_negatives"] = timed("hard_negatives", lambda: hard_negative_accuracy(
            model, tok, sets.hn_set, programs, dm.store, max_regions=max_regions, device=device, max_pairs=mp))
    if hasattr(module, "easy_to_learn_probe") and profile.probe_steps > 0:  # the CLIP family's (§4.4)
        def probe():
            curve = module.easy_to_learn_probe(_cycle(dm.train_dataloader()), steps=profile.probe_steps,
                                               lr=profile.probe_lr, seed=0)
            return {"accuracy": curve.accuracy, "text_to_image": curve.text_to_image, "loss": curve.loss}
        result["probe"] = timed("probe", probe)
    result["eval_seconds"] = round(time.perf_counter() - started, 1)
    result["train_curve"] = read_train_curve(Path(trainer.logger.log_dir) / "metrics.csv")
    result["train_curve"]["seed"] = seed
    if options.keep_weights:
        torch.save(model.state_dict(), out / "model.pt")
    return result


def generalisation_gap(in_domain: dict, systematic: dict) -> dict:
    """In-domain minus systematic recall, per metric both have (single-positive R@K, any-true R@K).

    >>> generalisation_gap({"R@1": 20.0, "sentence_any_true": {"R@1": 30.0}},
    ...                    {"R@1": 12.5, "sentence_any_true": {"R@1": 25.0}})
    {'R@1': 7.5, 'any_true_R@1': 5.0}
    """
    gap = {k: round(in_domain[k] - systematic[k], 3) for k in in_domain
           if k.startswith("R@") and isinstance(systematic.get(k), (int, float))}
    a, b = in_domain.get("sentence_any_true") or {}, systematic.get("sentence_any_true") or {}
    gap.update({f"any_true_{k}": round(a[k] - b[k], 3) for k in a if k in b})
    return gap


# ---------------------------------------------------------------------------- scheduling
def _claim(directory: Path) -> bool:
    directory.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(directory / ".claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def run_tasks(tasks: list[tuple[StudyRun, int]], profile: StudyProfile, data: dict, out: Path,
              options: StudyOptions) -> None:
    """Train and evaluate every unfinished (run, seed), skipping finished and claimed ones.

    A run that raises (a non-finite loss, say) is logged, its traceback kept in ``error.txt``, and the
    study goes on; the report lists it as failed and a rerun tries it again.
    """
    sets = EvalSets(profile, data)
    for k, (run, seed) in enumerate(tasks, 1):
        directory = run_dir(out, run, seed)
        if (directory / "result.json").exists():
            logger.info("[%d/%d] %s seed %d: done before, skipped", k, len(tasks), run.name, seed)
            continue
        if not _claim(directory):
            continue  # another worker has it
        try:
            shutil.rmtree(directory / "logs", ignore_errors=True)  # what a killed attempt left
            (directory / "error.txt").unlink(missing_ok=True)
            logger.info("[%d/%d] %s seed %d: training", k, len(tasks), run.name, seed)
            result = train_and_evaluate(run, seed, profile, sets, directory, options)
            write_json_atomic(directory / "result.json", result)
            r1 = {key: f"{result[key]['R@1']:.1f}" if key in result else "-" for key in ("test", "mcd")}
            logger.info("[%d/%d] %s seed %d: %d steps in %.0f s, evaluation %.0f s; test R@1 %s, MCD R@1 %s",
                        k, len(tasks), run.name, seed, result["steps"], result["train_seconds"],
                        result["eval_seconds"], r1["test"], r1["mcd"])
        except Exception:  # one broken run must not stop the study: record it and go on
            logger.exception("[%d/%d] %s seed %d failed; traceback in %s", k, len(tasks), run.name, seed,
                             directory / "error.txt")
            write_text_atomic(directory / "error.txt", traceback.format_exc())
        finally:
            (directory / ".claim").unlink(missing_ok=True)


def spawn_workers(jobs: int, argv: list[str]) -> None:
    """``jobs`` copies of this command with ``--worker``, each on its share of the cores."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    procs = [subprocess.Popen([sys.executable, "-m", "composer.cli.study", *argv, "--worker"], env=env)
             for _ in range(jobs)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"error: worker exit codes {codes}; finished runs are kept, rerun to resume")


# ---------------------------------------------------------------------------- aggregation
def collect(out: Path, profile: StudyProfile, runs: list[StudyRun], seeds: list[int]) -> tuple[dict, list, dict]:
    """Every finished run result under ``out/runs`` (also of runs and seeds not asked for this time), the
    (run, seed) pairs asked for that have none, and the failed ones' last error line."""
    found: dict = {}
    for path in sorted((out / "runs").glob("*/seed*/result.json")):
        r = json.loads(path.read_text())
        entry = found.setdefault(r["run"], {"label": r["label"], "model": r["model"], "seeds": {}})
        entry["seeds"][str(r["seed"])] = r
    missing = [(r.name, s) for s in seeds for r in runs
               if s in profile.seeds_for(r, seeds) and str(s) not in found.get(r.name, {}).get("seeds", {})]
    failed = {}
    for name, s in missing:
        error = out / "runs" / name / f"seed{s}" / "error.txt"
        if error.exists():
            lines = error.read_text().strip().splitlines()
            failed[f"{name} seed {s}"] = lines[-1] if lines else "unknown error"
    order = [r.name for r in runs] + sorted(set(found) - {r.name for r in runs})
    return {name: found[name] for name in order if name in found}, missing, failed


def run_commits(found: dict) -> list[str]:
    """The commits the collected runs were trained at, sorted (``unknown`` for a result without one).

    >>> run_commits({"a": {"seeds": {"0": {"git": "fc4bf8f"}, "1": {}}}, "b": {"seeds": {"0": {"git": "fc4bf8f"}}}})
    ['fc4bf8f', 'unknown']
    """
    return sorted({r.get("git", "unknown") for e in found.values() for r in e["seeds"].values()})


def write_report(out: Path, profile: StudyProfile, runs: list[StudyRun], seeds: list[int], data: dict,
                 wall_seconds: float) -> dict:
    """``results.json``, the tables and the plots from whatever runs have finished."""
    from composer.study.plots import loss_curves, plot_il_loss, plot_probe, plot_r1_vs_cd, probe_curves
    from composer.study.tables import FIGURE4_ROWS, Row, mcd_compounds, render_all

    found, missing, failed = collect(out, profile, runs, seeds)
    previous = {}
    if (out / "results.json").exists():
        previous = json.loads((out / "results.json").read_text()).get("study", {})
    results = {"study": {
        "profile": plain_config(profile), "profile_name": profile.name, "seeds": seeds, "runs": [r.name for r in runs],
        "complete": not missing, "missing": [f"{r} seed {s}" for r, s in missing], "failed": failed,
        # the checkout the report was written from, and the ones the runs were trained at (a resumed study
        # may span commits; a result written before runs recorded their commit counts as "unknown")
        "git": git_sha(), "run_gits": run_commits(found),
        "hardware": hardware_description(), "torch": torch.__version__, "python": platform.python_version(),
        "data": data, "recipes": read_chosen(out),
        "wall_seconds": {**previous.get("wall_seconds", {}),
                         time.strftime("%Y-%m-%dT%H:%M:%S"): round(wall_seconds, 1)},
        "train_seconds_total": round(sum(r.get("train_seconds", 0) for e in found.values()
                                         for r in e["seeds"].values()), 1),
        "eval_seconds_total": round(sum(r.get("eval_seconds", 0) for e in found.values()
                                        for r in e["seeds"].values()), 1)},
        "runs": found}
    write_json_atomic(out / "results.json", results)
    tables = render_all(results)
    for key, text in tables.items():
        write_text_atomic(out / TABLES_DIR / f"{key}.md", text)
    head = (f"# Study results ({profile.name} profile)\n\nSeeds {seeds}; {len(found)} runs; "
            f"git {results['study']['git']} (runs trained at {', '.join(results['study']['run_gits']) or '-'}); "
            f"{results['study']['hardware']}. MCD split: {data['mcd']['num_images']} images, "
            f"{mcd_compounds(results)} compound divergence {data['mcd']['compound_divergence']} "
            f"(random sets {data['mcd']['random_compound_divergence']}; under every definition: "
            f"{data['mcd'].get('compound_divergences', {})}).\n"
            + (f"\nMissing: {', '.join(results['study']['missing'])}.\n" if missing else "")
            + "".join(f"\nFailed: {k}: {v}\n" for k, v in failed.items()) + "\n")
    search_table = out / TABLES_DIR / "search.md"  # written by the recipe search, when there was one
    extra = [search_table.read_text()] if search_table.exists() else []
    write_text_atomic(out / "tables.md", head + "\n".join([*tables.values(), *extra]))
    plots = out / PLOTS_DIR
    plots.mkdir(parents=True, exist_ok=True)
    plot_r1_vs_cd(results, FIGURE4_ROWS, plots / PLOT_FILES[0])
    plot_il_loss(loss_curves(results, "il_clip"), plots / PLOT_FILES[1])
    plot_probe(probe_curves(results, [Row("IL-CLIP", "il_clip"), Row("Codebook-CLIP", "codebook_clip"),
                                      Row("CLIP", "clip")]), plots / PLOT_FILES[2])
    return results




# ---------------------------------------------------------------------------- the recipe search
SEARCH_DIR = "search"


def search_points(runs: list[StudyRun], profile: StudyProfile) -> list:
    """The search grid of every model the runs train, at the profile's preset (composer/study/search.py)."""
    from composer.study.search import search_grid

    return [p for model in dict.fromkeys(r.model for r in runs) for p in search_grid(model, profile.presets.get(model))]


def search_tasks(points: list) -> list[tuple[StudyRun, int]]:
    from composer.study.search import SEARCH_SEED

    return [(StudyRun(p.name, p.model, f"{p.model} ({p.setting})", overrides=p.overrides(), evals=("val",)),
             SEARCH_SEED) for p in points]


def finish_search(out: Path, points: list, runs: list[StudyRun], seeds: list[int], profile: StudyProfile) -> dict:
    """Read the search's results, choose each model's recipe, write ``search/chosen.json`` and the table.

    Refuses when a study run has already finished in ``out`` with the named recipes: a study is trained
    from one recipe per model, not a mix.
    """
    from composer.study.search import choose_recipes, render_search_table

    val_r1, chance = {}, None
    for p in points:
        path = out / SEARCH_DIR / "runs" / p.name / "seed0" / "result.json"
        if path.exists():
            val = json.loads(path.read_text())["val"]
            val_r1[p.name], chance = val["R@1"], val.get("chance_R@1")
        else:
            val_r1[p.name] = None
    chosen = choose_recipes(val_r1, points)
    path = out / SEARCH_DIR / "chosen.json"
    if not path.exists() or json.loads(path.read_text())["chosen"] != chosen:
        finished = [run.name for run in runs for s in seeds if (run_dir(out, run, s) / "result.json").exists()]
        if finished:
            raise SystemExit(f"error: {out} holds study runs trained before this recipe search ({finished[:3]} ...); "
                             f"search in a new --out, or delete {out / 'runs'}")
    write_json_atomic(path, {"chosen": chosen, "val_R@1": val_r1, "profile": profile.name})
    write_text_atomic(out / TABLES_DIR / "search.md", render_search_table(val_r1, points, chosen, chance))
    missing = sorted({p.model for p in points} - set(chosen))
    if missing:
        raise SystemExit(f"error: the recipe search has no finished run for {missing}; rerun to retry")
    logger.info("recipe search: %s", {m: c["run"] for m, c in chosen.items()})
    return chosen


def read_chosen(out: Path) -> dict | None:
    """The recipes the search chose for this study directory, or None (the named recipes)."""
    path = out / SEARCH_DIR / "chosen.json"
    return json.loads(path.read_text())["chosen"] if path.exists() else None


def with_chosen_recipe(run: StudyRun, chosen: dict | None) -> StudyRun:
    """``run`` starting from its model's chosen recipe; the run's own overrides (an ablation's) win.

    >>> run = StudyRun("composer_mlp", "composer", "x", overrides={"model": {"modulator": "mlp"}})
    >>> with_chosen_recipe(run, {"composer": {"lr": 1e-3, "init": 0.02}}).overrides
    {'lr': 0.001, 'model': {'text': {'initializer_range': 0.02}, 'modulator': 'mlp'}}
    """
    from composer.study.search import chosen_overrides

    if not chosen or run.model not in chosen:
        return run
    base = chosen_overrides(chosen[run.model])
    merged = {**base, **run.overrides}
    if "model" in base and "model" in run.overrides:
        merged["model"] = {**base["model"], **run.overrides["model"]}
    return replace(run, overrides=merged)


# ---------------------------------------------------------------------------- the whole study
def run_study(out: str | Path, profile: StudyProfile, *, seeds: list[int], runs: list[StudyRun],
              options: StudyOptions, jobs: int = 1, report_only: bool = False, worker: bool = False,
              worker_argv: list[str] | None = None, data: str = "world", search: bool = False,
              search_only: bool = False) -> dict | None:
    """Prepare the data, train and evaluate every unfinished (run, seed), and write the report.

    ``search`` first runs the equal-budget recipe search (composer/study/search.py) into ``out/search``
    and trains the study from the chosen recipes (``search_only``: the search alone). ``jobs > 1`` trains
    in that many worker processes (``gc-study ... --worker`` with ``worker_argv``); a worker
    (``worker=True``) only trains and returns None. Returns ``results.json``'s content.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    out = Path(out)
    started = time.perf_counter()
    if not worker:
        out.mkdir(parents=True, exist_ok=True)
        check_study_dir(out, profile, data)
        logger.info("study %s: profile %s, seeds %s, %d runs", out, profile.name, seeds, len(runs))
        for claim in (out / "runs").glob("*/seed*/.claim"):  # left by a killed study; no worker runs yet
            claim.unlink()
    study_data = prepare_data(profile, out) if not worker else json.loads(
        (out / "data" / "study_data.json").read_text())
    if search or search_only:
        points = search_points(runs, profile)
        if worker and search_only:
            run_tasks(search_tasks(points), profile, study_data, out / SEARCH_DIR, options)
            return None
        if not worker:
            if not report_only:
                if jobs > 1:
                    spawn_workers(jobs, [a for a in (worker_argv or []) if a != "--search"] + ["--search-only"])
                else:
                    run_tasks(search_tasks(points), profile, study_data, out / SEARCH_DIR, options)
            chosen = finish_search(out, points, runs, seeds, profile)
            if search_only:
                return {"search": chosen}
    chosen = read_chosen(out)
    runs = [with_chosen_recipe(r, chosen) for r in runs]
    # seed-major: one seed of everything first
    tasks = [(run, seed) for seed in seeds for run in runs if seed in profile.seeds_for(run, seeds)]
    if not report_only:
        if jobs > 1 and not worker:
            spawn_workers(jobs, list(worker_argv or []))  # --worker makes them train, not spawn
        else:
            run_tasks(tasks, profile, study_data, out, options)
    if worker:
        return None
    return write_report(out, profile, runs, seeds, study_data, time.perf_counter() - started)
