"""What running text layers on the real tokens only saves: the Predicate Transformer's packed path
(``TransformerLayer.forward_packed``) against the padded layers it replaced, on the world's own batches.

    python benchmarks/bench_packed_text.py              # about a minute on 2 cores
    python benchmarks/bench_packed_text.py --threads 1  # as a study worker runs (two jobs, one core each)

Text batches are padded to their longest row. The padded path runs every projection, FFN and LayerNorm on
all B x T slots; the packed one on the N real tokens, and pads only for the attention itself. Inputs: the
distinct templates of one COMPOSER training batch, and the captions the flat model reads in one batch
(positives and caption negatives), from the 3,000-image world at batch 64. Text encoders: ``small``'s
(random init, 128-d, 2 layers) and ``small-minilm``'s (MiniLM's first 2 layers, 384-d, then the projection to
128-d). Each cell: forward + backward of the encoder alone, median of ``--steps`` calls, the two paths
alternating; then the largest difference of their outputs at real tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from bench_composer import machine


def padded_forward(pt, ids, mask):
    """The Predicate Transformer before the packed path: every layer over all (B, T) slots."""
    x = pt.embeddings(ids)                                     # (B, T, D_pt)
    for layer in pt.encoder.layer:
        x = layer(x, mask)                                     # (B, T, D_pt)
    return x if pt.output_projection is None else pt.output_projection(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--world-images", type=int, default=3000)
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from composer.models.composer.config import composer_config
    from composer.models.composer.predicate_transformer import PredicateTransformer, TemplateTokenizer
    from composer.training.data import CompositionDataModule, DataConfig

    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine("cpu").items())
          + f"; load average at start {os.getloadavg()[0]:.1f}")
    dm = CompositionDataModule(DataConfig(data="world", batch_size=args.batch_size, world_images=args.world_images,
                                          eval_images=10))
    dm.prepare_data()
    dm.setup()
    tok = TemplateTokenizer.from_config(composer_config("small"))
    dm.tokenizer = tok
    batch = next(iter(dm.train_dataloader()))
    templates = batch.programs.template_tokens
    captions = tok.encode_sentences([p.texts[p.root] for p in batch.programs.programs])
    inputs = {"templates": (templates.ids, templates.mask), "captions": (captions.ids, captions.mask)}

    torch.manual_seed(0)
    encoders = {preset: PredicateTransformer.from_config(composer_config(preset)).train()
                for preset in ("small", "small-minilm")}
    print(f"torch threads {torch.get_num_threads()}\n")
    print("| text encoder | input | rows x padded length | real tokens | padded s | packed s | speed-up "
          "| max diff |")
    print("|---|---|---|---|---|---|---|---|")
    for preset, pt in encoders.items():
        for name, (ids, mask) in inputs.items():
            paths = {"padded": lambda: padded_forward(pt, ids, mask), "packed": lambda: pt(ids, mask)}
            times = {k: [] for k in paths}
            for step in range(args.steps + 1):
                for k, fn in paths.items():
                    pt.zero_grad(set_to_none=True)
                    started = time.perf_counter()
                    fn()[mask].square().mean().backward()
                    if step:  # the first round warms up
                        times[k].append(time.perf_counter() - started)
            with torch.no_grad():
                pt.eval()
                diff = (paths["padded"]()[mask] - paths["packed"]()[mask]).abs().max().item()
                pt.train()
            padded, packed = (statistics.median(times[k]) for k in ("padded", "packed"))
            print(f"| {preset} | {name} | {ids.shape[0]} x {ids.shape[1]} | {int(mask.sum())} "
                  f"({100 * mask.float().mean():.0f}%) | {padded:.4f} | {packed:.4f} | {padded / packed:.2f} "
                  f"| {diff:.1e} |")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
