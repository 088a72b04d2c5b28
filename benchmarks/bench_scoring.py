"""Cross-scoring throughput of the dual encoders: ``score_matrix``'s dual-encoder path against pair chunks.

``composer.models.common.retrieval.score_matrix`` scores a dual encoder (VSE, the CLIP family: a model with
``cross_scores``) by encoding every image and sentence once and taking one product; every other model
goes through ``score_pairs`` on chunks of at most ``max_pairs`` (image, caption) pairs. Before the dual
path existed the dual encoders went through the chunks too, which re-encode the images of a chunk for
every caption chunk (on a 1,000 x 5,000 test at 4,096 pairs per chunk: every image once per caption).
This prints pairs per second of both paths on random features and the largest score difference.

    python benchmarks/bench_scoring.py                       # 300 images x 1,500 captions, small models
    python benchmarks/bench_scoring.py --images 1000 --captions 5000
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

from composer.models.clip.model import ClipModel, clip_config
from composer.models.vse.model import VSE, vse_config
from composer.models.composer.program import ConceptProgram
from composer.models.common.retrieval import score_matrix

WORDS = ("red", "blue", "green", "small", "large", "metal", "cube", "ball", "cone", "ring", "left", "of", "near")
NOUNS = ("cube", "ball", "cone", "ring")


class PairsOnly:
    """A model seen without its ``cross_scores``: ``score_matrix`` takes the pair-chunk path."""

    def __init__(self, model):
        self.model = model

    def score_pairs(self, *args, **kwargs):
        return self.model.score_pairs(*args, **kwargs)


def captions(n: int, seed: int) -> list[ConceptProgram]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(3, 9)))] + [str(rng.choice(NOUNS))]
        sentence = "a " + " ".join(words)
        template = " ".join("[NN]" if w in NOUNS else w for w in sentence.split())
        out.append(ConceptProgram.from_derivations([(sentence, template, [w for w in sentence.split() if w in NOUNS])]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--captions", type=int, default=1500)
    ap.add_argument("--regions", type=int, default=37, help="regions per image (36 + the global one)")
    ap.add_argument("--max-pairs", type=int, default=4096, help="score_matrix's chunk size (its default)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    print(f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__};"
          f" {args.images} images x {args.captions} captions, {args.regions} regions, max_pairs {args.max_pairs}")
    print("| model | dual path pairs/s | pair chunks pairs/s | speed-up | max |difference| |")
    print("|---|---|---|---|---|")
    for name, model in (("VSE (small)", VSE(vse_config("small"), load_pretrained=False)),
                        ("CLIP (small)", ClipModel(clip_config("small"), use_codebook=False, seed=0, kind="clip"))):
        model.eval()
        dim = model.config.visual.region_dim if hasattr(model.config, "visual") else model.config.region_dim
        g = torch.Generator().manual_seed(1)
        regions = torch.randn(args.images, args.regions, dim, generator=g)
        geometry = torch.rand(args.images, args.regions, 5, generator=g)
        mask = torch.ones(args.images, args.regions, dtype=torch.bool)
        programs = captions(args.captions, seed=2)
        tok = model.make_tokenizer()
        started = time.perf_counter()
        fast = score_matrix(model, regions, geometry, mask, programs, tok, max_pairs=args.max_pairs)
        fast_s = time.perf_counter() - started
        started = time.perf_counter()
        slow = score_matrix(PairsOnly(model), regions, geometry, mask, programs, tok, max_pairs=args.max_pairs)
        slow_s = time.perf_counter() - started
        pairs = args.images * args.captions
        diff = float(np.abs(fast.scores - slow.scores).max())
        print(f"| {name} | {pairs / fast_s:,.0f} | {pairs / slow_s:,.0f} | x{slow_s / fast_s:.1f} | {diff:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
