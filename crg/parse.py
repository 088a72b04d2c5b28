"""Choose a parser backend, and a command line that parses sentences into bracketed trees.

    $ echo "two dogs are running on the grass" | python -m crg.parse --pretokenized
    (TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) (PP (IN on) (NP (DT the) (NN grass)))))))

Backends: ``spacy`` (default, offline), ``benepar`` (the paper's parser; needs ``--parser-model DIR``),
``preparsed`` (trees from a file; ``--parser-model FILE``).
"""

from __future__ import annotations

import argparse
import logging
import sys

from crg.parser_base import ConstituencyParser

__all__ = ["make_parser", "PARSERS", "add_parser_arguments", "main"]

logger = logging.getLogger(__name__)

PARSERS = ("spacy", "benepar", "preparsed", "world")


def make_parser(name: str = "spacy", model: str | None = None, **options) -> ConstituencyParser:
    """Build a parser backend by name.

    Args:
        name: ``spacy``, ``benepar``, ``preparsed``, or ``world`` (the generated world's own grammar: its gold
            trees of any text of its language, :class:`features.world.gold_trees.WorldGrammarParser`).
        model: spaCy package name (optional), benepar model directory (required), or the file of
            pre-parsed trees (required).
        options: backend keyword options (``batch_size``, ``n_process`` for spaCy; ``batch_size``,
            ``device`` for benepar).
    """
    if name == "spacy":
        from crg.spacy_parser import SpacyParser

        return SpacyParser(model, **options)
    if name == "benepar":
        if not model:
            raise ValueError("--parser benepar needs --parser-model DIR, a benepar model directory "
                             "(e.g. benepar_en3, downloaded on a machine with internet; see docs/parsing.md)")
        from crg.benepar_parser import BeneparParser

        return BeneparParser(model, **options)
    if name == "preparsed":
        if not model:
            raise ValueError("--parser preparsed needs --parser-model FILE, a file of bracketed trees")
        from crg.preparsed import PreparsedTrees

        return PreparsedTrees(model)
    if name == "world":
        from features.world.gold_trees import WorldGrammarParser

        return WorldGrammarParser()
    raise ValueError(f"unknown parser {name!r}; choose one of {PARSERS}")


def add_parser_arguments(ap: argparse.ArgumentParser, *, default: str | None = "spacy",
                         default_help: str = "spacy, offline") -> None:
    """The ``--parser`` / ``--parser-model`` options shared by every command that parses.

    ``default=None`` lets the command choose by its data (a named dataset's own parser: the world's gold
    trees); ``default_help`` says what that is.
    """
    ap.add_argument("--parser", choices=PARSERS, default=default,
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
