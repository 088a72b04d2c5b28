"""Hard negative captions from a caption's CRG parse: CREPE's HN-SWAP, HN-ATOM, HN-NEG and HN-COMP.

CREPE (Ma et al. 2023, Table 1 and §A.4) probes a model with captions that differ from a true one in
one compositional respect. Here they are made from the structure the CRG already has -- concepts,
predicates with their argument concepts, primitives (:mod:`crg.extract`) -- plus the POS tags of the
parse for the words inside templates:

* **HN-SWAP** (binding of arguments): exchange the two argument concepts of a predicate,
  ``[NP] chasing [NP]``: "a dog chasing a cat" -> "a cat chasing a dog". Arguments must be of one
  kind (nominal with nominal, clause with clause) and differ; coordinations and symmetric relations
  ("and", "next to", ...) are skipped, since swapping their arguments keeps the meaning.
* **HN-ATOM** (atoms): replace one atom by another of the same kind: a primitive noun by a corpus
  noun with the same tag (NN for NN, NNS for NNS), a colour by a corpus colour, a size word by one of
  the opposite size, a spatial word by its opposite ("on" -> "under"). Never the same word, a
  singular/plural form of it, a generic noun ("person", "thing": likely true of any image), or a
  word that any caption of the same image uses (those are probably true of it).
* **HN-NEG** (negation, as CREPE): a noun-phrase caption becomes "there is/are no ...", a sentence
  gets "not" after its auxiliary or do-support ("plays" -> "does not play"; an already negated one
  loses its "not"), an attribute becomes a negated relative clause ("a yellow vase" -> "a vase that
  is not yellow").
* **HN-COMP** (binding of attributes to objects): swap adjectives between two objects ("a red cube
  and a blue sphere" -> "a blue cube and a red sphere"), move one to another object ("a red cube and
  a sphere" -> "a cube and a red sphere"), or, for a caption with one attributed object, CREPE's
  compound split: "a pink car" -> "a pink toy and a blue car" (atomic foils fill the halves).

Unlike CREPE on Visual Genome, a corpus caption has no scene graph to verify against, so these
negatives are probably, not certainly, false (CREPE's own human check found 70-92% valid, Table 6).
The generated world verifies its negatives exactly (:mod:`features.world.hard_negatives`).

Everything is deterministic given ``seed``: each (type, image, caption) has its own random stream,
so adding captions or types changes nothing else. A caption for which a type cannot be made is
skipped for that type and counted with a reason; a negative never equals its source caption.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

from nltk import Tree

from crg.dep_to_constituency import PUNCT_TAGS, unescape_ptb_word
from crg.extract import PRIMITIVE, PRIMITIVE_TAGS, ConceptNode, extract_concepts

__all__ = [
    "HN_ATOM", "HN_SWAP", "HN_NEG", "HN_COMP", "HN_TYPES", "Change", "HardNegative", "HardNegativeConfig",
    "ParsedCaption", "AtomVocabulary", "CaptionNegatives", "GenerationReport", "caption_hard_negatives",
    "corpus_hard_negatives", "realize_words", "COLOR_WORDS",
]

HN_ATOM, HN_SWAP, HN_NEG, HN_COMP = "HN-ATOM", "HN-SWAP", "HN-NEG", "HN-COMP"
HN_TYPES = (HN_ATOM, HN_SWAP, HN_NEG, HN_COMP)

NOMINAL_LABELS = frozenset({"NP", "NX"}) | PRIMITIVE_TAGS
CLAUSE_LABELS = frozenset({"S", "SBAR", "SBARQ", "SQ", "SINV"})
#: Words joining two arguments such that their order does not matter ("a dog and a cat").
SYMMETRIC_CONNECTIVES = frozenset({
    "and", "or", "nor", "while", "as", "as well as", "along with", "together with", "plus", "next to",
    "beside", "besides", "near", "alongside", "by", "and also", "and a", "with each other"})
COLOR_WORDS = frozenset({
    "red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white", "gray",
    "grey", "tan", "beige", "violet", "cyan", "teal", "maroon", "turquoise", "golden", "silver", "blond",
    "blonde"})
#: Size words by pole: a size is replaced by a word of the other pole (an antonym, as CREPE).
SIZE_POLES = ({"big", "large", "huge", "giant", "enormous", "tall", "long"},
              {"small", "little", "tiny", "short"})
#: Spatial words and their opposites (CREPE's relation atoms, "on top of" -> "underneath").
RELATION_OPPOSITES = {"on": ("under",), "under": ("on",), "underneath": ("on",), "beneath": ("on",),
                      "above": ("below",), "below": ("above",), "over": ("under",), "inside": ("outside",),
                      "outside": ("inside",), "up": ("down",), "down": ("up",), "into": ("out of",),
                      "toward": ("away from",), "towards": ("away from",), "onto": ("off",), "off": ("onto",),
                      "behind": ("in front of",), "before": ("after",), "after": ("before",)}
#: Nouns never used as foils (true of nearly any image) nor replaced (parts of fixed phrases:
#: "in front of", "a group of", "on top of").
GENERIC_NOUNS = frozenset({
    "person", "people", "persons", "someone", "somebody", "something", "thing", "things", "object",
    "objects", "one", "ones", "individual", "individuals", "human", "humans", "group", "groups", "area",
    "stuff", "item", "items", "other", "others", "side", "front", "top", "bottom", "middle", "background",
    "foreground", "picture", "image", "photo", "view", "lot", "lots", "couple", "bunch", "kind", "type",
    "part", "way", "time", "day", "number", "pair", "variety", "set", "piece", "edge", "center",
    "end", "line", "row", "crowd", "team", "everyone", "anyone", "nobody"})
#: Near-synonyms and hypernyms common in captions: a word is never a foil for a word of its group
#: (no WordNet offline; CREPE enforces mutually exclusive foils with WordNet).
SYNONYM_GROUPS = (
    {"man", "guy", "gentleman", "male", "dude", "fellow", "adult"}, {"woman", "lady", "female", "gal", "adult"},
    {"boy", "kid", "child", "youngster", "son", "toddler", "youth", "teen", "teenager"},
    {"girl", "kid", "child", "youngster", "daughter", "toddler", "youth", "teen", "teenager"},
    {"child", "kid", "baby", "toddler", "infant"}, {"dog", "puppy", "pup", "canine", "animal", "pet"},
    {"cat", "kitten", "kitty", "animal", "pet"}, {"bike", "bicycle", "cycle"}, {"motorcycle", "motorbike", "bike"},
    {"car", "vehicle", "automobile", "truck"}, {"shirt", "top", "tee", "blouse", "jersey", "t-shirt"},
    {"pants", "jeans", "trousers", "slacks", "shorts"}, {"hat", "cap", "helmet"}, {"sofa", "couch"},
    {"road", "street", "roadway"}, {"ocean", "sea", "water", "waves", "lake"}, {"rock", "stone", "boulder", "cliff"},
    {"grass", "lawn", "field", "yard", "park", "meadow"}, {"stairs", "steps", "staircase", "stairway"},
    {"crowd", "audience", "spectators", "people"}, {"player", "athlete"}, {"jacket", "coat"},
    {"sidewalk", "pavement", "walkway"}, {"store", "shop", "market"}, {"mountain", "hill"},
    {"guitar", "instrument"}, {"outfit", "costume", "uniform", "clothes", "clothing"}, {"photo", "picture"},
    {"policeman", "officer", "cop"}, {"bag", "backpack", "purse"}, {"beach", "shore", "sand"})
#: Nouns of spatial phrases ("in front of", "on top of"): an argument headed by one is not swapped.
RELATIONAL_NOUNS = frozenset({"front", "top", "side", "middle", "bottom", "edge", "back", "center", "end",
                              "inside", "outside", "left", "right", "base", "corner"})
_ARTICLES = ("a", "an")
_LEADING_DETERMINER_TAGS = frozenset({"DT", "CD", "PRP$", "PDT"})
_QUANTIFIERS = frozenset({"several", "many", "some", "few", "various", "numerous", "multiple", "lots", "both"})
_AUXILIARIES = frozenset({"is", "are", "was", "were", "am", "be", "been", "can", "could", "will", "would",
                          "shall", "should", "may", "might", "must", "does", "do", "did", "has", "have", "had",
                          "'s", "'re", "'m"})
_NEGATORS = frozenset({"not", "n't", "never"})
_IRREGULAR_PLURALS = {"man": "men", "woman": "women", "child": "children", "person": "people", "foot": "feet",
                      "tooth": "teeth", "mouse": "mice", "goose": "geese", "policeman": "policemen",
                      "fireman": "firemen", "businessman": "businessmen", "fisherman": "fishermen"}
_IRREGULAR_SINGULARS = {v: k for k, v in _IRREGULAR_PLURALS.items()}
_VBZ_BASE = {"has": "have", "does": "do", "goes": "go", "is": "be"}
_MAX_TRIES = 20


# ---------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Change:
    """What a hard negative changed.

    Attributes:
        op: the edit: ``swap_arguments``, ``replace_noun``, ``replace_color``, ``replace_size``,
            ``replace_relation``, ``negate_caption``, ``negate_verb``, ``remove_negation``,
            ``negate_attribute``, ``swap_attributes``, ``move_attribute``, ``split_compound``
            (world negatives add ``replace_shape``, ``replace_attribute``, ``swap_objects``).
        before, after: the words (or phrases) as they were and as they are.
        where: the predicate template, atom kind or phrase the edit happened in.
    """

    op: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    where: str = ""


@dataclass(frozen=True)
class HardNegative:
    """One hard negative caption.

    Attributes:
        type: one of :data:`HN_TYPES`.
        text: the negative caption.
        source: the true caption it was made from.
        change: what was changed.
        image_id: the image the source caption describes (``None`` if unknown).
    """

    type: str
    text: str
    source: str
    change: Change
    image_id: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["change"] = {k: list(v) if isinstance(v, tuple) else v for k, v in d["change"].items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "HardNegative":
        c = d["change"]
        return cls(d["type"], d["text"], d["source"],
                   Change(c["op"], tuple(c["before"]), tuple(c["after"]), c.get("where", "")), d.get("image_id"))


@dataclass(frozen=True)
class HardNegativeConfig:
    """How many negatives to make and from which atoms.

    Attributes:
        per_type: negatives kept per caption and type. CREPE's productivity sets hold 5 per type
            (§B.3); fewer are kept when fewer distinct ones exist.
        types: which types to make.
        min_atom_count: a corpus noun or colour is a foil only if it occurs this often (CREPE uses
            seen atoms; rare words make easy, odd foils).
        seed: the seed of every random choice.
    """

    per_type: int = 5
    types: tuple[str, ...] = HN_TYPES
    min_atom_count: int = 2
    seed: int = 0

    def __post_init__(self):
        if self.per_type < 1:
            raise ValueError(f"per_type must be >= 1, got {self.per_type}")
        unknown = [t for t in self.types if t not in HN_TYPES]
        if unknown:
            raise ValueError(f"unknown hard negative types {unknown}; choose from {HN_TYPES}")
        if self.min_atom_count < 1:
            raise ValueError(f"min_atom_count must be >= 1, got {self.min_atom_count}")


# ---------------------------------------------------------------------------- the parse
@dataclass(frozen=True)
class _Tok:
    """A token of a caption being edited. ``fresh``: new at this position (an article before it
    must agree again); ``initial``: the source caption's first word (lower-cased when moved)."""

    word: str
    tag: str
    fresh: bool = False
    initial: bool = False


