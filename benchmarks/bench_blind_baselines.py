"""How far do blind text models get on compositionality negatives? (SugarCrepe's test, Hsieh et al. 2023, §3.)

Scorers that never see an image pick, for each (true caption, negative) pair, the text they prefer
(a tie counts one half, so 50% = cannot tell):

* ``LM``: an interpolated Kneser-Ney trigram model trained on the Flickr30K Karpathy train captions
  (145,000), preferring the higher mean log-probability per token (:class:`crg.blind.TrigramLM`);
* ``LM-B``: the same model trained on the captions of every other train image only (the odd
  positions of the train split, "half B"): held out from the refinement against half A below;
* ``grammar``: fewer agreement violations, then the shorter text (:class:`crg.blind.GrammarLengthHeuristic`,
  tags from the project's spaCy tagger);
* ``shorter``: the text with fewer words;
* ``negation``, ``and``, ``space-punct``: the counting rules of :data:`crg.blind.COUNTING_RULES` (the text
  with more negation words, or more "and", is the negative; the one with more spaces before
  punctuation is the caption: a formatting cue, issue 33).

on: SugarCrepe's seven files (all 7,511 pairs); ARO's COCO-Order and Flickr30K-Order built from the
first N Karpathy test captions (each against its 4 re-orderings); and this library's own generated
negatives (``crg.hard_negatives.corpus_hard_negatives``, seed 0, vocabulary from the same captions)
of the first N COCO and Flickr30K Karpathy test captions, per type, three ways:

* ``ours``: the plain generator (default config), what the negatives were before refinement;
* ``ours, refined``: adversarially refined (``HardNegativeConfig(refinement=RefinementConfig())``)
  against ``LM`` and the grammar heuristic (read from the tags the edits wrote, not spaCy's) -- the
  issue's acceptance: no type above 65% for ``LM`` and ``grammar``. ``LM`` measures what it was
  refined against, so its figure is at most the refinement's target (60%) by construction;
* ``ours, refined on half A``: refined against the LM of the even train images instead; ``LM-B``
  is then a language model the refinement never saw: how far the refinement carries over to
  another blind model, rather than fooling the one it was tuned on.

Prints a markdown table of accuracies, one of the negatives kept per type and, per type, a few COCO
captions with their plain and refined negatives (and writes JSON with ``--out``).

    python benchmarks/bench_blind_baselines.py                      # N = 2,000
    python benchmarks/bench_blind_baselines.py --num-captions 10000  # docs/benchmarks_compositional.md
    python benchmarks/bench_blind_baselines.py --num-captions 10000 --no-refine  # before refinement only
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

from crg.benchmarks import read_benchmark
from crg.benchmarks.aro import read_aro_order
from crg.benchmarks.parsing import parse_trees
from crg.blind import (GrammarLengthHeuristic, TrigramLM, blind_accuracy, conjunction_count, negation_count,
                       space_before_punctuation, spacy_tagger, tokenize)
from crg.corpus import read_corpus
from crg.hard_negatives import (
    HN_TYPES, GrammarScorer, HardNegativeConfig, LanguageModelScorer, ParsedCaption, RefinementConfig,
    corpus_hard_negatives)

SHARED = Path(__file__).resolve().parents[2] / "shared"
SCORERS = ("LM", "LM-B", "grammar", "shorter", "negation", "and", "space-punct")


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--f30k", default=str(SHARED / "data" / "flickr30k" / "captions.jsonl"),
                    help="Flickr30K corpus (the LM trains on its train split; its test captions get negatives)")
    ap.add_argument("--coco", default=str(SHARED / "data" / "coco" / "captions.jsonl.gz"), help="COCO corpus")
    ap.add_argument("--sugarcrepe", default=str(SHARED / "benchmarks" / "sugarcrepe"), help="SugarCrepe's folder")
    ap.add_argument("--num-captions", type=int, default=2000,
                    help="test captions per corpus for the order sets and our negatives (default 2,000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the negatives and the order shuffles")
    ap.add_argument("--refine", action=argparse.BooleanOptionalAction, default=True,
                    help="also generate adversarially refined negatives (default: yes)")
    ap.add_argument("--examples", type=int, default=2,
                    help="captions per type whose plain and refined COCO negatives are printed (default 2)")
    ap.add_argument("--out", help="also write the table as JSON here")
    return ap


def test_captions(path: str, n: int) -> list[tuple[str, str]]:
    corpus = read_corpus(path).select("test")
    return [(im.image_id, c) for im in corpus.images for c in im.captions][:n]


def parse_captions(pairs: list[tuple[str, str]]) -> list[tuple[str, ParsedCaption]]:
    trees = parse_trees([c for _, c in pairs])
    return [(i, ParsedCaption.from_tree(t, c)) for (i, c), t in zip(pairs, trees) if t is not None]


def our_negatives(parsed: list[tuple[str, ParsedCaption]], config: HardNegativeConfig,
                  scorers=()) -> tuple[dict, dict]:
    """``type -> [(caption, negative)]`` of the library's generator, and its report."""
    negatives, report = corpus_hard_negatives(parsed, config=config, scorers=scorers)
    out = defaultdict(list)
    for n in negatives:
        out[n.type].append((n.source, n.text))
    return {t: out[t] for t in HN_TYPES if t in out}, report.as_dict()


