"""The generated world's English: captions sampled from a scene's graph, and parsed back.

Generation walks the scene graph as CREPE does (§A.3): start at an object, add some of its
attributes, and possibly follow a true relation to another object, recursively; the walk's length
sets the caption's complexity (CREPE's productivity axis). The logical form is then realised with
real variety: determiners and counts, synonyms (ball/sphere, big/large, beside/next to), adjective
order, prepositional phrases, relative clauses (``that is ...``), reduced relatives (``sitting
...``), ``there is`` forms, coordination, clauses, and both "A red ball." and "a red ball" styles.

Every sampled caption is checked against its scene before it is kept. :func:`parse_caption` and
:func:`parse_phrase` read the language back into logical forms, which gives exact denotations for
the noun phrases and sentences the CRG extracts; :func:`parse_caption_tree` also returns the reading's
constituency skeleton, from which :mod:`features.world.gold_trees` writes the world's gold trees.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache
from itertools import accumulate

from features.world.scene import Scene, WorldConfig
from features.world.semantics import ATTRIBUTE_KINDS, Caption, ObjectRef, holds

__all__ = ["sample_caption", "realize", "parse_caption", "parse_caption_tree", "parse_phrase", "sample_captions"]

NOUNS = {"ball": ("ball", "sphere"), "cube": ("cube", "box", "block"), "cylinder": ("cylinder",),
         "cone": ("cone",), "pyramid": ("pyramid",), "ring": ("ring",)}
PLURALS = {"box": "boxes"}
SIZE_WORDS = {"small": ("small", "little", "tiny"), "medium": ("medium-sized",), "large": ("large", "big")}
MATERIAL_WORDS = {"metal": ("metal", "metallic")}
REL_WORDS = {"left_of": ("to the left of", "left of"), "right_of": ("to the right of", "right of"),
             "in_front_of": ("in front of",), "behind": ("behind",), "next_to": ("next to", "beside", "near"),
             "on_top_of": ("on top of", "on"), "under": ("under", "beneath", "below")}
NUMBERS = {2: "two", 3: "three", 4: "four"}
VERBS_ING = ("sitting", "lying", "resting", "standing", "placed")
CLAUSE_VERBS_SG = ("is", "is", "sits", "is sitting", "is placed", "can be seen")
CLAUSE_VERBS_PL = ("are", "are", "sit", "are sitting", "are placed", "can be seen")

# caption forms and how often each is drawn (roughly Flickr30K/COCO-like: mostly NPs and clauses)
FORMS = (("np", 0.22), ("np_rel", 0.2), ("clause", 0.26), ("there", 0.1), ("and", 0.1), ("count", 0.06),
         ("two_clauses", 0.06))
_FORM_NAMES = tuple(name for name, _ in FORMS)
_FORM_CUM_WEIGHTS = tuple(accumulate(weight for _, weight in FORMS))  # what random.choices would sum per call


# ---------------------------------------------------------------------------- sampling
def _sample(rng: random.Random, population: tuple | list, k: int) -> list:
    """``k`` distinct items in random order, by a partial Fisher-Yates shuffle.

    The same draws, in the same order, as CPython's ``random.sample`` on populations of up to 21
    items (all here), at a third of its cost: ``sample``'s argument handling was 12 % of the captions'
    time.
    """
    pool = list(population)
    n = len(pool)
    out = []
    for i in range(k):
        j = rng.randrange(n - i)
        out.append(pool[j])
        pool[j] = pool[n - i - 1]
    return out


def _outgoing(scene: Scene, k: int) -> list[tuple[str, int]]:
    """``(relation, other)`` pairs true of object ``k``, cached on the scene."""
    table = scene.__dict__.get("_outgoing")
    if table is None:
        table = [[] for _ in scene.objects]
        for a, r, b in scene.relations():
            table[a].append((r, b))
        scene.__dict__["_outgoing"] = table
    return table[k]


def _describe(rng: random.Random, scene: Scene, k: int, depth: int, n_attrs: int | None = None) -> ObjectRef:
    obj = scene.objects[k]
    if n_attrs is None:
        n_attrs = rng.choice((0, 1, 1, 2, 2, 3))
    if n_attrs:  # (sample(..., 0) draws nothing: skipping it keeps the stream)
        kinds = _sample(rng, ATTRIBUTE_KINDS, n_attrs)
        attrs = tuple((kind, getattr(obj, kind)) for kind in ATTRIBUTE_KINDS if kind in kinds)
    else:
        attrs = ()
    relation = None
    if depth > 0:
        options = _outgoing(scene, k)
        if options:
            r, b = rng.choice(options)
            relation = (r, _describe(rng, scene, b, depth - 1))
    return ObjectRef(obj.shape, attrs, relation)


def sample_caption(rng: random.Random, scene: Scene, max_tries: int = 50) -> Caption:
    """A caption true of ``scene``, of a randomly drawn form and complexity."""
    for _ in range(max_tries):
        form = rng.choices(_FORM_NAMES, cum_weights=_FORM_CUM_WEIGHTS)[0]
        cap = _sample_form(rng, scene, form)
        if cap is not None and holds(scene, cap):
            return cap
    k = rng.randrange(len(scene.objects))  # always true: "a <shape>"
    return Caption("np", (ObjectRef(scene.objects[k].shape),))


def _sample_form(rng: random.Random, scene: Scene, form: str) -> Caption | None:
    n = len(scene.objects)
    k = rng.randrange(n)
    if form == "np":
        return Caption("np", (_describe(rng, scene, k, depth=0, n_attrs=rng.randint(1, 3)),))
    if form == "np_rel":
        return Caption("np", (_describe(rng, scene, k, depth=rng.choice((1, 1, 2))),))
    if form == "there":
        return Caption("there", (_describe(rng, scene, k, depth=rng.choice((0, 1))),))
    if form == "clause":
        options = _outgoing(scene, k)
        if not options:
            return None
        r, b = rng.choice(options)
        return Caption("clause", (_describe(rng, scene, k, 0), _describe(rng, scene, b, rng.choice((0, 0, 1)))), r)
    if form == "and":
        others = [j for j in range(n) if j != k]
        picks = [k] + _sample(rng, others, min(len(others), rng.choice((1, 1, 2))))
        return Caption("and", tuple(_describe(rng, scene, j, 0) for j in picks))
    if form == "count":
        obj = scene.objects[k]
        kinds = [kind for kind in ("color", "size", "material") if rng.random() < 0.5]
        ref = ObjectRef(obj.shape, tuple((kind, obj.attribute(kind)) for kind in ATTRIBUTE_KINDS if kind in kinds))
        from features.world.semantics import matching_objects

        count = len(matching_objects(scene, ref))
        if count not in NUMBERS:
            return None
        return Caption("there" if rng.random() < 0.5 else "np", (ObjectRef(ref.shape, ref.attrs, None, count),))
    if form == "two_clauses":
        a = _sample_form(rng, scene, "clause")
        b = _sample_form(rng, scene, "clause")
        return None if a is None or b is None else Caption("two_clauses", (a, b))
    raise ValueError(f"unknown caption form {form!r}")


# ---------------------------------------------------------------------------- realisation
def _noun(rng, shape: str | None, plural: bool) -> str:
    word = rng.choice(NOUNS[shape]) if shape else rng.choice(("object", "thing"))
    return (PLURALS.get(word, word + "s")) if plural else word


def _adjective(rng, kind: str, value: str) -> str:
    table = SIZE_WORDS if kind == "size" else MATERIAL_WORDS if kind == "material" else {}
    return rng.choice(table.get(value, (value,)))


def _np(rng, ref: ObjectRef, definite_ok: bool = True) -> str:
    plural = ref.count is not None and ref.count > 1
    words = [_adjective(rng, kind, value) for kind, value in ref.attrs]
    head = " ".join(words + [_noun(rng, ref.shape, plural)])
    if ref.count is not None and ref.count > 1:
        det = NUMBERS[ref.count]
    else:
        det = "an" if head[0] in "aeiou" else "a"
    text = f"{det} {head}"
    if ref.negated_attr:
        kind, value = ref.negated_attr
        text += f" that {'are' if plural else 'is'} not {_adjective(rng, kind, value)}"
    if ref.relation:
        rel, other = ref.relation
        style = rng.choice(("pp", "pp", "that", "which", "ving"))
        rel_words = rng.choice(REL_WORDS[rel])
        be = "are" if plural else "is"
        if style == "pp":
            text += f" {rel_words} {_np(rng, other)}"
        elif style in ("that", "which"):
            text += f" {style} {be} {rel_words} {_np(rng, other)}"
        else:
            text += f" {rng.choice(VERBS_ING)} {rel_words} {_np(rng, other)}"
    return text


def realize(rng: random.Random, caption: Caption) -> str:
    """One surface string for a logical form (random synonyms, styles and casing)."""
    if caption.kind == "np":
        text = _np(rng, caption.parts[0])
    elif caption.kind == "there":
        ref = caption.parts[0]
        text = f"there {'are' if ref.count and ref.count > 1 else 'is'} {_np(rng, ref)}"
    elif caption.kind == "negation":
        text = f"there is no {_np(rng, caption.parts[0]).split(' ', 1)[1]}"
    elif caption.kind == "clause":
        subj, obj = caption.parts
        plural = subj.count is not None and subj.count > 1
        verb = rng.choice(CLAUSE_VERBS_PL if plural else CLAUSE_VERBS_SG)
        text = f"{_np(rng, subj)} {verb} {rng.choice(REL_WORDS[caption.relation])} {_np(rng, obj)}"
    elif caption.kind == "and":
        nps = [_np(rng, p) for p in caption.parts]
        text = nps[0] if len(nps) == 1 else ", ".join(nps[:-1]) + " and " + nps[-1]
    elif caption.kind == "two_clauses":
        a, b = (realize(rng, p).rstrip(".") for p in caption.parts)
        text = f"{a[0].lower() + a[1:]}, and {b[0].lower() + b[1:]}" if rng.random() < 0.5 else f"{a} while {b}"
    else:
        raise ValueError(f"unknown caption kind {caption.kind!r}")
    text = text.lower()
    if rng.random() < 0.8:  # most captions: capitalised with a final period, like Flickr30K
        text = text[0].upper() + text[1:] + "."
    return text


def sample_captions(rng: random.Random, scene: Scene, n: int = 5) -> list[tuple[str, Caption]]:
    """``n`` distinct true captions of a scene with their logical forms."""
    out, seen = [], set()
    for _ in range(n * 20):
        lf = sample_caption(rng, scene)
        text = realize(rng, lf)
        if text.lower().rstrip(".") in seen:
            continue
        seen.add(text.lower().rstrip("."))
        out.append((text, lf))
        if len(out) == n:
            break
    return out


# ---------------------------------------------------------------------------- parsing back
_WORD_TO_SHAPE = {w: s for s, words in NOUNS.items() for w in words}
_WORD_TO_SHAPE.update({PLURALS.get(w, w + "s"): s for s, words in NOUNS.items() for w in words})
_GENERIC = {"object", "thing", "objects", "things"}
_PLURAL_WORDS = {PLURALS.get(w, w + "s") for words in NOUNS.values() for w in words} | {"objects", "things"}


@lru_cache(maxsize=8)  # one per world configuration: the reader is called once per caption
def _adjective_lexicon(cfg: WorldConfig) -> dict[str, tuple[str, str]]:
    lex = {c: ("color", c) for c in cfg.colors}
    lex.update({m: ("material", m) for m in cfg.materials})
    for value, words in SIZE_WORDS.items():
        lex.update({w: ("size", value) for w in words})
    for value, words in MATERIAL_WORDS.items():
        lex.update({w: ("material", value) for w in words})
    return lex


_REL_PHRASES = sorted(((tuple(p.split()), r) for r, ps in REL_WORDS.items() for p in ps), key=lambda x: -len(x[0]))
_REL_BY_FIRST: dict[str, list[tuple[tuple[str, ...], str]]] = {}  # the same, by first word: longest first
for _phrase, _r in _REL_PHRASES:
    _REL_BY_FIRST.setdefault(_phrase[0], []).append((_phrase, _r))
_NUMBER_WORDS = {v: k for k, v in NUMBERS.items()}


# Part-of-speech tags of the function words the reader meets (gold trees; relation words are tagged IN)
_VERB_TAGS = {"is": "VBZ", "sits": "VBZ", "are": "VBP", "sit": "VBP", "sitting": "VBG", "lying": "VBG",
              "resting": "VBG", "standing": "VBG", "placed": "VBN", "can": "MD", "be": "VB", "seen": "VBN"}
_CLAUSE_VERBS = sorted(set(CLAUSE_VERBS_SG + CLAUSE_VERBS_PL), key=lambda v: (-len(v.split()), v))  # longest first


class _Parser:
    """A deterministic reader of the world's language over lower-cased tokens without punctuation.

    Every reading is ``(meaning, end, skeleton)``: the logical form, the index after its last token, and,
    when built with ``trees=True``, its constituency skeleton (else ``None``). A skeleton is a phrase
    ``(label, [children])`` whose leaves are preterminals ``(tag, token index)``; the bracketing is the
    one :mod:`features.world.gold_trees` documents.
    """

    def __init__(self, tokens: list[str], cfg: WorldConfig, trees: bool = False):
        self.t = tokens
        self.adj = _adjective_lexicon(cfg)
        self.trees = trees

    def rel(self, i: int):
        for phrase, r in _REL_BY_FIRST.get(self.t[i], ()) if i < len(self.t) else ():
            if tuple(self.t[i:i + len(phrase)]) == phrase:
                return r, i + len(phrase)
        return None

    def _pp(self, i: int, k: int, obj_tree):
        """``(PP (IN w) ... NP)``: the relation words ``i..k`` are one multiword preposition."""
        return ("PP", [("IN", m) for m in range(i, k)] + [obj_tree]) if self.trees else None

    def np(self, i: int, require_det: bool = False):
        t = self.t
        count, bare = None, False
        lead = []  # the determiner's preterminal
        if i < len(t) and t[i] in ("a", "an", "the", "one"):
            lead = [("CD" if t[i] == "one" else "DT", i)]
            i += 1
        elif i < len(t) and t[i] in _NUMBER_WORDS:
            count = _NUMBER_WORDS[t[i]]
            lead = [("CD", i)]
            i += 1
        elif require_det:
            return None
        else:
            bare = True  # "red balls", "ball": a CRG sub-phrase without its determiner
        first_adj = i
        attrs = []
        while i < len(t) and t[i] in self.adj:
            attrs.append(self.adj[t[i]])
            i += 1
        if i >= len(t) or (t[i] not in _WORD_TO_SHAPE and t[i] not in _GENERIC):
            return None
        plural = t[i] in _PLURAL_WORDS
        if plural and count is None and not bare or count is not None and not plural:
            return None
        shape = _WORD_TO_SHAPE.get(t[i])
        tree = ("NP", lead + [("JJ", k) for k in range(first_adj, i)] + [("NNS" if plural else "NN", i)]) \
            if self.trees else None
        i += 1
        attrs = tuple(sorted(set(attrs), key=lambda a: ATTRIBUTE_KINDS.index(a[0])))
        negated = None  # "a ball that is not red" (hard negatives, features/world/hard_negatives.py)
        if t[i:i + 3] in (["that", "is", "not"], ["that", "are", "not"]) and i + 3 < len(t) and t[i + 3] in self.adj:
            if self.trees:
                clause = ("VP", [(_VERB_TAGS[t[i + 1]], i + 1), ("RB", i + 2), ("ADJP", [("JJ", i + 3)])])
                tree = ("NP", [tree, ("RRC", [("WHNP", [("WDT", i)]), clause])])
            negated, i = self.adj[t[i + 3]], i + 4
        ref = ObjectRef(shape, attrs, None, count, negated)
        # optional post-modifier: PP, relative clause, reduced relative
        j = i
        if j + 1 < len(t) and t[j] in ("that", "which") and t[j + 1] in ("is", "are"):
            j += 2
        elif j < len(t) and t[j] in VERBS_ING:
            j += 1
        got = self.rel(j)
        if got is not None:
            relation, k = got
            inner = self.np(k, require_det=True)
            if inner is not None:
                other, end, other_tree = inner
                if self.trees:
                    modifier = self._pp(j, k, other_tree)
                    if j == i + 2:  # "that is ...": a relative clause
                        modifier = ("RRC", [("WHNP", [("WDT", i)]), ("VP", [(_VERB_TAGS[t[i + 1]], i + 1), modifier])])
                    elif j == i + 1:  # "sitting ...": a reduced relative
                        modifier = ("VP", [(_VERB_TAGS[t[i]], i), modifier])
                    tree = ("NP", [tree, modifier])
                return ObjectRef(shape, attrs, (relation, other), count, negated), end, tree
        return ref, i, tree

    def clause(self, i: int):
        subj = self.np(i)
        if subj is None:
            return None
        ref, j, subj_tree = subj
        for v in _CLAUSE_VERBS:
            vw = v.split()
            if self.t[j:j + len(vw)] == vw:
                got = self.rel(j + len(vw))
                if got is None:
                    continue
                relation, k = got
                obj = self.np(k, require_det=True)
                if obj is not None:
                    tree = None
                    if self.trees:  # "can be seen behind X": (VP (MD can) (VP (VB be) (VP (VBN seen) (PP ...))))
                        tree = self._pp(j + len(vw), k, obj[2])
                        for m in reversed(range(j, j + len(vw))):
                            tree = ("VP", [(_VERB_TAGS[self.t[m]], m), tree])
                        tree = ("S", [subj_tree, tree])
                    return Caption("clause", (ref, obj[0]), relation), obj[1], tree
        return None


def _tokens(text: str) -> list[str]:
    return re.sub(r"[.,]", " ", text.lower()).split()


def parse_caption(text: str, cfg: WorldConfig = WorldConfig()) -> Caption | None:
    """The logical form of a caption of the world's language, or ``None`` if it is not one."""
    got = _read_caption(_Parser(_tokens(text), cfg))
    return None if got is None else got[0]


