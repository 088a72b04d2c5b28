"""Parser backends by name (a registry), and a command line that parses sentences into bracketed trees.

    $ echo "two dogs are running on the grass" | python -m crg.parse --pretokenized
    (TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) (PP (IN on) (NP (DT the) (NN grass)))))))

Built in: ``spacy`` (default, offline), ``benepar`` (the paper's parser; needs ``--parser-model DIR``),
``preparsed`` (trees from a file; ``--parser-model FILE``). Other packages add backends without ``crg``
knowing them (``crg`` is the bottom layer): the module defining one calls :func:`register_parser` when it is
imported, and names it under the ``crg.parsers`` entry-point group of its distribution, so that
:func:`make_parser` finds it in a process that has not imported that module (a worker, ``python -m crg.parse``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points
from typing import Callable

from crg.parser_base import ConstituencyParser

__all__ = ["make_parser", "register_parser", "parser_factory", "parser_names", "PARSERS", "ENTRY_POINT_GROUP",
           "add_parser_arguments", "main"]

logger = logging.getLogger(__name__)

#: the entry-point group where a distribution names its parser factories (``NAME = module:factory``)
ENTRY_POINT_GROUP = "crg.parsers"

#: ``factory(model, **options)`` -> a parser; ``model`` is ``--parser-model`` (``None`` when not given)
ParserFactory = Callable[..., ConstituencyParser]

_FACTORIES: dict[str, ParserFactory] = {}


def register_parser(name: str, factory: ParserFactory) -> None:
    """Make ``factory`` the backend ``name`` of :func:`make_parser` (and ``--parser NAME``).

    ``factory`` should be a module-level function or class, so that it pickles by reference: worker
    processes receive the factory itself (:func:`parser_factory`), not only the name. Registering the same
    factory twice is a no-op; another factory under a taken name is refused.
    """
    if _FACTORIES.get(name, factory) is not factory:
        raise ValueError(f"parser {name!r} is already registered ({_FACTORIES[name]!r})")
    _FACTORIES[name] = factory


def parser_factory(name: str) -> ParserFactory:
    """The factory registered under ``name``, loading the ``crg.parsers`` entry point of that name if no
    imported module has registered it.

    Raises:
        ValueError: no backend of that name, with the names there are.
    """
    if name not in _FACTORIES:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            factory = ep.load()  # importing its module usually registers it already
            _FACTORIES.setdefault(name, factory)
            break
    try:
        return _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown parser {name!r}; choose one of {parser_names()}") from None


def parser_names() -> tuple[str, ...]:
    """Every backend name: the built-in ones, those registered, and the ``crg.parsers`` entry points."""
    names = dict.fromkeys(_FACTORIES)
    names.update(dict.fromkeys(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)))
    return tuple(names)


def __getattr__(name: str):
    if name == "PARSERS":  # the backend names as a tuple, computed when read: backends register at import
        return parser_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_parser(name: str = "spacy", model: str | None = None, **options) -> ConstituencyParser:
    """Build a parser backend by name.

    Args:
        name: ``spacy``, ``benepar``, ``preparsed``, or a registered backend (:func:`parser_names`).
        model: spaCy package name (optional), benepar model directory (required), or the file of
            pre-parsed trees (required).
        options: backend keyword options (``batch_size``, ``n_process`` for spaCy; ``batch_size``,
            ``device`` for benepar).
    """
    return parser_factory(name)(model, **options)


def _spacy(model: str | None = None, **options) -> ConstituencyParser:
    from crg.spacy_parser import SpacyParser

    return SpacyParser(model, **options)


def _benepar(model: str | None = None, **options) -> ConstituencyParser:
    if not model:
        raise ValueError("--parser benepar needs --parser-model DIR, a benepar model directory "
                         "(e.g. benepar_en3, downloaded on a machine with internet; see docs/parsing.md)")
    from crg.benepar_parser import BeneparParser

    return BeneparParser(model, **options)


def _preparsed(model: str | None = None, **_batching) -> ConstituencyParser:  # batch options: nothing to batch
    if not model:
        raise ValueError("--parser preparsed needs --parser-model FILE, a file of bracketed trees")
    from crg.preparsed import PreparsedTrees

    return PreparsedTrees(model)


register_parser("spacy", _spacy)
register_parser("benepar", _benepar)
register_parser("preparsed", _preparsed)


def add_parser_arguments(ap: argparse.ArgumentParser, *, default: str | None = "spacy",
                         default_help: str = "spacy, offline") -> None:
    """The ``--parser`` / ``--parser-model`` options shared by every command that parses.

    ``default=None`` lets the command choose by its data (a named dataset's own parser: the world's gold
    trees); ``default_help`` says what that is.
    """
    ap.add_argument("--parser", choices=parser_names(), default=default,
                    help=f"constituency parser backend (default: {default_help})")
    ap.add_argument("--parser-model", default=None,
                    help="spaCy package name, benepar model directory, or file of pre-parsed trees")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m crg.parse",
        description="Parse sentences from stdin, one per line, into one bracketed PTB tree per line on stdout.")
    add_parser_arguments(ap)
    ap.add_argument("--pretokenized", action="store_true",
                    help="input lines are already tokenized (split on whitespace; PTB escapes like -LRB- allowed)")
    ap.add_argument("--batch-size", type=int, default=256, help="sentences parsed per batch")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = make_parser(args.parser, args.parser_model)

    def flush(batch: list[str]) -> None:
        if args.pretokenized:
            trees = parser.parse_tokens([line.split() for line in batch])
        else:
            trees = parser.parse_texts(batch)
        for tree in trees:
            sys.stdout.write(tree.pformat(margin=10**9) + "\n")
        sys.stdout.flush()

    batch: list[str] = []
    for lineno, line in enumerate(sys.stdin, 1):
        line = line.strip()
        if not line:
            flush(batch)
            batch = []
            sys.stdout.write("\n")  # keep output lines aligned with input lines
            continue
        batch.append(line)
        if len(batch) >= args.batch_size:
            flush(batch)
            batch = []
    flush(batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
