"""The CRG build at scale through Ray: captions/s with 1 and 2 workers, peak memory, graph size on disk.

    python benchmarks/bench_crg_scale.py --out runs/bench_crg_scale                  # 250K / 500K / 1M captions
    python benchmarks/bench_crg_scale.py --out runs/bench_crg_scale --sizes 20000 --one-worker-sizes 20000
    python benchmarks/bench_crg_scale.py --out runs/bench_crg_scale --single-engine-sizes 250000  # + default engine
    python benchmarks/bench_crg_scale.py --out runs/bench_crg_scale --sizes 1000000 --merge driver  # the old merge

Builds use ``--merge partitioned`` by default (workers read byte ranges, a distributed merge, a columnar graph;
docs/scale.md); ``--merge driver`` measures the driver-merge build. Each row also gives the graph's bytes per
distinct concept and ``load_graph`` in a fresh process: seconds to open it and the resident memory added by
opening it and reading its statistics, one concept, its denotation and one caption's derivations.

The corpus is made of **distinct** captions of a generated world (features/world: scenes sampled as the
world generator samples them, captions only, no features), each caption kept the first time it occurs,
images taken in order until the largest size is reached; each size is a prefix of it. The world's captions
are parsed by the world's own grammar (``--parser world``): spaCy is about 2-3x slower per caption, so real
captions' throughput is measured separately (``--spacy-captions``, on Flickr30K) and the projection in
docs/scale.md combines the two.

The benchmark starts one local Ray (2 CPUs); each build runs ``python -m features.cli.build_crg --engine ray
--address ...`` in its own process, joining it as a cluster job would (so peak memory is per build: the
driver's, and the largest of its new actors'), and reads its ``stats.json``. One JSON line per build goes
to ``OUT/results.jsonl`` as it finishes (a rerun keeps what was measured), and a table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from features.world.generate import _image_rng, image_id
from features.world.grammar import sample_captions
from features.world.scene import WorldConfig, sample_scene

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_world_corpus(path: Path, num_captions: int, *, seed: int = 0) -> dict:
    """A JSONL corpus of ``num_captions`` distinct world captions (first occurrences only), all ``train``."""
    cfg = WorldConfig()
    seen: set[str] = set()
    images = 0
    with open(path, "w", encoding="utf-8") as f:
        while len(seen) < num_captions:
            rng = _image_rng(seed, images)
            scene = sample_scene(rng, cfg, image_id(seed, images))
            new = [c for c, _ in sample_captions(rng, scene, 5) if c not in seen][:num_captions - len(seen)]
            seen.update(new)
            if new:
                f.write(json.dumps({"image_id": scene.image_id, "split": "train", "captions": new}) + "\n")
            images += 1
    return {"images_sampled": images, "captions": len(seen)}


def prefix_corpus(src: Path, dst: Path, num_captions: int) -> int:
    """The first images of ``src`` holding ``num_captions`` captions (the last image cut to fit)."""
    n = 0
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            rec = json.loads(line)
            rec["captions"] = rec["captions"][:num_captions - n]
            n += len(rec["captions"])
            out.write(json.dumps(rec) + "\n")
            if n >= num_captions:
                break
    return n


_LOAD = """
import json, sys, time
from crg.graph import load_graph
from crg.shards import peak_rss_mb
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
base, started = rss_mb(), time.perf_counter()
g = load_graph(sys.argv[1])
opened = time.perf_counter() - started
s = g.stats()                                   # touches the kinds and heights
mid = g.concept(g.num_concepts // 2)            # one string, one denotation, one caption's derivations
g.denotation(mid.id); g.caption_derivations(g.num_captions // 2)
assert g.concept_id(g.concept_texts[g.num_concepts // 3]) == g.num_concepts // 3  # a lookup by text
print(json.dumps({"load_seconds": round(opened, 3), "load_and_stats_seconds": round(time.perf_counter() - started, 3),
                  "load_rss_mb": round(rss_mb() - base, 1),
                  "peak_rss_mb": peak_rss_mb(),
                  "num_concepts": s["num_concepts"]}))
"""


def measure_load(graph_dir: Path) -> dict:
    """``load_graph`` in a fresh process: seconds to open, and the resident memory it added after opening the
    graph and reading its statistics, one concept, its denotation, one caption's derivations and one concept
    looked up by its text."""
    res = subprocess.run([sys.executable, "-c", _LOAD, str(graph_dir)], capture_output=True, text=True)
    if res.returncode != 0:
        return {"load_error": res.stderr.strip().splitlines()[-1][:300] if res.stderr.strip() else "failed"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def graph_bytes_of(out: Path) -> int:
    if (out / "graph.json").exists():
        return (out / "graph.json").stat().st_size + sum(p.stat().st_size for p in (out / "graph").iterdir())
    return sum((out / name).stat().st_size for name in ("graph.npz", "graph_strings.json.gz"))


def run_build(corpus: Path, out: Path, workers: int, parser: str, shards: int | None, address: str,
              merge: str = "partitioned") -> dict:
    cmd = [sys.executable, "-m", "features.cli.build_crg", "--captions", str(corpus), "--out", str(out),
           "--engine", "ray", "--workers", str(workers), "--parser", parser, "--no-cache", "--quiet", "--overwrite",
           "--address", address, "--merge", merge]
    if shards:
        cmd += ["--shards", str(shards)]
    started = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return _failed(cmd, res, corpus, workers, parser)
    wall = time.perf_counter() - started
    stats = json.loads((out / "stats.json").read_text())
    eng = stats["engine"]
    graph_bytes = graph_bytes_of(out)
    shard_bytes = sum(p.stat().st_size for pattern in ("*.out.jsonl.gz", "*.part.npz")
                      for p in (out / "shards").glob(pattern))
    load = measure_load(out)
    return {
        "merge": merge, "captions": stats["report"]["num_captions"], "workers": workers, "parser": parser,
        "wall_seconds": round(wall, 1),
        "captions_per_second": round(stats["report"]["num_captions"] / wall, 1),
        "pipeline_seconds": eng["pipeline_seconds"], "merge_seconds": eng["merge_seconds"],
        "pipeline_captions_per_second": round(stats["report"]["num_captions"] / eng["pipeline_seconds"], 1),
        "driver_peak_rss_mb": eng["driver_peak_rss_mb"], "driver_cpu_seconds": eng.get("driver_cpu_seconds"),
        "worker_peak_rss_mb": eng["worker_peak_rss_mb"], "merge_actor_peak_rss_mb": eng.get("merge_peak_rss_mb"),
        "merge_steps": eng.get("merge_steps"),
        "num_shards": eng["num_shards"], "num_concepts": stats["num_concepts"],
        "num_predicates": stats["num_predicates"], "num_derivations": stats["num_derivations"],
        "graph_mb": round(graph_bytes / 2**20, 1), "shard_outputs_mb": round(shard_bytes / 2**20, 1),
        "graph_bytes_per_concept": round(graph_bytes / max(stats["num_concepts"], 1), 1),
        "skipped": stats["report"]["num_skipped"], "load_average": os.getloadavg()[0], **load,
    }


def run_single_build(corpus: Path, out: Path, workers: int, parser: str) -> dict:
    """The default engine (a process pool, no Ray) on the same corpus: what Ray's engine costs over it."""
    from bench_crg import process_tree_rss  # (benchmarks/ is the script directory)

    cmd = [sys.executable, "-m", "features.cli.build_crg", "--captions", str(corpus), "--out", str(out),
           "--workers", str(workers), "--parser", parser, "--no-cache", "--quiet", "--overwrite"]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:  # the build and its workers, summed
        peak = max(peak, process_tree_rss(proc.pid))
        time.sleep(0.2)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        return _failed(cmd, subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), corpus, workers, parser,
                       engine="single")
    wall = time.perf_counter() - started
    stats = json.loads((out / "stats.json").read_text())
    return {"engine": "single", "captions": stats["report"]["num_captions"], "workers": workers, "parser": parser,
            "wall_seconds": round(wall, 1), "captions_per_second": round(stats["report"]["num_captions"] / wall, 1),
            "build_seconds": stats["wall_seconds"], "peak_rss_mb_all_processes": round(peak / 2**20),
            "num_concepts": stats["num_concepts"], "load_average": os.getloadavg()[0]}


def _failed(cmd, res, corpus: Path, workers: int, parser: str, engine: str = "ray") -> dict:
    print(f"build failed ({' '.join(cmd)}):\n{res.stderr[-3000:]}", file=sys.stderr, flush=True)
    return {"engine": engine, "captions": num_captions_of(corpus), "workers": workers, "parser": parser,
            "error": res.stderr.strip().splitlines()[-1][:300] if res.stderr.strip() else f"exit {res.returncode}"}


def num_captions_of(corpus: Path) -> int:
    with open(corpus, encoding="utf-8") as f:
        return sum(len(json.loads(line)["captions"]) for line in f)


def f30k_slice(dst: Path, num_captions: int) -> Path:
    src = SHARED / "flickr30k" / "captions.jsonl"
    if not src.exists():
        raise SystemExit(f"--spacy-captions needs {src} (the shared Flickr30K captions)")
    prefix_corpus(src, dst, num_captions)
    return dst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="work folder (corpora, graphs, results.jsonl)")
    ap.add_argument("--sizes", default="250000,500000,1000000", help="captions per build, with --workers 2")
    ap.add_argument("--one-worker-sizes", default="250000", help="sizes also built with 1 worker (scaling)")
    ap.add_argument("--spacy-captions", type=int, default=0,
                    help="also build this many Flickr30K captions with spaCy, 1 and 2 workers (0: skip)")
    ap.add_argument("--shard-size", type=int, default=10_000, help="captions per shard")
    ap.add_argument("--merge", choices=("partitioned", "driver"), default="partitioned",
                    help="the Ray build's merge (default partitioned: workers read byte ranges, distributed merge, "
                         "columnar graph; driver: the driver reads, writes the shard inputs and merges)")
    ap.add_argument("--single-engine-sizes", default="",
                    help="sizes also built with the default engine (no Ray), 1 and 2 workers: Ray's overhead")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    one = sorted(int(s) for s in args.one_worker_sizes.split(",") if s)
    full = out / f"world_{max(sizes + one)}.jsonl"
    if not full.exists():
        started = time.perf_counter()
        info = write_world_corpus(full, max(sizes + one))
        print(f"world corpus: {info} in {time.perf_counter() - started:.0f} s", flush=True)
    plan = [(n, 1) for n in one] + [(n, 2) for n in sizes]
    plan.sort(key=lambda p: (p[0], p[1]))
    results = out / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    rows = [r for r in rows if "error" not in r]   # a rerun keeps what was measured, tries the failures again
    done = {(r.get("engine", "ray"), r.get("merge", "driver"), r["parser"], r["captions"], r["workers"]) for r in rows}
    import ray

    from crg.ray_engine import start_local_ray

    start_local_ray(2)  # one local Ray for every build: its start-up (slow on a busy machine) is not measured
    address = ray.get_runtime_context().gcs_address
    if args.spacy_captions:
        corpus = f30k_slice(out / f"f30k_{args.spacy_captions}.jsonl", args.spacy_captions)
        for workers in (1, 2):
            if ("ray", args.merge, "spacy", args.spacy_captions, workers) in done:
                continue
            shards = max(4, -(-args.spacy_captions // 2500))
            rows.append(run_build(corpus, out / f"f30k_{args.merge}_w{workers}", workers, "spacy", shards, address,
                                  args.merge))
            print(json.dumps(rows[-1]), flush=True)
            with open(results, "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    for n, workers in plan:
        if ("ray", args.merge, "world", n, workers) in done:
            continue
        corpus = out / f"world_{n}.jsonl"
        if not corpus.exists():
            prefix_corpus(full, corpus, n)
        rows.append(run_build(corpus, out / f"world_{n}_{args.merge}_w{workers}", workers, "world",
                              -(-n // args.shard_size), address, args.merge))
        print(json.dumps(rows[-1]), flush=True)
        with open(results, "a") as f:
            f.write(json.dumps(rows[-1]) + "\n")
    single = sorted(int(s) for s in args.single_engine_sizes.split(",") if s)
    for n in single:
        corpus = out / f"world_{n}.jsonl"
        if not corpus.exists():
            prefix_corpus(full, corpus, n)
        for workers in (1, 2):
            if ("single", "driver", "world", n, workers) in done:
                continue
            rows.append(run_single_build(corpus, out / f"single_world_{n}_w{workers}", workers, "world"))
            print(json.dumps(rows[-1]), flush=True)
            with open(results, "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
    cols = ("engine", "merge", "parser", "captions", "workers", "wall_seconds", "captions_per_second",
            "pipeline_captions_per_second", "merge_seconds", "driver_peak_rss_mb", "driver_cpu_seconds",
            "worker_peak_rss_mb", "merge_actor_peak_rss_mb", "num_concepts", "graph_mb", "graph_bytes_per_concept",
            "load_seconds", "load_rss_mb")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "ray" if c == "engine" else r.get("error", ""))) for c in cols))
    by = {(r.get("merge", "driver"), r["parser"], r["captions"], r["workers"]): r for r in rows
          if "error" not in r and r.get("engine", "ray") == "ray"}
    for (merge, parser, n, w), r in by.items():
        if w == 2 and (merge, parser, n, 1) in by:
            one_w = by[(merge, parser, n, 1)]
            eff = r["pipeline_captions_per_second"] / (2 * one_w["pipeline_captions_per_second"])
            wall = r["captions_per_second"] / (2 * one_w["captions_per_second"])
            print(f"scaling efficiency, {merge} merge, {parser} {n} captions, 2 workers vs 1: {eff:.2f} "
                  f"(pipeline), {wall:.2f} (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
