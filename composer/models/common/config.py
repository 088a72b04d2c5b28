"""Config dataclasses: a named preset with typed overrides, and the plain JSON form a run saves.

Every model's ``<model>_config(preset, **overrides)`` is :func:`named_config` over its own preset table, so
that a preset name, an unknown field and a nested override mean the same for every model.

>>> from dataclasses import dataclass
>>> @dataclass
... class Toy:
...     width: int = 8
...     depth: int = 2
>>> named_config(Toy, {"small": {"width": 4}}, "small", {"depth": 3})
Toy(width=4, depth=3)
>>> named_config(Toy, {"small": {"width": 4}}, "large")
Traceback (most recent call last):
...
ValueError: unknown Toy preset 'large'; available: ['small']
>>> named_config(Toy, {"small": {}}, "small", {"height": 1})
Traceback (most recent call last):
...
ValueError: Toy has no field 'height'; fields: ['depth', 'width']
"""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields, is_dataclass, replace
from typing import Any, TypeVar

__all__ = ["apply_overrides", "merge_overrides", "named_config", "optional_subconfig", "plain_config",
           "preset_values"]

C = TypeVar("C")
# a preset: the fields that differ from the dataclass's defaults, or a function returning them
Preset = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


def preset_values(presets: Mapping[str, Preset], preset: str, what: str) -> dict[str, Any]:
    """A fresh copy of the field values of ``presets[preset]``; an unknown name is a ValueError listing them
    (``what`` names the config in the message)."""
    if preset not in presets:
        raise ValueError(f"unknown {what} preset {preset!r}; available: {sorted(presets)}")
    values = presets[preset]
    return copy.deepcopy(dict(values() if callable(values) else values))


def optional_subconfig(hint: Any) -> type | None:
    """The dataclass of a field typed ``SomeConfig | None`` (an optional sub-config), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        classes = [a for a in typing.get_args(hint) if isinstance(a, type) and is_dataclass(a)]
        if len(classes) == 1 and type(None) in typing.get_args(hint):
            return classes[0]
    return None


def apply_overrides(obj: C, overrides: Mapping[str, Any], where: str) -> C:
    """``obj`` with ``overrides`` applied: nested dicts update sub-configs (an optional sub-config that is
    None starts from its defaults); an unknown field is a ValueError naming ``where`` and the fields."""
    known = {f.name: f for f in fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"{where} has no field {key!r}; fields: {sorted(known)}")
        current = getattr(obj, key)
        if current is None and isinstance(value, dict):  # an optional sub-config, given for the first time
            cls = optional_subconfig(typing.get_type_hints(type(obj))[key])
            current = cls() if cls is not None else None
        if is_dataclass(current) and isinstance(value, dict):
            value = apply_overrides(current, value, f"{where}.{key}")
        changes[key] = value
    return replace(obj, **changes)


def merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``overrides``, nested dicts merged key by key rather than replaced."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overrides(out[key], value)
        else:
            out[key] = value
    return out


def named_config(cls: type[C], presets: Mapping[str, Preset], preset: str,
                 overrides: Mapping[str, Any] | None = None) -> C:
    """``cls()`` with the preset's fields, then ``overrides`` (nested dicts for sub-configs), applied."""
    values = merge_overrides(preset_values(presets, preset, cls.__name__), dict(overrides or {}))
    return apply_overrides(cls(), values, cls.__name__)


def plain_config(cfg: Any) -> dict:
    """A (nested) config dataclass as plain JSON types: tuples become lists, as in the saved hyperparameters
    and ``results.json`` files, so a config read back compares equal to one written."""
    return json.loads(json.dumps(asdict(cfg)))
