"""Make hard negatives of a caption corpus, refined against blind text scorers, and report what
blind checks it never saw make of them (docs/hard_negatives.md, "gc-hard-negatives").

    gc-hard-negatives --captions ../shared/data/coco/captions.jsonl.gz --split test --num-captions 2000 --out runs/hn

writes ``OUT/negatives.jsonl`` (one negative a line: ``caption``, ``negative``, ``type``, ``image_id``,
``edit``: the operation, the words before and after, where, and the edited character ``spans``) and
``OUT/report.json`` (per type: counts after each filter, skip reasons, every blind check's outcome,
and whether refinement saw that check; timings).

Refinement (on by default) selects against a trigram LM trained on ``--lm-captions``/``--lm-splits``
(default: the same corpus's ``train`` split) and the grammar-and-length heuristic. The report adds
checks held out from it: an LM of the same kind trained on other captions (``--heldout-captions`` /
``--heldout-splits``, default: the corpus's splits that are neither ``--split`` nor the refinement
LM's) and the counting rules of :data:`crg.blind.COUNTING_RULES`. The held-out figures are the ones
to trust: a scorer refined against is near the bound by construction.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from crg.outputs import OutputDirError, prepare_output_dir, write_json_atomic, write_text_atomic

if TYPE_CHECKING:
    from crg.hard_negatives import HardNegative

__all__ = ["DEFAULT_TYPES", "build_argparser", "blind_checks", "negative_record", "main"]

#: HN-NEG is left out by default: a negation adds a negation word, so counting them tells a negation
#: from its caption (99.9% on COCO); no positive with the same cue can be made without an image.
#: HN-COMP is left out too (docs/hard_negatives.md): moving an attribute to another object is often
#: still true (22 of 50 read by hand), and without moves only 4% of COCO captions keep one.
DEFAULT_TYPES = ("HN-ATOM", "HN-SWAP")
#: crg.hard_negatives.HN_TYPES, spelt out so that building the parser imports none of the generators
#: (lemminflect, nltk: seconds; --help answers at once); tests/test_cli_help.py checks they are the same
TYPES = ("HN-ATOM", "HN-SWAP", "HN-NEG", "HN-COMP")
OWNED = ("negatives.jsonl", "report.json")
REFINE_LM, HELDOUT_LM, GRAMMAR = "LM (refined against)", "LM (held out)", "grammar"
PAIR_CLASSIFIER = "word-pair logistic regression (grouped folds)"
#: Counting rules refinement balances as scorers (the others are structurally silent on these edits and
#: stay held out: the surface form keeps the caption's spacing; HN-NEG, whose negation words decide it,
#: is not a default type).
REFINED_RULES = ("more 'and' is the negative", "shorter is the caption")


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gc-hard-negatives", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captions", required=True, help="caption corpus (jsonl[.gz], Karpathy json, tsv; crg.corpus)")
    ap.add_argument("--split", default="test", help="split whose captions get negatives (default test; 'all': every image)")
    ap.add_argument("--num-captions", type=int, default=None,
                    help="the first N captions of the split, in corpus order (default: all)")
    ap.add_argument("--types", nargs="+", choices=TYPES, default=list(DEFAULT_TYPES),
                    help=f"types to make (default {' '.join(DEFAULT_TYPES)}; HN-NEG is left out because counting "
                         "negation words tells it apart, HN-COMP because its negatives are too often not "
                         "false or too few, docs/hard_negatives.md)")
    ap.add_argument("--out", required=True, help="output folder (refused if it holds a run, unless --resume/--overwrite)")
    ap.add_argument("--per-type", type=int, default=5, help="negatives kept per caption and type (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-atom-count", type=int, default=2, help="a foil must occur this often in the captions")
    ap.add_argument("--refine", action=argparse.BooleanOptionalAction, default=True,
                    help="adversarial refinement against the refinement LM and the grammar heuristic (default: on)")
    ap.add_argument("--candidates-per-type", type=int, default=20, help="refinement: candidates per caption and type")
    ap.add_argument("--max-blind-accuracy", type=float, default=0.6,
                    help="refinement: bound on each refined-against scorer's accuracy per type (0.5-1, default 0.6)")
    ap.add_argument("--margin", type=float, default=0.06,
                    help="refinement: a scorer's preference for the negative counts against the bound from above "
                         "only beyond this fraction of its median gap (default 0.06; 0: any preference)")
    ap.add_argument("--margin-types", nargs="+", choices=TYPES, default=["HN-SWAP"],
                    help="refinement: the types --margin applies to (default HN-SWAP: the type whose LM gaps are "
                         "the noisiest; the others keep nearly all captions without it)")
    ap.add_argument("--lm-parts", type=int, default=2,
                    help="refinement: also a trigram LM of each of this many disjoint parts of the refinement LM's "
                         "images (default 2; 1: none), so that a pair counts as lost only where LMs of "
                         "independent captions agree")
    ap.add_argument("--lm-captions", default=None, help="corpus of the refinement LM (default: --captions)")
    ap.add_argument("--lm-splits", default="train", help="its splits (default train)")
    ap.add_argument("--heldout-captions", default=None, help="corpus of the held-out LM (default: --captions)")
    ap.add_argument("--heldout-splits", default=None,
                    help="its splits (default: those of the held-out corpus that are neither --split nor, for the "
                         "same file, --lm-splits)")
    ap.add_argument("--lm-orders", default="1,2,3",
                    help="refinement: orders of the refinement LM in the ensemble (default 1,2,3: one fit, three LMs)")
    ap.add_argument("--refine-rules", action=argparse.BooleanOptionalAction, default=True,
                    help="refinement: balance the 'and' and length counting rules too (default: on)")
    ap.add_argument("--refine-lm", action="append", default=[], metavar="FILE:SPLITS",
                    help="refinement: another trigram LM in the ensemble (repeatable), e.g. "
                         "../shared/data/flickr30k/captions.jsonl:train; never overlapping --split or a held-out LM")
    ap.add_argument("--extra-heldout-lm", action="append", default=[], metavar="FILE:SPLITS",
                    help="another held-out trigram LM (repeatable), e.g. ../shared/data/flickr30k/captions.jsonl:train")
    ap.add_argument("--classifier-folds", type=int, default=5,
                    help="held out: folds of the word-pair logistic regression, grouped by caption "
                         "(default 5; 0: none)")
    ap.add_argument("--parser", default="spacy", help="parser of the captions (default spacy; crg.parse)")
    ap.add_argument("--parser-model", default=None)
    ap.add_argument("--resume", action="store_true",
                    help="redo a run into an OUT made by the same command and settings (parses come from the cache)")
    ap.add_argument("--overwrite", action="store_true", help="replace the run in OUT instead of refusing")
    return ap


def negative_record(n: HardNegative) -> dict:
    """One line of ``negatives.jsonl``."""
    from crg.hard_negatives.reasons import false_because

    c = n.change
    return {"caption": n.source, "negative": n.text, "type": n.type, "image_id": n.image_id,
            "edit": {"op": c.op, "before": list(c.before), "after": list(c.after), "where": c.where,
                     "spans": [[s.source_start, s.source_end, s.negative_start, s.negative_end] for s in n.spans]},
            "false_because": false_because(c).as_dict()}


def blind_checks(negatives: Iterable[HardNegative], scorers: Mapping[str, Callable[[str], float]],
                 held_out: Iterable[str]) -> dict[str, dict[str, dict]]:
    """Per type and scorer, :class:`crg.blind.RuleOutcome` (as a dict, ``held_out`` added) of the
    (caption, negative) pairs; ``scorers``: text -> score, higher = taken for the caption."""
    from crg.blind import rule_outcome

    held_out = set(held_out)
    pairs: dict[str, list[tuple[str, str]]] = {}
    for n in negatives:
        pairs.setdefault(n.type, []).append((n.source, n.text))
    out = {}
    for hn_type, ps in pairs.items():
        out[hn_type] = {}
        for name, score in scorers.items():
            d = rule_outcome((score(a), score(b)) for a, b in ps).as_dict()
            out[hn_type][name] = {**d, "held_out": name in held_out}
    return out


def _order_name(order: int) -> str:
    return REFINE_LM if order == 3 else f"LM order {order} (refined against)"


def classifier_checks(negatives: Iterable[HardNegative], num_folds: int, seed: int) -> dict[str, dict]:
    """Per type, the word-pair logistic regression's held-out outcome (:func:`crg.blind.pair_classifier_outcome`,
    folds grouped by source caption) as a dict with ``held_out`` True."""
    from crg.blind import pair_classifier_outcome

    by_type: dict[str, list[HardNegative]] = {}
    for n in negatives:
        by_type.setdefault(n.type, []).append(n)
    out = {}
    for hn_type, ns in by_type.items():
        groups = [f"{n.image_id}\t{n.source}" for n in ns]
        if len(set(groups)) < num_folds:
            continue
        d = pair_classifier_outcome([(n.source, n.text) for n in ns], groups, num_folds=num_folds, seed=seed)
        out[hn_type] = {**d.as_dict(), "held_out": True}
    return out


def _splits(corpus, spec: str | None, exclude: set[str]) -> tuple[str, ...]:
    from crg.corpus import parse_splits

    if spec is None:
        return tuple(s for s in corpus.splits if s not in exclude)
    return parse_splits(spec) or tuple(corpus.splits)


def _captions_of(corpus, splits: Sequence[str], flag: str) -> list[str]:
    try:
        sub = corpus.select(splits)
    except ValueError as err:
        raise SystemExit(f"error: {flag}: {err}") from None
    texts = [c for im in sub.images for c in im.captions]
    if not texts:
        raise SystemExit(f"error: {flag}: no captions in split(s) {list(splits)} of {corpus.path}")
    return texts


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    # the generators and scorers (lemminflect, nltk): imported once the flags are parsed
    from crg.blind import COUNTING_RULES, TrigramLM
    from crg.corpus import read_corpus
    from crg.hard_negatives import (GrammarScorer, HardNegativeConfig, LanguageModelScorer, ParsedCaption,
                                    RefinementConfig, corpus_hard_negatives)
    from crg.hard_negatives.refine import CountingScorer

    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    if args.resume and args.overwrite:
        raise SystemExit("error: --resume redoes the run in --out, --overwrite replaces it: give one of them")
    if args.num_captions is not None and args.num_captions < 1:
        raise SystemExit(f"error: --num-captions must be >= 1, got {args.num_captions}")
    try:
        refinement = RefinementConfig(args.candidates_per_type, args.max_blind_accuracy,
                                      margin=args.margin, margin_types=tuple(args.margin_types)) if args.refine else None
        config = HardNegativeConfig(per_type=args.per_type, types=tuple(dict.fromkeys(args.types)),
                                    min_atom_count=args.min_atom_count, seed=args.seed, refinement=refinement)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    try:
        orders = tuple(sorted({int(o) for o in args.lm_orders.split(",")}))
    except ValueError:
        raise SystemExit(f"error: --lm-orders {args.lm_orders!r}: give orders like 1,2,3") from None
    if not orders or not set(orders) <= {1, 2, 3}:
        raise SystemExit(f"error: --lm-orders {args.lm_orders!r}: orders are 1, 2 or 3")
    extra_specs, refine_specs = [], []
    for flag, specs, out_specs in (("--extra-heldout-lm", args.extra_heldout_lm, extra_specs),
                                   ("--refine-lm", args.refine_lm, refine_specs)):
        for spec in specs:
            path, _, splits_spec = spec.rpartition(":") if ":" in spec else (spec, "", "")
            if not Path(path).is_file():
                raise SystemExit(f"error: {flag} {spec}: no such file {path!r}")
            out_specs.append((path, splits_spec or None))
    if args.lm_parts < 1:
        raise SystemExit(f"error: --lm-parts must be >= 1, got {args.lm_parts}")
    if args.classifier_folds == 1 or args.classifier_folds < 0:
        raise SystemExit(f"error: --classifier-folds must be 0 or >= 2, got {args.classifier_folds}")
    for flag in ("captions", "lm_captions", "heldout_captions"):
        path = getattr(args, flag)
        if path is not None and not Path(path).is_file():
            raise SystemExit(f"error: --{flag.replace('_', '-')} {path}: no such file")

    t = time.perf_counter()
    corpus = read_corpus(args.captions)
    from crg.corpus import parse_splits

    split = parse_splits(args.split)
    try:
        target = corpus.select(split)
    except ValueError as err:
        raise SystemExit(f"error: --split: {err}") from None
    target_splits = set(split or corpus.splits)
    pairs = [(im.image_id, c) for im in target.images for c in im.captions][:args.num_captions]
    if not pairs:
        raise SystemExit(f"error: --split {args.split} of {args.captions} has no captions")
    same_lm = args.lm_captions is None or Path(args.lm_captions).resolve() == Path(args.captions).resolve()
    lm_corpus = corpus if same_lm else read_corpus(args.lm_captions)
    lm_splits = _splits(lm_corpus, args.lm_splits, set())
    same_heldout = args.heldout_captions is None or \
        Path(args.heldout_captions).resolve() == Path(args.captions).resolve()
    heldout_corpus = corpus if same_heldout else read_corpus(args.heldout_captions)
    exclude = set(target_splits) | (set(lm_splits) if same_heldout and same_lm else set())
    heldout_splits = _splits(heldout_corpus, args.heldout_splits, exclude)
    if refinement is not None:
        if same_lm and set(lm_splits) & target_splits:
            raise SystemExit(f"error: --lm-splits {','.join(lm_splits)} overlap --split {args.split}: the refinement "
                             f"LM would be trained on the captions it judges")
    if same_heldout and set(heldout_splits) & target_splits:
        raise SystemExit(f"error: --heldout-splits {','.join(heldout_splits)} overlap --split {args.split}")
    if same_heldout and same_lm and refinement is not None and set(heldout_splits) & set(lm_splits):
        raise SystemExit(f"error: --heldout-splits {','.join(heldout_splits)} overlap --lm-splits "
                         f"{','.join(lm_splits)}: the held-out LM would share captions with the refinement LM")
    if not heldout_splits:
        raise SystemExit(f"error: {heldout_corpus.path} has no split left for the held-out LM "
                         f"(it has {corpus.splits}); give --heldout-captions / --heldout-splits")
    lm_texts = _captions_of(lm_corpus, lm_splits, "--lm-splits") if refinement is not None else []
    # --lm-parts: the refinement LM's images dealt round-robin into disjoint parts, one LM each
    lm_parts = [] if refinement is None or args.lm_parts < 2 else [
        [c for k, im in enumerate(lm_corpus.select(lm_splits).images) if k % args.lm_parts == part for c in im.captions]
        for part in range(args.lm_parts)]
    if any(not texts for texts in lm_parts):
        raise SystemExit(f"error: --lm-parts {args.lm_parts}: the refinement LM's splits have fewer images than parts")
    heldout_texts = _captions_of(heldout_corpus, heldout_splits, "--heldout-splits")
    # which (file, split) each LM reads: a held-out LM shares none with the target or a refinement LM
    def used(path, splits):
        return {(str(Path(path).resolve()), sp) for sp in splits}

    target_used = used(args.captions, target_splits)
    refine_used = used(args.lm_captions or args.captions, lm_splits) if refinement is not None else set()
    extra_refine = []  # (name, description, texts)
    for path, splits_spec in (refine_specs if refinement is not None else []):
        c = read_corpus(path)
        sp = _splits(c, splits_spec, set())
        if used(path, sp) & target_used:
            raise SystemExit(f"error: --refine-lm {path}:{','.join(sp)} overlaps --split {args.split}")
        refine_used |= used(path, sp)
        texts = _captions_of(c, sp, "--refine-lm")
        extra_refine.append((f"LM (refined against: {Path(path).parent.name or Path(path).name} {','.join(sp)})",
                             f"trigram LM of {len(texts):,} captions ({Path(path).resolve()}: {','.join(sp)})", texts))
    if used(args.heldout_captions or args.captions, heldout_splits) & refine_used:
        raise SystemExit("error: the held-out LM (--heldout-captions/--heldout-splits) shares captions with a "
                         "refinement LM (--lm-splits/--refine-lm)")
    extra_heldout = []  # (name, description, texts)
    for path, splits_spec in extra_specs:
        same = Path(path).resolve() == Path(args.captions).resolve()
        c = corpus if same else read_corpus(path)
        sp = _splits(c, splits_spec, set(target_splits) if same else set())
        if used(path, sp) & (target_used | refine_used):
            raise SystemExit(f"error: --extra-heldout-lm {path}:{','.join(sp)} overlaps --split or a refinement LM")
        texts = _captions_of(c, sp, "--extra-heldout-lm")
        extra_heldout.append((f"LM (held out: {Path(path).parent.name or Path(path).name} {','.join(sp)})",
                              f"trigram LM of {len(texts):,} captions ({Path(path).resolve()}: {','.join(sp)})", texts))
    timings["read corpora"] = time.perf_counter() - t

    settings = {"captions": str(Path(args.captions).resolve()), "split": args.split, "num_captions": args.num_captions,
                "types": list(config.types), "per_type": args.per_type, "seed": args.seed,
                "min_atom_count": args.min_atom_count, "refine": args.refine,
                "candidates_per_type": args.candidates_per_type, "max_blind_accuracy": args.max_blind_accuracy,
                "lm_captions": str(Path(args.lm_captions or args.captions).resolve()), "lm_splits": list(lm_splits),
                "heldout_captions": str(Path(args.heldout_captions or args.captions).resolve()),
                "heldout_splits": list(heldout_splits), "parser": args.parser, "parser_model": args.parser_model,
                "lm_orders": list(orders), "refine_rules": args.refine_rules,
                "extra_heldout_lm": list(args.extra_heldout_lm), "refine_lm": list(args.refine_lm),
                "classifier_folds": args.classifier_folds, "margin": args.margin, "margin_types": list(args.margin_types),
                "lm_parts": args.lm_parts}
    try:
        out = prepare_output_dir(args.out, command="gc-hard-negatives", settings=settings,
                                 mode="resume" if args.resume else "overwrite" if args.overwrite else "new",
                                 owned=OWNED, inputs={
                                     "--captions": args.captions, "--lm-captions": args.lm_captions,
                                     "--heldout-captions": args.heldout_captions,
                                     **{f"--refine-lm {v}": v.rsplit(":", 1)[0] for v in args.refine_lm},
                                     **{f"--extra-heldout-lm {v}": v.rsplit(":", 1)[0] for v in args.extra_heldout_lm}})
    except OutputDirError as err:
        raise SystemExit(f"error: {err}") from None

    from crg.benchmarks.parsing import parse_trees

    t = time.perf_counter()
    trees = parse_trees([c for _, c in pairs], parser_name=args.parser, parser_model=args.parser_model)
    parsed = [(i, ParsedCaption.from_tree(tr, c)) for (i, c), tr in zip(pairs, trees) if tr is not None]
    timings["parse"] = time.perf_counter() - t

    t = time.perf_counter()
    refine_lm = TrigramLM.fit(lm_texts) if refinement is not None else None
    heldout_lm = TrigramLM.fit(heldout_texts)
    extra_lms = [(name, desc, TrigramLM.fit(texts)) for name, desc, texts in extra_heldout]
    refine_lms = [(name, desc, TrigramLM.fit(texts)) for name, desc, texts in extra_refine]
    refine_lms += [(f"LM part {k + 1}/{len(lm_parts)} (refined against)",
                    f"trigram LM of {len(texts):,} captions, part {k + 1} of {len(lm_parts)} of the refinement LM's "
                    f"images (round-robin)", TrigramLM.fit(texts)) for k, texts in enumerate(lm_parts)]
    timings["fit LMs"] = time.perf_counter() - t

    t = time.perf_counter()
    scorers = []
    if refine_lm is not None:
        scorers = [LanguageModelScorer(refine_lm, name=_order_name(o), order=o) for o in orders]
        scorers += [LanguageModelScorer(lm, name=name) for name, _, lm in refine_lms]
        scorers.append(GrammarScorer(name=GRAMMAR))
        if args.refine_rules:
            scorers += [CountingScorer(r) for r in COUNTING_RULES if r.name in REFINED_RULES]
    negatives, report = corpus_hard_negatives(parsed, config=config, scorers=scorers)
    timings["generate" + (" and refine" if refinement else "")] = time.perf_counter() - t

    t = time.perf_counter()
    checks: dict[str, Callable[[str], float]] = {}
    if refine_lm is not None:
        for o in orders:
            checks[_order_name(o)] = (lambda lm, o: lambda text: lm.score(text, order=o))(refine_lm, o)
    for name, _, lm in refine_lms:
        checks[name] = lm.score
    checks[HELDOUT_LM] = heldout_lm.score
    for name, _, lm in extra_lms:
        checks[name] = lm.score
    for rule in COUNTING_RULES:
        checks[rule.name] = rule.score
    refined_rules = set(REFINED_RULES) if refine_lm is not None and args.refine_rules else set()
    held_out = [HELDOUT_LM] + [n for n, _, _ in extra_lms] + [r.name for r in COUNTING_RULES
                                                              if r.name not in refined_rules]
    outcomes = blind_checks(negatives, checks, held_out)
    if args.classifier_folds:
        for hn_type, d in classifier_checks(negatives, args.classifier_folds, args.seed).items():
            outcomes.setdefault(hn_type, {})[PAIR_CLASSIFIER] = d
        held_out.append(PAIR_CLASSIFIER)
    timings["blind checks"] = time.perf_counter() - t

    rep = report.as_dict()
    refined = (rep.get("refinement") or {}).get("types", {})
    types = {}
    for hn_type in config.types:
        st = refined.get(hn_type, {})
        counts = {"captions": len(parsed),
                  "captions_with_candidates": st.get("captions", rep["captions_with"].get(hn_type, 0)),
                  "candidates": st.get("candidates", rep["produced"].get(hn_type, 0)),
                  "picked_per_caption": st.get("picked", rep["produced"].get(hn_type, 0)),
                  "kept": rep["produced"].get(hn_type, 0),
                  "captions_kept": rep["captions_with"].get(hn_type, 0)}
        counts["dropped_ungrammatical"] = rep.get("dropped_ungrammatical", {}).get(hn_type, 0)
        entry = {"counts": counts, "skipped": rep["skipped"].get(hn_type, {}),
                 "blind_checks": outcomes.get(hn_type, {})}
        if st:
            entry["refinement"] = {k: st[k] for k in ("blind_accuracy_candidates", "blind_accuracy_first",
                                                      "blind_accuracy_kept")}
        types[hn_type] = entry
    total = time.perf_counter() - started
    timings = {k: round(v, 1) for k, v in timings.items()}
    result = {
        "command": "gc-hard-negatives", "settings": settings,
        "corpus": {"captions": len(pairs), "parsed": len(parsed), "images": len({i for i, _ in pairs}),
                   "surface_unaligned": sum(p.offsets is None for _, p in parsed)},
        "scorers": {"refined_against": ([f"{_order_name(o)}: order-{o} cut of a Kneser-Ney trigram LM of "
                                         f"{len(lm_texts):,} captions "
                                         f"({settings['lm_captions']}: {','.join(lm_splits)})"
                                         for o in orders]
                                        + [f"{n}: {d}" for n, d, _ in refine_lms]
                                        + [f"{GRAMMAR}: agreement violations then length, from the edit's tags"]
                                        + sorted(refined_rules) if refinement else []),
                    "held_out": [f"{HELDOUT_LM}: trigram LM of {len(heldout_texts):,} captions "
                                 f"({settings['heldout_captions']}: {','.join(heldout_splits)})"]
                    + [f"{n}: {d}" for n, d, _ in extra_lms]
                    + [r.name for r in COUNTING_RULES if r.name not in refined_rules]
                    + ([f"{PAIR_CLASSIFIER}: {args.classifier_folds} folds grouped by source caption, word and "
                        f"word-pair count differences, trained per type on the other folds' pairs"]
                       if args.classifier_folds else [])},
        "types": types,
        "timings_s": {**timings, "total": round(total, 1)},
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
    }
    write_text_atomic(out / "negatives.jsonl",
                      "".join(json.dumps(negative_record(n)) + "\n" for n in negatives))
    write_json_atomic(out / "report.json", result)
    print(format_table(result))
    print(f"{len(negatives):,} negatives of {len(parsed):,} captions in {out} ({total:.0f} s)")
    return 0


def format_table(result: dict) -> str:
    """The report's per-type table (markdown): counts, then each check's accuracy; * = held out."""
    types = result["types"]
    names = list(next((t["blind_checks"] for t in types.values() if t["blind_checks"]), {}))
    head = ["type", "captions with candidates", "candidates", "kept", "captions kept"] + \
        [f"{n}{' *' if any(t['blind_checks'].get(n, {}).get('held_out') for t in types.values()) else ''}"
         for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for hn_type, t in types.items():
        c = t["counts"]
        row = [hn_type, f"{c['captions_with_candidates']:,}", f"{c['candidates']:,}", f"{c['kept']:,}",
               f"{c['captions_kept']:,}"]
        row += [f"{t['blind_checks'][n]['accuracy']:.1f}" if n in t["blind_checks"] else "-" for n in names]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
