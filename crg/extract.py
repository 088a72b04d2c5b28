"""Concepts and predicates from a constituency tree, as in Appendix A of Zhang et al. (2021).

Starting from the sentence, a breadth-first search over the current concept's constituency tree
finds its sub-concepts:

1. a word is a *primitive* concept when its POS tag is NN, NNS, NNP or NNPS;
2. a phrase of two or more words is a concept when its label is one of S, SBAR, SBARQ, SQ, SINV,
   NP, NX and it contains a primitive word.

The search does not descend into a node once it is a concept. The words left over form the
*predicate*, a template whose placeholders carry the sub-concepts' syntactic types
(``[NP] are running on [NP]``). Each sub-concept is decomposed the same way until only primitives
remain. Two details the paper leaves open, decided here:

* punctuation is not part of concepts' texts or templates (Table 8 shows none);
* a sub-concept covering exactly the words of its parent (a unary ``NP -> NP`` chain) would give
  the empty predicate ``[NP]``; the search looks inside it instead.

Texts are lower-cased (the models use uncased WordPiece), so "A dog" and "a dog" are one concept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from crg.ptb import PUNCT_TAGS, unescape_ptb_word

if TYPE_CHECKING:  # nltk is imported where a tree is built (prune_tree): reading a graph does not pay for it
    from nltk import Tree

__all__ = [
    "PRIMITIVE_TAGS", "CONCEPT_LABELS", "Predicate", "ConceptNode", "extract_concepts",
    "concept_text", "prune_tree",
]

PRIMITIVE_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
CONCEPT_LABELS = frozenset({"S", "SBAR", "SBARQ", "SQ", "SINV", "NP", "NX"})
SENTENCE, PHRASE, PRIMITIVE = "sentence", "phrase", "primitive"


@dataclass(frozen=True)
class Predicate:
    """An n-ary function over concepts: a lexical template with typed placeholders.

    ``template`` is e.g. ``"[NP] are running on [NP]"``; ``arg_types`` the placeholder types in
    order (``("NP", "NP")``). A sentence without any noun has a predicate of arity 0.
    """

    template: str

    @property
    def arg_types(self) -> tuple[str, ...]:
        return tuple(tok[1:-1] for tok in self.template.split() if _is_placeholder(tok))

    @property
    def arity(self) -> int:
        return len(self.arg_types)


def _is_placeholder(token: str) -> bool:
    return len(token) > 2 and token[0] == "[" and token[-1] == "]" and token[1:-1].isupper()


@dataclass
class ConceptNode:
    """One concept of one caption, with the predicate that composes it from its children.

    Attributes:
        text: the concept's words, lower-cased, without punctuation.
        label: its syntactic type: a phrase label (NP, S, ...) or, for a primitive, its POS tag.
        kind: ``"sentence"``, ``"phrase"`` or ``"primitive"``.
        predicate: how the children compose into this concept; ``None`` for primitives.
        children: the argument concepts, in the order of the predicate's placeholders.
        start, end: the token span ``[start, end)`` in the caption's tree leaves.
    """

    text: str
    label: str
    kind: str
    start: int
    end: int
    predicate: Predicate | None = None
    children: list["ConceptNode"] = field(default_factory=list)

    @property
    def height(self) -> int:
        """Edges on the longest path down to a primitive (a primitive has height 0)."""
        return 1 + max(c.height for c in self.children) if self.children else 0

    def walk(self) -> Iterator["ConceptNode"]:
        """All concepts of the tree, parents before children."""
        yield self
        for c in self.children:
            yield from c.walk()

    def walk_bottom_up(self) -> Iterator["ConceptNode"]:
        for c in self.children:
            yield from c.walk_bottom_up()
        yield self

    def to_dict(self) -> dict:
        return {"text": self.text, "label": self.label, "kind": self.kind, "span": [self.start, self.end],
                "predicate": self.predicate.template if self.predicate else None,
                "children": [c.to_dict() for c in self.children]}


def concept_text(words: list[str]) -> str:
    """The canonical text of a concept: lower-cased words joined by single spaces.

    >>> concept_text(["Two", "dogs"])
    'two dogs'
    """
    return " ".join(unescape_ptb_word(w).lower() for w in words)


def extract_concepts(tree: Tree) -> ConceptNode:
    """Decompose a caption's tree into its concept tree (Appendix A).

    ``tree`` is a PTB tree; a ``TOP`` root is looked through. The result's root is the sentence
    concept; its descendants are phrases and primitives.

    >>> from nltk import Tree
    >>> t = Tree.fromstring("(TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) "
    ...                     "(PP (IN on) (NP (DT the) (NN grass)))))))")
    >>> root = extract_concepts(t)
    >>> root.predicate.template, [c.text for c in root.children]
    ('[NP] are running on [NP]', ['two dogs', 'the grass'])
    >>> [(c.predicate.template, [g.text for g in c.children]) for c in root.children]
    [('two [NNS]', ['dogs']), ('the [NN]', ['grass'])]
    """
    if tree.label() == "TOP" and len(tree) == 1 and not isinstance(tree[0], str):  # a leaf is a str
        tree = tree[0]
    sentence = _Sentence(tree)
    n = len(sentence.tags)
    if not n:
        raise ValueError("cannot extract concepts from an empty tree")
    root = ConceptNode(text=sentence.text(0, n), label=tree.label(), kind=SENTENCE, start=0, end=n)
    _decompose(root, tree, sentence)
    return root


class _Sentence:
    """A tree's words with running counts, so each "how many content words in [start, end)" is O(1).

    Why: the search asks it of every node it visits; counting by scanning the span made the
    extraction quadratic in the sentence length.
    """

    def __init__(self, tree: Tree):
        self.spans: dict[int, tuple[int, int]] = {}   # id(subtree) -> its token span
        self.labels: dict[int, str] = {}               # id(subtree) -> its label (Tree.label() is a call)
        self.preterminals: set[int] = set()            # id() of the subtrees over one word
        pos: list[tuple[str, str]] = []
        self._walk(tree, pos)
        self.tags = [t for _, t in pos]
        self.content = [i for i, t in enumerate(self.tags) if t not in PUNCT_TAGS]
        # the content words only, so that a span's words are one slice (see text, template_part)
        self.text_words = [unescape_ptb_word(pos[i][0]).lower() for i in self.content]     # as concept_text writes
        self.template_words = [unescape_ptb_word(pos[i][0].lower()) for i in self.content]  # as templates write
        self.num_content = [0]     # num_content[i]: content words before token i
        self.num_primitive = [0]   # num_primitive[i]: primitive-tagged words before token i
        for t in self.tags:
            self.num_content.append(self.num_content[-1] + (t not in PUNCT_TAGS))
            self.num_primitive.append(self.num_primitive[-1] + (t in PRIMITIVE_TAGS))

    def _walk(self, tree: Tree, pos: list) -> None:
        """Spans, labels, preterminals and (word, tag) pairs in one pass (``Tree.pos`` and indexing are slow)."""
        spans, labels, preterminals = self.spans, self.labels, self.preterminals

        def walk(node: Tree) -> None:
            start = len(pos)
            label = labels[id(node)] = node.label()
            for child in node:
                if isinstance(child, str):
                    pos.append((child, label))
                    preterminals.add(id(node))
                else:
                    walk(child)
            spans[id(node)] = (start, len(pos))

        walk(tree)

    def is_preterminal(self, node: Tree) -> bool:
        return id(node) in self.preterminals

    def count(self, start: int, end: int) -> int:
        return self.num_content[end] - self.num_content[start]

    def text(self, start: int, end: int) -> str:
        """concept_text of the content words in [start, end)."""
        return " ".join(self.text_words[self.num_content[start]:self.num_content[end]])

    def template_part(self, start: int, end: int) -> list[str]:
        return self.template_words[self.num_content[start]:self.num_content[end]]

    def is_phrase_concept(self, node: Tree) -> bool:
        if id(node) in self.preterminals or node.label() not in CONCEPT_LABELS:
            return False
        start, end = self.spans[id(node)]
        return self.count(start, end) >= 2 and self.num_primitive[end] > self.num_primitive[start]


def _decompose(concept: ConceptNode, tree: Tree, sentence: _Sentence) -> None:
    """Fill ``concept.predicate`` and ``concept.children`` by BFS over ``tree`` (the concept's subtree).

    Every node searched lies inside the concept's span, so it has the concept's content words exactly
    when it has as many of them.
    """
    spans, labels, preterminals = sentence.spans, sentence.labels, sentence.preterminals
    num_content, num_primitive = sentence.num_content, sentence.num_primitive
    own_count = sentence.count(concept.start, concept.end)
    found: list[tuple[Tree, str]] = []  # (subtree, kind)
    queue = deque(tree if id(tree) not in preterminals else [])
    while queue:
        node = queue.popleft()
        if isinstance(node, str):  # a word
            continue
        if id(node) in preterminals:
            if labels[id(node)] in PRIMITIVE_TAGS:
                found.append((node, PRIMITIVE))
            continue
        if labels[id(node)] in CONCEPT_LABELS:  # sentence.is_phrase_concept, inlined
            start, end = spans[id(node)]
            count = num_content[end] - num_content[start]
            if count >= 2 and num_primitive[end] > num_primitive[start] and count != own_count:
                found.append((node, PHRASE))  # (a unary copy of the parent is searched through)
                continue
        queue.extend(node)
    if not found and concept.kind == PRIMITIVE:
        return
    if len(found) == 1 and found[0][1] == PRIMITIVE and sentence.count(*spans[id(found[0][0])]) == own_count:
        concept.label = found[0][0].label()  # a one-noun sentence ("Dogs.") is that primitive itself
        return
    found.sort(key=lambda f: spans[id(f[0])][0])
    template: list[str] = []
    cursor = concept.start
    for node, kind in found:
        start, end = spans[id(node)]
        label = labels[id(node)]
        template.extend(sentence.template_part(cursor, start))
        template.append(f"[{label}]")
        child = ConceptNode(text=sentence.text(start, end), label=label, kind=kind, start=start, end=end)
        if kind == PHRASE:
            _decompose(child, node, sentence)
        concept.children.append(child)
        cursor = end
    template.extend(sentence.template_part(cursor, concept.end))
    concept.predicate = Predicate(" ".join(template))


def prune_tree(tree: Tree, probability: float, rng) -> Tree:
    """Degrade a parse by removing branches at random (Table 7's parse-quality study).

    Each phrasal node below the root is, with ``probability``, dissolved: its children are attached
    to its parent, so the words stay and the structure above them is lost. ``rng`` is a
    ``random.Random``; the same seed gives the same pruned tree.

    >>> import random
    >>> from nltk import Tree
    >>> t = Tree.fromstring("(TOP (S (NP (DT a) (NN dog)) (VP (VBZ runs))))")
    >>> prune_tree(t, 0.0, random.Random(0)) == t
    True
    >>> prune_tree(t, 1.0, random.Random(0)).leaves() == t.leaves()
    True
    """
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"pruning probability must lie in [0, 1], got {probability}")
    from nltk import Tree

    def prune(node: Tree, is_root: bool) -> list:
        if isinstance(node[0], str):
            return [node.copy(deep=True)]
        kids = [k for child in node for k in prune(child, False)]
        if not is_root and rng.random() < probability:
            return kids
        return [Tree(node.label(), kids)]

    top = tree
    if tree.label() == "TOP" and len(tree) == 1:
        return Tree("TOP", prune(tree[0], True))
    return prune(top, True)[0]
