"""Save a model to a directory and load it back, as Hugging Face does.

Every model of the library (COMPOSER, VSE, the flat model, the CLIP family) has
``model.save_pretrained(directory)`` and ``Model.from_pretrained(directory)``;
:func:`composer.models.registry.load_pretrained` loads a directory of any of them (the registry knows which
class a saved ``model_type`` is), so one evaluation command evaluates whichever model it is given::

    model.save_pretrained("runs/w/pretrained")
    loaded = load_pretrained("runs/w/pretrained")           # LoadedModel: model in eval mode, tokenizer, ...
    scores = score_matrix(loaded.model, regions, geometry, region_mask, programs, loaded.tokenizer)

A saved directory holds:

=========================  =================================================================================
``config.json``            ``{"model_type": "composer" | "vse" | "flat" | "clip", ...}``, the other keys
                           the model's config dataclass as plain JSON (:func:`composer.models.common.config.plain_config`);
                           a CLIP model adds ``use_codebook`` and ``kind``
``model.safetensors``      every tensor of the model's ``state_dict``, by name (``safetensors`` format)
``tokenizer.json``,        the WordPiece tokenizer the model reads captions with (the HF tokenizer's own
``tokenizer_config.json``  ``save_pretrained``; older ``transformers`` versions also write ``vocab.txt``)
=========================  =================================================================================

Loading never unpickles (JSON and safetensors only) and needs nothing outside the directory: the
architecture is built from the config without pretrained text weights (``text_model`` is neither read
nor needed, e.g. offline), the saved weights then replace every tensor, and the tokenizer is read
from the directory, not from the config's ``tokenizer`` path. The config read back equals the one
saved (:func:`config_from_dict`), the paths it names included: they record where the model came from.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import torch
from torch import nn

from composer.models.common.config import optional_subconfig, plain_config

__all__ = [
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "LoadedModel",
    "PretrainedModel",
    "config_from_dict",
    "load_directory",
    "load_state_checked",
    "read_saved_type",
]

log = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")  # either one is a complete WordPiece vocabulary

C = TypeVar("C")


def config_from_dict(cls: type[C], data: Mapping[str, Any], *, where: str | None = None) -> C:
    """Rebuild a config dataclass from its plain dict (:func:`composer.models.common.config.plain_config`'s output):
    nested sub-configs from nested dicts, lists back to tuples where a field is a tuple.

    An unknown key is a ValueError naming it and the fields; a missing key takes the field's default
    (a config written before the field existed), with a warning.

    >>> from composer.models.composer.config import ComposerConfig, composer_config
    >>> cfg = composer_config("paper", modulator="mlp", composition={"cross_heads": 16})
    >>> config_from_dict(ComposerConfig, plain_config(cfg)) == cfg
    True
    >>> config_from_dict(ComposerConfig, {"ct_layers": 3, "text": {"hiden_size": 24}})
    Traceback (most recent call last):
    ...
    ValueError: ComposerConfig.text has no field(s) ['hiden_size']; fields: ['dropout', 'hidden_size', ...]
    """
    where = where or cls.__name__
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a JSON object of its fields, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in fields(cls) if f.init]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{where} has no field(s) {unknown}; fields: {sorted(known)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        hint = hints[name]
        optional = optional_subconfig(hint)
        if isinstance(hint, type) and is_dataclass(hint):
            value = config_from_dict(hint, value, where=f"{where}.{name}")
        elif optional is not None and value is not None:
            value = config_from_dict(optional, value, where=f"{where}.{name}")
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        values[name] = value
    missing = [k for k in known if k not in data]
    if missing:
        log.warning("%s: no value for %s, the defaults are used", where, missing)
    try:
        return cls(**values)
    except TypeError as err:  # a value of the wrong JSON type, caught by __post_init__'s comparisons
        raise ValueError(f"{where}: {err}; values {values}") from err


def load_state_checked(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Load ``state`` into ``model`` after checking that every name and shape fits; a ValueError naming
    ``source`` lists the missing, unexpected and mis-shaped tensors otherwise."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = {k: (tuple(state[k].shape), tuple(v.shape)) for k, v in own.items()
              if k in state and state[k].shape != v.shape}
    if missing or unexpected or shapes:
        raise ValueError(f"{source}: the weights do not fit the {type(model).__name__} its config describes: "
                         f"{len(missing)} missing {missing[:5]}, {len(unexpected)} unexpected {unexpected[:5]}, "
                         f"{len(shapes)} of another shape (saved, expected) {dict(list(shapes.items())[:5])} "
                         f"(are config and weights from the same model?)")
    model.load_state_dict(state, strict=True)


class PretrainedModel:
    """``save_pretrained`` / ``from_pretrained`` for an ``nn.Module`` with a ``config`` dataclass.

    A model class inherits it first (``class VSE(PretrainedModel, nn.Module)``), sets ``model_type``
    and ``config_class``, reads its tokenizer from :meth:`tokenizer_path` in ``make_tokenizer()``, and
    overrides :meth:`pretrained_extras` / :meth:`build_for_weights` when its constructor takes more
    than the config (as ``ClipModel`` does).
    """

    model_type: ClassVar[str]
    config_class: ClassVar[type]
    extra_keys: ClassVar[tuple[str, ...]] = ()  # config.json keys of pretrained_extras(), beside the config's
    # the directory the model was loaded from; its tokenizer is read there, not from the config's path
    pretrained_dir: Path | None = None

    def tokenizer_path(self, configured: str | None) -> str | None:
        """Where the tokenizer is read: the directory the model was loaded from, else ``configured``."""
        return str(self.pretrained_dir) if self.pretrained_dir is not None else configured

    def pretrained_extras(self) -> dict[str, Any]:
        """JSON values written beside the config's fields in config.json (keys: ``extra_keys``)."""
        return {}

    @classmethod
    def build_for_weights(cls, config: Any, extras: dict[str, Any]) -> Self:
        """The architecture of ``config`` without pretrained text weights (the saved ones replace them)."""
        return cls(config, load_pretrained=False)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write config.json, model.safetensors and the tokenizer's files to ``directory`` (created if
        needed; files of the same names are overwritten). Returns the directory."""
        return _save(self, Path(directory))

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> Self:
        """The model saved in ``directory`` by :meth:`save_pretrained`, in eval mode, on the CPU."""
        return load_directory(Path(directory), cls).model


@dataclass
class LoadedModel:
    """A model loaded by :func:`load_pretrained`.

    Attributes:
        model: the model, in eval mode, on the CPU (``loaded.model.to(device)``).
        tokenizer: its :class:`composer.models.composer.predicate_transformer.TemplateTokenizer`, read from the
            directory (``score_matrix``'s ``tokenizer``).
        config: its config dataclass, equal to the one saved.
        model_type: the saved ``model_type`` (``"composer"``, ``"vse"``, ``"flat"`` or ``"clip"``).
        path: the directory.
        name: its name in :mod:`composer.models.registry` (the CLIP family's saved ``kind``), else
            ``model_type``.
    """

    model: nn.Module
    tokenizer: Any
    config: Any
    model_type: str
    path: Path
    name: str = ""


def _save(model: PretrainedModel, directory: Path) -> Path:
    from composer.models.common.weights_file import save_weights

    if not isinstance(model, nn.Module):
        raise TypeError(f"{type(model).__name__} is not an nn.Module")
    config = plain_config(model.config)
    extras = model.pretrained_extras()
    assert set(extras) == set(model.extra_keys), (extras, model.extra_keys)
    clash = sorted(({"model_type"} | set(extras)) & set(config))
    assert not clash, f"config fields {clash} clash with config.json's own keys"
    directory.mkdir(parents=True, exist_ok=True)
    # detached CPU copies: safetensors stores contiguous tensors that share no memory
    state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
    # sorted metadata: identical weights give an identical file; atomic: never a truncated one
    save_weights(state, directory / WEIGHTS_NAME, {"format": "pt", "model_type": model.model_type})
    try:
        model.make_tokenizer().tokenizer.save_pretrained(str(directory))
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot save the tokenizer of the {type(model).__name__} to {directory}: {err}") from err
    # config.json last: a directory whose writing failed half-way has none and does not load
    meta = {"model_type": model.model_type, **extras, **config}
    from crg.outputs import write_text_atomic

    write_text_atomic(directory / CONFIG_NAME, json.dumps(meta, indent=2) + "\n")
    log.info("saved the %s model to %s (%d tensors)", model.model_type, directory, len(state))
    return directory


def _read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory; a saved model is a directory with {CONFIG_NAME} "
                                f"and {WEIGHTS_NAME} (write one with model.save_pretrained(directory) or "
                                f"composer.training.checkpoint.export_pretrained)")
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (directory / name).is_file():
            present = sorted(p.name for p in directory.iterdir())[:10]
            raise FileNotFoundError(f"{directory} has no {name} (it holds {present or 'nothing'}); a saved model "
                                    f"has {CONFIG_NAME} and {WEIGHTS_NAME} (model.save_pretrained writes both)")
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"{directory} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); "
                                f"model.save_pretrained writes it")
    try:
        meta = json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{directory / CONFIG_NAME} is not valid JSON: {err}") from err
    if not isinstance(meta, dict) or "model_type" not in meta:
        raise ValueError(f"{directory / CONFIG_NAME} has no \"model_type\"; was it written by save_pretrained?")
    return meta


def read_saved_type(directory: Path) -> tuple[str, str | None]:
    """The ``model_type`` and (where written) ``kind`` of the model saved in ``directory``; an incomplete
    directory is an error naming what is missing."""
    meta = _read_config(directory)
    kind = meta.get("kind")
    return meta["model_type"], kind if isinstance(kind, str) else None


def load_directory(directory: Path, cls: type[PretrainedModel], *, name: str | None = None) -> LoadedModel:
    """The ``cls`` model saved in ``directory`` (its config.json's ``model_type`` must be ``cls``'s), in eval
    mode, on the CPU; ``name``: its registry name (default: the saved ``kind``, else ``model_type``)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = _read_config(directory)
    model_type = meta.pop("model_type")
    config_file = directory / CONFIG_NAME
    if model_type != cls.model_type:
        raise ValueError(f"{directory} holds a {model_type!r} model, not a {cls.__name__} ({cls.model_type!r}); "
                         f"load it with composer.models.registry.load_pretrained")
    extras = {k: meta.pop(k) for k in cls.extra_keys if k in meta}
    try:
        config = config_from_dict(cls.config_class, meta)
        model = cls.build_for_weights(config, extras)
    except ValueError as err:
        raise ValueError(f"{config_file}: {err}") from err
    weights = directory / WEIGHTS_NAME
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError) as err:  # truncated, or not safetensors at all
        raise ValueError(f"cannot read {weights} as safetensors: {err}") from err
    load_state_checked(model, state, str(weights))
    model.pretrained_dir = directory.resolve()
    tokenizer = model.make_tokenizer()
    if hasattr(model, "_tokenizer"):  # the baselines cache theirs: the same one, read once
        model._tokenizer = tokenizer
    model.eval()
    log.info("loaded the %s model from %s", model_type, directory)
    kind = extras.get("kind")
    return LoadedModel(model=model, tokenizer=tokenizer, config=config, model_type=model_type, path=directory,
                       name=name or (kind if isinstance(kind, str) else model_type))
