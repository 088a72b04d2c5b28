"""A training run's configuration file (``OUT/config.yaml``), and the training commands' run from it.

The file is a :class:`RunConfig`: the model's registry name, the dataset, the typed overrides of its
named recipe (:class:`~composer.training.recipes.RecipeOverrides`; ``null`` keeps the named
configuration's value) and how the trainer runs (:class:`~composer.training.fit.TrainerOptions`).
Every run of ``gc-train-composer`` / ``gc-train-baseline`` writes the one it ran with to
``OUT/config.yaml``, and

    gc-train-composer --config runs/x/config.yaml --out runs/y

trains the same run again: the same losses and weights, bit for bit, on the same machine
(tests/test_run_config.py). Flags beside ``--config`` override the file's values. ``--print-config``
prints the effective configuration (and, as comments, the recipe it resolves to) and exits.

This module imports torch (through the recipes); the commands import it after parsing their flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import lightning as L

from composer.cli.config_file import config_yaml, given_dests, merge, plain, read_config, typed
from composer.training.fit import TrainerOptions
from composer.training.recipes import RecipeOverrides, TrainingRecipe, named_recipe
from crg.outputs import write_text_atomic

__all__ = ["CONFIG_FILE", "RunConfig", "SaveConfig", "run_training_command"]

#: what a training run writes its configuration to, in its output folder
CONFIG_FILE = "config.yaml"


@dataclass
class RunConfig:
    """Everything that decides a training run, as typed values: what ``--config`` reads and a run saves.

    Attributes:
        model: a name in :mod:`composer.models.registry`.
        data: ``world``, ``f30k``, ``coco`` or a caption file (the named recipe's dataset).
        recipe: typed changes to the named recipe of (``model``, ``data``).
        trainer: how the trainer runs (its folder policy, ``mode`` / ``resume``, comes from the command line).
    """

    model: str
    data: str = "world"
    recipe: RecipeOverrides = field(default_factory=RecipeOverrides)
    trainer: TrainerOptions = field(default_factory=TrainerOptions)


class SaveConfig(L.Callback):
    """Writes the run's configuration to ``OUT/config.yaml`` when fitting starts (after the folder is
    prepared; as Lightning's CLI saves its own), on the first process only."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = Path(path), text

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.is_global_zero:
            write_text_atomic(self.path, self.text)


def _header(command: str) -> str:
    return (f"{command} configuration (composer.cli.run_config.RunConfig); train it again with\n"
            f"  {command} --config THIS_FILE --out NEW_FOLDER\n"
            "recipe: composer.training.recipes.RecipeOverrides (null: the named configuration's value);\n"
            "trainer: composer.training.fit.TrainerOptions")


def saved_config(config: RunConfig) -> RunConfig:
    """``config`` as saved: the folder policy (``--resume`` / ``--overwrite``) is not part of the run."""
    return replace(config, trainer=replace(config.trainer, mode="new", resume=False))


def run_config_text(config: RunConfig, recipe: TrainingRecipe, command: str) -> str:
    """The YAML of ``config``, with the recipe it resolves to as comments."""
    return config_yaml(saved_config(config), header=_header(command), footer=recipe,
                       footer_title="the recipe this resolves to (composer.training.recipes.TrainingRecipe; "
                                    "for reading, not read back):")


def resolve_config(ap: argparse.ArgumentParser, argv: Sequence[str], args: argparse.Namespace, *,
                   cli_config: Callable[[str], RunConfig], paths: Mapping[str, Sequence[str]],
                   model: str | None) -> RunConfig:
    """The run's configuration: ``--config``'s file (if given), the flags given beside it written over it.

    ``cli_config(model)`` is the configuration the flags alone give; ``paths`` maps each flag's
    destination to the fields it sets; ``model`` is the command's model (None: ``--model`` or the file's).
    """
    if not args.config:
        name = model or args.model
        if not name:
            ap.error("--model is required (or a --config file that names it)")
        return cli_config(name)
    source = f"--config {args.config}"
    base = read_config(args.config)
    name = model or args.model or base.get("model")
    if not name:
        ap.error(f"{source} names no model: pass --model")
    if model is not None and base.get("model", model) != model:
        ap.error(f"{source} configures {base['model']!r}, not {model!r}: train it with gc-train-baseline")
    cli = plain(cli_config(name))
    given = given_dests(ap, argv)
    merged = merge(base, cli, given=given | {"model"}, paths={**paths, "model": ("model",)})
    merged["trainer"] = {**merged.get("trainer", {}), "mode": cli["trainer"]["mode"],
                         "resume": cli["trainer"]["resume"]}  # the folder policy is the command line's alone
    return typed(RunConfig, merged, source=source)


def run_training_command(ap: argparse.ArgumentParser, argv: Sequence[str] | None, args: argparse.Namespace, *,
                         command: str, cli_config: Callable[[str], RunConfig],
                         paths: Mapping[str, Sequence[str]], model: str | None = None) -> int:
    """What ``gc-train-composer`` and ``gc-train-baseline`` do once their flags are parsed: resolve the
    configuration, print it (``--print-config``) or train it into ``--out`` and print the results."""
    import sys

    from composer.cli.arguments import configure_logging, train_and_print

    argv = list(sys.argv[1:] if argv is None else argv)
    config = resolve_config(ap, argv, args, cli_config=cli_config, paths=paths, model=model)
    try:
        recipe = named_recipe(config.model, config.data, config.recipe)
    except ValueError as err:
        ap.error(str(err))
    if args.print_config:
        print(run_config_text(config, recipe, command), end="")
        return 0
    if not args.out:
        ap.error("--out is required (the run's folder)")
    configure_logging()
    text = run_config_text(config, recipe, command)
    return train_and_print(recipe, config.trainer, args.out, callbacks=[SaveConfig(Path(args.out) / CONFIG_FILE,
                                                                                   text)])