@dataclass(frozen=True)
class _Object:
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
    """

    tokens: tuple[tuple[str, str], ...]
    root: ConceptNode
    text: str

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

    def _toks(self) -> list[_Tok]:
        first = next((i for i, (_, t) in enumerate(self.tokens) if t not in PUNCT_TAGS), 0)
        return [_Tok(w, t, False, i == first) for i, (w, t) in enumerate(self.tokens)]

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


def _normalize(text: str) -> str:
    return " ".join("".join(ch if ch.isalnum() or ch in " '" else " " for ch in text.lower()).split())


def _article_for(word: str) -> str:
    w = word.lower()
    if w.startswith(("uni", "use", "usu", "eu", "one", "once", "ur")):
        return "a"
    if w.startswith(("hour", "honest", "honor", "heir")):
        return "an"
    return "an" if w[:1] in "aeiou" else "a"


def _realize(toks: list[_Tok], source: str) -> str:
    """Text of edited tokens: articles agree with fresh words, the first letter follows the source."""
    toks = list(toks)
    for i in range(len(toks) - 1):
        if toks[i].word.lower() in _ARTICLES and toks[i + 1].fresh:
            art = _article_for(toks[i + 1].word)
            if toks[i].word[:1].isupper():
                art = art.capitalize()
            toks[i] = _Tok(art, toks[i].tag, toks[i].fresh, toks[i].initial)
    words = [t.word for t in toks]
    first = next((i for i, t in enumerate(toks) if t.tag not in PUNCT_TAGS), None)
    for i, t in enumerate(toks):
        if t.initial and i != first and t.tag not in ("NNP", "NNPS") and t.word != "I":
            words[i] = t.word[:1].lower() + t.word[1:]
    if first is not None and source[:1].isupper():
        words[first] = words[first][:1].upper() + words[first][1:]
    elif first is not None and source[:1].islower() and toks[first].tag not in ("NNP", "NNPS"):
        words[first] = words[first][:1].lower() + words[first][1:]
    return realize_words(words)


def _variants(word: str) -> set[str]:
    """The word with its likely singular/plural forms (to never replace a noun by itself)."""
    w = word.lower()
    out = {w, w + "s", w + "es"}
    if w in _IRREGULAR_PLURALS:
        out.add(_IRREGULAR_PLURALS[w])
    if w in _IRREGULAR_SINGULARS:
        out.add(_IRREGULAR_SINGULARS[w])
    if w.endswith("ies"):
        out.add(w[:-3] + "y")
    if w.endswith("y"):
        out.add(w[:-1] + "ies")
    if w.endswith("es"):
        out.add(w[:-2])
    if w.endswith("s"):
        out.add(w[:-1])
    return out


def _related(word: str) -> set[str]:
    """The word's forms and every word sharing a synonym group with one of them (never its foils).

    >>> sorted(_related("men") & {"man", "guy", "guys", "woman"})
    ['guy', 'guys', 'man']
    """
    forms = _variants(word)
    out = set(forms)
    for group in SYNONYM_GROUPS:
        if forms & group:
            for w in group:
                out |= _variants(w)
    return out


def _own_tokens(node: ConceptNode) -> list[int]:
    """Token indices of the node's template words (inside its span, outside its children's)."""
    covered = set()
    for c in node.children:
        covered.update(range(c.start, c.end))
    return [i for i in range(node.start, node.end) if i not in covered]


def _primitive_tokens(parsed: ParsedCaption) -> list[int]:
    """Token indices of the caption's primitive nouns (a one-noun caption is its own primitive)."""
    root = parsed.root
    if not root.children and root.label in PRIMITIVE_TAGS:
        return [i for i, (_, t) in enumerate(parsed.tokens) if t in PRIMITIVE_TAGS][:1]
    return sorted(n.start for n in root.walk() if n.kind == PRIMITIVE)


