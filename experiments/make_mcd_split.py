"""Make a maximum-compound-divergence (MCD) evaluation split (Zhang et al. 2021, §5.1 and Appendix B).

Cross-corpus (the paper's COCO-MCD: train on Flickr30K, evaluate on COCO val+test):

    python experiments/make_mcd_split.py --train ../shared/data/flickr30k/captions.jsonl --train-split train \\
        --candidates ../shared/data/coco/captions.jsonl.gz --candidate-splits test,val --num-images 1000 --out runs/coco_mcd

Within one corpus: leave out --candidates (or give the same file). Candidates that are also training
images leave training when selected; e.g. all 31,014 Flickr30K images, training on the rest:

    python experiments/make_mcd_split.py --train ../shared/data/flickr30k/captions.jsonl --out runs/f30k_mcd

Writes OUT/eval.jsonl (the selected images, records as in the candidate corpus), OUT/eval_ids.txt,
OUT/report.json, OUT/divergence_along_ranking.png, OUT/train_ids.txt when images were held out of
training, and OUT/targets/cd_X/ for each --target-cds value (e.g. 0.15:max:16 for Figure 4's 16
splits from 0.15 to the maximum). Graphs are cached under $GC_CACHE_DIR/graphs (built on first use
with the parse cache), so a rerun takes seconds. See docs/mcd.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crg.corpus import CORPUS_FORMATS, read_corpus, write_jsonl  # noqa: E402
from crg.graph_cache import get_or_build_graph  # noqa: E402
from crg.mcd import (DIRECTIONS, MCDConfig, RefineConfig, build_problem, make_mcd_split,  # noqa: E402
                     parse_target_cds, plot_ranking, result_summary)
from crg.parse import add_parser_arguments  # noqa: E402

logger = logging.getLogger("make_mcd_split")


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="training caption corpus (JSONL, Karpathy JSON, TSV, SCAN caps)")
    ap.add_argument("--data", help="a named dataset instead of --train: world (generated offline), f30k, coco; "
                                   "with no --candidates, a within-corpus split")
    ap.add_argument("--train-split", default=None, help="comma-separated training splits (default: all images)")
    ap.add_argument("--train-format", choices=CORPUS_FORMATS, default=None, help="default: detect")
    ap.add_argument("--candidates", default=None, help="corpus to select evaluation images from (default: --train)")
    ap.add_argument("--candidate-splits", default=None,
                    help="comma-separated candidate splits, e.g. test,val (default: all images)")
    ap.add_argument("--candidate-format", choices=CORPUS_FORMATS, default=None, help="default: detect")
    ap.add_argument("--num-images", type=int, default=1000, help="images in the split (default 1000)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--target-cds", default=None,
                    help="compound divergences wanted from the sliding window: 0.15,0.17,... or LOW:max:COUNT")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random baseline (the split itself is deterministic)")
    ap.add_argument("--num-random", type=int, default=20, help="random same-size sets for the baseline (default 20)")
    ap.add_argument("--direction", choices=DIRECTIONS, default="auto",
                    help="ranking direction of Delta_i (default auto: the end with the higher divergence)")
    ap.add_argument("--window-stride", type=int, default=1, help="sliding-window step along the ranking")
    ap.add_argument("--refine", action="store_true", help="swap refinement after selection (beyond the paper)")
    ap.add_argument("--refine-rounds", type=int, default=200, help="at most this many refinement rounds")
    ap.add_argument("--max-atom-divergence", type=float, default=None,
                    help="refinement keeps the atom divergence at or below this")
    add_parser_arguments(ap)
    ap.add_argument("--cache", default=None, help="parse cache file used when a graph must be built "
                                                  "(default: $GC_CACHE_DIR/parse_cache.sqlite)")
    ap.add_argument("--graph-cache", default=None, help="graph cache directory (default: $GC_CACHE_DIR/graphs)")
    ap.add_argument("--workers", type=int, default=None, help="parser processes when a graph must be built")
    ap.add_argument("--max-words", type=int, default=100, help="skip captions longer than this (graph build)")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def _splits(text: str | None) -> list[str] | None:
    return None if not text else [s.strip() for s in text.split(",") if s.strip()]


def _rows(graph, splits: list[str] | None) -> np.ndarray:
    if splits is None:
        return np.arange(len(graph.image_ids))
    return np.flatnonzero(np.isin(np.asarray(graph.image_splits, dtype=object), splits))


def main(argv=None) -> int:
    ap = build_argparser()
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.data:
        from features.catalog import resolve_dataset

        args.train = str(resolve_dataset(args.data).captions)
    if not args.train:
        ap.error("give --train PATH or --data NAME")
    started = time.perf_counter()
    train_splits, cand_splits = _splits(args.train_split), _splits(args.candidate_splits)
    cand_path = args.candidates or args.train
    cand_format = args.candidate_format if args.candidates else (args.candidate_format or args.train_format)
    graph_opts = dict(parser_name=args.parser, parser_model=args.parser_model, max_words=args.max_words,
                      cache_root=args.graph_cache, parse_cache_path=args.cache, n_process=args.workers,
                      progress=not args.quiet)
    same = Path(cand_path).resolve() == Path(args.train).resolve() and cand_format == args.train_format
    corpus = None
    if same:  # one graph of the union of splits; candidates that are training images are held out
        corpus = read_corpus(args.train, args.train_format)
        union = None if train_splits is None or cand_splits is None else sorted(set(train_splits) | set(cand_splits))
        if union is not None and set(corpus.splits) <= set(union):
            union = None  # all splits: share the whole-corpus graph
        graph, hit = get_or_build_graph(args.train, union, format=args.train_format, **graph_opts)
        train_graph = cand_graph = graph
        hits = [hit]
    else:
        train_graph, hit_t = get_or_build_graph(args.train, train_splits, format=args.train_format, **graph_opts)
        cand_graph, hit_c = get_or_build_graph(cand_path, cand_splits, format=cand_format, **graph_opts)
        hits = [hit_t, hit_c]
    problem = build_problem(train_graph, cand_graph, train_images=_rows(train_graph, train_splits if same else None),
                            candidate_images=_rows(cand_graph, cand_splits if same else None))
    config = MCDConfig(num_images=args.num_images, direction=args.direction, num_random=args.num_random,
                       seed=args.seed, window_stride=args.window_stride,
                       refine=RefineConfig(max_rounds=args.refine_rounds, max_atom_divergence=args.max_atom_divergence)
                       if args.refine else None, progress=not args.quiet)
    targets = parse_target_cds(args.target_cds)
    if isinstance(targets, tuple):
        config.target_cds = targets
    result = make_mcd_split(problem, config, target_spec=targets if isinstance(targets, str) else None)

    corpus = corpus or read_corpus(cand_path, cand_format)
    records = {im.image_id: im for im in corpus.images}
    caps = [len(records[i].captions) for i in problem.candidate_ids]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def write(directory: Path, members: np.ndarray) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        chosen = {problem.candidate_ids[i] for i in members}
        images = [im for im in corpus.images if im.image_id in chosen]  # corpus order
        write_jsonl(images, directory / "eval.jsonl")
        (directory / "eval_ids.txt").write_text("".join(im.image_id + "\n" for im in images))
        if problem.in_train[members].any():  # the training images left after holding the split out
            train_ids = [train_graph.image_ids[i] for i in _rows(train_graph, train_splits if same else None)]
            (directory / "train_ids.txt").write_text("".join(i + "\n" for i in train_ids if i not in chosen))

    write(out, result.selected)
    for t in result.targets:
        write(out / "targets" / f"cd_{t.target:.3f}", t.members)
    report = result_summary(result, problem, caps)
    report.update({
        "train": str(args.train), "train_split": train_splits, "candidates": str(cand_path),
        "candidate_splits": cand_splits, "within_corpus": same, "seed": args.seed, "num_images_requested": args.num_images,
        "parser": train_graph.meta.get("parser"), "graph_cache_hits": hits,
        "run_seconds": round(time.perf_counter() - started, 3),  # from main() on: no interpreter start-up or imports
    })
    def name(path, splits):
        return f"{Path(path).parent.name}/{Path(path).name}" + (f" [{','.join(splits)}]" if splits else "")

    plot_ranking(result, out / "divergence_along_ranking.png",
                 title=f"{name(args.train, train_splits)} -> {name(cand_path, cand_splits)}, "
                       f"{len(result.selected)} images")
    report["run_seconds"] = round(time.perf_counter() - started, 3)
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out / "report.json")
    logger.info("compound divergence %.4f (random sets %.4f), atom divergence %.4f, %d images, %d captions -> %s",
                report["compound_divergence"], report["random_compound_divergence"] or float("nan"),
                report["atom_divergence"], report["num_images"], report["num_captions"], out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
