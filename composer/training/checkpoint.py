"""Load a trained model from a Lightning checkpoint, safely (``weights_only=True``), and export it as a
pretrained directory (:mod:`composer.models.common.pretrained`).

The training programs save the LightningModule's ``state_dict`` (the model's weights under ``model.``)
and ``hyper_parameters`` (``model``: the config dataclass as plain values; ``kind``: the model's registry
name). Which model a checkpoint holds follows from those (:func:`composer.models.registry.spec_of_checkpoint`:
``kind``, or for a checkpoint written before every module recorded it, the weights' top-level parts:
COMPOSER has a ``predicate_transformer``, VSE a ``text_projection``, the flat model a
``composition_transformer`` without either). The model is
rebuilt from its config without loading pretrained text weights (the checkpoint holds them all). The
run's data settings, when its ``results.json`` sits beside the checkpoint directory, come along (the
number of regions it was trained with, for instance).

:func:`load_composer` is the COMPOSER-only form the evaluation programs use; :func:`export_pretrained`
turns a checkpoint into a directory that :func:`composer.models.registry.load_pretrained` reads without
Lightning, pickle or the original text model.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from composer.models import registry
from composer.models.common.pretrained import config_from_dict, load_state_checked
from composer.models.composer.config import ComposerConfig
from composer.models.composer.model import Composer

__all__ = ["LoadedCheckpoint", "LoadedComposer", "export_pretrained", "load_checkpoint", "load_composer"]

log = logging.getLogger(__name__)

@dataclass
class LoadedCheckpoint:
    """A model restored from a Lightning checkpoint, in eval mode, on the CPU.

    Attributes:
        model: the model (:class:`Composer`, ``VSE``, ``FlatCrossTransformer`` or ``ClipModel``).
        config: its configuration dataclass.
        model_type: the saved family (``"composer"``, ``"vse"``, ``"flat"`` or ``"clip"``: ``ModelSpec.family``).
        kind: the model's name in :mod:`composer.models.registry`.
        path: the checkpoint file.
        epoch, global_step: where training was when it was saved (None if not recorded).
        run_data: the run's ``DataConfig`` as a dict, from ``results.json`` next to ``checkpoints/``
            (None when the run has none, e.g. it was killed before the end).
    """

    model: nn.Module
    config: Any
    model_type: str
    kind: str
    path: Path
    epoch: int | None
    global_step: int | None
    run_data: dict | None


@dataclass
class LoadedComposer:
    """A COMPOSER restored from a checkpoint, in eval mode (:func:`load_composer`).

    Attributes:
        model: the :class:`Composer`.
        config: its configuration.
        path: the checkpoint file.
        epoch, global_step: where training was when it was saved (None if not recorded).
        run_data: the run's ``DataConfig`` as a dict, from ``results.json`` next to ``checkpoints/``
            (None when the run has none, e.g. it was killed before the end).
    """

    model: Composer
    config: ComposerConfig
    path: Path
    epoch: int | None
    global_step: int | None
    run_data: dict | None


def _checkpoint_file(path: str | Path) -> Path:
    """The checkpoint a path names. A run folder (or its ``checkpoints/``) names the weights the run reports:
    ``best.ckpt`` when it was trained to the plateau (the best validation's), else ``last.ckpt``."""
    path = Path(path)
    if path.is_dir():
        candidates = [path / "best.ckpt", path / "checkpoints" / "best.ckpt",
                      path / "last.ckpt", path / "checkpoints" / "last.ckpt"]
        for c in candidates:
            if c.is_file():
                return c
        found = sorted(str(p.relative_to(path)) for p in path.rglob("*.ckpt"))[:10]
        raise FileNotFoundError(f"{path} is a directory without best.ckpt or last.ckpt (nor under checkpoints/); "
                                f"checkpoints under it: {found or 'none'} (train one with experiments/train_composer.py or "
                                f"experiments/train_baseline.py)")
    if not path.is_file():
        near = sorted(p.name for p in path.parent.glob("*.ckpt"))[:10] if path.parent.is_dir() else []
        raise FileNotFoundError(f"checkpoint {path} does not exist" +
                                (f"; {path.parent} holds {near}" if near else "") +
                                " (experiments/train_composer.py or train_baseline.py --out RUN writes "
                                "RUN/checkpoints/last.ckpt)")
    return path


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu") -> LoadedCheckpoint:
    """Rebuild the model of a ComposerModule, VSEModule, FlatModule or ClipModule checkpoint (a ``.ckpt``
    file, or a run directory: its reported weights, ``best.ckpt`` or else ``last.ckpt``, also under
    ``checkpoints/``)."""
    file = _checkpoint_file(path)
    try:
        ckpt = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as err:  # a truncated file, or one holding arbitrary objects
        raise ValueError(f"cannot load {file} as a weights-only checkpoint: {err}") from err
    hparams = ckpt.get("hyper_parameters") or {}
    state = ckpt.get("state_dict") or {}
    spec = registry.spec_of_checkpoint(hparams, set(state)) if "model" in hparams else None
    if spec is None:
        raise ValueError(f"{file} is not a ComposerModule checkpoint (nor a VSEModule, FlatModule or ClipModule "
                         f"one): it has keys {sorted(ckpt)}, hyper_parameters {sorted(hparams)} and weights "
                         f"{sorted(state)[:5]} (expected 'state_dict' with the model's weights under 'model.' and "
                         f"hyper_parameters['model'])")
    cls = registry.resolve(spec.model)
    extras: dict[str, Any] = {}
    if spec.checkpoint_extras is not None:  # e.g. the CLIP family: whether the weights hold a codebook
        extras = registry.resolve(spec.checkpoint_extras)(hparams, state)
    try:
        cfg = config_from_dict(cls.config_class, hparams["model"])
        model = cls.build_for_weights(cfg, extras)
    except ValueError as err:
        raise ValueError(f"{file}: hyper_parameters['model'] does not make a {cls.__name__}: {err}") from err
    weights = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    load_state_checked(model, weights, f"{file} ({registry.resolve(spec.module).__name__} checkpoint)")
    model.eval()
    run_data = None
    results = file.parent.parent / "results.json"
    if file.parent.name == "checkpoints" and results.is_file():
        run_data = json.loads(results.read_text()).get("config", {}).get("data")
    log.info("loaded a %s checkpoint %s (epoch %s, step %s)", spec.name, file, ckpt.get("epoch"),
             ckpt.get("global_step"))
    return LoadedCheckpoint(model=model, config=cfg, model_type=spec.family, kind=spec.name,
                            path=file, epoch=ckpt.get("epoch"), global_step=ckpt.get("global_step"),
                            run_data=run_data)


def load_composer(path: str | Path, *, map_location: str | torch.device = "cpu") -> LoadedComposer:
    """Rebuild the :class:`Composer` of a ComposerModule checkpoint (a ``.ckpt`` file or a run directory)."""
    loaded = load_checkpoint(path, map_location=map_location)
    if not isinstance(loaded.model, Composer):
        module = registry.resolve(registry.get(loaded.kind).module).__name__
        raise ValueError(f"{loaded.path} is a {module} checkpoint ({loaded.kind}), not a "
                         f"ComposerModule one: load it with composer.training.checkpoint.load_checkpoint")
    return LoadedComposer(loaded.model, loaded.config, loaded.path, loaded.epoch, loaded.global_step,
                          loaded.run_data)


def export_pretrained(ckpt_path: str | Path, out_dir: str | Path) -> Path:
    """Write the model of a Lightning checkpoint (any model: :func:`load_checkpoint`) to ``out_dir`` as a
    pretrained directory (config.json, model.safetensors, tokenizer files). The tokenizer is read from
    the path its config names, so export where the model was trained. Returns ``out_dir``."""
    loaded = load_checkpoint(ckpt_path)
    out = loaded.model.save_pretrained(out_dir)
    log.info("exported %s (%s, step %s) to %s", loaded.path, loaded.kind, loaded.global_step, out)
    return out