def _objects(parsed: ParsedCaption) -> list[_Object]:
    """Nouns heading a description, with the adjectives before them (``a red tennis ball``: ball, red)."""
    toks = parsed.tokens
    heads = [i for i in _primitive_tokens(parsed)
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
        det = j if j >= 0 and toks[j][1] in _LEADING_DETERMINER_TAGS else None
        out.append(_Object(h, tuple(sorted(adjectives)), j + 1, det))
    return out


# ---------------------------------------------------------------------------- vocabulary
@dataclass
class AtomVocabulary:
    """Atoms of a corpus by kind, with counts: foils for HN-ATOM and HN-COMP come from here.

    Attributes:
        nouns: tag (NN, NNS, NNP, NNPS) -> primitive noun (lower-cased) -> count.
        colors: colour adjective -> count.
    """

    nouns: dict[str, Counter] = field(default_factory=dict)
    colors: Counter = field(default_factory=Counter)

    def add(self, parsed: ParsedCaption) -> None:
        for i in _primitive_tokens(parsed):
            word, tag = parsed.tokens[i]
            self.nouns.setdefault(tag, Counter())[word.lower()] += 1
        for word, tag in parsed.tokens:
            if tag == "JJ" and word.lower() in COLOR_WORDS:
                self.colors[word.lower()] += 1

    @classmethod
    def from_parsed(cls, captions: Iterable[ParsedCaption]) -> "AtomVocabulary":
        vocab = cls()
        for p in captions:
            vocab.add(p)
        return vocab

    @classmethod
    def from_graph(cls, graph) -> "AtomVocabulary":
        """Atoms of a saved :class:`crg.graph.ConceptGraph`: its primitives by POS tag, counted by
        the images they denote, and the colour words of its predicate templates, by derivation."""
        from crg.graph import KIND_BITS

        vocab = cls()
        prim = KIND_BITS[PRIMITIVE]
        for cid, (text, label) in enumerate(zip(graph.concept_texts, graph.concept_labels)):
            if graph.concept_kinds[cid] & prim and label in PRIMITIVE_TAGS:
                n = int(graph.concept_image_ptr[cid + 1] - graph.concept_image_ptr[cid])
                vocab.nouns.setdefault(label, Counter())[text] += n
        template_uses = Counter(graph.deriv_predicate.tolist())
        for pid, template in enumerate(graph.predicate_templates):
            for w in template.split():
                if w in COLOR_WORDS:
                    vocab.colors[w] += template_uses[pid]
        return vocab

    def noun_foils(self, tag: str, min_count: int) -> list[str]:
        """Nouns of ``tag`` seen at least ``min_count`` times, generic nouns left out, sorted."""
        return sorted(w for w, n in self.nouns.get(tag, Counter()).items()
                      if n >= min_count and w not in GENERIC_NOUNS and w.isalpha())

    def color_foils(self, min_count: int) -> list[str]:
        return sorted(w for w, n in self.colors.items() if n >= min_count)


# ---------------------------------------------------------------------------- generators
@dataclass(frozen=True)
class _Candidate:
    tokens: tuple[_Tok, ...]
    change: Change


def _replace(toks: list[_Tok], i: int, word: str, tag: str | None = None) -> list[_Tok]:
    out = list(toks)
    out[i] = _Tok(_match_case(word, toks[i].word), tag or toks[i].tag, True, toks[i].initial)
    return out


def _match_case(word: str, like: str) -> str:
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _swap_candidates(parsed: ParsedCaption) -> tuple[list[_Candidate], str]:
    toks, out, reason = parsed._toks(), [], "no predicate with two or more arguments"
    for node in parsed.root.walk():
        kids = node.children
        if node.predicate is None or len(kids) < 2:
            continue
        template_words = [parsed.tokens[i][0].lower() for i in _own_tokens(node)
                          if parsed.tokens[i][1] not in PUNCT_TAGS]
        if all(w in SYMMETRIC_CONNECTIVES for w in template_words):
            reason = "only coordinations (order-free arguments)"
            continue
        for a in range(len(kids)):
            for b in range(a + 1, len(kids)):
                x, y = kids[a], kids[b]
                same_kind = (x.label in NOMINAL_LABELS and y.label in NOMINAL_LABELS) or \
                    (x.label in CLAUSE_LABELS and y.label in CLAUSE_LABELS)
                if not same_kind:
                    reason = "arguments of different kinds" if not out else reason
                    continue
                if any(_head_word(parsed, z) in RELATIONAL_NOUNS for z in (x, y)):
                    reason = "argument is a spatial phrase (in front of, on top of)" if not out else reason
                    continue
                if _normalize(x.text) == _normalize(y.text):
                    reason = "identical arguments" if not out else reason
                    continue
                between = " ".join(parsed.tokens[i][0].lower() for i in range(x.end, y.start)
                                   if parsed.tokens[i][1] not in PUNCT_TAGS)
                if b == a + 1 and (between in SYMMETRIC_CONNECTIVES or not between):
                    reason = "symmetric relation (next to, and, ...)" if not out else reason
                    continue
                first = [_Tok(t.word, t.tag, k == 0, t.initial) for k, t in enumerate(toks[y.start:y.end])]
                second = [_Tok(t.word, t.tag, k == 0, t.initial) for k, t in enumerate(toks[x.start:x.end])]
                new = toks[:x.start] + first + toks[x.end:y.start] + second + toks[y.end:]
                out.append(_Candidate(tuple(new), Change("swap_arguments", (x.text, y.text), (y.text, x.text),
                                                         node.predicate.template)))
    return out, reason


def _head_word(parsed: ParsedCaption, node: ConceptNode) -> str:
    """The first noun of a concept's span (lower-cased), "" if it has none."""
    return next((parsed.tokens[i][0].lower() for i in range(node.start, node.end)
                 if parsed.tokens[i][1] in PRIMITIVE_TAGS), "")


def _atom_slots(parsed: ParsedCaption, vocab: AtomVocabulary | None, cfg: HardNegativeConfig,
                banned: set[str]) -> tuple[list[tuple[int, str, list[str]]], bool]:
    """``(token, kind, foils)`` for every atom of the caption; the flag says whether any atom exists."""
    slots, any_atom = [], False
    caption_words = {w for w in parsed.words()}
    for i in _primitive_tokens(parsed):
        word, tag = parsed.tokens[i]
        if word.lower() in GENERIC_NOUNS:
            continue
        any_atom = True
        pool = vocab.noun_foils(tag, cfg.min_atom_count) if vocab else []
        related = _related(word)
        pool = [w for w in pool if w not in related and not (_variants(w) & banned)]
        slots.append((i, "noun:" + tag, pool))
    colors = (vocab.color_foils(cfg.min_atom_count) if vocab else []) or sorted(COLOR_WORDS)
    for i, (word, tag) in enumerate(parsed.tokens):
        w = word.lower()
        if tag == "JJ" and w in COLOR_WORDS:
            any_atom = True
            slots.append((i, "color", [c for c in colors if c != w and c not in banned and c not in caption_words
                                       and {c, w} != {"gray", "grey"} and {c, w} != {"blond", "blonde"}]))
        elif tag in ("JJ", "JJS", "JJR") and any(w in pole for pole in SIZE_POLES):
            any_atom = True
            other = next(pole for pole in SIZE_POLES if w not in pole)
            slots.append((i, "size", sorted(o for o in other if o not in banned)))
        elif tag in ("IN", "RP", "RB") and w in RELATION_OPPOSITES:
            any_atom = True
            slots.append((i, "relation", [o for o in RELATION_OPPOSITES[w] if o not in banned]))
    return [s for s in slots if s[2]], any_atom


def _atom_candidates(parsed: ParsedCaption, vocab, cfg, banned, rng: random.Random) -> tuple[list[_Candidate], str]:
    slots, any_atom = _atom_slots(parsed, vocab, cfg, banned)
    if not slots:
        return [], ("no atom of a known kind (noun, colour, size, spatial word)" if not any_atom
                    else "no foil of the same kind (vocabulary empty, or every foil used for this image)")
    toks, out, seen = parsed._toks(), [], set()
    for _ in range(_MAX_TRIES * cfg.per_type):
        if len(out) >= cfg.per_type:
            break
        i, kind, pool = slots[rng.randrange(len(slots))]
        foil = pool[rng.randrange(len(pool))]
        if (i, foil) in seen:
            continue
        seen.add((i, foil))
        words = foil.split()
        new = toks[:i] + [_Tok(_match_case(w, toks[i].word) if k == 0 else w, toks[i].tag, True,
                               toks[i].initial and k == 0) for k, w in enumerate(words)] + toks[i + 1:]
        op = "replace_" + kind.split(":")[0]
        out.append(_Candidate(tuple(new), Change(op, (toks[i].word.lower(),), (foil,), kind)))
    return out, ""


def _negation_candidates(parsed: ParsedCaption) -> tuple[list[_Candidate], str]:
    toks, out, reason = parsed._toks(), [], ""
    root = parsed.root
    content = [i for i, t in enumerate(toks) if t.tag not in PUNCT_TAGS]
    if root.label in NOMINAL_LABELS or root.label == "FRAG" and any(t.tag in PRIMITIVE_TAGS for t in toks):
        # "a man in a blue shirt" -> "there is no man in a blue shirt"
        k = content[0] if content else 0
        while k < len(toks) and (toks[k].tag in _LEADING_DETERMINER_TAGS or toks[k].word.lower() in _QUANTIFIERS):
            k += 1
        heads = [i for i in _primitive_tokens(parsed) if i >= k]
        if heads and k < len(toks):
            be = "are" if toks[heads[0]].tag in ("NNS", "NNPS") else "is"
            rest = [_Tok(t.word[:1].lower() + t.word[1:] if t.initial and t.tag not in ("NNP", "NNPS") else t.word,
                         t.tag, t.fresh) for t in toks[k:]]
            new = [_Tok("there", "EX", True, True), _Tok(be, "VBZ"), _Tok("no", "DT")] + rest
            out.append(_Candidate(tuple(new), Change("negate_caption", (realize_words([t.word for t in toks[:k]]),),
                                                     (f"there {be} no",), root.label)))
        else:
            reason = "noun-phrase caption without a head noun"
    elif root.label in CLAUSE_LABELS:
        verb = _finite_verb(parsed)
        if verb is None:
            reason = "no finite verb in the sentence's predicate"
        else:
            cand = _negate_verb(toks, verb)
            if cand is None:
                reason = "past-tense verb without auxiliary (no lemmatiser for do-support)"
            else:
                out.append(cand)
    else:
        reason = f"caption of type {root.label} has no negatable form"
    for obj in _objects(parsed):  # "a yellow vase" -> "a vase that is not yellow"
        for a in obj.adjectives:
            be = "are" if toks[obj.head].tag in ("NNS", "NNPS") else "is"
            adj = toks[a].word.lower()
            new = toks[:a] + toks[a + 1:obj.head + 1] + [_Tok("that", "WDT"), _Tok(be, "VBZ"), _Tok("not", "RB"),
                                                         _Tok(adj, "JJ")] + toks[obj.head + 1:]
            if a == obj.run_start and a > 0:  # the noun (or next adjective) now follows the article
                new[a] = _Tok(new[a].word, new[a].tag, True, new[a].initial)
            out.append(_Candidate(tuple(new), Change("negate_attribute", (f"{adj} {toks[obj.head].word.lower()}",),
                                                     (f"{toks[obj.head].word.lower()} that {be} not {adj}",),
                                                     "attribute")))
    if not out and not reason:
        reason = "no negatable verb, noun phrase or attribute"
    return out, reason


def _finite_verb(parsed: ParsedCaption) -> int | None:
    """The first finite verb among the sentence predicate's own words (after its subject)."""
    root = parsed.root
    subject_end = root.children[0].end if root.children and root.children[0].start == root.start else root.start
    for i in _own_tokens(root):
        if i >= subject_end and parsed.tokens[i][1] in ("VBZ", "VBP", "VBD", "MD"):
            return i
    return None


def _negate_verb(toks: list[_Tok], v: int) -> _Candidate | None:
    word, tag = toks[v].word, toks[v].tag
    w = word.lower()
    nxt = toks[v + 1] if v + 1 < len(toks) else None
    if nxt is not None and nxt.word.lower() in _NEGATORS:
        new = toks[:v + 1] + toks[v + 2:]
        return _Candidate(tuple(new), Change("remove_negation", (f"{w} {nxt.word.lower()}",), (w,), "verb"))
    main_have = w in ("has", "have", "had") and not (nxt is not None and nxt.tag in ("VBN", "VBG", "RB", "TO"))
    if w in _AUXILIARIES and not main_have:
        new = toks[:v + 1] + [_Tok("not", "RB")] + toks[v + 1:]
        return _Candidate(tuple(new), Change("negate_verb", (w,), (f"{w} not",), "verb"))
    if tag == "VBP" or (main_have and w == "have"):
        do, base = "do", w
    elif tag == "VBZ":
        do, base = "does", _vbz_base(w)
    elif w == "had":
        do, base = "did", "have"
    else:
        return None
    new = toks[:v] + [_Tok(_match_case(do, word), "VBZ", False, toks[v].initial), _Tok("not", "RB"),
                      _Tok(base, "VB")] + toks[v + 1:]
    return _Candidate(tuple(new), Change("negate_verb", (w,), (f"{do} not {base}",), "verb"))


def _vbz_base(w: str) -> str:
    """Base form of a 3rd-person singular verb (regular rules; ``_VBZ_BASE`` for the irregular).

    >>> [_vbz_base(w) for w in ("plays", "watches", "tries", "goes", "has", "rides")]
    ['play', 'watch', 'try', 'go', 'have', 'ride']
    """
    if w in _VBZ_BASE:
        return _VBZ_BASE[w]
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("sses", "shes", "ches", "xes", "zes")):
        return w[:-2]
    return w[:-1] if w.endswith("s") else w


