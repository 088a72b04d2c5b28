"""Oracle ceilings of the compositional world, per split: what a perfect model of each kind would score.

    python benchmarks/world_ceilings.py --num-images 10000 --eval-images 100 --out runs/world_ceilings.json

Generates (or reuses) a compositional world, then prints, for ``test_iid``, ``test_systematic`` and
``test_productivity``: sentence-to-image R@1 of the three oracles (exact truth, bag of bound objects, bag of
words; features/world/oracles.py) on the split's first ``--eval-images`` images and all their captions,
random ties broken by a seeded draw; and Winoground text / image / group scores of each oracle on the
split's twin groups (ties fail). These numbers say what each split can measure: docs/world.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from composer.evaluation.twins import twin_scores
from composer.models.common.retrieval import recall_at_k
from crg.outputs import write_json_atomic
from features.world.compositional import CompositionalConfig
from features.world.generate import GenerateConfig, generate_world, load_scenes
from features.world.grammar import parse_caption
from features.world.oracles import ORACLES, oracle_matrix
from features.world.scene import Scene

SPLITS = ("test_iid", "test_systematic", "test_productivity")


def ceilings(world: Path, eval_images: int, seeds: int) -> dict:
    scenes = load_scenes(world / "scenes.jsonl.gz")
    rows = [json.loads(line) for line in (world / "captions.jsonl").read_text().splitlines()]
    groups = [json.loads(line) for line in (world / "twins.jsonl").read_text().splitlines()]
    out = {}
    for split in SPLITS:
        chosen = [r for r in rows if r["split"] == split][:eval_images]
        images = [scenes[r["image_id"]] for r in chosen]
        captions = [parse_caption(c) for r in chosen for c in r["captions"]]
        target = np.repeat(np.arange(len(chosen)), [len(r["captions"]) for r in chosen])
        entry = {"images": len(chosen), "captions": len(captions), "retrieval_R@1": {}, "twins": {}}
        for oracle in ORACLES:
            r1 = [recall_at_k(oracle_matrix(oracle, captions, images, tie_break=s), target)["R@1"]
                  for s in range(seeds)]
            entry["retrieval_R@1"][oracle] = {"mean": round(float(np.mean(r1)), 2), "std": round(float(np.std(r1)), 2)}
        split_groups = [g for g in groups if g["split"] == split]
        if split_groups:
            for oracle in ORACLES:
                scores = np.stack([oracle_matrix(oracle, [parse_caption(g["caption_0"]), parse_caption(g["caption_1"])],
                                                 [scenes[g["source_image"]], Scene.from_dict(g["scene_1"])],
                                                 tie_break=None) for g in split_groups])
                entry["twins"][oracle] = twin_scores(scores, [g["kind"] for g in split_groups])
        out[split] = entry
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", help="an existing compositional world's directory (default: generate one)")
    ap.add_argument("--num-images", type=int, default=10000, help="world size when generating (default 10,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-images", type=int, default=100, help="retrieval candidates per split (default 100)")
    ap.add_argument("--tie-seeds", type=int, default=5, help="random tie-breaks averaged (default 5)")
    ap.add_argument("--out", help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    world = Path(args.world) if args.world else Path("runs") / f"world-compositional-s{args.seed}-n{args.num_images}"
    if not args.world:
        generate_world(world, GenerateConfig(num_images=args.num_images, seed=args.seed, render=0,
                                             compositional=CompositionalConfig()), progress=False)
    result = ceilings(world, args.eval_images, args.tie_seeds)
    print(f"{'split':<18} {'oracle':<14} {'R@1':>12}  {'twins text/image/group (relation text, binding text)'}")
    for split, entry in result.items():
        for oracle in ORACLES:
            r = entry["retrieval_R@1"][oracle]
            t = entry["twins"].get(oracle)
            twins = (f"{t['text']}/{t['image']}/{t['group']} ({t.get('relation', {}).get('text')}, "
                     f"{t.get('binding', {}).get('text')}) of {t['groups']}") if t else "-"
            print(f"{split:<18} {oracle:<14} {r['mean']:>6.1f} ± {r['std']:<4.1f}  {twins}")
    if args.out:
        write_json_atomic(args.out, {"world": str(world), "eval_images": args.eval_images, "splits": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
