"""Load a trained model from a Lightning checkpoint, safely (``weights_only=True``), and export it as a
pretrained directory (:mod:`composer.models.common.pretrained`).

The training programs save the LightningModule's ``state_dict`` (the model's weights under ``model.``)
and ``hyper_parameters`` (``model``: the config dataclass as plain values; a CLIP-family module also
its ``kind``). Which model a checkpoint holds follows from those: ``kind`` names the CLIP family,
otherwise the weights' top-level parts do (COMPOSER has a ``predicate_transformer``, VSE a
``text_projection``, the flat model a ``composition_transformer`` without either). The model is
rebuilt from its config without loading pretrained text weights (the checkpoint holds them all). The
run's data settings, when its ``results.json`` sits beside the checkpoint directory, come along (the
number of regions it was trained with, for instance).

:func:`load_composer` is the COMPOSER-only form the evaluation programs use; :func:`export_pretrained`
turns a checkpoint into a directory that :func:`composer.models.common.pretrained.load_pretrained` reads without
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

from composer.models.composer.config import ComposerConfig
from composer.models.registry import CLIP_FAMILY
from composer.models.composer.model import Composer
from composer.models.common.pretrained import config_from_dict, load_state_checked, model_class

__all__ = ["LoadedCheckpoint", "LoadedComposer", "export_pretrained", "load_checkpoint", "load_composer"]

log = logging.getLogger(__name__)

# the LightningModule class of each model type, for messages
MODULES = {"composer": "ComposerModule", "vse": "VSEModule", "flat": "FlatModule", "clip": "ClipModule"}


@dataclass
class LoadedCheckpoint:
    """A model restored from a Lightning checkpoint, in eval mode, on the CPU.

    Attributes:
        model: the model (:class:`Composer`, ``VSE``, ``FlatCrossTransformer`` or ``ClipModel``).
        config: its configuration dataclass.
        model_type: ``"composer"``, ``"vse"``, ``"flat"`` or ``"clip"`` (:data:`composer.models.common.pretrained.MODEL_TYPES`).
        kind: the model's name in :data:`composer.models.registry.MODELS` (the CLIP family's ``kind``; else ``model_type``).
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
    path = Path(path)
    if path.is_dir():
        candidates = [path / "last.ckpt", path / "checkpoints" / "last.ckpt"]
        for c in candidates:
            if c.is_file():
                return c
        found = sorted(str(p.relative_to(path)) for p in path.rglob("*.ckpt"))[:10]
        raise FileNotFoundError(f"{path} is a directory without last.ckpt or checkpoints/last.ckpt; checkpoints "
                                f"under it: {found or 'none'} (train one with experiments/train_composer.py or "
                                f"experiments/train_baseline.py)")
    if not path.is_file():
        near = sorted(p.name for p in path.parent.glob("*.ckpt"))[:10] if path.parent.is_dir() else []
        raise FileNotFoundError(f"checkpoint {path} does not exist" +
                                (f"; {path.parent} holds {near}" if near else "") +
                                " (experiments/train_composer.py or train_baseline.py --out RUN writes "
                                "RUN/checkpoints/last.ckpt)")
    return path


def _model_type(hparams: dict, state: dict[str, torch.Tensor]) -> str | None:
    """The model type a checkpoint's hyperparameters and weights say; None if they fit none."""
    if hparams.get("kind") in CLIP_FAMILY:
        return "clip"
    parts = {k.split(".")[1] for k in state if k.startswith("model.") and k.count(".") >= 2}
    if "predicate_transformer" in parts:
        return "composer"
    if "text_projection" in parts:
        return "vse"
    if "composition_transformer" in parts:
        return "flat"
    return None


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu") -> LoadedCheckpoint:
    """Rebuild the model of a ComposerModule, VSEModule, FlatModule or ClipModule checkpoint (a ``.ckpt``
    file or a run directory holding ``last.ckpt`` or ``checkpoints/last.ckpt``)."""
    file = _checkpoint_file(path)
    try:
        ckpt = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as err:  # a truncated file, or one holding arbitrary objects
        raise ValueError(f"cannot load {file} as a weights-only checkpoint: {err}") from err
    hparams = ckpt.get("hyper_parameters") or {}
    state = ckpt.get("state_dict") or {}
    model_type = _model_type(hparams, state) if "model" in hparams else None
    if model_type is None:
        raise ValueError(f"{file} is not a ComposerModule checkpoint (nor a VSEModule, FlatModule or ClipModule "
                         f"one): it has keys {sorted(ckpt)}, hyper_parameters {sorted(hparams)} and weights "
                         f"{sorted(state)[:5]} (expected 'state_dict' with the model's weights under 'model.' and "
                         f"hyper_parameters['model'])")
    cls = model_class(model_type)
    extras: dict[str, Any] = {}
    if model_type == "clip":  # the weights say whether there is a codebook (il_clip may have none)
        extras = {"use_codebook": any(k.startswith("model.codebook.") for k in state), "kind": hparams["kind"]}
    try:
        cfg = config_from_dict(cls.config_class, hparams["model"])
        model = cls.build_for_weights(cfg, extras)
    except ValueError as err:
        raise ValueError(f"{file}: hyper_parameters['model'] does not make a {cls.__name__}: {err}") from err
    weights = {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}
    load_state_checked(model, weights, f"{file} ({MODULES[model_type]} checkpoint)")
    model.eval()
    run_data = None
    results = file.parent.parent / "results.json"
    if file.parent.name == "checkpoints" and results.is_file():
        run_data = json.loads(results.read_text()).get("config", {}).get("data")
    log.info("loaded a %s checkpoint %s (epoch %s, step %s)", model_type, file, ckpt.get("epoch"),
             ckpt.get("global_step"))
    return LoadedCheckpoint(model=model, config=cfg, model_type=model_type, kind=hparams.get("kind", model_type),
                            path=file, epoch=ckpt.get("epoch"), global_step=ckpt.get("global_step"),
                            run_data=run_data)


def load_composer(path: str | Path, *, map_location: str | torch.device = "cpu") -> LoadedComposer:
    """Rebuild the :class:`Composer` of a ComposerModule checkpoint (a ``.ckpt`` file or a run directory)."""
    loaded = load_checkpoint(path, map_location=map_location)
    if loaded.model_type != "composer":
        raise ValueError(f"{loaded.path} is a {MODULES[loaded.model_type]} checkpoint ({loaded.kind}), not a "
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