def parse_caption_tree(text: str, cfg: WorldConfig = WorldConfig()) -> tuple[Caption, tuple] | None:
    """A caption's logical form and constituency skeleton (see :class:`_Parser`), or ``None``.

    The skeleton's token indices count the words of ``text`` lower-cased, without ``.`` and ``,``.

    >>> lf, skeleton = parse_caption_tree("A cube is in front of a ball.")
    >>> lf.relation, skeleton[0], skeleton[1][1]
    ('in_front_of', 'S', ('VP', [('VBZ', 2), ('PP', [('IN', 3), ('IN', 4), ('IN', 5), ('NP', [('DT', 6), ('NN', 7)])])]))
    """
    got = _read_caption(_Parser(_tokens(text), cfg, trees=True))
    return None if got is None else (got[0], got[2])


def _read_caption(p: _Parser):
    toks = p.t
    whole = _parse_sentence(p, 0)
    if whole is not None and whole[1] == len(toks):
        return whole
    # "X, and Y" / "X while Y"
    for k, tok in enumerate(toks):
        if tok in ("and", "while"):
            left, right = _parse_sentence(p, 0), _parse_sentence(p, k + 1)
            if left and right and left[1] == k and right[1] == len(toks) and \
                    left[0].kind == "clause" and right[0].kind == "clause":
                tree = ("S", [left[2], ("CC" if tok == "and" else "IN", k), right[2]]) if p.trees else None
                return Caption("two_clauses", (left[0], right[0])), len(toks), tree
    return None