def _comp_candidates(parsed: ParsedCaption, vocab, cfg, banned, rng: random.Random) -> tuple[list[_Candidate], str]:
    toks = parsed._toks()
    objects = _objects(parsed)
    attributed = [o for o in objects if o.adjectives]
    if not attributed:
        return [], "no object with an attribute (adjective)"
    binding: list[_Candidate] = []
    for a_obj in attributed:
        a_words = {toks[k].word.lower() for k in a_obj.adjectives}
        for b_obj in objects:
            if b_obj.head == a_obj.head or _variants(toks[b_obj.head].word) & _variants(toks[a_obj.head].word):
                continue
            b_words = {toks[k].word.lower() for k in b_obj.adjectives}
            b_kinds = {_adjective_kind(w) for w in b_words} - {None}
            for a in a_obj.adjectives:
                wa = toks[a].word.lower()
                if wa in b_words:
                    continue
                for b in b_obj.adjectives:  # swap (each pair once: a's object before b's)
                    wb = toks[b].word.lower()
                    if a < b and wb not in a_words:
                        new = _replace(_replace(toks, a, wb), b, wa)
                        binding.append(_Candidate(tuple(new), Change(
                            "swap_attributes", (f"{wa} {toks[a_obj.head].word.lower()}",
                                                f"{wb} {toks[b_obj.head].word.lower()}"),
                            (f"{wb} {toks[a_obj.head].word.lower()}", f"{wa} {toks[b_obj.head].word.lower()}"),
                            "attribute binding")))
                # move a to b's object, unless b already has an attribute of a's kind ("a red blue
                # sphere"): it goes first in b's adjective run; what followed a in its own run now
                # follows a's article, so the article must agree with it again
                if _adjective_kind(wa) in b_kinds:
                    continue
                new = []
                for i, t in enumerate(toks):
                    if i == b_obj.run_start:
                        new.append(_Tok(wa, "JJ", True, False))
                    if i == a:
                        continue
                    new.append(_Tok(t.word, t.tag, True, t.initial) if i == a + 1 and a == a_obj.run_start else t)
                binding.append(_Candidate(tuple(new), Change(
                    "move_attribute", (f"{wa} {toks[a_obj.head].word.lower()}", toks[b_obj.head].word.lower()),
                    (toks[a_obj.head].word.lower(), f"{wa} {toks[b_obj.head].word.lower()}"), "attribute binding")))
    split = _split_candidates(parsed, toks, attributed, vocab, cfg, banned, rng)
    picked = rng.sample(binding, min(len(binding), cfg.per_type))
    picked += rng.sample(split, min(len(split), cfg.per_type - len(picked)))
    if not picked:
        return [], ("attributes already shared by the objects, and no colour/size foil for a compound split"
                    if len(attributed) > 1 or len(objects) > 1 else
                    "one attributed object and no colour/size foil for a compound split")
    return picked, ""