def examples(plain: dict, refined: dict, k: int) -> dict:
    """Per type, ``k`` captions spread evenly over those that keep a refined negative: the caption, the
    plain generator's negatives of it and the refined ones (what the docs quote)."""
    out = {}
    for hn_type, pairs in refined.items():
        kept, before = defaultdict(list), defaultdict(list)
        for source, text in pairs:
            kept[source].append(text)
        for source, text in plain.get(hn_type, ()):
            before[source].append(text)
        sources = list(kept)
        picks = [sources[i * len(sources) // k] for i in range(min(k, len(sources)))]
        out[hn_type] = [{"caption": s, "plain": before[s], "refined": kept[s]} for s in picks]
    return out


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    timings = {}

    t = time.perf_counter()
    train_images = read_corpus(args.f30k).select("train").images
    train = [c for im in train_images for c in im.captions]
    lm = TrigramLM.fit(train)
    # two halves of the train images (even / odd positions): refine against A, measure with B
    lm_a = TrigramLM.fit([c for k, im in enumerate(train_images) if k % 2 == 0 for c in im.captions])
    lm_b = TrigramLM.fit([c for k, im in enumerate(train_images) if k % 2 == 1 for c in im.captions])
    timings["fit LMs"] = time.perf_counter() - t

    sets: dict[str, dict[str, list[tuple[str, str]]]] = {}
    t = time.perf_counter()
    sugar = read_benchmark("sugarcrepe", args.sugarcrepe)
    sets["SugarCrepe"] = defaultdict(list)
    for r in sugar.records:
        sets["SugarCrepe"][r.subset].append((r.positives[0], r.negatives[0]))
    for name, path in (("coco_order", args.coco), ("flickr30k_order", args.f30k)):
        bench = read_aro_order(path, name=name, limit=args.num_captions, seed=args.seed)
        sets[f"ARO {name}"] = {name: [(r.positives[0], n) for r in bench.records for n in r.negatives]}
    timings["read benchmarks"] = time.perf_counter() - t

    counts, reports = {}, {}
    plain = HardNegativeConfig(seed=args.seed)
    refined = HardNegativeConfig(seed=args.seed, refinement=RefinementConfig())
    for name, path in (("COCO", args.coco), ("Flickr30K", args.f30k)):
        t = time.perf_counter()
        pairs = test_captions(path, args.num_captions)
        parsed = parse_captions(pairs)
        counts[name] = {"captions": len(pairs), "parsed": len(parsed)}
        timings[f"parse {name}"] = time.perf_counter() - t
        runs = [("", plain, ())]
        if args.refine:
            runs += [(", refined", refined, (LanguageModelScorer(lm), GrammarScorer())),
                     (", refined on half A", refined, (LanguageModelScorer(lm_a), GrammarScorer()))]
        for suffix, config, scorers in runs:
            t = time.perf_counter()
            sets[f"ours {name}{suffix}"], reports[f"ours {name}{suffix}"] = our_negatives(parsed, config, scorers)
            timings[f"generate ours {name}{suffix}"] = time.perf_counter() - t

    t = time.perf_counter()
    texts = list(dict.fromkeys(x for groups in sets.values() for pairs in groups.values() for p in pairs for x in p))
    lm_score = {x: lm.score(x) for x in texts}
    lm_b_score = {x: lm_b.score(x) for x in texts}
    timings["LM scores"] = time.perf_counter() - t
    t = time.perf_counter()
    heuristic = GrammarLengthHeuristic()
    tags = spacy_tagger()(texts)
    grammar_score = {x: heuristic.score(tg) for x, tg in zip(texts, tags)}
    timings["tag + grammar"] = time.perf_counter() - t
    length = {x: -len(tokenize(x)) for x in texts}
    scorer = {"LM": lm_score, "LM-B": lm_b_score, "grammar": grammar_score, "shorter": length,
              "negation": {x: -negation_count(x) for x in texts}, "and": {x: -conjunction_count(x) for x in texts},
              "space-punct": {x: space_before_punctuation(x) for x in texts}}

    rows = []
    for set_name, groups in sets.items():
        for kind, pairs in groups.items():
            rows.append({"set": set_name, "type": kind, "pairs": len(pairs),
                         **{s: round(blind_accuracy((scorer[s][p], scorer[s][n]) for p, n in pairs), 1)
                            for s in SCORERS}})
    kept = []
    for name in counts:
        before = reports[f"ours {name}"]
        for suffix in (", refined", ", refined on half A"):
            report = reports.get(f"ours {name}{suffix}")
            if report is None:
                continue
            for hn_type in HN_TYPES:
                st = report["refinement"]["types"].get(hn_type, {})
                n_before, n_after = before["produced"].get(hn_type, 0), report["produced"].get(hn_type, 0)
                kept.append({"set": f"ours {name}{suffix}", "type": hn_type, "before": n_before,
                             "candidates": st.get("candidates", 0), "after": n_after,
                             "kept %": round(100.0 * n_after / max(n_before, 1), 1),
                             "captions before": before["captions_with"].get(hn_type, 0),
                             "captions after": report["captions_with"].get(hn_type, 0)})
    shown = {name: examples(sets[f"ours {name}"], sets[f"ours {name}, refined"], args.examples)
             for name in counts if f"ours {name}, refined" in sets}
    total = time.perf_counter() - started
    print(f"blind text baselines: LM trained on {len(train):,} Flickr30K train captions (LM-B on the odd train images' "
          f"captions); order sets and our negatives from the first {args.num_captions:,} Karpathy test captions of "
          f"each corpus (ours: {json.dumps(counts)}); accuracy %, a tie counts 1/2")
    print(f"| set | type | pairs | {' | '.join(SCORERS)} |")
    print("|---|---|---|" + "---|" * len(SCORERS))
    for r in rows:
        print(f"| {r['set']} | {r['type']} | {r['pairs']:,} | " + " | ".join(f"{r[s]:.1f}" for s in SCORERS) + " |")
    if kept:
        print("\nnegatives kept per type by refinement (before: the plain generator; candidates: what refinement "
              "chose from)")
        cols = ("before", "candidates", "after", "kept %", "captions before", "captions after")
        print(f"| set | type | {' | '.join(cols)} |")
        print("|---|---|" + "---|" * len(cols))
        for r in kept:
            print(f"| {r['set']} | {r['type']} | " + " | ".join(f"{r[c]:,}" for c in cols) + " |")
    for hn_type, items in shown.get("COCO", {}).items():
        print(f"\n{hn_type}, COCO: caption / plain negatives / refined negatives")
        for ex in items:
            print(f"  {ex['caption']}\n    plain:   {' | '.join(ex['plain'])}")
            print(f"    refined: {' | '.join(ex['refined'])}")
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
    print(f"\n{total:.0f} s on {platform.processor() or platform.machine()} ({steps})")
    if args.out:
        from crg.outputs import write_json_atomic

        write_json_atomic(args.out, {"rows": rows, "kept": kept, "num_captions": args.num_captions,
                                     "train_captions": len(train), "ours": counts, "reports": reports,
                                     "examples": shown, "seconds": round(total, 1),
                                     "timings": {k: round(v, 1) for k, v in timings.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
