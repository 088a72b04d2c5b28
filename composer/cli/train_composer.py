"""Train COMPOSER and evaluate text-to-image retrieval.

    gc-train-composer --data world --out runs/composer_world                        # offline, CPU
    gc-train-composer --data f30k --features f30k_butd.h5 --text-model bert-base-uncased \\
        --out runs/composer_f30k                                                   # the paper's setting

(``python experiments/train_composer.py ...`` runs the same program.) Named configurations (``--data``)
hold only what differs from the defaults (composer/models/registry.py); every value can be overridden
on the command line. ``world`` is a small model that trains on 2 CPU cores in minutes; ``f30k`` /
``coco`` are the paper's setting (Appendix C). Writes ``OUT/results.json``, CSV and TensorBoard logs,
and checkpoints (``--resume`` continues a killed run exactly), and the run's configuration,
``OUT/config.yaml``: ``--config OUT/config.yaml --out NEW`` trains the same run again (flags beside
``--config`` override it; ``--print-config`` shows the effective configuration).
"""

from __future__ import annotations

import argparse
import sys

from composer.cli.arguments import (SHARED_PATHS, add_data_arguments, add_plateau_arguments,
                                    add_training_arguments, recipe_overrides, trainer_options)
from composer.cli.config_file import add_config_arguments
from crg.cli.arguments import non_negative_int
from composer.models.composer.config import MODULATORS

__all__ = ["PATHS", "build_argparser", "main"]

#: this command's flags -> the configuration fields they set (composer.cli.run_config.RunConfig)
PATHS = {**SHARED_PATHS, "pt_layers": ("recipe.model.pt_layers",), "ct_layers": ("recipe.model.ct_layers",),
         "modulator": ("recipe.model.modulator",),
         "no_primitive_crossatt": ("recipe.model.primitive_cross_attention",),
         "mvsa_kind": ("recipe.model.loss.mvsa",), "no_mvsa": ("recipe.use_mvsa",), "no_order": ("recipe.use_order",)}


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gc-train-composer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(ap, text_model_help="BERT checkpoint directory or hub name for the Predicate Transformer")
    g = ap.add_argument_group("model and losses (the paper's ablations)")
    g.add_argument("--pt-layers", type=non_negative_int, help="Predicate Transformer layers (paper: 6; Table 6)")
    g.add_argument("--ct-layers", type=int, help="Composition Transformer layers (paper: 5; Table 6)")
    g.add_argument("--modulator", choices=MODULATORS, help="how a child binds to a predicate (paper: film; Table 4)")
    g.add_argument("--no-primitive-crossatt", action="store_true", help="primitives without CrossAtt (Table 3)")
    g.add_argument("--no-mvsa", action="store_true", help="train without the MVSA loss (Table 5)")
    g.add_argument("--no-order", action="store_true", help="train without the order loss")
    g.add_argument("--mvsa-kind", choices=["hinge", "nll"], help="MVSA's form (default hinge)")
    add_training_arguments(ap.add_argument_group("training"))
    add_plateau_arguments(ap)
    add_config_arguments(ap, saved="OUT/config.yaml")
    return ap


def model_overrides(args) -> dict:
    """The model-config fields the command line sets."""
    out = {k: v for k, v in {"pt_layers": args.pt_layers, "ct_layers": args.ct_layers,
                             "modulator": args.modulator}.items() if v is not None}
    if args.no_primitive_crossatt:
        out["primitive_cross_attention"] = False
    if args.mvsa_kind:
        out["loss"] = {"mvsa": args.mvsa_kind}
    return out


def run_config(args, model: str = "composer"):
    """The run's configuration the flags alone give (:class:`composer.cli.run_config.RunConfig`)."""
    from composer.cli.run_config import RunConfig

    overrides = recipe_overrides(args, model=model_overrides(args), use_mvsa=False if args.no_mvsa else None,
                                 use_order=False if args.no_order else None)
    return RunConfig(model=model, data=args.data, recipe=overrides, trainer=trainer_options(args))


def main(argv=None) -> int:
    ap = build_argparser()
    args = ap.parse_args(argv)
    from composer.cli.run_config import run_training_command  # torch and Lightning: after --help

    return run_training_command(ap, argv, args, command="gc-train-composer", cli_config=lambda m: run_config(args, m),
                                paths=PATHS, model="composer")


if __name__ == "__main__":
    sys.exit(main())
