"""Make a maximum-compound-divergence (MCD) evaluation split (Zhang et al. 2021, §5.1 and Appendix B).

Cross-corpus (the paper's COCO-MCD: train on Flickr30K, evaluate on COCO val+test):

    python experiments/make_mcd_split.py --train ../shared/data/flickr30k/captions.jsonl --train-split train \\
        --candidates ../shared/data/coco/captions.jsonl.gz --candidate-splits test,val --num-images 1000 \\
        --out runs/coco_mcd

Within one corpus: leave out --candidates (or give the same file). Candidates that are also training
images leave training when selected; e.g. all 31,014 Flickr30K images, training on the rest:

    python experiments/make_mcd_split.py --train ../shared/data/flickr30k/captions.jsonl --out runs/f30k_mcd

What counts as a compound (--compounds): template, the CRG's predicate templates (the paper's, default);
template-heads, the templates with their arguments' head nouns ([NP:cube] left of [NP:ball]), for any corpus;
semantic, the generated world's logical-form compounds (attribute-noun, noun-relation-noun, ...):

    python experiments/make_mcd_split.py --data world --world-images 10000 --train-split train \
        --candidate-splits val,test_iid,test_systematic,test_productivity --compounds semantic --out runs/world_mcd

The split's atom divergence is bounded (--max-atom-divergence, default auto: Keysers et al.'s 0.02, or the
random sets' atom divergence when even they exceed it, as between two corpora); an annealed swap optimiser
maximises the compound divergence within the bound. --max-atom-divergence none is the paper's procedure
(the top of the ranking, unbounded). The report gives the divergences under every definition.

Writes OUT/eval.jsonl (the selected images, records as in the candidate corpus), OUT/eval_ids.txt,
OUT/report.json, OUT/divergence_along_ranking.png, OUT/train_ids.txt when images were held out of
training, and OUT/targets/cd_X/ for each --target-cds value (e.g. 0.15:max:16 for Figure 4's 16
splits from 0.15 to the maximum). Graphs are cached under $GC_CACHE_DIR/graphs (built on first use
with the parse cache), so a rerun takes seconds. The work is done by crg.mcd_output.write_mcd_split;
see docs/mcd.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable

from crg.compounds import COMPOUND_DEFINITIONS, TEMPLATE
from crg.corpus import CORPUS_FORMATS, parse_splits
from crg.mcd import AUTO_ATOM_BOUND, DIRECTIONS, AnnealConfig, MCDConfig, RefineConfig, parse_target_cds
from crg.mcd_output import GraphOptions, MCDCorpora, write_mcd_split
from crg.outputs import OutputDirError, prepare_output_dir
from crg.parse import add_parser_arguments


def build_argparser(named_datasets: bool = False) -> argparse.ArgumentParser:
    """The options; ``named_datasets``: also ``--data NAME`` and the world's size and seed (when a dataset
    catalog is given to :func:`main`)."""
    ap = argparse.ArgumentParser(prog="gc-make-mcd-split", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="training caption corpus (JSONL, Karpathy JSON, TSV, SCAN caps)")
    if named_datasets:
        ap.add_argument("--data", help="a named dataset instead of --train: world (generated offline), f30k, coco; "
                                       "with no --candidates, a within-corpus split")
        ap.add_argument("--world-images", type=int, default=4000,
                        help="--data world: images of the world (default 4000)")
        ap.add_argument("--world-seed", type=int, default=0, help="--data world: the world's seed (default 0)")
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
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the random baseline and of the optimiser (the paper's top-K needs none)")
    ap.add_argument("--num-random", type=int, default=20, help="random same-size sets for the baseline (default 20)")
    ap.add_argument("--direction", choices=DIRECTIONS, default="auto",
                    help="ranking direction of Delta_i (default auto: the end with the higher divergence)")
    ap.add_argument("--window-stride", type=int, default=1, help="sliding-window step along the ranking")
    ap.add_argument("--compounds", choices=COMPOUND_DEFINITIONS, default=TEMPLATE,
                    help="what a compound is: template (CRG predicate templates, the paper's; default), "
                         "template-heads (templates with their arguments' head nouns), semantic (the generated "
                         "world's logical forms; --data world only)")
    ap.add_argument("--max-atom-divergence", type=_atom_bound, default=AUTO_ATOM_BOUND,
                    help="bound on the split's atom divergence: a number, auto (default: 0.02 as Keysers et al., or "
                         "the random sets' mean when higher) or none (unbounded: the paper's top-K, no optimiser)")
    ap.add_argument("--anneal", action="store_true",
                    help="run the annealed optimiser even without a bound (it always runs with one)")
    ap.add_argument("--anneal-steps", type=int, default=AnnealConfig.steps_per_image,
                    help=f"optimiser proposals per restart and split image (default {AnnealConfig.steps_per_image})")
    ap.add_argument("--restarts", type=int, default=AnnealConfig.restarts,
                    help=f"optimiser restarts: the top-K, then random sets (default {AnnealConfig.restarts})")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="wall-clock seconds for the optimiser (a split cut short depends on the machine's speed)")
    ap.add_argument("--refine", action="store_true",
                    help="greedy swap refinement of the unbounded split (beyond the paper; the optimiser's last step)")
    ap.add_argument("--refine-rounds", type=int, default=200, help="at most this many greedy refinement rounds")
    add_parser_arguments(ap, default=None, default_help="the --data dataset's (the world: its gold trees), else spacy")
    ap.add_argument("--cache", default=None, help="parse cache file used when a graph must be built "
                                                  "(default: $GC_CACHE_DIR/parse_cache.sqlite)")
    ap.add_argument("--graph-cache", default=None, help="graph cache directory (default: $GC_CACHE_DIR/graphs)")
    ap.add_argument("--train-graph", default=None,
                    help="the training images' graph, built beforehand (gc-build-crg --out DIR, e.g. --engine ray "
                         "--merge partitioned), used instead of the graph cache: memory-mapped when columnar, its "
                         "saved per-image counts read instead of its captions; within one corpus, the graph of "
                         "every image used")
    ap.add_argument("--candidate-graph", default=None,
                    help="the candidates' graph built beforehand (with --train-graph, candidates of another corpus)")
    ap.add_argument("--workers", type=int, default=None, help="parser processes when a graph must be built")
    ap.add_argument("--max-words", type=int, default=100, help="skip captions longer than this (graph build)")
    ap.add_argument("--overwrite", action="store_true",
                    help="replace a split already in --out (its files only) instead of refusing")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


OWNED = ("eval.jsonl", "eval_ids.txt", "train_ids.txt", "report.json", "targets", "divergence_along_ranking.png")


def _atom_bound(text: str) -> float | str | None:
    """``--max-atom-divergence``: a number in [0, 1], ``auto`` or ``none``."""
    if text.strip().lower() in ("none", "off"):
        return None
    if text.strip().lower() == AUTO_ATOM_BOUND:
        return AUTO_ATOM_BOUND
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, auto or none, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"an atom divergence lies in [0, 1], got {value}")
    return value


def _splits(text: str | None) -> list[str] | None:
    """A ``--train-split`` / ``--candidate-splits`` value, aliases (``trainval``, ``all``) expanded."""
    names = parse_splits(text)
    return None if names is None else list(names)


def main(argv: list[str] | None = None, *, resolve_dataset: Callable | None = None) -> int:
    """Run the command. ``resolve_dataset(name, world_images=, world_seed=, progress=)`` turns ``--data NAME``
    into a spec with ``.captions`` and ``.parser_for(parser, parser_model)``: the dataset catalog, which lives
    in a layer above ``crg`` and is passed in by the console program (``gc-make-mcd-split``); without it there
    is no ``--data``."""
    ap = build_argparser(named_datasets=resolve_dataset is not None)
    args = ap.parse_args(argv)
    args.data = getattr(args, "data", None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser_name, parser_model = args.parser or "spacy", args.parser_model
    if args.data:
        spec = resolve_dataset(args.data, world_images=args.world_images, world_seed=args.world_seed,
                               progress=not args.quiet)
        args.train = str(spec.captions)
        parser_name, parser_model = spec.parser_for(args.parser, args.parser_model)
    if not args.train:
        ap.error("give --train PATH or --data NAME")
    if args.parser is None and args.parser_model is not None and not args.data:
        ap.error("--parser-model needs --parser")
    for flag, path in (("--train", args.train), ("--candidates", args.candidates), ("--train-graph", args.train_graph),
                       ("--candidate-graph", args.candidate_graph)):
        if path is not None and not Path(path).exists():  # before the output folder is made
            ap.error(f"{flag} {path}: no such file or folder")
    corpora = MCDCorpora(args.train, _splits(args.train_split), args.train_format, args.candidates,
                         _splits(args.candidate_splits), args.candidate_format)
    graphs = GraphOptions(parser_name=parser_name, parser_model=parser_model, max_words=args.max_words,
                          cache_root=args.graph_cache, parse_cache_path=args.cache, n_process=args.workers,
                          progress=not args.quiet, train_graph=args.train_graph, candidate_graph=args.candidate_graph)
    targets = parse_target_cds(args.target_cds)
    refine = RefineConfig(max_rounds=args.refine_rounds)
    anneal = None
    if args.max_atom_divergence is not None or args.anneal:
        anneal = AnnealConfig(steps_per_image=args.anneal_steps, restarts=args.restarts, seed=args.seed,
                              time_limit_s=args.time_limit)
    config = MCDConfig(num_images=args.num_images, direction=args.direction, num_random=args.num_random,
                       seed=args.seed, window_stride=args.window_stride, refine=refine if args.refine else None,
                       progress=not args.quiet, max_atom_divergence=args.max_atom_divergence, anneal=anneal)
    if isinstance(targets, tuple):
        config.target_cds = targets  # set after construction, as before: a target outside [0, 1] only warns
    settings = {k: v for k, v in sorted(vars(args).items()) if k not in ("quiet", "overwrite", "workers")}
    try:
        prepare_output_dir(args.out, command="make_mcd_split", settings=settings, can_resume=False,
                           mode="overwrite" if args.overwrite else "new", owned=OWNED,
                           inputs={"--train": args.train, "--candidates": args.candidates, "--cache": args.cache,
                                   "--graph-cache": args.graph_cache, "--train-graph": args.train_graph,
                                   "--candidate-graph": args.candidate_graph})
        split = write_mcd_split(corpora, args.out, config, target_spec=targets if isinstance(targets, str) else None,
                                graphs=graphs, compounds=args.compounds)
    except (OutputDirError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    print(summary(split.report))
    return 0


def summary(report: dict) -> str:
    """The printed summary: the split's divergences under every compound definition, the bound, the baseline."""
    bound = report["max_atom_divergence"]
    lines = [f"MCD split of {report['num_images']} images ({report['num_captions']} captions), compounds "
             f"optimised: {report['compounds']}; atom bound: "
             + ("none (the paper's procedure)" if bound is None else
                f"{bound:.4f} ({'met' if report['meets_atom_bound'] else 'NOT met'})"),
             f"{'compounds':<16}{'compound div.':>15}{'atom div.':>11}{'random sets':>13}"]
    for name, cd in report["compound_divergences"].items():
        rand = report["random_compound_divergences"].get(name)
        lines.append(f"{name:<16}{cd:>15.4f}{report['atom_divergences'][name]:>11.4f}"
                     f"{'' if rand is None else f'{rand:.4f}':>13}")
    if "unrefined_compound_divergence" in report:
        lines.append(f"before the optimiser (the paper's top-K): compound "
                     f"{report['unrefined_compound_divergence']:.4f}, atom {report['unrefined_atom_divergence']:.4f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
