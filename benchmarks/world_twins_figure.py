"""Draw minimal-pair twin groups of a compositional world: each group's two images and two captions.

    python benchmarks/world_twins_figure.py --world runs/world-compositional-s0-n10000 --out docs/img/world_twins.png

Takes the first ``--groups`` groups of each twin kind (relation, binding) in ``twins.jsonl`` order, renders
both scenes (the source image's scene from ``scenes.jsonl.gz``, the twin's from its record) and writes
one PNG: a row per group, caption 0 under image 0 and caption 1 under image 1 (each caption is true of
the image above it and false of the other; docs/world.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from features.world.generate import load_scenes
from features.world.render import render_scene
from features.world.scene import Scene
from features.world.twins import TWIN_KINDS


def pick_groups(twins_path: Path, per_kind: int) -> list[dict]:
    """The first ``per_kind`` records of each twin kind, kinds in :data:`TWIN_KINDS` order."""
    chosen: dict[str, list[dict]] = {k: [] for k in TWIN_KINDS}
    with open(twins_path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if len(chosen[record["kind"]]) < per_kind:
                chosen[record["kind"]].append(record)
    return [r for k in TWIN_KINDS for r in chosen[k]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True, help="a compositional world's directory (with twins.jsonl)")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--groups", type=int, default=2, help="groups per twin kind (default 2)")
    args = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    world = Path(args.world)
    twins = world / "twins.jsonl"
    if not twins.exists():
        raise SystemExit(f"error: {twins} not found: generate a compositional world (features.world.generate)")
    groups = pick_groups(twins, args.groups)
    scenes = load_scenes(world / "scenes.jsonl.gz")
    fig, axes = plt.subplots(len(groups), 2, figsize=(8, 3.4 * len(groups)), squeeze=False)
    for row, record in zip(axes, groups):
        pair = (scenes[record["source_image"]], Scene.from_dict(record["scene_1"]))
        for k, (ax, scene) in enumerate(zip(row, pair)):
            ax.imshow(render_scene(scene))
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_xlabel(f"{record['caption_' + str(k)]}", fontsize=8, wrap=True)
            ax.set_title(f"{record['kind']} twin, image {k}", fontsize=9)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}: {len(groups)} groups from {twins}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
