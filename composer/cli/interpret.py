"""Interpret COMPOSER's decision on one caption and one image (Figure 5): the caption's composition tree
with every concept's alignment score on the image and on a negative image, as text and as a PNG.

    # the 4th test caption, on its own image and on the candidate the model likes best among the others
    gc-interpret --checkpoint runs/w/checkpoints/last.ckpt --data world --index 3 --out fig5.png
    # any caption (parsed if it is not in the corpus) on a chosen image, against a chosen negative
    gc-interpret --checkpoint runs/w/checkpoints/last.ckpt --data world \\
        --image w0-003412 --caption "A red ball is left of a large cube." --negative w0-003500

The negative is ``auto`` by default: the highest-scoring other candidate among the split's first
--eval-images images (the model's strongest competitor); ``none`` scores the image alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from typing import TYPE_CHECKING

import numpy as np

from composer.cli.evaluate import add_data_arguments, load
from crg.outputs import write_json_atomic

if TYPE_CHECKING:
    from composer.models.composer.program import ConceptProgram

logger = logging.getLogger(__name__)


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gc-interpret", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(ap)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--index", type=int, help="take the N-th caption of the split's evaluation set (from 0)")
    which.add_argument("--caption", help="a caption text (looked up in the split's CRG, else parsed)")
    ap.add_argument("--image", help="image id to read the caption against (default: the caption's own image)")
    ap.add_argument("--negative", default="auto", help="auto | none | an image id (default auto)")
    ap.add_argument("--picture", help="picture file of --image to draw beside the tree (the world renders its own)")
    ap.add_argument("--out", default="interpret.png", help="PNG to write (default interpret.png)")
    ap.add_argument("--json", help="also write the tree with its scores as JSON")
    return ap


def caption_program(args, data) -> tuple[ConceptProgram, str, str | None]:
    """The caption's program, its text, and its own image (None for a caption not in the corpus)."""
    from composer.evaluation.interpretation import program_from_concepts
    from composer.models.composer.program import ConceptProgram

    graph = data.graph
    if args.index is not None:
        if not 0 <= args.index < len(data.captions):
            raise SystemExit(f"--index {args.index}: the {args.split} evaluation set has {len(data.captions)} "
                             f"captions (0 .. {len(data.captions) - 1})")
        c = data.captions[args.index]
        return ConceptProgram.from_graph(graph, c), graph.caption_texts[c], graph.image_ids[graph.caption_image[c]]
    key = " ".join(args.caption.lower().split())
    for c, text in enumerate(graph.caption_texts):
        if " ".join(text.lower().split()) == key:
            return ConceptProgram.from_graph(graph, c), text, graph.image_ids[graph.caption_image[c]]
    from crg.extract import extract_concepts
    from crg.parse import make_parser

    logger.info("caption not in the %s split: parsing it with %s", args.split, data.parser[0])
    tree = make_parser(*data.parser).parse_texts([" ".join(args.caption.split())])[0]
    return program_from_concepts(extract_concepts(tree)), args.caption, None


def regions_of(data, image_ids: list[str]):
    """(M, R, Dr), (M, R, 5), (M, R) of the given images, from the candidates or the store."""
    import torch

    device = data.regions.device
    batch = data.store.read_batch(image_ids, data.max_regions, add_global=True)
    return (torch.from_numpy(batch.features).to(device), torch.from_numpy(batch.geometry).to(device),
            torch.from_numpy(batch.mask).to(device))


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    # the model and its scoring (torch): imported once the flags are parsed, so --help answers at once
    from composer.evaluation.interpretation import interpret_pair, render_figure, render_text
    from composer.models.common.retrieval import score_matrix

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loaded, data, _, _ = load(args)
    from composer.models import registry

    if not registry.get(loaded.kind).concept_tree:
        raise SystemExit(f"error: {args.checkpoint} holds a {loaded.kind} model; interpretation reads per-concept "
                         f"scores along the caption's CRG, which only COMPOSER has")
    model, tokenizer = loaded.model, loaded.tokenizer
    program, caption, own_image = caption_program(args, data)
    image = args.image or own_image
    if image is None:
        raise SystemExit(f"--caption {caption!r} is not a caption of the {args.split} split: "
                         f"name the image with --image")

    info: dict = {"caption": caption, "image": image, "checkpoint": str(loaded.path)}
    negative = None if args.negative == "none" else args.negative
    if args.negative == "auto":
        res = score_matrix(model, data.regions, data.geometry, data.region_mask, [program], tokenizer,
                           max_pairs=args.max_pairs)
        row = res.scores[0]                                                    # (I,)
        order = [data.image_ids[i] for i in np.argsort(-row, kind="stable")]
        negative = next((i for i in order if i != image), None)
        if image in data.image_ids:
            info["rank_among_candidates"] = order.index(image) + 1
        info["num_candidates"] = len(data.image_ids)
    labels = [image] + ([negative] if negative else [])
    regions, geometry, mask = regions_of(data, labels)
    tree = interpret_pair(model, regions, geometry, mask, program, tokenizer, image_labels=labels)

    pictures = None
    if data.truth is not None:
        pictures = [data.truth.picture(i) for i in labels]
        info["caption_true_of"] = {i: data.truth.is_true(caption, i) for i in labels}
    elif args.picture:
        pictures = [args.picture]
    print(json.dumps(info))
    print(render_text(tree))
    path = render_figure(tree, args.out, pictures, title=caption)
    print(f"wrote {path}")
    if args.json:
        write_json_atomic(args.json, {**info, "tree": tree.to_dict()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
