"""CRG speed and memory: parsing and extraction throughput, and a full graph build.

    python benchmarks/bench_crg.py                       # Flickr30K train from ../shared/data
    python benchmarks/bench_crg.py --sample 5000 --skip-full

Prints captions/s for parsing (spaCy + PTB conversion) and for concept extraction separately, each
on one process, then runs ``experiments/build_crg.py`` on the whole corpus with an empty parse cache
and reports wall time and peak memory summed over the build's processes (sampled every 0.2 s), and
the rerun time from the cache. Targets (issue #2): <= 240 s and <= 3 GiB on 2 cores for 145,000 captions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "flickr30k" / "captions.jsonl"


def process_tree_rss(pid: int) -> int:
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc] + proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def run_and_watch(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """Run ``cmd``; return wall seconds, peak summed RSS in bytes, and its stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    peak = [0]

    def watch():
        while proc.poll() is None:
            peak[0] = max(peak[0], process_tree_rss(proc.pid))
            time.sleep(0.2)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    out, _ = proc.communicate()
    t.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return time.perf_counter() - started, peak[0], out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captions", default=str(DEFAULT_CORPUS))
    ap.add_argument("--split", default="train")
    ap.add_argument("--sample", type=int, default=3000, help="captions for the per-stage throughput")
    ap.add_argument("--skip-full", action="store_true", help="only the per-stage throughput")
    args = ap.parse_args()
    if not Path(args.captions).exists():
        raise SystemExit(f"corpus not found: {args.captions} (the benchmark needs ../shared/data)")

    from nltk import Tree

    from crg.caption_filter import normalize_caption
    from crg.corpus import read_corpus
    from crg.extract import extract_concepts
    from crg.spacy_parser import SpacyParser

    corpus = read_corpus(args.captions).select(args.split)
    texts = [normalize_caption(c) for _, _, c in corpus.iter_captions()][: args.sample]
    from crg.speedups import compiled_status

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    # the converter's compiled copy runs only when built from the current source (python -m crg.speedups build)
    print(f"compiled converter: {compiled_status()['crg.dep_to_constituency']}")
    parser = SpacyParser()
    parser.parse_texts(texts[:200])  # warm up
    t0 = time.perf_counter()
    trees = parser.parse_texts(texts)
    parse_s = time.perf_counter() - t0
    bracketed = [t.pformat(margin=10**9) for t in trees]
    t0 = time.perf_counter()
    for b in bracketed:
        extract_concepts(Tree.fromstring(b))
    extract_s = time.perf_counter() - t0
    print(f"parsing (spaCy + PTB conversion), 1 process: {len(texts) / parse_s:8.0f} captions/s  "
          f"({len(texts)} captions)")
    print(f"extraction (read tree + Appendix A), 1 process: {len(texts) / extract_s:8.0f} captions/s")
    if args.skip_full:
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GC_CACHE_DIR=tmp, PYTHONPATH=str(ROOT))
        cmd = [sys.executable, str(ROOT / "experiments" / "build_crg.py"), "--captions", args.captions,
               "--split", args.split, "--out", str(Path(tmp) / "graph"), "--dump", "--quiet"]
        wall, peak, _ = run_and_watch(cmd, env)
        stats = json.loads((Path(tmp) / "graph" / "stats.json").read_text())
        print(f"full build, empty cache: {stats['num_captions']} captions in {wall:.1f} s wall "
              f"({stats['num_captions'] / wall:.0f} captions/s), peak memory {peak / 2**30:.2f} GiB "
              f"(all processes)")
        wall2, peak2, _ = run_and_watch(cmd + ["--overwrite"], env)
        print(f"rebuild from the parse cache: {wall2:.1f} s wall, peak memory {peak2 / 2**30:.2f} GiB")
        print(json.dumps({k: stats[k] for k in ("num_concepts", "num_predicates", "num_primitives", "avg_height")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