def _adjective_kind(word: str) -> str | None:
    if word in COLOR_WORDS:
        return "color"
    if any(word in pole for pole in SIZE_POLES):
        return "size"
    return None


def _split_candidates(parsed, toks, attributed, vocab, cfg, banned, rng) -> list[_Candidate]:
    """CREPE's compound foil: "a pink car" -> "a pink toy and a blue car" (atoms split over two objects)."""
    slots = {i: (kind, pool) for i, kind, pool in _atom_slots(parsed, vocab, cfg, banned)[0]}
    out = []
    for obj in attributed:
        head_slot = slots.get(obj.head)
        if head_slot is None:
            continue
        for a in obj.adjectives:
            if a not in slots or slots[a][0] not in ("color", "size"):
                continue
            noun_foil = head_slot[1][rng.randrange(len(head_slot[1]))]
            adj_foil = slots[a][1][rng.randrange(len(slots[a][1]))].split()[0]
            start = obj.determiner if obj.determiner is not None else obj.run_start
            phrase = toks[start:obj.head + 1]
            first = [t if k != obj.head - start else _Tok(_match_case(noun_foil, t.word), t.tag, True, t.initial)
                     for k, t in enumerate(phrase)]
            second = [_Tok(t.word[:1].lower() + t.word[1:] if t.initial else t.word, t.tag, False, False)
                      if k != a - start else _Tok(adj_foil, t.tag, True, False) for k, t in enumerate(phrase)]
            if second and second[0].word.lower() in _ARTICLES:
                second[0] = _Tok(second[0].word, second[0].tag, False, False)
                if len(second) > 1:
                    second[1] = _Tok(second[1].word, second[1].tag, True, False)
            new = toks[:start] + first + [_Tok("and", "CC")] + second + toks[obj.head + 1:]
            head = toks[obj.head].word.lower()
            adj = toks[a].word.lower()
            out.append(_Candidate(tuple(new), Change("split_compound", (f"{adj} {head}",),
                                                     (f"{adj} {noun_foil}", f"{adj_foil} {head}"), "compound")))
    return out