def _with_determiner(tree: tuple, leaf: tuple) -> tuple:
    """``tree`` (an NP) with ``leaf`` put first in its leftmost base NP: "no" of "there is no red ball"."""
    label, children = tree
    if isinstance(children[0][1], int):  # a base NP: preterminals only
        return label, [leaf] + children
    return label, [_with_determiner(children[0], leaf)] + children[1:]


def _parse_sentence(p: _Parser, i: int):
    t = p.t
    if t[i:i + 2] in (["there", "is"], ["there", "are"]):
        negated = t[i + 2:i + 3] == ["no"]
        got = p.np(i + 3) if negated else p.np(i + 2, require_det=True)
        if got is None:
            return None
        tree = None
        if p.trees:
            obj = _with_determiner(got[2], ("DT", i + 2)) if negated else got[2]
            tree = ("S", [("NP", [("EX", i)]), ("VP", [(_VERB_TAGS[t[i + 1]], i + 1), obj])])
        return Caption("negation" if negated else "there", (got[0],)), got[1], tree
    clause = p.clause(i)
    if clause is not None:
        return clause
    parts, trees, j = [], [], i
    while True:
        got = p.np(j, require_det=True)
        if got is None:
            return None
        parts.append(got[0])
        trees.append(got[2])
        j = got[1]
        if j < len(t) and t[j] == "and":
            trees.append(("CC", j))
            j += 1
            continue
        if j < len(t) and (t[j] in ("a", "an") or t[j] in _NUMBER_WORDS):  # "a X, a Y and a Z" (commas dropped)
            continue
        break
    if len(parts) == 1:
        return Caption("np", (parts[0],)), j, trees[0]
    return Caption("and", tuple(parts)), j, ("NP", trees) if p.trees else None


def parse_phrase(text: str, cfg: WorldConfig = WorldConfig()) -> Caption | None:
    """The logical form of a CRG concept's text (a noun phrase or a sentence), if it has one.

    A bare noun ("ball") or an NP without determiner ("red balls") means "some such object".
    """
    cap = parse_caption(text, cfg)
    if cap is not None:
        return cap
    toks = _tokens(text)
    got = _Parser(toks, cfg).np(0)
    if got is not None and got[1] == len(toks):
        return Caption("np", (got[0] if got[0].count is not None or toks[0] in _NUMBER_WORDS
                              else got[0].without_count(),))
    return None
