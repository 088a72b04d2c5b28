"""Which of the world's hard negatives can a model separate from the text alone? (issue 36's blind check)

    python benchmarks/world_blind_negatives.py --study runs/study_converge --out runs/world_blind_negatives.json

The world's negatives (HN-ATOM / SWAP / NEG / COMP, :mod:`features.world.hard_negatives`) are verified false of
their image, but a model trained with them as structural negatives (``--structural-negatives``) can still learn
a text-only rule that separates a kind from true captions. This measures, per CREPE type and per edit, on the
study's evaluation set (``STUDY/data/hard_negatives.json``, test images), how often scorers that never see an
image prefer the true caption (a tie counts one half, so 50 = cannot tell):

* ``LM``: a Kneser-Ney trigram model of the world's training captions (what a caption prior knows;
  :class:`crg.blind.TrigramLM`, 1 % uniform mixture for unseen words), preferring the higher mean
  log-probability per token;
* ``negation`` / ``shorter``: the text with fewer negation words / fewer words is the caption;
* ``pairs``: a word-and-bigram logistic regression (:func:`crg.blind.fit_pair_logistic`) fitted on
  ``(caption, negative)`` pairs of *training* images made by the same generator (all four kinds), the text
  side of what structural-negative training shows a model, then scored on the evaluation pairs.

A kind a blind scorer separates measures text, not grounding, for a model trained on that kind.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from crg.outputs import write_json_atomic


def eval_pairs_by_edit(eval_set: dict) -> dict[str, list[tuple[str, str]]]:
    """``"TYPE/edit" -> [(caption, negative)]`` of a hard-negative evaluation set, and ``"TYPE"`` for each type."""
    from composer.evaluation.hard_negatives import edit_of

    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for item in eval_set["items"]:
        for neg in item["negatives"]:
            pair = (item["positive"], neg["text"])
            out[neg["type"]].append(pair)
            out[f"{neg['type']}/{edit_of(neg.get('change'))}"].append(pair)
    return dict(sorted(out.items()))


def pair_margins(train_pairs: list[tuple[str, str]], test_pairs: list[tuple[str, str]], l2: float = 1.0):
    """Margins of the pair classifier fitted on ``train_pairs`` for each of ``test_pairs`` (> 0: the first text
    is taken for the caption). Features are built over both sets, so a test word unseen in training weighs 0."""
    from crg.blind import fit_pair_logistic, pair_features

    x = pair_features(list(train_pairs) + list(test_pairs))
    w = fit_pair_logistic(x[:len(train_pairs)], l2=l2)
    return x[len(train_pairs):] @ w                                               # (len(test_pairs),)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, help="a study folder on the world (its data/hard_negatives.json)")
    parser.add_argument("--train-images", type=int, default=2000,
                        help="training images whose first caption gives the pair classifier's training pairs")
    parser.add_argument("--out", help="write the table here (JSON)")
    args = parser.parse_args(argv)

    from composer.evaluation.hard_negatives import training_image_set
    from composer.study.config import get_profile
    from crg.blind import TrigramLM, negation_count, rule_outcome, tokenize
    from crg.corpus import read_corpus
    from features.catalog import resolve_dataset

    study = Path(args.study)
    path = study / "data" / "hard_negatives.json"
    if not path.is_file() or not (study / "study.json").is_file():
        raise SystemExit(f"error: {path} is missing: --study must be a study folder on the world (gc-study --out)")
    eval_set = json.loads(path.read_text())
    profile = get_profile(json.loads((study / "study.json").read_text())["profile"]["name"])
    spec = resolve_dataset("world", **profile.world_data())
    train_images = read_corpus(spec.captions).select(spec.train_splits).images
    # the world's few words all occur in training, so <unk> is never seen; a small uniform share gives a word no
    # training caption has ("not", "no": no true caption is negated) a low probability instead of none
    lm = TrigramLM.fit([c for im in train_images for c in im.captions], uniform_weight=0.01)
    train_set, summary = training_image_set(spec.world_dir, train_images, args.train_images)
    train_pairs = [(item["positive"], n["text"]) for item in train_set["items"] for n in item["negatives"]]

    groups = eval_pairs_by_edit(eval_set)
    every = sorted({p for pairs in groups.values() for p in pairs})
    margins = dict(zip(every, pair_margins(train_pairs, every).tolist()))
    score = {"LM": lm.score, "negation": lambda t: -negation_count(t), "shorter": lambda t: -len(tokenize(t))}
    rows = []
    for name, pairs in groups.items():
        row = {"negatives": name, "pairs": len(pairs)}
        for s in ("LM", "negation", "shorter"):
            row[s] = round(rule_outcome((score[s](p), score[s](n)) for p, n in pairs).accuracy, 1)
        row["pair classifier"] = round(rule_outcome((margins[p], 0.0) for p in pairs).accuracy, 1)
        rows.append(row)

    print(f"blind scorers on {path} ({len(eval_set['items'])} captions); LM on {len(train_images):,} training images' "
          f"captions; pair classifier fitted on {len(train_pairs):,} pairs of {summary['captions']:,} training images "
          f"({summary['negatives_by_type']})\n")
    print("| negatives | pairs | LM | negation | shorter | pair classifier |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['negatives']} | {r['pairs']} | {r['LM']} | {r['negation']} | {r['shorter']} | "
              f"{r['pair classifier']} |")
    if args.out:
        write_json_atomic(args.out, {"study": str(study), "train_pairs": len(train_pairs), "train_set": summary,
                                     "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