# ---------------------------------------------------------------------------- drivers
@dataclass
class CaptionNegatives:
    """The negatives of one caption and, per type that gave none, why."""

    negatives: list[HardNegative]
    skipped: dict[str, str]


def caption_hard_negatives(parsed: ParsedCaption, *, vocabulary: AtomVocabulary | None = None,
                           config: HardNegativeConfig = HardNegativeConfig(), image_id: str | None = None,
                           image_words: Iterable[str] = ()) -> CaptionNegatives:
    """Hard negatives of one parsed caption.

    Args:
        parsed: the caption's parse (:meth:`ParsedCaption.from_tree`).
        vocabulary: the corpus's atoms (foils for HN-ATOM and compound splits); without it only
            colour, size and spatial words are replaced.
        config: how many, which types, seed.
        image_id: the image the caption describes (recorded, and part of the random stream's key).
        image_words: words of every caption of the same image: never used as foils.
    """
    banned = {w.lower() for w in image_words} | set(parsed.words())
    source = parsed.text
    negatives, skipped = [], {}
    seen = {_normalize(source)}
    for hn_type in config.types:
        rng = random.Random(f"{config.seed}:{hn_type}:{image_id}:{source}")
        if hn_type == HN_SWAP:
            cands, reason = _swap_candidates(parsed)
        elif hn_type == HN_ATOM:
            cands, reason = _atom_candidates(parsed, vocabulary, config, banned, rng)
        elif hn_type == HN_NEG:
            cands, reason = _negation_candidates(parsed)
        else:
            cands, reason = _comp_candidates(parsed, vocabulary, config, banned, rng)
        if hn_type in (HN_SWAP, HN_NEG):
            cands = rng.sample(cands, len(cands))
        kept = 0
        for cand in cands:
            if kept >= config.per_type:
                break
            text = _realize(list(cand.tokens), source)
            key = _normalize(text)
            if key in seen:
                continue
            seen.add(key)
            negatives.append(HardNegative(hn_type, text, source, cand.change, image_id))
            kept += 1
        if kept == 0:
            skipped[hn_type] = reason or "every candidate repeats the caption or another negative"
    return CaptionNegatives(negatives, skipped)


