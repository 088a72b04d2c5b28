"""Argument groups the training commands share, and their conversion to typed configs.

Importing this module (building a command's parser) imports no torch or Lightning: ``--help`` answers at
once. The configs are built, and the library imported, after the flags are parsed.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING

from composer.models import registry
from crg.cli.arguments import (
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from crg.parse import add_parser_arguments
from features.catalog import WORLD_SPLITS

if TYPE_CHECKING:
    from composer.training.fit import TrainerOptions
    from composer.training.recipes import RecipeOverrides, TrainingRecipe

__all__ = ["SHARED_PATHS", "add_data_arguments", "add_plateau_arguments", "add_training_arguments",
           "configure_logging", "model_presets", "plateau_overrides", "recipe_overrides", "train_and_print",
           "trainer_options"]

_RECIPE_FLAGS = ("preset", "text_model", "captions", "features", "parser", "parser_model", "epochs", "lr",
                 "grad_clip", "batch_size", "max_regions", "eval_images", "val_images", "world_images", "world_split",
                 "world_held_out_seed", "world_held_out_pairs", "world_held_out_facts", "hard_negative_captions",
                 "num_workers", "seed", "val_every_positives", "patience", "min_delta", "max_positives",
                 "min_positives")
_TRAINER_FLAGS = ("max_steps", "accelerator", "devices", "num_nodes", "precision", "ckpt_every_n_steps",
                  "deterministic")
#: the shared flags (argparse destinations) -> the fields of a run's configuration file they set
#: (:class:`composer.cli.run_config.RunConfig`): a flag given beside ``--config`` overrides those fields
SHARED_PATHS: dict[str, tuple[str, ...]] = {
    "data": ("data",), **{k: (f"recipe.{k}",) for k in _RECIPE_FLAGS},
    **{k: (f"trainer.{k}",) for k in _TRAINER_FLAGS},
    "val_every": ("recipe.val_every", "trainer.val_every"), "no_test": ("trainer.test",),
    "quiet": ("trainer.progress",),
    **{k: ("recipe.structural_negatives",) for k in ("structural_negatives", "structural_per_caption",
                                                      "structural_rate")}}


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def model_presets() -> tuple[str, ...]:
    """Every size preset of the registered models, in registration order."""
    return tuple(dict.fromkeys(p for name in registry.names() for p in registry.get(name).presets))


def add_data_arguments(ap: argparse.ArgumentParser, *, text_model_help: str) -> None:
    """Dataset, output directory and model-size options."""
    ap.add_argument("--data", default="world", help="world | f30k | coco | a caption file (default: world, the "
                                                    "generated offline dataset)")
    ap.add_argument("--captions", help="caption corpus (overrides the dataset's)")
    ap.add_argument("--features", help="feature store .h5 (required for f30k / coco)")
    ap.add_argument("--out", help="run directory (logs, checkpoints, results.json, config.yaml); required "
                                  "unless --print-config")
    ap.add_argument("--preset", choices=model_presets(), help="model size preset (default: the named configuration's)")
    ap.add_argument("--text-model", help=text_model_help)
    add_parser_arguments(ap, default=None, default_help="the dataset's: the world's gold trees, spacy for f30k / "
                                                        "coco / caption files")


def add_training_arguments(group, *, max_steps_help: str = "stop after this many steps (smoke tests)") -> None:
    """The data-size, trainer and checkpoint options every training command shares."""
    group.add_argument("--epochs", type=positive_int, help="training epochs (paper: 20; world: the named configuration's)")
    group.add_argument("--max-steps", type=int, default=-1, help=max_steps_help)
    group.add_argument("--lr", type=positive_float, help="peak learning rate (paper: 4e-5)")
    group.add_argument("--grad-clip", type=non_negative_float, help="clip the gradient norm (0 = off, the paper's setting)")
    group.add_argument("--batch-size", type=positive_int, help="positive pairs per batch (paper: 64)")
    group.add_argument("--max-regions", type=positive_int, help="detector regions per image (paper: 100)")
    group.add_argument("--eval-images", type=positive_int,
                       help="images of the val / test retrieval sets (paper: 1,000)")
    group.add_argument("--val-images", type=positive_int,
                       help="images of the validation set scored during training (default: --eval-images); a "
                            "smaller one makes frequent validation (--val-every-positives) affordable")
    group.add_argument("--world-images", type=positive_int, help="size of the generated world for --data world")
    group.add_argument("--world-split", choices=WORLD_SPLITS,
                       help="--data world: compositional (default: compounds held out of training, tested in-domain, "
                            "systematic and productivity) or random (an i.i.d. 80/10/10 split)")
    group.add_argument("--world-held-out-seed", type=int, dest="world_held_out_seed",
                       help="--data world: which compounds are held out (default 0; the generator's --held-out-seed)")
    group.add_argument("--world-held-out-pairs", type=non_negative_int, dest="world_held_out_pairs",
                       help="--data world: held-out colour-shape pairs (default 8)")
    group.add_argument("--world-held-out-facts", type=non_negative_int, dest="world_held_out_facts",
                       help="--data world: held-out relation facts between two shapes (default 6)")
    group.add_argument("--hard-negatives", type=non_negative_int, dest="hard_negative_captions", metavar="N",
                       help="caption negatives per positive drawn from its 100 nearest captions of other images "
                            "(ViLBERT's hard distractor: 1; default 0: all random; not the CLIP family)")
    group.add_argument("--structural-negatives", type=_structural_kinds, metavar="KINDS",
                       help="--data world: extra caption negatives verified false of the positive's image, of these "
                            "comma-separated kinds among HN-ATOM,HN-SWAP,HN-NEG,HN-COMP (issue 36; every model; "
                            "default: none)")
    group.add_argument("--structural-per-caption", type=positive_int, metavar="S",
                       help="structural negatives per positive caption (default 1)")
    group.add_argument("--structural-rate", type=float, metavar="P",
                       help="share of positives that get structural negatives (default 1)")
    group.add_argument("--num-workers", type=non_negative_int, default=0, help="DataLoader worker processes")
    group.add_argument("--val-every", type=positive_int, help="validate every N epochs (default 1; world: 3, i.e. at the end)")
    group.add_argument("--seed", type=int, default=0, help="seed of the weights, the batches and the negatives")
    group.add_argument("--accelerator", default="auto", help="Lightning accelerator (default: GPU when available)")
    group.add_argument("--devices", default="auto", help="devices per node (Lightning's; e.g. 8)")
    group.add_argument("--num-nodes", type=positive_int, default=1, help="nodes for multi-node DDP (docs/composer.md)")
    group.add_argument("--precision", default=None, help="default: bf16-mixed on GPU, 32 on CPU")
    group.add_argument("--ckpt-every-n-steps", type=positive_int, default=200, help="checkpoint cadence in steps")
    group.add_argument("--resume", action="store_true",
                       help="continue the run in OUT from OUT/checkpoints/last.ckpt (its settings must be the same)")
    group.add_argument("--overwrite", action="store_true",
                       help="replace the run in OUT (its checkpoints, logs and results) instead of refusing")
    group.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                       help="torch deterministic algorithms (default: on CPU, where they make reruns bit-identical "
                            "at no measured cost; off on a GPU)")
    group.add_argument("--no-test", action="store_true", help="skip the final test-split evaluation")
    group.add_argument("--quiet", action="store_true", help="no progress bars")


def add_plateau_arguments(ap: argparse.ArgumentParser) -> None:
    """Training to the plateau (:class:`composer.training.plateau.PlateauConfig`; docs/composer.md): all off
    by default, which trains the recipe's fixed schedule and reports its last weights."""
    g = ap.add_argument_group("training to the plateau (off by default: the recipe's fixed schedule)")
    g.add_argument("--val-every-positives", type=positive_int, metavar="N",
                   help="validate every N positive pairs trained on (rounded up to whole steps), recording the "
                        "learning curve in OUT/curve.json; default: every --val-every epochs")
    g.add_argument("--patience", type=non_negative_int, metavar="K",
                   help="stop after K validations in a row without a val R@1 gain above --min-delta "
                        "(0 or unset: never)")
    g.add_argument("--min-delta", type=non_negative_float, metavar="POINTS",
                   help="the val R@1 gain (in points) that counts as an improvement for --patience (default 0)")
    g.add_argument("--max-positives", type=positive_int, metavar="N",
                   help="train on at most N positive pairs (replaces --epochs / the CLIP schedule's length as the "
                        "end of training; the same budget for every model)")
    g.add_argument("--min-positives", type=positive_int, metavar="N",
                   help="never stop for --patience before N positive pairs (a model that starts slowly, such as "
                        "COMPOSER from random weights, is not stopped on its first flat stretch)")


