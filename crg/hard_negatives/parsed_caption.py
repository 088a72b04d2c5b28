"""A caption as the generators see it: its tagged tokens and concept tree, and how edited tokens become text.

Every generator edits a list of :class:`EditToken` (the caption's tokens, each marked when it is new
at its position) and :func:`realize_tokens` turns the result back into a caption whose articles and
capitalisation agree again. The structural queries here (a node's own words, the primitive nouns,
the objects with their adjectives) are shared by several generators.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from nltk import Tree

from crg.dep_to_constituency import PUNCT_TAGS, unescape_ptb_word
from crg.extract import PRIMITIVE, PRIMITIVE_TAGS, ConceptNode, extract_concepts
from crg.hard_negatives.lexicon import ARTICLES, GENERIC_NOUNS, LEADING_DETERMINER_TAGS
from crg.hard_negatives.morphology import article_for
from crg.hard_negatives.surface import EditSpan, realize_surface, token_offsets

__all__ = ["ParsedCaption", "EditToken", "ObjectMention", "realize_words", "realize_tokens", "realize_tagged", "realize_source_form",
           "own_tokens", "primitive_tokens", "object_mentions"]


@dataclass(frozen=True)
class EditToken:
    """A token of a caption being edited. ``fresh``: new at this position (an article before it
    must agree again); ``initial``: the source caption's first word (lower-cased when moved);
    ``src``: its index among the source's tokens while it stays where it was (None once moved or
    new), so that the negative keeps the source's characters around it
    (:func:`crg.hard_negatives.surface.realize_surface`)."""

    word: str
    tag: str
    fresh: bool = False
    initial: bool = False
    src: int | None = None


@dataclass(frozen=True)
class ObjectMention:
    """A noun that heads a description: its token, its prenominal adjectives, where they start."""

    head: int
    adjectives: tuple[int, ...]
    run_start: int  # first token after the determiner (where a moved adjective goes)
    determiner: int | None


@dataclass
class ParsedCaption:
    """A caption's CRG parse: its tokens with POS tags and its concept tree.

    Attributes:
        tokens: ``(word, tag)`` of every leaf, punctuation included, PTB escapes undone.
        root: the concept tree (:func:`crg.extract.extract_concepts`); spans index ``tokens``.
        text: the caption as given, or the tokens re-joined.
        offsets: ``(start, end)`` of each token in ``text`` (None when a token is not found there as
            written: then negatives are re-joined, not written in the caption's form).
    """

    tokens: tuple[tuple[str, str], ...]
    root: ConceptNode
    text: str
    offsets: tuple[tuple[int, int], ...] | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.offsets is None:
            self.offsets = token_offsets(self.text, [w for w, _ in self.tokens])

    @classmethod
    def from_tree(cls, tree: Tree, text: str | None = None) -> "ParsedCaption":
        """Parse record of a caption from its PTB tree (``text``: the caption as written).

        >>> p = ParsedCaption.from_tree(Tree.fromstring(
        ...     "(TOP (NP (NP (DT A) (NN dog)) (VP (VBG chasing) (NP (DT a) (NN cat))) (. .)))"))
        >>> p.text, p.root.predicate.template
        ('A dog chasing a cat.', '[NP] chasing [NP]')
        """
        root = extract_concepts(tree)
        top = tree[0] if tree.label() == "TOP" and len(tree) == 1 and isinstance(tree[0], Tree) else tree
        tokens = tuple((unescape_ptb_word(w), t) for w, t in top.pos())
        return cls(tokens, root, text if text is not None else realize_words([w for w, _ in tokens]))

    def edit_tokens(self) -> list[EditToken]:
        """The tokens as a fresh edit: nothing new yet, the first word marked initial."""
        first = next((i for i, (_, t) in enumerate(self.tokens) if t not in PUNCT_TAGS), 0)
        return [EditToken(w, t, False, i == first, i) for i, (w, t) in enumerate(self.tokens)]

    def words(self) -> list[str]:
        return [w.lower() for w, t in self.tokens if t not in PUNCT_TAGS]


def realize_words(words: Sequence[str]) -> str:
    """Join tokens into text: no space before punctuation and clitics, none after opening brackets.

    >>> print(realize_words(["Two", "young", ",", "White", "males", "are", "n't", "here", "."]))
    Two young, White males aren't here.
    """
    out = ""
    for w in words:
        if not out:
            out = w
        elif w in (".", ",", ";", ":", "!", "?", "%", ")", "]", "'") or w.startswith("'") or w == "n't" \
                or out.endswith(("(", "[", "$")):
            out += w
        else:
            out += " " + w
    return out


def realize_tokens(toks: list[EditToken], source: str) -> str:
    """Text of edited tokens: articles agree with fresh words, the first letter follows the source.

    >>> toks = [EditToken("A", "DT", False, True), EditToken("apple", "NN", True), EditToken(".", ".")]
    >>> realize_tokens(toks, "A cat.")
    'An apple.'
    """
    return realize_words([w for w, _ in realize_tagged(toks, source)])


def realize_tagged(toks: list[EditToken], source: str) -> list[tuple[str, str]]:
    """The ``(word, tag)`` tokens :func:`realize_tokens` joins: the words as they will be written
    (articles agreeing, casing following the source) with the tags the edit gave them.

    >>> toks = [EditToken("A", "DT", False, True), EditToken("apple", "NN", True), EditToken(".", ".")]
    >>> realize_tagged(toks, "a cat.")
    [('an', 'DT'), ('apple', 'NN'), ('.', '.')]
    """
    toks = list(toks)
    for i in range(len(toks) - 1):
        if toks[i].word.lower() in ARTICLES and toks[i + 1].fresh:
            art = article_for(toks[i + 1].word)
            if toks[i].word[:1].isupper():
                art = art.capitalize()
            toks[i] = replace(toks[i], word=art)
    words = [t.word for t in toks]
    first = next((i for i, t in enumerate(toks) if t.tag not in PUNCT_TAGS), None)
    for i, t in enumerate(toks):
        if t.initial and i != first and t.tag not in ("NNP", "NNPS") and t.word != "I":
            words[i] = t.word[:1].lower() + t.word[1:]
    if first is not None and source[:1].isupper():
        words[first] = words[first][:1].upper() + words[first][1:]
    elif first is not None and source[:1].islower() and toks[first].tag not in ("NNP", "NNPS"):
        words[first] = words[first][:1].lower() + words[first][1:]
    return [(w, t.tag) for w, t in zip(words, toks)]


def realize_source_form(toks: list[EditToken], parsed: "ParsedCaption") -> tuple[str, list[tuple[str, str]], tuple]:
    """The negative's text in the caption's own surface form, its ``(word, tag)`` tokens, and the
    edited regions (:class:`crg.hard_negatives.surface.EditSpan`). Where the parse's tokens cannot be
    located in the caption's text, the tokens are re-joined (:func:`realize_words`) and the whole text
    is one region.

    >>> p = ParsedCaption.from_tree(Tree.fromstring("(TOP (NP (DT A) (NN dog) (. .)))"), "A dog .")
    >>> toks = p.edit_tokens()
    >>> toks[1] = EditToken("apple", "NN", True)
    >>> realize_source_form(toks, p)[0]
    'An apple .'
    """
    tagged = realize_tagged(toks, parsed.text)
    if parsed.offsets is None:
        text = realize_words([w for w, _ in tagged])
        return text, tagged, (EditSpan(0, len(parsed.text), 0, len(text)),)
    written = [replace(t, word=w) for t, (w, _) in zip(toks, tagged)]
    text, spans = realize_surface(written, parsed.text, parsed.offsets, [w for w, _ in parsed.tokens])
    return text, tagged, spans


def own_tokens(node: ConceptNode) -> list[int]:
    """Token indices of the node's template words (inside its span, outside its children's)."""
    covered = set()
    for c in node.children:
        covered.update(range(c.start, c.end))
    return [i for i in range(node.start, node.end) if i not in covered]


def primitive_tokens(parsed: ParsedCaption) -> list[int]:
    """Token indices of the caption's primitive nouns (a one-noun caption is its own primitive)."""
    root = parsed.root
    if not root.children and root.label in PRIMITIVE_TAGS:
        return [i for i, (_, t) in enumerate(parsed.tokens) if t in PRIMITIVE_TAGS][:1]
    return sorted(n.start for n in root.walk() if n.kind == PRIMITIVE)


def object_mentions(parsed: ParsedCaption) -> list[ObjectMention]:
    """Nouns heading a description, with the adjectives before them (``a red tennis ball``: ball, red)."""
    toks = parsed.tokens
    heads = [i for i in primitive_tokens(parsed)
             if not (i + 1 < len(toks) and toks[i + 1][1] in PRIMITIVE_TAGS)]  # not a compound's modifier
    out = []
    for h in heads:
        if toks[h][0].lower() in GENERIC_NOUNS:
            continue
        adjectives, j = [], h - 1
        while j >= 0 and toks[j][1] in ("JJ", "NN", "NNS", "VBN", "HYPH"):
            if toks[j][1] == "JJ":
                adjectives.append(j)
            j -= 1
        det = j if j >= 0 and toks[j][1] in LEADING_DETERMINER_TAGS else None
        out.append(ObjectMention(h, tuple(sorted(adjectives)), j + 1, det))
    return out
