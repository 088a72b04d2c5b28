"""The generated world's CRG from its gold trees against the one from spaCy's parses (docs/world.md, "Gold parses").

    python -m features.world.generate --out runs/world4k --num-images 4000      # the training default world
    python benchmarks/world_gold_parses.py --world runs/world4k [--split train] [--json OUT]

Prints, for the CRG of the ``--split`` captions built with each parser: the number of primitives and their
list, the share of captions holding a primitive that is not a shape noun, and the relation templates
(predicates of two arguments holding one of the grammar's relation phrases); then the labelled-bracket
F1 (:mod:`crg.bracket_score`, evalb conventions) of spaCy's trees against the gold trees on every caption
of the world, spaCy parsing the gold trees' tokens. Nothing is cached: every number is computed afresh.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from crg.bracket_score import format_table, score_as_dict, score_trees
from crg.build import build_crg
from crg.corpus import read_corpus
from crg.graph import KIND_BITS
from crg.preparsed import PreparsedTrees
from features.world.grammar import NOUNS, PLURALS, REL_WORDS

SHAPE_WORDS = frozenset(w for words in NOUNS.values() for w in words) | \
    frozenset(PLURALS.get(w, w + "s") for words in NOUNS.values() for w in words)
_RELATION = re.compile(r"\b(" + "|".join(sorted((re.escape(p) for ps in REL_WORDS.values() for p in ps),
                                                key=len, reverse=True)) + r")\b")


def graph_figures(graph) -> dict:
    """Primitives, the share of captions holding a non-shape primitive, and the relation templates."""
    is_primitive = (graph.concept_kinds & KIND_BITS["primitive"]) != 0
    primitives = sorted(t for t, p in zip(graph.concept_texts, is_primitive) if p)
    other = np.array([p and t not in SHAPE_WORDS for t, p in zip(graph.concept_texts, is_primitive)])
    ptr, concepts = graph.caption_concept_ptr, graph.caption_concepts
    holding = sum(bool(other[concepts[ptr[c]:ptr[c + 1]]].any()) for c in range(graph.num_captions))
    uses = Counter(int(p) for p in graph.deriv_predicate)
    binary = [(graph.predicate_templates[p], n) for p, n in uses.items()
              if graph.predicate_templates[p].count("[") == 2]
    relation = sorted(((t, n) for t, n in binary if _RELATION.search(t.replace("[NP]", " "))), key=lambda x: -x[1])
    return {"num_primitives": len(primitives), "primitives": primitives,
            "non_shape_primitives": [t for t in primitives if t not in SHAPE_WORDS],
            "captions": graph.num_captions, "captions_with_non_shape_primitive": holding,
            "share_with_non_shape_primitive": round(holding / max(graph.num_captions, 1), 4),
            "num_predicates": graph.num_predicates, "num_binary_templates": len(binary),
            "relation_templates": relation}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True, help="a generated world's directory (with gold_trees.jsonl)")
    ap.add_argument("--split", default="train", help="split whose CRG is compared (default train)")
    ap.add_argument("--json", help="also write every figure (full template lists included) to this file")
    args = ap.parse_args(argv)
    from crg.spacy_parser import SpacyParser

    world = Path(args.world)
    corpus = read_corpus(world / "captions.jsonl")
    gold = PreparsedTrees(world / "gold_trees.jsonl")
    spacy = SpacyParser()
    out: dict = {"world": str(world), "split": args.split, "parser": spacy.cache_key()}
    for name, parser in (("gold", gold), ("spacy", spacy)):
        started = time.perf_counter()
        graph, report = build_crg(corpus.select([args.split]), parser, progress=False)
        out[name] = {**graph_figures(graph), "skipped": report.as_dict().get("skipped"),
                     "seconds": round(time.perf_counter() - started, 1)}
        fig = out[name]
        print(f"\n== {name}: CRG of the {args.split} captions ({fig['captions']}), {fig['seconds']} s")
        print(f"primitives: {fig['num_primitives']}: {' '.join(fig['primitives'])}")
        print(f"non-shape primitives: {len(fig['non_shape_primitives'])}: {' '.join(fig['non_shape_primitives'])}")
        print(f"captions holding a non-shape primitive: {fig['captions_with_non_shape_primitive']} "
              f"({100 * fig['share_with_non_shape_primitive']:.1f}%)")
        print(f"predicates: {fig['num_predicates']}, binary: {fig['num_binary_templates']}, "
              f"relation templates: {len(fig['relation_templates'])}; most used:")
        for template, n in fig["relation_templates"][:12]:
            print(f"  {n:6d}  {template}")

    texts, trees = [], []
    with open(world / "gold_trees.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            texts.append(record["caption"])
            trees.append(record["tree"])
    from nltk import Tree

    gold_trees = [Tree.fromstring(t) for t in trees]
    started = time.perf_counter()
    predicted = spacy.parse_tokens([t.leaves() for t in gold_trees])
    seconds = time.perf_counter() - started
    score = score_trees(gold_trees, predicted)
    out["bracket_f1"] = {**score_as_dict(score), "captions": len(gold_trees), "parse_seconds": round(seconds, 1)}
    print(f"\n== spaCy against the gold trees: all {len(gold_trees)} captions of the world "
          f"(parsed in {seconds:.1f} s)\n{format_table(score)}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
