"""The one interface every constituency-parser backend implements.

Every backend returns :class:`nltk.Tree` objects in Penn Treebank style:

* the root is labelled ``TOP`` and has exactly one child, the sentence constituent
  (``S``, ``NP``, ``FRAG``, ``SBARQ``, ...);
* preterminals carry PTB part-of-speech tags (``NN``, ``VBZ``, ``.``, ...) and each has a single
  word leaf;
* no function tags (``NP-SBJ`` is ``NP``), no empty elements (``-NONE-``), no traces.

The extraction of concepts and predicates (:mod:`crg.extract`) relies on nothing else, so any
parser whose output is brought to this form (see :func:`normalize_ptb_tree`) can feed the CRG.
"""

from __future__ import annotations

import abc
import re
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # nltk is imported where a tree is built: a backend's module, normalize_ptb_tree
    from nltk import Tree

__all__ = ["ConstituencyParser", "normalize_ptb_tree", "ROOT_LABEL"]

ROOT_LABEL = "TOP"

_FUNCTION_TAG = re.compile(r"^([A-Z]+|-[A-Z]+-)(?:[-=].*)?$")


class ConstituencyParser(abc.ABC):
    """A constituency parser. Subclasses implement :meth:`parse_tokens`; raw text goes through
    :meth:`parse_texts`, which tokenizes first (PTB-style) and then calls :meth:`parse_tokens`."""

    #: short name used on the command line and recorded in parse caches (``spacy``, ``benepar``, ...)
    name: str = "base"

    @abc.abstractmethod
    def parse_tokens(self, sentences: Sequence[Sequence[str]]) -> list[Tree]:
        """Parse pre-tokenized sentences, one list of words each, into PTB trees (root ``TOP``).

        The leaves of tree ``i`` are exactly ``sentences[i]``, in order.
        """

    @abc.abstractmethod
    def parse_texts(self, texts: Sequence[str]) -> list[Tree]:
        """Parse raw sentences (untokenized strings) into PTB trees (root ``TOP``)."""

    def cache_key(self) -> str:
        """A string that changes whenever the parser's output could change (model, version).

        Parse caches are keyed on it so that switching parsers never reuses stale trees.
        """
        return self.name


def normalize_ptb_tree(tree: Tree) -> Tree:
    """Bring a bracketed tree from any PTB-style parser to this project's form.

    Strips function tags and indices (``NP-SBJ-1`` -> ``NP``), removes ``-NONE-`` empty elements
    and constituents left empty by that, and wraps the sentence in a ``TOP`` root when the input
    has a different or unlabelled root.

    >>> from nltk import Tree
    >>> t = Tree.fromstring("( (S (NP-SBJ (DT The) (NN dog)) (VP (VBZ barks) (NP (-NONE- *T*-1))) (. .)))")
    >>> print(normalize_ptb_tree(t))
    (TOP (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)))
    """
    from nltk import Tree

    def clean(node):
        if not isinstance(node, Tree):
            return node
        label = node.label()
        if label == "-NONE-":
            return None
        m = _FUNCTION_TAG.match(label)
        if m and label not in ("-LRB-", "-RRB-"):
            label = m.group(1)
        children = [c for c in (clean(ch) for ch in node) if c is not None]
        if not children:
            return None
        return Tree(label, children)

    cleaned = clean(tree)
    if cleaned is None:
        raise ValueError(f"tree has no words after removing empty elements: {tree}")
    if cleaned.label() in ("", "ROOT", "TOP", "S1") and len(cleaned) == 1 and isinstance(cleaned[0], Tree):
        return Tree(ROOT_LABEL, [cleaned[0]])
    if cleaned.label() in ("", "ROOT", "TOP", "S1"):
        # several children under the root (some parsers emit (ROOT (NP ..) (. .))): keep them as
        # one fragment so the tree still has a single sentence constituent.
        return Tree(ROOT_LABEL, [Tree("FRAG", list(cleaned))])
    return Tree(ROOT_LABEL, [cleaned])
