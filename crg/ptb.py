"""Penn Treebank token conventions shared by the parsers and the concept extraction: punctuation tags and
bracket escapes.

Why a module of its own: the extraction (and so :func:`crg.load_graph`) needs these strings but no tree
builder; kept apart from :mod:`crg.dep_to_constituency`, reading a graph does not import nltk.
"""

from __future__ import annotations

__all__ = ["PUNCT_TAGS", "escape_ptb_word", "unescape_ptb_word"]

PUNCT_TAGS = frozenset({",", ".", ":", "``", "''", "-LRB-", "-RRB-", "HYPH", "NFP", "_SP"})

_ESCAPES = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()} | {"``": '"', "''": '"'}


def escape_ptb_word(word: str) -> str:
    """PTB escapes for brackets, which would otherwise break bracketed tree strings.

    >>> escape_ptb_word("(")
    '-LRB-'
    >>> escape_ptb_word("dog")
    'dog'
    """
    return _ESCAPES.get(word, word)


def unescape_ptb_word(word: str) -> str:
    """Undo PTB escapes (``-LRB-`` -> ``(``, ``` `` ``` -> ``"``) before a model sees the word.

    >>> unescape_ptb_word("-RRB-"), unescape_ptb_word("``")
    (')', '"')
    """
    return _UNESCAPES.get(word, word)