def plateau_overrides(args) -> dict:
    """The plateau options as :class:`RecipeOverrides` fields (none when the command has no such options)."""
    return {k: getattr(args, k, None) for k in ("val_every_positives", "patience", "min_delta", "max_positives",
                                              "min_positives")}


def _structural_kinds(text: str) -> tuple[str, ...]:
    """``--structural-negatives``: comma-separated CREPE kinds, checked here (before any data are read)."""
    from composer.training.structural_negatives import STRUCTURAL_KINDS

    kinds = tuple(k.strip().upper() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in STRUCTURAL_KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"unknown kinds {bad or text!r}; choose among {','.join(STRUCTURAL_KINDS)}")
    return kinds


def structural_overrides(args) -> dict | None:
    """The structural-negative options as a :class:`RecipeOverrides` ``structural_negatives`` dict (None: off)."""
    kinds = getattr(args, "structural_negatives", None)
    if not kinds:
        if getattr(args, "structural_per_caption", None) or getattr(args, "structural_rate", None) is not None:
            raise SystemExit("error: --structural-per-caption / --structural-rate need --structural-negatives KINDS")
        return None
    out = {"kinds": kinds}
    if args.structural_per_caption:
        out["per_caption"] = args.structural_per_caption
    if args.structural_rate is not None:
        out["rate"] = args.structural_rate
    return out


