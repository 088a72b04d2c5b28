"""Train a baseline (VSE, the flat cross-modal transformer, CLIP / codebook-CLIP / IL-CLIP) and evaluate
text-to-image retrieval, on the same batches, schedule and evaluation as COMPOSER.

    gc-train-baseline --model vse --data world --out runs/vse_world                    # offline, CPU
    gc-train-baseline --model flat --data world --mvsa --out runs/flat_mvsa_world
    gc-train-baseline --model vse --data f30k --features f30k_butd.h5 \\
        --text-model bert-base-uncased --out runs/vse_f30k                             # the paper's setting

(``python experiments/train_baseline.py ...`` runs the same program.) Named configurations (per
``--model`` and ``--data``: each model's ``named_recipes`` in composer/models/registry.py) hold only what differs from the defaults;
every value can be overridden on the command line. On ``world`` each model is small enough to train on
2 CPU cores in minutes; ``f30k`` / ``coco`` use the paper's sizes (Appendix C). Writes
``OUT/results.json``, CSV and TensorBoard logs, checkpoints (``--resume`` continues a killed run
exactly) and the run's configuration, ``OUT/config.yaml`` (``--config OUT/config.yaml --out NEW`` trains
the same run again; ``--print-config`` shows the effective configuration). See docs/baselines.md.
"""

from __future__ import annotations

import argparse
import sys

from typing import TYPE_CHECKING

from composer.cli.arguments import (SHARED_PATHS, add_data_arguments, add_plateau_arguments,
                                    add_training_arguments, recipe_overrides, trainer_options)
from composer.cli.config_file import add_config_arguments
from crg.cli.arguments import non_negative_int, positive_int
from composer.models import registry

if TYPE_CHECKING:
    from composer.cli.run_config import RunConfig
    from composer.training.recipes import RecipeOverrides, TrainingRecipe

__all__ = ["MODEL_OPTIONS", "PATHS", "baselines", "build_argparser", "main", "recipe_from_args"]

# The model options (argparse dest -> where the value goes: "model:<config field path>" or a RecipeOverrides
# field). Each model's registry entry lists those that apply to it (ModelSpec.cli_options); given to
# another model, they are an error.
MODEL_OPTIONS = {"text_layers": "model:text_layers", "embed_dim": "model:embed_dim", "pool": "model:image_pool",
                 "margin": "model:loss.margin", "hardest_negative": "model:loss.negatives",
                 "pt_layers": "model:pt_layers", "ct_layers": "model:ct_layers", "mvsa_kind": "model:loss.mvsa",
                 "mvsa": "use_mvsa", "mvsa_concepts": "mvsa_concepts", "il_preset": "il_preset",
                 "negclip": "il:negclip"}

#: this command's flags -> the configuration fields they set (composer.cli.run_config.RunConfig)
PATHS = {**SHARED_PATHS, **{k: ("recipe." + v.replace("model:", "model.").replace("il:", "il."),)
                          for k, v in MODEL_OPTIONS.items()}}