@dataclass
class GenerationReport:
    """Counts over a corpus: negatives per type, captions covered per type, skips per type and reason."""

    num_captions: int = 0
    produced: dict[str, int] = field(default_factory=dict)
    captions_with: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, result: CaptionNegatives) -> None:
        self.num_captions += 1
        types = Counter(n.type for n in result.negatives)
        for t, n in types.items():
            self.produced[t] = self.produced.get(t, 0) + n
            self.captions_with[t] = self.captions_with.get(t, 0) + 1
        for t, reason in result.skipped.items():
            self.skip(t, reason)

    def skip(self, hn_type: str, reason: str) -> None:
        bucket = self.skipped.setdefault(hn_type, {})
        bucket[reason] = bucket.get(reason, 0) + 1

    def per_thousand(self) -> dict[str, float]:
        """Negatives produced per 1,000 captions, by type."""
        n = max(self.num_captions, 1)
        return {t: round(1000.0 * c / n, 1) for t, c in sorted(self.produced.items())}

    def as_dict(self) -> dict:
        d = asdict(self)
        d["per_thousand_captions"] = self.per_thousand()
        return d


def corpus_hard_negatives(captions: Iterable[tuple[str | None, ParsedCaption]], *,
                          vocabulary: AtomVocabulary | None = None,
                          config: HardNegativeConfig = HardNegativeConfig()
                          ) -> tuple[list[HardNegative], GenerationReport]:
    """Hard negatives of a corpus of ``(image_id, parsed caption)`` pairs.

    The vocabulary is built from the same captions unless given; the words of all captions of an
    image are kept from being its captions' foils.
    """
    captions = list(captions)
    if vocabulary is None:
        vocabulary = AtomVocabulary.from_parsed(p for _, p in captions)
    image_words: dict[str | None, set[str]] = {}
    for image_id, p in captions:
        image_words.setdefault(image_id, set()).update(p.words())
    report, out = GenerationReport(), []
    for image_id, p in captions:
        result = caption_hard_negatives(p, vocabulary=vocabulary, config=config, image_id=image_id,
                                        image_words=image_words[image_id])
        report.add(result)
        out.extend(result.negatives)
    return out, report

