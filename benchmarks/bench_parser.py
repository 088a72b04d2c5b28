"""Accuracy and speed of the default parser (spaCy en_core_web_sm -> PTB trees).

    python benchmarks/bench_parser.py                      # PTB halves, caption gold sets, 5,000 Flickr30K captions
    python benchmarks/bench_parser.py --skip-speed --write-split /tmp/ptb   # also write the halves' gold trees
    python benchmarks/bench_parser.py --skip-speed --profile --speed-sample 3000  # CPU time per build stage

Accuracy: labelled-bracket F1 per label (:mod:`crg.bracket_score`, evalb conventions) of the parser
run on the gold tokens, against

* the Penn Treebank WSJ sample in ``../shared/data/ptb_dev/wsj_dev.mrg`` (1,921 trees, the
  documents wsj_0001 ... wsj_0099), split by document into a **dev half** (wsj_0001-0049, 996 trees:
  the converter's errors were analysed on it) and a **held-out half** (wsj_0050-0099, 925 trees:
  only ever scored). Documents are separated by blank lines in the file; the split is checked
  against the expected counts;
* the project's hand-bracketed caption gold sets, ``tests/data/gold_ptb.mrg`` and
  ``tests/data/gold_ptb_heldout.mrg``.

Speed: captions/s of ``SpacyParser.parse_texts`` (tagging, parsing, PTB conversion; one process,
batches of 1,000) on the first ``--speed-sample`` Flickr30K training captions, and of the
conversion alone on their dependency parses. The best of ``--repeats`` runs is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DEFAULT_PTB = DATA / "ptb_dev" / "wsj_dev.mrg"
DEFAULT_CAPTIONS = DATA / "flickr30k" / "captions.jsonl"
CAPTION_GOLD = [ROOT / "tests" / "data" / "gold_ptb.mrg", ROOT / "tests" / "data" / "gold_ptb_heldout.mrg"]

#: wsj_0001 ... wsj_0099 in file order; the first DEV_DOCUMENTS are the dev half.
PTB_DOCUMENTS = 99
DEV_DOCUMENTS = 49
PTB_TREES = 1921


def read_ptb_documents(path: Path) -> list[str]:
    """The treebank file's documents (blank-line separated), each as its bracketed text."""
    blocks = [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    if len(blocks) != PTB_DOCUMENTS:
        raise SystemExit(f"{path}: expected {PTB_DOCUMENTS} documents separated by blank lines, found {len(blocks)}")
    return blocks


def split_ptb(path: Path) -> dict[str, list]:
    """``{"dev": trees of wsj_0001-0049, "heldout": trees of wsj_0050-0099}``, normalised."""
    from crg.bracket_score import parse_trees

    blocks = read_ptb_documents(path)
    out = {"dev": [t for doc in blocks[:DEV_DOCUMENTS] for t in parse_trees(doc, str(path))],
           "heldout": [t for doc in blocks[DEV_DOCUMENTS:] for t in parse_trees(doc, str(path))]}
    total = sum(len(t) for t in out.values())
    if total != PTB_TREES:
        raise SystemExit(f"{path}: split into {total} trees, expected {PTB_TREES}")
    return out


def score_set(parser, gold: list) -> dict:
    from crg.bracket_score import score_as_dict, score_trees

    predicted = parser.parse_tokens([t.leaves() for t in gold])
    return score_as_dict(score_trees(gold, predicted))


def caption_gold(path: Path) -> list:
    from crg.bracket_score import read_trees

    return read_trees(path)


def speed(parser, texts: list[str], repeats: int) -> dict:
    """Best-of-``repeats`` captions/s for the whole parser and for the conversion alone."""
    import crg.spacy_parser as sp
    from crg.dep_to_constituency import dependency_to_constituency

    parser.parse_texts(texts[:200])  # warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        parser.parse_texts(texts)
        best = min(best, time.perf_counter() - t0)
    captured = []
    original = sp.dependency_to_constituency
    sp.dependency_to_constituency = lambda *a: (captured.append(a), original(*a))[1]
    try:
        parser.parse_texts(texts)
    finally:
        sp.dependency_to_constituency = original
    convert = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for args in captured:
            dependency_to_constituency(*args)
        convert = min(convert, time.perf_counter() - t0)
    return {"captions": len(texts), "parse_captions_per_s": round(len(texts) / best, 1),
            "convert_captions_per_s": round(len(texts) / convert, 1)}


def profile_stages(parser, texts: list[str]) -> dict:
    """CPU seconds per caption of each stage of a graph build's worker (``time.process_time``, so
    the shares hold on a shared machine): spaCy's tokenizer and pipeline components one by one (on one
    BLAS thread, as the parser runs them), the PTB conversion, formatting the tree (for the cache and
    the dump), the concept extraction from the parser's tree and the chunk's graph part, as
    ``crg/build.py``'s workers do them (cyclic garbage collection paused, as there)."""
    from threadpoolctl import threadpool_limits

    from crg.build import gc_paused
    from crg.extract import extract_concepts
    from crg.graph import GraphBuilder
    from crg.spacy_parser import doc_to_tree

    nlp = parser.nlp
    parser.parse_texts(texts[:200])  # warm up
    seconds: dict[str, float] = {}

    def timed(name, fn):
        t0 = time.process_time()
        out = fn()
        seconds[name] = time.process_time() - t0
        return out

    def graph_part(roots):
        builder = GraphBuilder([], [])
        for k, (text, root) in enumerate(zip(texts, roots)):
            builder.add_caption(0, k, text, root)
        return builder.part()

    with gc_paused(), threadpool_limits(limits=1, user_api="blas"):
        docs = timed("tokenizer", lambda: [nlp.make_doc(t) for t in texts])
        for name, component in nlp.pipeline:
            docs = timed(name, lambda c=component, d=docs: list(c.pipe(d, batch_size=parser.batch_size)))
        trees = timed("conversion", lambda: [doc_to_tree(d) for d in docs])
        timed("pformat", lambda: [t.pformat(margin=10**9) for t in trees])
        roots = timed("extraction", lambda: [extract_concepts(t) for t in trees])
        timed("graph part", lambda: graph_part(roots))
    total = sum(seconds.values())
    return {name: {"ms_per_caption": round(1000 * s / len(texts), 3), "share": round(s / total, 3)}
            for name, s in seconds.items()}


def print_table(results: dict) -> None:
    from crg.bracket_score import REPORTED_LABELS

    names = list(results)
    print(f"{'label':<22}" + "".join(f"{n:>22}" for n in names))
    print(f"{'sentences':<22}" + "".join(f"{results[n]['sentences']:>22}" for n in names))
    rows = [(label, lambda r, label=label: r["labels"][label]) for label in REPORTED_LABELS]
    rows += [("concept (NP S SBAR)", lambda r: r["concept"]), ("all labels", lambda r: r["all"])]
    for label, get in rows:
        print(f"{label + ' F1':<22}" + "".join(f"{get(results[n])['f1']:>22.1f}" for n in names))
    print(f"{'concept P / R':<22}" + "".join(
        f"{results[n]['concept']['precision']:>15.1f} / {results[n]['concept']['recall']:.1f}" for n in names))


def main(argv: list[str] | None = None) -> int:
    from crg.dep_to_constituency import CONVERTER_VERSION
    from crg.spacy_parser import MATMUL_BACKENDS, SpacyParser

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptb", default=str(DEFAULT_PTB), help="the WSJ sample (default: %(default)s)")
    ap.add_argument("--captions", default=str(DEFAULT_CAPTIONS), help="Flickr30K captions.jsonl for the speed test")
    ap.add_argument("--speed-sample", type=int, default=5000, help="Flickr30K training captions timed")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs (the best is reported)")
    ap.add_argument("--skip-speed", action="store_true", help="accuracy only")
    ap.add_argument("--profile", action="store_true",
                    help="also print the CPU time per caption of each build stage on the --speed-sample captions")
    ap.add_argument("--matmul", default="numpy", choices=MATMUL_BACKENDS,
                    help="the networks' matrix products (crg.spacy_parser.use_matmul; blis: thinc's default)")
    ap.add_argument("--write-split", metavar="DIR",
                    help="write the halves' gold trees as DIR/wsj_dev_half.mrg and DIR/wsj_heldout_half.mrg "
                         "(for python -m crg.bracket_score)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure to FILE as JSON")
    args = ap.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    parser = SpacyParser(matmul=args.matmul)
    print(f"parser: {parser.cache_key()} (converter version {CONVERTER_VERSION}, matmul {args.matmul})")
    results: dict = {}
    ptb = Path(args.ptb)
    if ptb.exists():
        halves = split_ptb(ptb)
        if args.write_split:
            out = Path(args.write_split)
            out.mkdir(parents=True, exist_ok=True)
            for name, trees in halves.items():
                path = out / f"wsj_{name}_half.mrg"
                path.write_text("".join(t.pformat(margin=10**9) + "\n" for t in trees), encoding="utf-8")
                print(f"wrote {path} ({len(trees)} trees)")
        results["PTB dev half"] = score_set(parser, halves["dev"])
        results["PTB held-out"] = score_set(parser, halves["heldout"])
        results["PTB all"] = score_set(parser, halves["dev"] + halves["heldout"])
    else:
        print(f"{ptb} not found: PTB figures skipped")
    for path in CAPTION_GOLD:
        results[path.name] = score_set(parser, caption_gold(path))
    print()
    print_table(results)
    if not args.skip_speed or args.profile:
        if not Path(args.captions).exists():
            raise SystemExit(f"captions not found: {args.captions} (use --skip-speed)")
        from crg.caption_filter import normalize_caption
        from crg.corpus import read_corpus

        corpus = read_corpus(args.captions).select("train")
        texts = [normalize_caption(c) for _, _, c in corpus.iter_captions()][: args.speed_sample]
    if not args.skip_speed:
        results["speed"] = speed(parser, texts, args.repeats)
        s = results["speed"]
        print(f"\nspeed, 1 process, {s['captions']} Flickr30K train captions: parsing (spaCy + conversion) "
              f"{s['parse_captions_per_s']:.0f} captions/s; "
              f"conversion alone {s['convert_captions_per_s']:.0f} captions/s")
    if args.profile:
        from crg.speedups import compiled_status

        results["profile"] = profile_stages(parser, texts)
        results["compiled_converter"] = compiled_status()["crg.dep_to_constituency"]
        print(f"\nCPU time per caption, 1 process, {len(texts)} Flickr30K train captions "
              f"(compiled converter: {results['compiled_converter']}):")
        for name, row in results["profile"].items():
            print(f"  {name:<12} {row['ms_per_caption']:7.3f} ms  {100 * row['share']:5.1f} %")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
