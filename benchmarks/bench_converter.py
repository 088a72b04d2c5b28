"""CPU time per caption of a graph build's stages after spaCy: the PTB conversion, formatting, the extraction.

    python benchmarks/bench_converter.py                                # 3,000 Flickr30K train captions
    python benchmarks/bench_converter.py --baseline-rev 164a3c9 --repeats 5

spaCy parses the captions once (its CPU time is reported); the docs stay in memory and every variant of the
converter and the extraction runs on them in turn, interleaved, ``--repeats`` times, in CPU time of this
process (``time.process_time``, cyclic garbage collection paused as in a build's workers), so the ratios
hold on a machine other jobs share. Variants: the pure-Python converter, its compiled copy
(``python -m crg.speedups build``) when built and current, and with ``--baseline-rev`` the converter and
extraction of that git revision. Prints min and median per stage and a projection of the 145,000-caption
build's CPU time.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "flickr30k" / "captions.jsonl"
FLICKR30K_TRAIN = 145_000


def read_captions(path: Path, count: int) -> list[str]:
    from crg.caption_filter import normalize_caption

    texts: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record["split"] == "train":
                texts += [normalize_caption(c) for c in record["captions"]]
            if len(texts) >= count:
                break
    return texts[:count]


def module_at_revision(path: str, rev: str, name: str, workdir: Path):
    """``path`` (a module of this repository) as it was at git revision ``rev``, imported as ``name``."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    file = workdir / f"{name}.py"
    file.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captions", default=str(DEFAULT_CORPUS))
    ap.add_argument("--sample", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline-rev", default=None, help="also time the converter and extraction of this git revision")
    args = ap.parse_args(argv)
    if not Path(args.captions).exists():
        raise SystemExit(f"corpus not found: {args.captions} (the benchmark needs ../shared/data)")

    import crg.dep_to_constituency as converter
    import crg.spacy_parser as spacy_parser
    from crg.extract import extract_concepts
    from crg.graph import GraphBuilder
    from crg.speedups import compiled_status

    texts = read_captions(Path(args.captions), args.sample)
    parser = spacy_parser.SpacyParser()
    parser.parse_texts(texts[:200])  # warm up
    gc.disable()
    t0 = time.process_time()
    docs = [doc for k in range(0, len(texts), parser.batch_size) for doc in parser._pipe(texts[k:k + parser.batch_size])]
    spacy_ms = 1000 * (time.process_time() - t0) / len(texts)

    # name -> (the module whose doc_to_tree runs, the converter it calls, the extraction)
    variants = {"pure Python": (spacy_parser, converter.python_dependency_to_constituency, extract_concepts)}
    state = compiled_status()["crg.dep_to_constituency"]
    if converter.dependency_to_constituency is not converter.python_dependency_to_constituency:
        variants["compiled"] = (spacy_parser, converter.dependency_to_constituency, extract_concepts)
    workdir = Path(tempfile.mkdtemp(prefix="bench-converter-"))
    if args.baseline_rev:  # that revision's doc_to_tree, converter and extraction
        old_converter = module_at_revision("crg/dep_to_constituency.py", args.baseline_rev, "baseline_converter", workdir)
        old_extract = module_at_revision("crg/extract.py", args.baseline_rev, "baseline_extract", workdir)
        old_glue = module_at_revision("crg/spacy_parser.py", args.baseline_rev, "baseline_spacy_parser", workdir)
        variants = {f"git {args.baseline_rev}": (old_glue, old_converter.dependency_to_constituency,
                                                 old_extract.extract_concepts), **variants}

    seconds: dict[str, dict[str, list[float]]] = {v: {"conversion": [], "pformat": [], "extraction": []} for v in variants}
    graph_part = []
    original = spacy_parser.dependency_to_constituency
    try:
        for _ in range(args.repeats):
            for name, (glue, convert, extract) in variants.items():
                glue.dependency_to_constituency = convert  # the converter doc_to_tree calls
                t0 = time.process_time()
                trees = [glue.doc_to_tree(doc) for doc in docs]
                t1 = time.process_time()
                for tree in trees:
                    tree.pformat(margin=10**9)
                t2 = time.process_time()
                roots = [extract(tree) for tree in trees]
                t3 = time.process_time()
                for stage, s in (("conversion", t1 - t0), ("pformat", t2 - t1), ("extraction", t3 - t2)):
                    seconds[name][stage].append(s)
            t0 = time.process_time()
            builder = GraphBuilder([], [])
            for k, (text, root) in enumerate(zip(texts, roots)):
                builder.add_caption(0, k, text, root)
            builder.part()
            graph_part.append(time.process_time() - t0)
    finally:
        spacy_parser.dependency_to_constituency = original
        gc.enable()

    def ms(values: list[float]) -> str:
        per = [1000 * v / len(texts) for v in values]
        return f"{min(per):.3f} / {statistics.median(per):.3f}"

    print(f"{len(texts)} Flickr30K train captions, {args.repeats} interleaved repeats, CPU ms per caption "
          f"(min / median); compiled copy: {state}")
    print(f"  spaCy (tokenizer + tok2vec + tagger + parser, once): {spacy_ms:.3f}")
    print(f"  graph part (current GraphBuilder): {ms(graph_part)}")
    header = f"  {'stage':12s}" + "".join(f"{name:>22s}" for name in variants)
    print(header)
    for stage in ("conversion", "pformat", "extraction"):
        print(f"  {stage:12s}" + "".join(f"{ms(seconds[name][stage]):>22s}" for name in variants))
    graph_ms = 1000 * min(graph_part) / len(texts)
    for name in variants:
        after = sum(1000 * min(seconds[name][stage]) / len(texts) for stage in seconds[name])
        total = spacy_ms + after + graph_ms
        print(f"  {name}: after spaCy {after:.3f} ms, all stages {total:.3f} ms per caption -> projection for "
              f"{FLICKR30K_TRAIN:,} captions: {FLICKR30K_TRAIN * total / 1000:.0f} CPU s, "
              f"{FLICKR30K_TRAIN * total / 2000:.0f} s on 2 cores (stages only: no start-up, merge or imbalance)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
