"""A command's configuration as a YAML file: ``--config FILE`` and ``--print-config``, read into dataclasses.

A configuration file holds the fields of a command's config dataclass (the training commands':
:class:`composer.cli.run_config.RunConfig`, whose ``recipe`` and ``trainer`` are the library's
:class:`~composer.training.recipes.RecipeOverrides` and :class:`~composer.training.fit.TrainerOptions`;
the study's: :class:`composer.cli.study_config.StudyConfig`), nested as the dataclasses nest. jsonargparse
(the library Lightning's own CLI reads its configs with) checks every key and value against the
dataclasses' fields and types, so a misspelt key or a wrong type is an error naming the file before
anything runs. Flags given beside ``--config`` win over the file (defaults < file < command line, as in
Lightning's CLI): each command maps its flags onto the fields they set (``paths``).

Nothing here imports torch: the command's ``--help`` does not pay for it.

>>> merge({"recipe": {"lr": 0.1, "model": {"ct_layers": 1}}}, {"recipe": {"lr": 0.5, "model": {"pt_layers": 2}}},
...       given={"pt_layers"}, paths={"lr": ("recipe.lr",), "pt_layers": ("recipe.model.pt_layers",)})
{'recipe': {'lr': 0.1, 'model': {'ct_layers': 1, 'pt_layers': 2}}}
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["add_config_arguments", "config_yaml", "given_dests", "merge", "plain", "read_config", "typed"]

T = TypeVar("T")


def add_config_arguments(ap: argparse.ArgumentParser, *, saved: str) -> None:
    """``--config FILE`` and ``--print-config`` (``saved``: where a run writes the file it ran with)."""
    g = ap.add_argument_group("configuration file")
    g.add_argument("--config", metavar="FILE",
                   help=f"a YAML configuration (what --print-config prints; every run writes its own to {saved}); "
                        "flags given beside it override its values")
    g.add_argument("--print-config", action="store_true",
                   help="print the effective configuration (the file's, the flags', the defaults') as YAML and exit")


def given_dests(ap: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The destinations of the options ``argv`` gives explicitly (``--seed 0`` counts, the default does not)."""
    actions = [a for a in ap._actions if a.dest != "help"]
    saved = [(a.default, a.required) for a in actions]
    try:
        for a in actions:  # parse again with no defaults: only what argv sets is in the namespace
            a.default, a.required = argparse.SUPPRESS, False
        return set(vars(ap.parse_args(list(argv))))
    finally:
        for a, (default, required) in zip(actions, saved):
            a.default, a.required = default, required


def read_config(path: str | Path) -> dict:
    """The mapping in the YAML (or JSON) file ``path``; a clear error naming it otherwise."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise SystemExit(f"error: --config {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise SystemExit(f"error: --config {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: --config {path} must hold a mapping of settings, not {type(data).__name__}")
    return data


def _set(tree: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = tree
    for key in parents:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[last] = copy.deepcopy(value)


_MISSING = object()


def _get(tree: Mapping, path: str) -> Any:
    node: Any = tree
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


def merge(base: Mapping, cli: Mapping, *, given: Iterable[str], paths: Mapping[str, Sequence[str]]) -> dict:
    """``base`` (a file's settings) with the values the given flags set in ``cli`` (the command line's
    settings) written over it; ``paths``: flag destination -> the dotted fields it sets."""
    out = copy.deepcopy(dict(base))
    for dest in given:
        for path in paths.get(dest, ()):
            value = _get(cli, path)
            if value is not _MISSING:
                _set(out, path, value)
    return out


def typed(cls: type[T], data: Mapping, *, source: str) -> T:
    """``data`` as an instance of the dataclass ``cls``, every key and value checked by jsonargparse
    against its fields' types (nested dataclasses included); an error names ``source``."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--cfg", type=cls)
    try:
        namespace = parser.parse_object({"cfg": dict(data)})
    except (argparse.ArgumentError, ValueError, TypeError) as err:
        message = str(err).replace("'cfg.", "'").replace('"cfg.', '"').replace("Group 'cfg'", "it")
        raise SystemExit(f"error: {source}: {message}") from None
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in 4.49
    return instantiate(namespace).cfg


def plain(obj: Any) -> Any:
    """A dataclass (or anything JSON-able) as plain dicts, lists and scalars: what YAML writes."""
    return json.loads(json.dumps(asdict(obj) if hasattr(obj, "__dataclass_fields__") else obj, default=str))


def config_yaml(config: Any, *, header: str, footer: Mapping | None = None, footer_title: str = "") -> str:
    """``config`` (a dataclass) as YAML under the comment ``header``; ``footer``, if given, follows as
    comments (read by people, not read back)."""
    import yaml

    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    text = "\n".join(lines) + "\n" + yaml.safe_dump(plain(config), sort_keys=False, default_flow_style=False)
    if footer is not None:
        body = yaml.safe_dump(plain(footer), sort_keys=False, default_flow_style=False)
        text += f"\n# {footer_title}\n" + "".join(f"#   {line}\n" for line in body.splitlines())
    return text
