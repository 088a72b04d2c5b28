"""What a pretrained text side costs on CPU: the ``small`` preset against ``small-minilm`` (issue 17 item 3).

    python benchmarks/bench_pretrained_text.py                    # about 5 minutes on 2 cores
    python benchmarks/bench_pretrained_text.py --pt-layers 1,2,6  # more MiniLM depths
    python benchmarks/bench_pretrained_text.py --batch-size 64    # the study's cpu profile batch

``small-minilm`` is ``small`` (128-d, random init) after the packaged MiniLM's embeddings and first
``pt_layers`` layers (384-d) with a projection to 128-d, its word embeddings trained (the paper's
setting, the preset's default) or frozen (``train_word_embeddings=False``). For COMPOSER, the flat model and VSE, every
variant's training step (forward + loss + backward + Adam, outside a Trainer, as
benchmarks/bench_composer.py times them) runs on the same world batches, back to back, for ``--rounds``
rounds; s / step is the median. Where the time goes: the share of the step's forward spent in the text
encoder (the PT: templates, primitive words; the flat model and VSE: whole captions), timed by forward
hooks. The text side's work depends on the batch's distinct templates and captions only, not on the
images: COMPOSER encodes each distinct template once per batch however many pairs use it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from bench_composer import TrainingStepper, build_module, machine  # the step timing of docs/benchmarks.md

MODELS = ("composer", "flat", "vse")


class ForwardClock:
    """Wall time spent inside one sub-module's forward calls (``register_forward_pre_hook`` / ``hook``)."""

    def __init__(self, module):
        self.seconds = 0.0
        self._start = None
        module.register_forward_pre_hook(self._pre)
        module.register_forward_hook(self._post)

    def _pre(self, *_):
        self._start = time.perf_counter()

    def _post(self, *_):
        self.seconds += time.perf_counter() - self._start


def text_encoder(module):
    model = module.model
    return model.predicate_transformer if hasattr(model, "predicate_transformer") else model.text_encoder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--pt-layers", default="2", help="MiniLM layers of the small-minilm variants (comma-separated)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-regions", type=int, default=14)
    ap.add_argument("--world-images", type=int, default=3000)
    args = ap.parse_args(argv)

    import torch

    from composer.models.composer.config import composer_config
    from composer.models.composer.predicate_transformer import TemplateTokenizer
    from composer.training.data import CompositionDataModule, DataConfig

    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine("cpu").items())
          + f"; load average at start {os.getloadavg()[0]:.1f}")
    dm = CompositionDataModule(DataConfig(data="world", batch_size=args.batch_size, max_regions=args.max_regions,
                                          world_images=args.world_images, eval_images=10))
    dm.prepare_data()
    dm.setup()
    dm.tokenizer = TemplateTokenizer.from_config(composer_config("small"))  # the same vocabulary as MiniLM's
    loader = iter(dm.train_dataloader())
    batches = [next(loader) for _ in range(args.warmup + args.steps)]
    templates = statistics.mean(len(b.programs.templates) for b in batches)
    print(f"{len(batches)} world batches of {args.batch_size} positives; {templates:.0f} distinct templates each")

    variants = []  # (model, preset, MiniLM layers, word embeddings trained)
    for name in args.models.split(","):
        variants.append((name, "small", None, True))
        for k in map(int, args.pt_layers.split(",")):
            variants += [(name, "small-minilm", k, False), (name, "small-minilm", k, True)]
    steppers, clocks, params = {}, {}, {}
    for name, preset, k, train_words in variants:
        key = f"{name} {preset}" + (f" (PT {k} layers, word embeddings {'trained' if train_words else 'frozen'})"
                                    if k else "")
        if k is None:
            module = build_module(name, preset, dm.store.feature_dim)
        else:
            from dataclasses import fields

            from composer.models import registry
            from composer.training.recipes import RecipeOverrides, build_module as module_of, named_recipe

            words = {"train_word_embeddings": train_words}
            # VSE's text encoder is all of its text side (text_layers, text); the others' is the PT's
            own = {f.name for f in fields(registry.get(name).make_config(preset))}
            layers = {"text_layers": k, "text": words} if "text_layers" in own else {"pt_layers": k, "pt_text": words}
            recipe = named_recipe(name, "world", RecipeOverrides(preset=preset, model=layers))
            module = module_of(recipe, recipe.model_config(dm.store.feature_dim))  # the pretrained weights load:
            # what a user trains
        clocks[key] = ForwardClock(text_encoder(module))
        params[key] = sum(p.numel() for p in module.parameters()) / 1e6
        steppers[key] = TrainingStepper(name, module, batches, "cpu")
    torch.manual_seed(0)
    text_seconds = dict.fromkeys(steppers, 0.0)  # the text encoder's forward time in the timed steps
    for _ in range(args.rounds):
        for i in range(len(batches)):
            for key, stepper in steppers.items():
                before = clocks[key].seconds
                stepper.step(i, timed=i >= args.warmup)
                if i >= args.warmup:
                    text_seconds[key] += clocks[key].seconds - before
    print(f"load average at the end {os.getloadavg()[0]:.1f}; torch threads {torch.get_num_threads()}\n")
    print("| model | params | s / step | vs small | text encoder forward, share of the step |")
    print("|---|---|---|---|---|")
    base = {}
    for key, stepper in steppers.items():
        t = statistics.median(stepper.times)
        name = key.split()[0]
        base.setdefault(name, t)
        share = text_seconds[key] / sum(stepper.times)  # forward only: its backward adds about as much again
        print(f"| {key} | {params[key]:.1f}M | {t:.3f} | {t / base[name]:.2f} | {100 * share:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
