"""Why is a relation's direction not learned? Three readings of trained models of a study (issue 36).

    python benchmarks/relation_diagnostics.py --study runs/study_converge \\
        --models runs/study_converge/runs/composer_structneg_swap_only/seed0/model keep/composer_seed2/best.ckpt \\
        --out runs/relation_diagnostics.json

For each model (a saved model directory, a run directory or a Lightning checkpoint, as ``gc-evaluate`` takes):

1. **Hard negatives by edit on the study's test images** (``i2t_by_edit``): HN-ATOM's relation-word replacements
   ("in front of" -> "behind") apart from its colour and shape ones, next to HN-SWAP's argument exchanges. Both
   are false only because of where the two objects are.
2. **The same on training images** (the first caption of the first ``--train-images`` training images, negatives
   made by the same generator): a model trained with HN-SWAP negatives has met such negatives of these very
   images. Failing here too means training did not fit the signal, not that it failed to generalise.
3. **Does retrieval use where each object is?** Test R@1 with the true box geometry, with the boxes permuted among
   each image's detector regions (the same boxes, on the wrong objects; the whole-image region kept) and with no
   geometry at all. A model that reads positions loses R@1 when its boxes are permuted.

Prints one Markdown table per reading and writes everything to ``--out`` (JSON). Scores are the evaluation's own
(``composer.evaluation``), so reading 1 reproduces a study run's ``i2t_by_type`` for the same weights.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import torch

from crg.outputs import write_json_atomic

logger = logging.getLogger("relation_diagnostics")

#: the edits shown, in reading order (composer.report.tables' by-edit table has them all)
EDITS = ("HN-ATOM/replace_attribute", "HN-ATOM/replace_shape", "HN-ATOM/replace_relation", "HN-SWAP/swap_arguments",
         "HN-NEG/negate_attribute", "HN-COMP/swap_attributes")


def permuted_geometry(geometry: torch.Tensor, region_mask: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """``geometry`` (I, R, G) with each image's detector-region boxes permuted among its real regions.

    Region 0 is the whole image (the feature store's global region, ``add_global=True``) and keeps its box;
    padding regions keep theirs. Each image gets its own random permutation from one seeded generator.
    """
    g = torch.Generator().manual_seed(seed)
    out = geometry.clone()
    for i in range(geometry.shape[0]):
        real = torch.nonzero(region_mask[i]).flatten()
        real = real[real > 0]                                                     # (n,) detector regions
        out[i, real] = geometry[i, real[torch.randperm(len(real), generator=g)]]
    return out


def by_edit(loaded, eval_set: dict, programs: dict, store, max_regions: int) -> dict:
    from composer.evaluation.text_pairs import hard_negative_accuracy

    with torch.no_grad():
        r = hard_negative_accuracy(loaded.model, loaded.tokenizer, eval_set, programs, store, max_regions=max_regions)
    return {"i2t_by_type": r["i2t_by_type"], "i2t_by_edit": r["i2t_by_edit"],
            "counts": r["counts"]["negatives_by_edit"]}


def geometry_use(loaded, test) -> dict:
    """Test R@1 with the true, permuted and zeroed box geometry."""
    from composer.evaluation.sentence_retrieval import sentence_retrieval

    true = test.geometry
    out = {}
    for name, geometry in (("true", true), ("permuted", permuted_geometry(true, test.region_mask)),
                           ("none", torch.zeros_like(true))):
        test.geometry = geometry
        try:
            with torch.no_grad():
                out[name] = sentence_retrieval(loaded.model, loaded.tokenizer, test)["R@1"]
        finally:
            test.geometry = true
    return out


def markdown(results: dict) -> str:
    def table(title: str, key: str) -> list[str]:
        counts = next(iter(results.values()))[key]["counts"]
        lines = [f"#### {title}", "", "| model | " + " | ".join(
            f"{e.replace('/', ' ')} (n={counts.get(e, 0)})" for e in EDITS) + " |", "|---|" + "---|" * len(EDITS)]
        for name, r in results.items():
            edits = r[key]["i2t_by_edit"]
            lines.append(f"| {name} | " + " | ".join(f"{edits[e]:.1f}" if e in edits else "–" for e in EDITS) + " |")
        return lines + [""]

    lines = table("I2T by edit, the study's test images", "test") + table("I2T by edit, training images", "train")
    lines += ["#### Test R@1 with the box geometry true, permuted among each image's regions, and removed", "",
              "| model | true | permuted | none |", "|---|---|---|---|"]
    lines += ["| " + " | ".join([name] + [f"{r['geometry'][k]:.1f}" for k in ("true", "permuted", "none")]) + " |"
              for name, r in results.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, help="a study folder (its data: world, hard-negative set)")
    parser.add_argument("--models", nargs="+", required=True,
                        help="saved model directories, run directories or .ckpt files (as gc-evaluate --model)")
    parser.add_argument("--train-images", type=int, default=600, help="training images of the training-set reading")
    parser.add_argument("--out", help="write the results here (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(1)

    from composer.cli.evaluate import load_model
    from composer.evaluation.eval_sets import EvalSets
    from composer.evaluation.hard_negatives import eval_pairs, training_image_set
    from composer.evaluation.text_pairs import programs_for_texts
    from composer.study.config import get_profile
    from composer.study.data import PRUNE_SEED, STUDY_PARSER, prepare_data
    from crg.corpus import read_corpus
    from features.catalog import resolve_dataset
    from features.store import FeatureStore

    study = Path(args.study)
    for name in ("study.json", "data/study_data.json"):
        if not (study / name).is_file():
            raise SystemExit(f"error: {study / name} is missing: --study must be a study folder (gc-study --out)")
    profile = get_profile(json.loads((study / "study.json").read_text())["profile"]["name"])
    data = prepare_data(profile, study)  # its paths resolved against the folder (study_data.json keeps them relative)
    spec = resolve_dataset("world", **profile.world_data())
    sets = EvalSets(profile.world_data(), profile.eval_images, data["world"]["features"],
                    data["hard_negatives"]["path"], PRUNE_SEED)
    max_regions = profile.max_regions or 14  # the world's named configs read 14 regions per image
    train_images = read_corpus(spec.captions).select(spec.train_splits).images
    train_set, summary = training_image_set(spec.world_dir, train_images, args.train_images)
    logger.info("training-image set: %d captions, negatives %s", summary["captions"], summary["negatives_by_type"])
    test_set = sets.hn_set

    def programs_of(eval_set: dict) -> dict:  # parsed as the study parses its hard negatives
        return programs_for_texts([t for _, t in eval_pairs(eval_set)], parser_name=STUDY_PARSER,
                                  prune_probability=0.0, prune_seed=PRUNE_SEED)

    programs = {"test": programs_of(test_set), "train": programs_of(train_set)}
    store = FeatureStore(data["world"]["features"])
    test = sets.test(0.0, max_regions, STUDY_PARSER)

    results = {}
    for path in args.models:
        loaded = load_model(path)
        loaded.model.eval()
        results[path] = {"kind": loaded.kind, "step": loaded.global_step,
                         "test": by_edit(loaded, test_set, programs["test"], store, max_regions),
                         "train": by_edit(loaded, train_set, programs["train"], store, max_regions),
                         "geometry": geometry_use(loaded, test)}
        logger.info("%s: %s", path, json.dumps(results[path]["geometry"]))
    print(markdown(results))
    if args.out:
        write_json_atomic(args.out, {"study": str(study), "train_images": args.train_images,
                                     "train_set": summary, "models": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
