"""The ``--data f30k`` path end to end, on the real Flickr30K captions and a synthetic bottom-up TSV.

    python benchmarks/bench_f30k_path.py                     # all 31,014 images, 1K x 5K test (about 1.5 h on 2 cores)
    python benchmarks/bench_f30k_path.py --images 100 --work /tmp/f30k100   # a slice (tests/test_f30k_path.py)

What users will run on a GPU (``train_composer.py --data f30k --features STORE``) has to get through the
same steps as here, only with real detector features:

1. **TSV**: one bottom-up-attention TSV line per image of the caption corpus (``image_id image_w image_h
   num_boxes boxes features``, boxes and features base64 float32, as ``generate_tsv.py`` writes them),
   in ``--tsv-parts`` files like the adaptive 10-100 release. Image ids are the corpus's; widths and
   heights are drawn from Flickr's usual 500-pixel long side; ``--min-boxes``..``--max-boxes`` boxes per
   image, each inside its image; features are rectified Gaussian noise (non-negative, like the
   detector's pooled ReLU outputs), 2048-d. Nothing in them depends on the captions: every trained
   model here is at chance, and the run measures the path and its cost, not retrieval quality.
2. **convert**: ``python -m features.convert_butd_tsv PARTS --out STORE`` (float16 store).
3. **check**: ``python -m features.check STORE --captions CORPUS`` (every split).
4. **train**: ``experiments/train_composer.py --data f30k --captions CORPUS --features STORE`` with
   ``--preset small`` for ``--steps`` steps (the CRG of every split is parsed with spaCy on first use and
   cached), then the full test protocol: every test image against every test caption (1,000 x 5,000 for
   the Karpathy split) by cross-scoring, into ``OUT/results.json``.
5. **rerank** (unless ``--no-rerank``): a VSE first stage trained for the same steps scores the test set
   (``gc-evaluate --save-scores``), and COMPOSER rescores its top ``--rerank-k`` images per caption
   (``gc-evaluate --first-stage-scores ... --rerank-k K --no-sentences``); its R@K are set against the
   full cross-scoring of step 4 (the same model and test set).

Every step runs its command-line program as a fresh process (what a user runs), timed as a whole.
Prints one line per step and a summary, and writes ``WORK/bench.json``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ROOT.parent / "shared" / "data" / "flickr30k" / "captions.jsonl"


def read_records(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def slice_corpus(records: list[dict], images: int) -> list[dict]:
    """``images`` images in corpus order, 70 / 15 / 15 % from train / val / test (at least one of each)."""
    per = {"val": max(1, round(images * 0.15)), "test": max(1, round(images * 0.15))}
    per["train"] = max(1, images - per["val"] - per["test"])
    out, taken = [], {k: 0 for k in per}
    for r in records:
        s = r["split"]
        if s in per and taken[s] < per[s]:
            out.append(r)
            taken[s] += 1
    return out


def write_butd_tsv(records: list[dict], paths: list[Path], *, min_boxes: int, max_boxes: int, feature_dim: int,
                   seed: int) -> int:
    """One bottom-up TSV line per image, round-robin over ``paths``; returns the bytes written."""
    rng = np.random.default_rng(seed)
    files = [open(p, "wb") for p in paths]
    try:
        for k, r in enumerate(records):
            # Flickr images: long side ~500 px, portrait or landscape
            long_side, short_side = int(rng.integers(400, 501)), int(rng.integers(250, 400))
            w, h = (long_side, short_side) if rng.random() < 0.6 else (short_side, long_side)
            n = int(rng.integers(min_boxes, max_boxes + 1))
            x1 = rng.uniform(0, w - 16, n)
            y1 = rng.uniform(0, h - 16, n)
            x2 = np.minimum(x1 + rng.uniform(16, w, n), w - 1)
            y2 = np.minimum(y1 + rng.uniform(16, h, n), h - 1)
            boxes = np.stack([x1, y1, x2, y2], 1).astype(np.float32)                         # (n, 4) pixels
            feats = np.maximum(rng.standard_normal((n, feature_dim), dtype=np.float32), 0)  # (n, D) post-ReLU
            line = b"\t".join([r["image_id"].encode(), str(w).encode(), str(h).encode(), str(n).encode(),
                               base64.b64encode(boxes.tobytes()), base64.b64encode(feats.tobytes())]) + b"\n"
            files[k % len(files)].write(line)
    finally:
        for f in files:
            f.close()
    return sum(p.stat().st_size for p in paths)


def run(step: str, cmd: list[str], timings: dict, log_dir: Path, env: dict) -> str:
    """Run ``cmd``, time it, keep its output in ``log_dir/step.log``; stop with the output's tail on failure."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    timings[step] = round(time.perf_counter() - started, 1)
    (log_dir / f"{step}.log").write_text(" ".join(cmd) + "\n\n" + proc.stdout)
    print(f"{step:<12} {timings[step]:>8.1f} s   {' '.join(cmd[1:4])} ...", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed (exit {proc.returncode}):\n{' '.join(cmd)}\n{proc.stdout[-4000:]}")
    return proc.stdout


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captions", default=str(CAPTIONS), help="Flickr30K caption corpus (default: the shared one)")
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench_f30k"), help="working directory (replaced)")
    ap.add_argument("--images", type=int, default=0, help="a slice of this many images (0 = all 31,014)")
    ap.add_argument("--min-boxes", type=int, default=10, help="fewest boxes per image (BUTD adaptive: 10)")
    ap.add_argument("--max-boxes", type=int, default=16, help="most boxes per image (BUTD adaptive: 100)")
    ap.add_argument("--feature-dim", type=int, default=2048)
    ap.add_argument("--tsv-parts", type=int, default=4, help="TSV files, as the adaptive release's parts")
    ap.add_argument("--keep-tsv", action="store_true", help="keep the TSV files after conversion")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=40, help="training steps")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-regions", type=int, default=10, help="regions per image in training and evaluation")
    ap.add_argument("--eval-images", type=int, default=1000, help="test images (Karpathy: 1,000)")
    ap.add_argument("--rerank-k", type=int, default=50)
    ap.add_argument("--no-rerank", action="store_true", help="skip the VSE first stage and the rerank")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    work = Path(args.work)
    if work.exists():
        import shutil

        shutil.rmtree(work)
    logs = work / "logs"
    logs.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py = sys.executable
    timings: dict[str, float] = {}
    print(f"bench_f30k_path: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load average at start "
          f"{os.getloadavg()[0]:.1f}", flush=True)

    records = read_records(Path(args.captions))
    captions = Path(args.captions)
    if args.images:
        records = slice_corpus(records, args.images)
        captions = work / "captions.jsonl"
        captions.write_text("".join(json.dumps(r) + "\n" for r in records))
    counts = {s: sum(r["split"] == s for r in records) for s in ("train", "val", "test")}
    print(f"corpus: {captions} ({len(records)} images: {counts})", flush=True)

    parts = [work / f"f30k_butd_synthetic.tsv.{k}" for k in range(args.tsv_parts)]
    started = time.perf_counter()
    tsv_bytes = write_butd_tsv(records, parts, min_boxes=args.min_boxes, max_boxes=args.max_boxes,
                               feature_dim=args.feature_dim, seed=args.seed)
    timings["write_tsv"] = round(time.perf_counter() - started, 1)
    print(f"{'write_tsv':<12} {timings['write_tsv']:>8.1f} s   {len(parts)} parts, {tsv_bytes / 2**30:.2f} GiB",
          flush=True)

    store = work / "f30k_butd.h5"
    run("convert", [py, "-m", "features.convert_butd_tsv", *map(str, parts), "--out", str(store), "--no-progress"],
        timings, logs, env)
    if not args.keep_tsv:
        for p in parts:
            p.unlink()
    run("check", [py, "-m", "features.check", str(store), "--captions", str(captions)], timings, logs, env)

    common = ["--data", "f30k", "--captions", str(captions), "--features", str(store), "--preset", args.preset,
              "--max-regions", str(args.max_regions), "--batch-size", str(args.batch_size), "--max-steps",
              str(args.steps), "--eval-images", str(args.eval_images), "--val-every", "1000", "--seed",
              str(args.seed), "--quiet"]
    run("train", [py, "experiments/train_composer.py", *common, "--out", str(work / "composer")], timings, logs, env)
    results = json.loads((work / "composer" / "results.json").read_text())
    test = results["test"]
    summary = {"images": counts, "tsv_gib": round(tsv_bytes / 2**30, 2),
               "store_gib": round(store.stat().st_size / 2**30, 2), "preset": args.preset,
               "steps": results["global_step"], "batch_size": args.batch_size,
               "max_regions": args.max_regions, "train_seconds": results["train_seconds"],
               "test": {k: test[k] for k in ("sentence", "num_images", "num_captions", "seconds", "pairs_per_second",
                                             "chance_R@1")}}

    if not args.no_rerank:
        run("train_vse", [py, "experiments/train_baseline.py", "--model", "vse", *common, "--no-test",
                          "--out", str(work / "vse")], timings, logs, env)
        evaluate = [py, "experiments/evaluate_composer.py", "--data", "f30k", "--captions", str(captions),
                    "--features", str(store), "--split", "test", "--eval-images", str(args.eval_images),
                    "--max-regions", str(args.max_regions), "--no-phrases", "--quiet"]
        run("vse_scores", [*evaluate, "--checkpoint", str(work / "vse"), "--save-scores", str(work / "vse_scores"),
                           "--out", str(work / "vse_eval.json")], timings, logs, env)
        k = min(args.rerank_k, test["num_images"])  # a slice may have fewer test images than k
        run("rerank", [*evaluate, "--checkpoint", str(work / "composer"), "--no-sentences", "--first-stage-scores",
                       str(work / "vse_scores" / "scores.npy"), "--rerank-k", str(k),
                       "--out", str(work / "rerank.json")], timings, logs, env)
        vse = json.loads((work / "vse_eval.json").read_text())["sentence"]
        summary["first_stage_vse"] = {k: vse[k] for k in ("R@1", "R@5", "R@10")}
        summary["rerank"] = json.loads((work / "rerank.json").read_text())["rerank"]

    summary["timings_s"] = timings
    summary["load_average_end"] = round(os.getloadavg()[0], 1)
    (work / "bench.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
