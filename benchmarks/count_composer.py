"""COMPOSER's parameters and FLOPs at the paper's sizes, against Table 6 (and the flat baseline).

    python benchmarks/count_composer.py    # the table of docs/composer.md (about 15 minutes on 2 cores)

Parameters are counted on the meta device (nothing allocated, nothing downloaded: random init, MiniLM's
uncased WordPiece vocabulary, which is bert-base-uncased's). FLOPs come from ``torch.utils.flop_counter``
(2 per multiply-add, attention included) for a forward pass over one (image, caption) pair with
``--regions`` regions, averaged over ``--captions`` Flickr30K test captions drawn with ``--seed`` and
parsed with the default spaCy parser; the per-image visual prefix counts once per pair. Needs the shared
Flickr30K captions (``--corpus``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Table 6 (PT layers, CT layers) -> (parameters, GFLOPs per pair); ViLBERT is the paper's flat reference
TABLE6 = {(2, 5): ("129M", 35.40), (4, 5): ("143M", 37.11), (6, 5): ("157M", 38.40), (6, 3): ("136M", 29.40),
          (6, 1): ("115M", 19.98)}
VILBERT = ("235M", 24.44)


def paper_config(pt: int, ct: int, selfatt: str):
    from bench_composer import text_overrides  # random weights, bert-base-uncased's vocabulary from MiniLM

    from composer.models.composer.config import composer_config

    return composer_config("paper", pt_layers=pt, ct_layers=ct, composition={"visual_selfatt": selfatt},
                           **text_overrides("paper"))


def count_parameters(cfg, model: str = "composer") -> int:
    import torch

    from composer.models import registry

    with torch.device("meta"):
        m = registry.get(model).build_model(cfg, load_pretrained=False)
    return sum(p.numel() for p in m.parameters())


def sample_programs(corpus: Path, n: int, seed: int):
    """``n`` random Karpathy-test captions of ``corpus`` as concept programs (spaCy parses)."""
    from crg.corpus import read_corpus
    from crg.extract import extract_concepts
    from crg.graph import GraphBuilder
    from crg.spacy_parser import SpacyParser
    from composer.models.composer.program import ConceptProgram

    images = [im for im in read_corpus(corpus).images if im.split == "test"]
    picks = random.Random(seed).sample([(im.image_id, c) for im in images for c in im.captions], n)
    trees = SpacyParser().parse_texts([c for _, c in picks])
    builder = GraphBuilder([i for i, _ in picks], ["test"] * n)  # one "image" per caption: ids need not be unique
    for k, tree in enumerate(trees):
        builder.add_caption(k, 0, " ".join(tree.leaves()), extract_concepts(tree))
    graph = builder.build()
    return [ConceptProgram.from_graph(graph, k) for k in range(n)]


def pair_gflops(cfg, programs, regions: int, model: str = "composer") -> float:
    """Mean forward GFLOPs of one (image, caption) pair over ``programs``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from composer.models import registry
    from composer.models.composer.program import ProgramBatch
    from features.geometry import box_geometry

    torch.manual_seed(0)
    m = registry.get(model).build_model(cfg, load_pretrained=False).eval()
    tok = m.make_tokenizer()
    feats = torch.randn(1, regions, cfg.visual.region_dim)                   # (1, R, Dr)
    x1y1 = torch.rand(regions, 2) * 300
    boxes = torch.cat([x1y1, x1y1 + torch.rand(regions, 2) * 300], 1).numpy()  # (R, 4) in a 640 x 480 image
    geometry = torch.from_numpy(box_geometry(boxes, 640, 480))[None]         # (1, R, 5)
    mask = torch.ones(1, regions, dtype=torch.bool)
    one = torch.zeros(1, dtype=torch.long)
    flops = []
    with torch.no_grad():
        for p in programs:
            batch = ProgramBatch.collate([p], tok)
            with FlopCounterMode(display=False) as counter:
                m.score_pairs(feats, geometry, mask, batch, one, one)
            flops.append(counter.get_total_flops() / 1e9)
    return statistics.mean(flops)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(ROOT.parent / "shared" / "data" / "flickr30k" / "captions.jsonl"))
    ap.add_argument("--captions", type=int, default=100, help="test captions the FLOPs are averaged over")
    ap.add_argument("--regions", type=int, default=100, help="regions per image (Appendix C: up to 100)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not Path(args.corpus).exists():
        raise SystemExit(f"{args.corpus} not found: pass --corpus with Flickr30K captions (JSONL or Karpathy JSON)")

    programs = sample_programs(Path(args.corpus), args.captions, args.seed)
    heights = statistics.mean(p.height for p in programs)
    composed = statistics.mean(sum(t is not None for t in p.templates) for p in programs)
    primitives = statistics.mean(sum(t is None for t in p.templates) for p in programs)
    rows = []
    for (pt, ct), (paper_params, paper_gflops) in TABLE6.items():
        cells = [f"{pt}", f"{ct}", paper_params]
        flops = []
        for selfatt in ("first", "every"):
            cfg = paper_config(pt, ct, selfatt)
            cells.append(f"{count_parameters(cfg) / 1e6:.1f}M")
            flops.append(pair_gflops(cfg, programs, args.regions))
        rows.append(cells + [f"{paper_gflops:.2f}G"] + [f"{f:.2f}G" for f in flops])
        print(" | ".join(rows[-1]), flush=True)
    flat_cfg = paper_config(6, 5, "first")
    rows.append(["flat baseline (PT 6 + CT 5)", "", f"(ViLBERT {VILBERT[0]})",
                 f"{count_parameters(flat_cfg, 'flat') / 1e6:.1f}M", "", f"(ViLBERT {VILBERT[1]}G)",
                 f"{pair_gflops(flat_cfg, programs, args.regions, 'flat'):.2f}G", ""])
    print(" | ".join(rows[-1]))

    header = ("| PT | CT | Table 6 params | ours, `first` | ours, `every` | Table 6 FLOPs | ours, `first` | ours, `every` |\n"
              "|---|---|---|---|---|---|---|---|\n")
    text = (f"`python benchmarks/count_composer.py` (parameters on the meta device with the `paper` sizes, random "
            f"init, nothing downloaded; FLOPs from `torch.utils.flop_counter`, 2 per multiply-add, attention "
            f"included, for the forward pass of one (image, caption) pair with {args.regions} regions, averaged "
            f"over {args.captions} random Flickr30K test captions (seed {args.seed}) parsed with the default spaCy "
            f"parser: mean height {heights:.2f}, {composed:.1f} composed concepts, {primitives:.1f} primitives per "
            f"caption; the per-image visual prefix counts once per pair).\n\n"
            + header + "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