def baselines() -> tuple[str, ...]:
    """The registered models this command trains (every one but COMPOSER, which has its own)."""
    return tuple(name for name in registry.names() if registry.get(name).baseline)


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gc-train-baseline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=baselines(), help="the baseline to train (required, unless a --config "
                                                          "file names it)")
    add_data_arguments(ap, text_model_help="BERT checkpoint directory or hub name initialising the text encoder")
    g = ap.add_argument_group("VSE")
    g.add_argument("--text-layers", type=non_negative_int, help="VSE text encoder depth (paper: 12)")
    g.add_argument("--embed-dim", type=positive_int, help="VSE joint space size")
    g.add_argument("--pool", choices=["mean", "max"], help="VSE pooling over regions (paper: mean)")
    g.add_argument("--margin", type=float, help="VSE hinge margin (default 0.2, VSE++'s)")
    g.add_argument("--hardest-negative", action="store_true", help="VSE++'s hardest in-batch negative, not the sum")
    g = ap.add_argument_group("flat cross-modal transformer")
    g.add_argument("--pt-layers", type=non_negative_int, help="text layers before the cross-modal ones")
    g.add_argument("--ct-layers", type=int, help="cross-modal (co-attention) layers")
    g.add_argument("--mvsa", action="store_true", help="add phrase-level MVSA (Table 5's 'ViLBERT + MVSA')")
    g.add_argument("--mvsa-kind", choices=["hinge", "nll"], help="MVSA's form (default hinge)")
    g.add_argument("--mvsa-concepts", type=positive_int, help="phrases per positive caption for MVSA (default 2)")
    g = ap.add_argument_group("CLIP, codebook-CLIP, IL-CLIP")
    g.add_argument("--il-preset", choices=["paper", "small"],
                   help="optimiser and step schedule (composer.models.clip.iterated_learning.il_config); default: "
                        "'small' for the small/tiny model presets, else 'paper'")
    g.add_argument("--negclip", action="store_true",
                   help="NegCLIP's word-swap text and pool-neighbour image negatives (with --model il_clip: "
                        "IL-NegCLIP, IL-CLIP's Table 8; --model negclip has them always)")
    add_training_arguments(ap.add_argument_group("training"),
                           max_steps_help="stop after this many steps (smoke tests); the CLIP family defaults to "
                                          "its schedule's")
    add_plateau_arguments(ap)
    add_config_arguments(ap, saved="OUT/config.yaml")
    return ap


def recipe_from_args(args) -> TrainingRecipe:
    """Arguments -> the recipe of ``--model`` on ``--data`` (options of another model are an error)."""
    from composer.training.recipes import named_recipe

    return named_recipe(args.model, args.data, overrides_from_args(args, args.model))


def overrides_from_args(args, model: str) -> RecipeOverrides:
    """Arguments -> typed overrides of ``model``'s named recipe (options of another model are an error)."""
    spec = registry.get(model)
    given = {k: getattr(args, k, None) for k in MODEL_OPTIONS if getattr(args, k, None) not in (None, False)}
    misplaced = [f"--{k.replace('_', '-')}" for k in given if k not in spec.cli_options]
    if misplaced:
        raise ValueError(f"{', '.join(misplaced)} do(es) not apply to --model {model}; see --help for the "
                         f"options of each model")
    if spec.step_schedule is not None and (args.text_model or args.epochs is not None):
        raise ValueError(f"{model} trains from scratch on a step schedule: --text-model and --epochs do not "
                         f"apply (use --il-preset, --lr, --max-steps)")
    model_cfg: dict = {}
    extra: dict = {}
    for key, value in given.items():
        target = MODEL_OPTIONS[key]
        if key == "hardest_negative":
            value = "hardest"
        if target.startswith("il:"):
            extra.setdefault("il", {})[target[len("il:"):]] = value
        elif target.startswith("model:"):
            *path, last = target[len("model:"):].split(".")
            node = model_cfg
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        else:
            extra[target] = value
    if "mvsa" in spec.cli_options:  # --mvsa is a switch: off unless given
        extra.setdefault("use_mvsa", False)
    return recipe_overrides(args, model=model_cfg, **extra)


def run_config(args, model: str) -> RunConfig:
    """The run's configuration the flags alone give (:class:`composer.cli.run_config.RunConfig`)."""
    from composer.cli.run_config import RunConfig

    return RunConfig(model=model, data=args.data, recipe=overrides_from_args(args, model),
                     trainer=trainer_options(args))


def main(argv=None) -> int:
    ap = build_argparser()
    args = ap.parse_args(argv)
    from composer.cli.run_config import run_training_command  # torch and Lightning: after --help

    def cli_config(model: str) -> RunConfig:
        try:
            return run_config(args, model)
        except ValueError as err:
            ap.error(str(err))

    return run_training_command(ap, argv, args, command="gc-train-baseline", cli_config=cli_config, paths=PATHS)


if __name__ == "__main__":
    sys.exit(main())
