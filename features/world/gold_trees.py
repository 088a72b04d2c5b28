"""Gold constituency trees of the generated world's captions, read off the world's own grammar.

Why: the world's CRG was built by parsing its captions with spaCy, whose tagger calls "front", "top",
"left", "glass", "rubber" nouns, so they became primitives, and "in front of X" became ``[NP] is in
[NP]`` over ``[NN] of [NP]``. The grammar knows every caption's structure exactly
(:func:`features.world.grammar.parse_caption_tree` reads it back deterministically), so the world can be
given the trees a perfect parser would give, and the CRG's concepts are then the world's own.

The bracketing is Penn-Treebank style, with four decisions made for the CRG's extraction
(:mod:`crg.extract`: nouns are primitives; NP, S, SBAR, ... with a noun are concepts):

* attribute words (colours, sizes, materials, "medium-sized") are adjectives (JJ), even "rubber" and
  "glass": in the world they are attributes, and as nouns they would be primitives. Noun phrases are flat,
  ``(NP (DT a) (JJ small) (JJ red) (NN ball))`` -> ``a small red [NN]``; counts are CD (``two red [NNS]``).
  The primitives are the shape nouns and "object"/"thing";
* a relation ("in front of", "on top of", "to the left of", "next to", "behind", ...) is one multiword
  preposition: its words are all tagged IN, directly under the PP, with no NP inside, so the template
  keeps it whole: ``(NP (NP a cube) (PP (IN in) (IN front) (IN of) (NP a ball)))`` -> ``[NP] in front of [NP]``;
* a relative clause "that is behind X" is ``(RRC (WHNP (WDT that)) (VP (VBZ is) (PP ...)))`` instead of
  PTB's ``(SBAR (WHNP ..) (S (VP ..)))``: SBAR and the subjectless S would be concepts of their own
  (``that [S]``, ``is behind [NP]``) and break the binary relation into a chain of unary predicates; as
  RRC, ``that is`` stays in the relation's template, ``[NP] that is behind [NP]``, like the PP form
  ``[NP] behind [NP]`` and the reduced relative ``(VP (VBG sitting) (PP ..))`` -> ``[NP] sitting behind [NP]``;
* two clauses joined by "while" are ``(S (S ..) (IN while) (S ..))``, as "and" is ``(S (S ..) (, ,) (CC and)
  (S ..))``: both give a binary ``[S] while [S]`` / ``[S] and [S]``, not ``[S] [SBAR]`` over ``while [S]``.

The rest is as PTB: clauses ``(S (NP ..) (VP (VBZ is) (VP (VBG sitting) (PP ..))))`` -> ``[NP] is sitting
behind [NP]``; ``(S (NP (EX there)) (VP (VBZ is) (NP ..)))`` -> ``there is [NP]``; coordination
``(NP (NP ..) (, ,) (NP ..) (CC and) (NP ..))`` -> ``[NP] [NP] and [NP]``. Punctuation hangs from the lowest
constituent spanning its neighbours (the final period from the sentence constituent), under ``TOP``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from crg.parse import register_parser
from crg.parser_base import ConstituencyParser
from features.world.grammar import parse_caption_tree
from features.world.scene import WorldConfig

if TYPE_CHECKING:  # nltk is imported where a tree is built (gold_tree): generating a world writes strings
    from nltk import Tree

__all__ = ["caption_tokens", "gold_tree", "gold_tree_string", "gold_tree_line", "WorldGrammarParser",
           "make_world_parser", "GOLD_TREES_VERSION"]

# bumped whenever the trees of a caption change (the bracketing, the tokens): parse caches key on it
GOLD_TREES_VERSION = 1

_TOKEN = re.compile(r"[^\s,.]+|[,.]")
_PUNCT = (",", ".")


def caption_tokens(text: str) -> list[str]:
    """A world caption's tokens as the CRG's tokenizer gives them: words (hyphenated ones whole) and ``,`` ``.``.

    >>> caption_tokens("A medium-sized ball, a cube and a cone.")
    ['A', 'medium-sized', 'ball', ',', 'a', 'cube', 'and', 'a', 'cone', '.']
    """
    return _TOKEN.findall(text)


def gold_tree_string(text: str, cfg: WorldConfig = WorldConfig()) -> str:
    """The gold tree of a caption of the world's language, bracketed on one line (root ``TOP``).

    >>> gold_tree_string("A cube in front of a ball.")
    '(TOP (NP (NP (DT A) (NN cube)) (PP (IN in) (IN front) (IN of) (NP (DT a) (NN ball))) (. .)))'

    Raises:
        ValueError: ``text`` is not a caption of the world's language (with ``cfg``'s vocabulary).
    """
    tree, tokens = _skeleton(text, cfg)
    return f"(TOP {_render(tree, tokens)})"


def gold_tree(text: str, cfg: WorldConfig = WorldConfig()) -> Tree:
    """:func:`gold_tree_string` as an :class:`nltk.Tree` (built directly: the world parser's hot path).

    >>> from crg.extract import extract_concepts
    >>> root = extract_concepts(gold_tree("A red cube is on top of a glass ball."))
    >>> root.predicate.template, [c.predicate.template for c in root.children]
    ('[NP] is on top of [NP]', ['a red [NN]', 'a glass [NN]'])
    """
    from nltk import Tree

    tree, tokens = _skeleton(text, cfg)
    return Tree("TOP", [_to_tree(tree, tokens, Tree)])


def _skeleton(text: str, cfg: WorldConfig) -> tuple[list, list[str]]:
    """The reader's tree of ``text`` over its tokens, punctuation attached (see :func:`_on_tokens`)."""
    tokens = caption_tokens(text)
    words = [k for k, tok in enumerate(tokens) if tok not in _PUNCT]
    read = parse_caption_tree(text, cfg)
    if read is None:
        raise ValueError(f"not a caption of the world's language, so it has no gold tree: {text!r}")
    tree = _on_tokens(read[1], words)
    for k, tok in enumerate(tokens):
        if tok in _PUNCT:
            _attach(tree, (tok, k))
    return tree, tokens


def gold_tree_line(text: str, cfg: WorldConfig = WorldConfig()) -> str:
    """One line of ``gold_trees.jsonl`` (what :class:`crg.preparsed.PreparsedTrees` reads), newline included."""
    return json.dumps({"caption": text, "tree": gold_tree_string(text, cfg)}) + "\n"


class WorldGrammarParser(ConstituencyParser):
    """The world's grammar as a parser backend (``--parser world``): :func:`gold_tree` of any text of the
    world's language, captions or not (twin captions, hard negatives, phrases), so every text of the world
    is analysed as its captions are. A text outside the language raises ``ValueError`` (the CRG builder
    counts it as a parse failure).

    >>> WorldGrammarParser().parse_texts(["a red cube"])[0].pformat(margin=200)
    '(TOP (NP (DT a) (JJ red) (NN cube)))'
    """

    name = "world"

    def __init__(self, cfg: WorldConfig = WorldConfig()):
        self.cfg = cfg

    def parse_texts(self, texts) -> list[Tree]:
        return [gold_tree(text, self.cfg) for text in texts]

    def parse_tokens(self, sentences) -> list[Tree]:
        return [gold_tree(" ".join(words), self.cfg) for words in sentences]

    def cache_key(self) -> str:
        return f"world:gold-trees-v{GOLD_TREES_VERSION}:{hash_config(self.cfg)}"


def make_world_parser(model: str | None = None, **_batching) -> WorldGrammarParser:
    """``--parser world``: the factory registered with :mod:`crg.parse` (and named by this distribution's
    ``crg.parsers`` entry point), so that ``crg`` builds the world's parser without importing this layer.
    Batch options (``batch_size``, ...) mean nothing to a grammar; a model file does, so it is refused."""
    if model is not None:
        raise ValueError(f"--parser world reads the world's own grammar and takes no --parser-model (got {model!r})")
    return WorldGrammarParser()


register_parser("world", make_world_parser)


def hash_config(cfg: WorldConfig) -> str:
    """A short stable digest of the world's vocabulary settings (what the grammar's reader depends on)."""
    import hashlib
    from dataclasses import asdict

    return hashlib.sha1(json.dumps(asdict(cfg), sort_keys=True, default=str).encode()).hexdigest()[:12]


def _on_tokens(node, words: list[int]) -> list:
    """The reader's skeleton as mutable ``[label, children, first, last]`` phrases over ``[tag, token]``
    preterminals, leaves renumbered from words to tokens (``first``/``last``: the phrase's token span)."""
    label, rest = node
    if isinstance(rest, int):
        return [label, words[rest]]
    children = [_on_tokens(child, words) for child in rest]
    return [label, children, _first(children[0]), _last(children[-1])]


def _first(node) -> int:
    return node[1] if len(node) == 2 else node[2]


def _last(node) -> int:
    return node[1] if len(node) == 2 else node[3]


def _attach(node, leaf: tuple[str, int]) -> None:
    """Put a punctuation preterminal under the lowest phrase spanning the tokens on both sides of it."""
    k = leaf[1]
    while True:
        children = node[1]
        inside = next((c for c in children if len(c) == 4 and c[2] < k < c[3]), None)
        if inside is None:
            break
        node = inside
    at = next((n for n, c in enumerate(children) if _first(c) > k), len(children))
    children.insert(at, list(leaf))


def _to_tree(node, tokens: list[str], tree_class: type[Tree]) -> Tree:
    if len(node) == 2:
        return tree_class(node[0], [tokens[node[1]]])
    return tree_class(node[0], [_to_tree(child, tokens, tree_class) for child in node[1]])


def _render(node, tokens: list[str]) -> str:
    if len(node) == 2:
        return f"({node[0]} {tokens[node[1]]})"
    return f"({node[0]} " + " ".join([_render(child, tokens) for child in node[1]]) + ")"