def recipe_overrides(args, **model_specific) -> RecipeOverrides:
    """The shared options as :class:`RecipeOverrides`; ``model_specific`` adds the command's own fields."""
    from composer.training.recipes import RecipeOverrides

    return RecipeOverrides(
        preset=args.preset, text_model=args.text_model, lr=args.lr, epochs=args.epochs, grad_clip=args.grad_clip,
        batch_size=args.batch_size, max_regions=args.max_regions, eval_images=args.eval_images,
        val_images=args.val_images,
        world_images=args.world_images, world_split=args.world_split,
        world_held_out_seed=args.world_held_out_seed, world_held_out_pairs=args.world_held_out_pairs,
        world_held_out_facts=args.world_held_out_facts, captions=args.captions, features=args.features,
        num_workers=args.num_workers, seed=args.seed, val_every=args.val_every, parser=args.parser,
        parser_model=args.parser_model, hard_negative_captions=args.hard_negative_captions,
        structural_negatives=structural_overrides(args), **plateau_overrides(args), **model_specific)


def trainer_options(args) -> TrainerOptions:
    from composer.training.fit import TrainerOptions

    if args.resume and args.overwrite:
        raise SystemExit("error: --resume continues the run in --out, --overwrite replaces it: give one of them")
    return TrainerOptions(mode="overwrite" if args.overwrite else "new", max_steps=args.max_steps,
                          accelerator=args.accelerator, devices=args.devices,
                          num_nodes=args.num_nodes, precision=args.precision,
                          ckpt_every_n_steps=args.ckpt_every_n_steps, resume=args.resume,
                          deterministic=args.deterministic, test=not args.no_test, progress=not args.quiet,
                          val_every=args.val_every)


def train_and_print(recipe: TrainingRecipe, options: TrainerOptions, out, *, callbacks=()) -> int:
    """Train ``recipe`` into ``out`` with ``options``; print the test sets' and val's reports, then the test
    sets side by side (in-domain, systematic, productivity: the generalisation gap)."""
    from composer.training.fit import train
    from crg.outputs import OutputDirError

    try:
        results = train(recipe, options, out, callbacks)
    except OutputDirError as err:
        raise SystemExit(f"error: {err}") from None
    from composer.evaluation.sentence_retrieval import format_retrieval_table

    shown = ("test", "systematic", "productivity", "val")
    # the ceilings are in the table below and in results.json
    print(json.dumps({k: {f: v for f, v in results[k].items() if f != "ceilings"} for k in shown if results.get(k)},
                     indent=2))
    table = format_retrieval_table({k: results[k] for k in shown[:-1] if results.get(k)})
    if table:
        print("\ntext-to-image retrieval, test sets (" + str(out) + "/results.json):\n" + table)
    plateau = results.get("plateau")
    if plateau:  # trained to the plateau: which weights were reported, and why training ended
        best = plateau["best"]
        chosen = (f"best val R@1 {best['val']['R@1']:.1f} at step {best['step']} ({best['positives']:,} positives)"
                  if best else "no validation ran: the last weights")
        print(f"\nstopped by {plateau['stopped']} after {plateau['steps']} steps ({plateau['positives']:,} positives, "
              f"{plateau['validations']} validations); {chosen} is {out}/model; curve: {out}/curve.json")
    return 0
