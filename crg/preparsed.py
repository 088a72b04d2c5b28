"""Use trees produced by any external parser: bracketed trees read from a file.

The file holds one bracketed PTB tree per line (blank lines and ``#`` comments ignored), as written
by ``python -m crg.parse`` or by Stanford CoreNLP, benepar, Berkeley, ... Trees are matched to
captions by their words, not by position: the key is the text with PTB escapes undone, lower-cased
and with all whitespace removed, so tokenization differences ("road." vs "road .") do not matter.
A JSONL file of ``{"caption": ..., "tree": ...}`` objects is accepted as well.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

from nltk import Tree

from crg.dep_to_constituency import unescape_ptb_word
from crg.parser_base import ConstituencyParser, normalize_ptb_tree

__all__ = ["PreparsedTrees", "MissingParseError", "match_key"]

logger = logging.getLogger(__name__)


class MissingParseError(KeyError):
    """A caption has no tree in the pre-parsed file."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


def match_key(words_or_text: Sequence[str] | str) -> str:
    """Tokenization-independent key of a sentence.

    >>> match_key("A man rides a bike.") == match_key(["A", "man", "rides", "a", "bike", "."])
    True
    >>> match_key(["-LRB-", "hi", "-RRB-"]) == match_key("(hi)")
    True
    """
    if isinstance(words_or_text, str):
        text = words_or_text
    else:
        text = "".join(unescape_ptb_word(w) for w in words_or_text)
    return "".join(text.replace("``", '"').replace("''", '"').lower().split())


def _tree_of_json(path: Path, lineno: int, line: str) -> str:
    """The ``"tree"`` string of a JSON line, or a one-line error naming the file and line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno}): {line[:120]}") from None
    tree = record.get("tree") if isinstance(record, dict) else None
    if not isinstance(tree, str):
        raise ValueError(f"{path}:{lineno}: a JSON line needs a \"tree\" string (a bracketed parse), got "
                         f"{line[:120]}")
    return tree


class PreparsedTrees(ConstituencyParser):
    """A "parser" that looks trees up in a file of pre-parsed trees."""

    name = "preparsed"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"pre-parsed tree file not found: {self.path}")
        self.trees: dict[str, str] = {}
        with open(self.path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                bracketed = _tree_of_json(self.path, lineno, line) if line.startswith("{") else line
                try:
                    tree = normalize_ptb_tree(Tree.fromstring(bracketed))
                except ValueError as err:
                    raise ValueError(f"{self.path}:{lineno}: not a bracketed tree ({err}): {line[:120]}") from None
                self.trees[match_key(tree.leaves())] = tree.pformat(margin=10**9)
        logger.info("read %d pre-parsed trees from %s", len(self.trees), self.path)

    def cache_key(self) -> str:
        stat = self.path.stat()
        return f"preparsed:{self.path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"

    def lookup(self, key: str, shown: str) -> Tree:
        try:
            return Tree.fromstring(self.trees[key])
        except KeyError:
            raise MissingParseError(f"no pre-parsed tree in {self.path} for: {shown[:200]!r}") from None

    def parse_texts(self, texts: Sequence[str]) -> list[Tree]:
        return [self.lookup(match_key(t), t) for t in texts]

    def parse_tokens(self, sentences: Sequence[Sequence[str]]) -> list[Tree]:
        return [self.lookup(match_key(s), " ".join(s)) for s in sentences]
