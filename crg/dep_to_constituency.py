"""Convert a labelled dependency parse (ClearNLP labels, as spaCy's English models produce) into a
Penn-Treebank-style constituency tree.

Why: the paper parses with benepar, whose models cannot be downloaded here; spaCy's
``en_core_web_sm`` installs from PyPI and parses fast. Its dependency trees hold the attachment
decisions of a constituency parse; what they lack is the *projection* of each head into its phrase
levels. This module adds exactly that, following PTB conventions:

* a noun projects to a base ``NP`` (determiners, adjectives, compounds, numbers, possessors), then to
  an ``NP`` over that base for post-modifiers: ``(NP (NP a man) (PP in (NP a shirt)))``;
* a verb projects to a ``VP`` (objects, complements, PPs), one more ``VP`` per auxiliary
  (``(VP are (VP running ...))``), an ``S`` with the subject (``SQ``/``SINV`` when inverted), and an
  ``SBAR`` (``SBARQ``) with a complementizer or a relative/wh word;
* coordination gives ``(XP (XP ..) (CC and) (XP ..))``, flat when every conjunct is a bare word;
* adjectives, adverbs, prepositions and particles project to ``ADJP``, ``ADVP``, ``PP``, ``PRT``.

Each dependent gets a *level* in its head's projection. A dependent sandwiched between dependents
of a lower level is pulled down to that level, so every constituent covers a contiguous span and
the leaves always come out in sentence order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import Sequence

from nltk import Tree

from crg.ptb import PUNCT_TAGS, escape_ptb_word, unescape_ptb_word  # re-exported: their home before crg.ptb

__all__ = ["dependency_to_constituency", "projectivize", "escape_ptb_word", "unescape_ptb_word", "PUNCT_TAGS"]

logger = logging.getLogger(__name__)

#: Bump whenever the conversion's output can change: parse caches are keyed on it.
CONVERTER_VERSION = "7"

#: How many sentences needed the flat fallback projection (for benchmarks and tests).
FALLBACKS = [0]

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
NOMINAL_HEAD_TAGS = NOUN_TAGS | {"PRP", "EX", "CD", "WP", "FW", "SYM", "$", "ADD", "XX", "LS", "AFX",
                                 "DT", "PDT", "WDT", "PRP$", "WP$", "POS"}
VERB_TAGS = frozenset({"VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "MD"})
ADJ_TAGS = frozenset({"JJ", "JJR", "JJS"})
ADV_TAGS = frozenset({"RB", "RBR", "RBS", "WRB"})
WH_TAGS = frozenset({"WDT", "WP", "WP$", "WRB"})

# Roles only a noun phrase fills (an adjective in one heads an NP: "many of them").
NOMINAL_ROLES = frozenset({"nsubj", "nsubjpass", "dobj", "pobj", "dative"})
# Dependents only a verb takes (ClearNLP makes the copula, not a predicate noun, the head).
VERB_ONLY_DEPS = frozenset({"nsubj", "nsubjpass", "dobj", "aux", "auxpass", "ccomp"})
SUBJECT_DEPS = frozenset({"nsubj", "nsubjpass", "csubj", "csubjpass", "expl"})
AUX_DEPS = frozenset({"aux", "auxpass"})
# Dependents right of a noun that still belong to its base NP.
RIGHT_BASE_DEPS = frozenset({"case", "compound", "nummod", "det", "poss", "nmod", "quantmod", "predet"})
# Dependents left of a noun that attach above its base NP.
LEFT_POST_DEPS = frozenset({"prep", "acl", "relcl", "advcl", "appos", "punct"})
# Roles inside a base NP / ADJP: their phrases are spelled out flat, PTB style.
NP_INTERNAL_ROLES = frozenset({"amod", "compound", "nmod", "nummod", "quantmod", "det", "predet", "nn"})
# Roles whose single-word dependents stay bare preterminals.
BARE_ROLES = NP_INTERNAL_ROLES | {"case", "aux", "auxpass", "neg", "cc", "punct", "mark", "preconj"}
# Roles of a prenominal amount ("a $ 5 million account", "a 10 % stake"), an ADJP in PTB.
MEASURE_ROLES = frozenset({"compound", "nmod", "amod", "npadvmod", "nummod", "nn"})
GLUE_PUNCT = frozenset({",", ":"})
# Dependents moved from an inverted parenthetical reporting verb to the clause it interrupts.
_LIFTED_DEPS = frozenset({"advmod", "cc", "punct", "npadvmod", "prep", "advcl"})
# Label of a temporary node whose children are spliced into the parent (flat compounds).
_SPLICE = "@SPLICE"

def projectivize(heads: Sequence[int]) -> list[int]:
    """Lift non-projective arcs until every subtree covers a contiguous span.

    ``heads[i]`` is the index of token ``i``'s head, ``i`` itself for a root. The dependent of the
    shortest crossing arc is re-attached to its head's head (the standard lifting operation) until
    no arc crosses; every token keeps an ancestor of its original head.

    >>> projectivize([1, 1, 3, 1])      # already projective
    [1, 1, 3, 1]
    >>> projectivize([2, 2, 2, 0])      # the arc 0->3 spans token 1, which 0 does not dominate
    [2, 2, 2, 2]
    """
    heads = list(heads)
    if _is_projective(heads):  # nearly every caption: skip the quadratic search
        return heads
    for _ in range(len(heads) ** 2 + 1):
        d = _shortest_crossing_dependent(heads)
        if d is None:
            return heads
        h = heads[d]
        # lift to the grandparent; a dependent of a root whose arc still crosses (several roots
        # in one sentence) becomes a root of its own
        heads[d] = heads[h] if heads[h] != h else d
    raise AssertionError(f"projectivize did not converge for heads={heads}")


def _is_projective(heads: list[int]) -> bool:
    """True for a tree with one root and no crossing arcs, where nothing needs lifting; False
    also for several roots or a cycle (left to the general search).

    >>> _is_projective([1, 1, 3, 1]), _is_projective([2, 2, 2, 0]), _is_projective([1, 0, 2])
    (True, False, False)
    """
    n = len(heads)
    root = -1
    for d in range(n):
        if heads[d] == d:
            if root >= 0:
                return False
            root = d
    if root < 0:
        return False
    reaches = [False] * n  # reaches[t]: t's chain of heads ends at the root
    reaches[root] = True
    for d in range(n):  # every token reaches the root: no cycle
        path, t = [], d
        while not reaches[t]:
            path.append(t)
            t = heads[t]
            if len(path) > n:
                return False
        for p in path:
            reaches[p] = True
    # arcs as spans, left to right, outer before inner: each must lie inside the innermost open span it starts in
    open_spans: list[tuple[int, int]] = []
    for lo, neg_hi in sorted((d, -h) if d < h else (h, -d) for d, h in enumerate(heads) if d != h):
        hi = -neg_hi
        if lo < root < hi:
            return False
        while open_spans and open_spans[-1][1] <= lo:
            open_spans.pop()
        if open_spans and open_spans[-1][0] < lo and hi > open_spans[-1][1]:
            return False
        open_spans.append((lo, hi))
    return True


def _dominates(heads: list[int], ancestor: int, token: int) -> bool:
    for _ in range(len(heads) + 1):
        if token == ancestor:
            return True
        if heads[token] == token:
            return False
        token = heads[token]
    return False


def _shortest_crossing_dependent(heads: list[int]) -> int | None:
    best = None
    for d, h in enumerate(heads):
        if h == d or (best is not None and abs(h - d) >= abs(heads[best] - best)):
            continue
        lo, hi = min(d, h), max(d, h)
        if any(not _dominates(heads, h, k) for k in range(lo + 1, hi)):
            best = d
    return best


@dataclass(slots=True)
class _Item:
    """A built constituent and the token span it covers."""

    tree: Tree
    start: int
    end: int
    level: int = 0


_start = attrgetter("start")


class _Converter:
    """One sentence's conversion; holds the arrays so the recursive builders stay short."""

    def __init__(self, words, tags, heads, deps):
        self.words = [escape_ptb_word(w) for w in words]
        self.tags = list(tags)
        self.heads = projectivize(heads)
        self.deps = list(deps)
        self.children: list[list[int]] = [[] for _ in self.words]
        for d, h in enumerate(self.heads):
            if h != d:
                self.children[h].append(d)
        for h in range(len(self.words)):
            for c in self.children[h]:
                if self.deps[c] == "conj" and c < h:  # conjuncts follow their head; anything else is noise
                    self.deps[c] = "dep"
                # spaCy labels the second item of "a dog, a cat and a bird" appos of the first,
                # with the coordinator below it: that is coordination, not apposition.
                # A common noun in apposition to a name is a title, even when coordinated:
                # "Rowe, (NP president and chief executive)".
                if self.deps[c] == "appos" and any(self.deps[g] in ("cc", "conj") for g in self.children[c]) \
                        and not (self.tags[h] in ("NNP", "NNPS") and self.tags[c] in ("NN", "NNS")):
                    self.deps[c] = "conj"
        self._lift_from_inverted_parentheticals()
        # the word class of every token, fixed from here on (tags, deps and arcs no longer change)
        self.cats = [self._category(i) for i in range(len(self.words))]
        self.question = bool(self.words) and self.words[-1] == "?"
        self.parenthetical = False  # a clause was marked |PRN (see _mark_parentheticals)

    def _lift_from_inverted_parentheticals(self) -> None:
        """``And , says Mr. Dinkins , he did n't know``: spaCy hangs the words before an inverted
        reporting verb (``And``, ``Now``) on that verb; they belong to the clause it interrupts, whose
        head is the reporting verb's head. Moves them there, so the parenthetical is just
        ``(SINV (VP says) (NP Mr. Dinkins))``."""
        for v, h in enumerate(self.heads):
            if self.deps[v] != "parataxis" or h <= v or not any(
                    self.deps[c] in ("nsubj", "nsubjpass") and c > v for c in self.children[v]):
                continue
            left = [c for c in self.children[v] if c < v]
            if not left or any(self.deps[c] not in _LIFTED_DEPS for c in left):
                continue
            for c in left:
                self.heads[c] = h
                self.children[v].remove(c)
                self.children[h].append(c)
            self.children[h].sort()

    # ------------------------------------------------------------------ small helpers
    def leaf(self, i: int) -> Tree:
        word, tag = self.words[i], self.tags[i]
        if word == '"':
            word = "``" if tag == "``" else "''"
        return Tree(tag, [word])

    def kids(self, i: int, exclude=()) -> list[int]:
        """``i``'s dependents not in ``exclude``, in sentence order (``children`` lists are sorted)."""
        if not exclude:
            return self.children[i][:]
        return [c for c in self.children[i] if c not in exclude]

    def _category(self, i: int) -> str:
        """The word class that decides ``i``'s projection (``cats`` holds every token's)."""
        tag = self.tags[i]
        kid_deps = {self.deps[c] for c in self.children[i]}
        if tag in ("VBG", "VBN") and self.deps[i] == "prep":
            return "prep"  # "according to", "including", "compared with": PTB's PP headed by a participle
        if tag in VERB_TAGS or tag in NOUN_TAGS and kid_deps & VERB_ONLY_DEPS:
            return "verb"  # a "noun" with a subject or an object is a verb the tagger missed ("teachers telegraph")
        if tag in ADJ_TAGS:  # "the rich", "many of the risks": an adjective heading a noun phrase
            return "noun" if kid_deps & {"det", "poss"} or self.deps[i] in NOMINAL_ROLES else "adj"
        if tag in NOMINAL_HEAD_TAGS:
            return "noun"
        if tag in ADV_TAGS:
            return "adv"
        if tag in ("IN", "TO"):
            return "prep"
        return {"RP": "prt", "UH": "intj", "CC": "conj"}.get(tag, "other")

    def phrase_label(self, i: int) -> str:
        return {"noun": "NP", "verb": "VP", "adj": "ADJP", "adv": "ADVP", "prep": "PP", "prt": "PRT",
                "intj": "INTJ", "conj": "CONJP"}.get(self.cats[i], "FRAG")

    def subtree(self, i: int, exclude=()) -> list[int]:
        out, stack = [], [i]
        while stack:
            t = stack.pop()
            out.append(t)
            stack.extend(self.kids(t, exclude))
        return sorted(out)

    # ------------------------------------------------------------------ fallback
    def flat_projection(self) -> Tree:
        """Each head with all its dependents as one flat phrase: crude, but always in word order."""

        def build(i: int) -> tuple[int, Tree]:
            kids = sorted(self.children[i])
            if not kids:
                return i, self.leaf(i)
            parts = sorted([(i, self.leaf(i))] + [(self.subtree(c)[0], build(c)[1]) for c in kids],
                           key=lambda p: p[0])
            label = "S" if self.cats[i] == "verb" else self.phrase_label(i)
            return parts[0][0], Tree(label, [t for _, t in parts])

        roots = [i for i, h in enumerate(self.heads) if h == i]
        trees = [t if t.height() > 2 else Tree("FRAG", [t]) for _, t in sorted(build(r) for r in roots)]
        return trees[0] if len(trees) == 1 else Tree("FRAG", trees)

    # ------------------------------------------------------------------ entry point
    def convert(self) -> Tree:
        roots = [i for i, h in enumerate(self.heads) if h == i]
        items = [self.build(r, "ROOT") for r in roots]
        trees = [it.tree for it in items]
        if len(trees) == 1:
            top = trees[0]
            if _preterminal(top):  # a one-word sentence: give it a phrase node
                top = Tree("NP" if self.cats[roots[0]] == "noun" else "FRAG", [top])
        else:
            labels = {t.label() for t in trees}
            top = Tree("S" if labels <= {"S", "SQ", "SINV", "SBARQ"} else "FRAG", trees)
        if self.parenthetical or any(tag == "-LRB-" or tag == ":" and word in ("--", "-")
                                     for word, tag in zip(self.words, self.tags)):
            top = _mark_parentheticals(top)
        return Tree("TOP", [top])

    # ------------------------------------------------------------------ coordination
    def coordination(self, h: int) -> tuple[list[int], list[int]]:
        """Conjuncts chained below ``h`` (``a -> b -> c``) and the coordinators/commas between them."""
        conj, stack = [], [c for c in self.children[h] if self.deps[c] == "conj"]
        while stack:
            c = stack.pop()
            conj.append(c)
            stack.extend(g for g in self.children[c] if self.deps[g] == "conj")
        if not conj:
            return [], []
        conj.sort()
        owners = [h] + conj
        candidates = [g for o in owners for g in self.children[o]
                      if self.deps[g] in ("cc", "preconj") or (self.deps[g] == "punct" and self.tags[g] in GLUE_PUNCT)]
        glue_set = set(candidates)
        cores = []
        for o in conj:
            span = self.subtree(o, exclude=set(conj) | glue_set)
            cores.append((span[0], span[-1]))
        glue = []
        for g in candidates:
            if self.deps[g] == "preconj" and g < h:
                continue
            if not (h < g < conj[-1]) and (self.deps[g] != "cc" or g < h):  # "But .. had X and could Y"
                continue
            if any(lo < g < hi for lo, hi in cores):
                continue
            glue.append(g)
        return conj, sorted(glue)

    # ------------------------------------------------------------------ generic projection
    def project(self, h: int, items: list[_Item], labels: list[tuple[str | None, bool]],
                coord: tuple[list[_Item], int] | None = None, bare_ok: bool = False,
                head: _Item | None = None) -> _Item:
        """Nest ``h``'s projection: level k wraps level k-1 plus the items at level k.

        ``labels[k] = (label, required)``: the node made at level k, and whether it is made even
        when no item attaches there (an ``S`` over a subjectless complement clause, say).
        ``coord = (members, k)``: a coordination (conjuncts and glue) joined right after level k
        is built; what level k holds to the right of it is attached above the coordination.
        With ``bare_ok``, a head with no dependents stays a bare preterminal. ``head`` replaces the
        head word's preterminal as the innermost constituent (a ``QP`` around a number, say).
        """
        top = len(labels) - 1
        block = None
        if coord is not None:
            members, coord_level = coord
            block = (min(m.start for m in members), max(m.end for m in members))
            # the head's own dependents between the conjuncts ("people, one with a hat, and one ...")
            # belong to the coordination; never drop them
            inside = [it for it in items if block[0] < it.start < block[1]]
            items = [it for it in items if it not in inside]
            members = members + inside
            coord = (members, coord_level)
            for it in items:  # anything right of the coordination attaches above it
                if it.start > block[1] and it.level < coord_level:
                    it.level = coord_level
        if head is None:
            head = _Item(self.leaf(h), h, h)
        if items:  # contiguity: pull sandwiched items down to level k
            # [lo, hi] covers the head and the items at level <= k; it only grows with k, and an item
            # pulled down lies inside it, so one running span serves every level
            lo, hi = head.start, head.end
            for k in range(top + 1):
                for it in items:
                    if it.level <= k:
                        if it.start < lo:
                            lo = it.start
                        if it.end > hi:
                            hi = it.end
                if block is not None and k >= coord[1]:
                    lo, hi = min(lo, block[0]), max(hi, block[1])
                for it in items:
                    if it.level > k and lo <= it.start and it.end <= hi:
                        it.level = k

        if not items and coord is None and bare_ok:
            return head
        cur = head
        made_node = False
        for k in range(top + 1):
            label, required = labels[k]
            added = [it for it in items if it.level == k]
            if coord is not None and k == coord[1]:
                pre = [it for it in added if it.start < block[0]]
                post = [it for it in added if it.start > block[1]]
                first = self._node(label or "X", [cur] + pre) if pre else cur
                first = self._as_phrase(first, h)
                joined = self._join(first, coord[0], h)
                cur = self._node(joined.tree.label(), [joined] + post) if post else joined
                made_node = True
                continue
            if not added and not (required and label) and not (k == 0 and not bare_ok):
                continue
            if added and made_node and not required and all(it.tree.label() in PUNCT_TAGS for it in added):
                cur = self._absorb(cur, added)  # a final period adds no phrase level of its own
                continue
            if label is None:  # nothing to make here: hand the items to the next level up
                for it in added:
                    it.level = k + 1
                if k < top:
                    continue
                label = "X"
            cur = self._node(label, [cur] + added)
            made_node = True
        return cur

    def _absorb(self, node: _Item, extra: list[_Item]) -> _Item:
        """``node`` with the constituents in ``extra`` added as its own children, in order."""
        before = [it.tree for it in extra if it.start < node.start]
        after = [it.tree for it in extra if it.start > node.end]
        return _Item(Tree(node.tree.label(), before + list(node.tree) + after),
                     min([node.start] + [it.start for it in extra]), max([node.end] + [it.end for it in extra]))

    def _node(self, label: str, parts: list[_Item]) -> _Item:
        parts = sorted(parts, key=_start)
        trees = []
        for p in parts:
            if p.tree.label() == _SPLICE:
                trees.extend(p.tree)
            else:
                trees.append(p.tree)
        return _Item(Tree(label, trees), parts[0].start, parts[-1].end)

    def _as_phrase(self, item: _Item, h: int) -> _Item:
        if _preterminal(item.tree):
            return _Item(Tree(self.phrase_label(h) if self.cats[h] != "verb" else "VP", [item.tree]),
                         item.start, item.end)
        return item

    def _join(self, first: _Item, members: list[_Item], h: int) -> _Item:
        conjuncts = [first] + [m for m in members if m.tree.label() not in {"CC", "CONJP"} | PUNCT_TAGS]
        parts = sorted([first] + members, key=lambda it: it.start)
        if all(len(c.tree) == 1 and _preterminal(c.tree[0]) and c.tree.label() not in ("VP", "S") for c in conjuncts):
            # bare words: PTB coordinates them flat, (NP (NNS dogs) (CC and) (NNS cats))
            label = conjuncts[0].tree.label()
            flat = [p.tree[0] if p in conjuncts else p.tree for p in parts]
            return _Item(Tree(label, flat), parts[0].start, parts[-1].end)
        if any(p.tree.label() == "CC" and p.tree[0] == "&" for p in parts) and \
                all(_base_np(c.tree) for c in conjuncts):
            # names joined by "&" are one base NP in PTB: (NP (NNP W.R.) (NNP Grace) (CC &) (NNP Co.))
            flat = [w for p in parts for w in (p.tree if p in conjuncts else [p.tree])]
            return _Item(Tree("NP", flat), parts[0].start, parts[-1].end)
        if _base_np(first.tree) and any(w.label() not in NOUN_TAGS for w in first.tree) and all(
                c.tree.label() == "NP" and len(c.tree) == 1 and c.tree[0].label() in ("NN", "NNS") and
                _agrees(first.tree[0], c.tree[0].label()) for c in conjuncts[1:]):
            # bare nouns after a premodified one share its premodifiers, flat in PTB:
            # (NP (DT those) (NNS workers) (CC and) (NNS managers)); not when a determiner cannot
            # take them all, (NP (NP a beard) (CC and) (NP glasses)), or the first is a compound noun,
            # (NP (NP school officials) (CC and) (NP prosecutors))
            flat = [w for p in parts for w in (p.tree if p in conjuncts else [p.tree])]
            return _Item(Tree("NP", flat), parts[0].start, parts[-1].end)
        return self._node(first.tree.label(), parts)

    # ------------------------------------------------------------------ per-category builders
    def build(self, i: int, role: str, exclude=frozenset()) -> _Item:
        """The constituent headed by token ``i`` in its dependency ``role``, without ``exclude``."""
        cat = self.cats[i]
        if role == "neg" and self.words[i].lower() not in ("not", "n't"):
            role = "advmod"  # "never", "no longer": an ADVP, where "not" is a bare RB
        has_kids = any(c not in exclude for c in self.children[i]) if exclude else bool(self.children[i])
        if role in BARE_ROLES and not has_kids:
            return _Item(self.leaf(i), i, i)  # "a smiling man", "is": words, not phrases
        if role == "cc" and has_kids:
            span = self.subtree(i, exclude)  # "as well as", "but also": a multi-word coordinator
            return _Item(Tree("CONJP", [self.leaf(j) for j in span]), span[0], span[-1])
        if cat == "prep" and not has_kids and abs(self.heads[i] - i) == 1 and \
                self.cats[self.heads[i]] == "prep":
            return _Item(self.leaf(i), i, i)  # "because of", "out of": one flat PP, (PP because of NP)
        if role in MEASURE_ROLES and cat == "noun" and i < self.heads[i] and \
                self.cats[self.heads[i]] == "noun" and self._is_measure(i):
            # "a (ADJP (QP $ 2.29 billion)) deal", "a (ADJP 83.4 %) interest"
            item = self.build_nominal(i, "measure", set(exclude), [], [])
            return _Item(Tree("ADJP", [item.tree] if item.tree.label() == "QP" else list(item.tree)),
                         item.start, item.end)
        if role in ("compound", "nmod", "nn") and cat == "noun":
            span = self.subtree(i, exclude)  # PTB keeps noun compounds flat: "New York City"
            return _Item(Tree(_SPLICE, [self.leaf(j) for j in span]), span[0], span[-1])
        conj, glue = ([], []) if role == "conj" else self.coordination(i)
        conj = [c for c in conj if c not in exclude]
        skip = set(exclude) | set(conj) | set(glue) if conj or glue else exclude
        if cat == "verb" and role == "amod" and i < self.heads[i] and not conj and self.kids(i, skip):
            span = self.subtree(i, skip)  # "a (ADJP publicly traded) company": a participle used as an adjective
            return _Item(Tree("ADJP", [self.leaf(j) for j in span]), span[0], span[-1])
        if cat == "verb":
            return self.build_clause(i, role, skip, conj, glue)
        if cat == "noun":
            item = self.build_nominal(i, role, skip, conj, glue)
            if role == "oprd" and item.tree.label() == "NP":  # "named (S (NP a director))": a small clause
                item = _Item(Tree("S", [item.tree]), item.start, item.end)
            return item
        return self.build_simple(i, role, skip, conj, glue)

    def _members(self, conj: list[int], glue: list[int], chain: set[int]) -> list[_Item]:
        """The conjuncts and glue of a coordination, as items. A conjunct's dependents that lie past
        the next conjunct or coordinator (spaCy hangs a final period or a PP on a middle conjunct)
        are detached and join the coordination themselves, so no two members overlap."""
        boundaries = sorted(conj + glue)
        members, detached = [], []
        for c in conj:
            later = [b for b in boundaries if b > c]
            stray = {g for g in self.children[c] if g not in chain and later and g > later[0]}
            members.append(self.build(c, "conj", exclude=chain | stray))
            detached.extend(stray)
        members += [self.build(g, self.deps[g], exclude=chain) for g in glue]  # "as well as" is a CONJP
        members += [self.build(g, self.deps[g]) for g in sorted(detached)]
        return members

    def _child_items(self, kids: list[int]) -> list[_Item]:
        return [self.build(c, self.deps[c]) for c in kids]

    def build_nominal(self, i: int, role: str, skip, conj, glue) -> _Item:
        kids = self.kids(i, skip)
        items = self._child_items(kids)
        for it, c in zip(items, kids):
            d = self.deps[c]
            it.level = 1 if (c < i and d in LEFT_POST_DEPS) or (c > i and d not in RIGHT_BASE_DEPS) else 0
            if d in ("acl", "relcl") and c > i and not any(i < x < c for x in kids) and (
                    d == "acl" and self._infinitival(c) or any(self.deps[g] == "mark" for g in self.children[c])):
                # a noun's complement clause right after it sits in the base NP:
                # (NP the right (S to choose)), (NP any signs (SBAR that prices fell))
                it.level = 0
        head = None
        number = self._quantifier_phrase(i, kids)
        if number:  # "$ 1.5 billion", "about 160": one flat QP, the rest of the NP around it
            words = sorted(t for c in number for t in self.subtree(c)) + [i]
            items = [it for it, c in zip(items, kids) if c not in number]
            head = _Item(Tree("QP", [self.leaf(t) for t in words]), words[0], i)
        wh = role != "conj" and self._wh_position(i)
        base = "WHNP" if wh and self.tags[i] in WH_TAGS | {"DT"} or wh and any(
            self.tags[c] in ("WDT", "WP", "WP$") for c in self.children[i]) else "NP"
        coord = (self._members(conj, glue, set(conj) | set(glue)), 1) if conj else None
        bare_ok = role in BARE_ROLES or (role == "poss" and self.tags[i] in ("PRP$", "WP$"))
        item = self.project(i, items, [(base, False), ("NP", False)], coord, bare_ok=bare_ok, head=head)
        if role in ("amod", "nummod") and item.tree.label() == "NP" and not _preterminal(item.tree):
            item.tree = Tree("QP" if role == "nummod" else "ADJP", [t for t in item.tree])
        return item

    def _quantifier_phrase(self, i: int, kids: list[int]) -> list[int]:
        """The dependents left of the number ``i`` that make a PTB ``QP`` with it: currency signs,
        number words, quantifier modifiers (``about``, ``more than``, ``nearly``). PTB makes a QP
        only of two or more words besides the currency sign: ``(NP (QP $ 1.5 billion))`` but
        ``(NP $ 100)``. Returns them nearest first; empty when there is no QP."""
        if self.tags[i] != "CD":
            return []
        part = []
        for c in sorted((c for c in kids if c < i), reverse=True):
            d, tag = self.deps[c], self.tags[c]
            if not (d == "quantmod" or tag in ("$", "#") or (d in ("compound", "nummod", "nmod") and tag == "CD")
                    or (d == "advmod" and tag in ADV_TAGS | {"IN", "JJR"})
                    or (d == "amod" and tag in ("JJR", "JJS", "RBR"))):
                break
            if self.subtree(c)[-1] != (part[-1] if part else i) - 1:  # not adjacent: stop
                break
            part.append(c)
        words = [t for c in part for t in self.subtree(c)]
        if sum(self.tags[t] not in ("$", "#") for t in words) < 1:  # the number itself is the other word
            return []
        return part

    def _is_measure(self, i: int) -> bool:
        """A prenominal amount: ``$ 2.29 billion`` (a number with a currency sign) or ``83.4 %``
        (a noun counted by a number before it). PTB brackets it as an ``ADJP`` inside the NP."""
        if self.tags[i] == "CD":
            return any(self.tags[c] in ("$", "#") for c in self.children[i])
        return self.tags[i] in NOUN_TAGS and any(
            c < i and self.deps[c] == "nummod" and self.tags[c] == "CD" for c in self.children[i])

    def _wh_position(self, i: int) -> bool:
        """Is ``i`` the fronted wh-phrase of a relative clause, free relative or question, or the
        object of a fronted wh-preposition (``under (WHNP which)``)?"""
        h = self.heads[i]
        if h == i:
            return False
        if self.deps[i] == "pobj" and self.cats[h] == "prep":
            return self.tags[self.subtree(i)[0]] in WH_TAGS and self._wh_position(h)
        return i < h and self.deps[i] != "mark" and self.cats[h] == "verb" and self._is_sbar_dep(h, i)

    def _wh_word(self, c: int) -> int:
        """The first word of ``c``'s phrase, or of its object when ``c`` is a preposition that
        pied-pipes a wh-word (``in which``, ``of whom``)."""
        span = self.subtree(c)
        if self.cats[c] == "prep" and len(span) > 1 and span[1] != c and self.deps[span[1]] == "pobj":
            return span[1]
        return span[0]

    def build_simple(self, i: int, role: str, skip, conj, glue) -> _Item:
        """Adjectives, adverbs, prepositions, particles, interjections: one flat phrase."""
        kids = self.kids(i, skip)
        label = self.phrase_label(i)
        if label == "PP" and not any(self.deps[c] in ("pobj", "pcomp") for c in kids):
            label = "ADVP" if role in ("advmod", "npadvmod") and self.tags[i] != "IN" else "PP"
        if label == "ADVP" and self.tags[i] == "WRB" and self._wh_position(i):
            label = "WHADVP"
        if label == "PP" and self._wh_position(i):  # "in which"; a bare "that" relativizer is a WHNP
            label = "WHPP" if any(self.deps[c] == "pobj" for c in kids) else "WHNP"
        items = self._child_items(kids)
        coord = (self._members(conj, glue, set(conj) | set(glue)), 0) if conj else None
        head_cat = self.cats[self.heads[i]] if self.heads[i] != i else None
        bare_ok = role in BARE_ROLES or (role == "advmod" and (head_cat in ("adj", "adv") or
                                                               (head_cat == "noun" and i < self.heads[i])))
        if role in NP_INTERNAL_ROLES and items and coord is None and i < self.heads[i]:
            span = self.subtree(i, skip)  # "a very big dog": a flat ADJP inside the NP
            # ... but an adjective modified only by an adjective or noun stays flat in the NP:
            # "(NP (JJ Latin) (JJ American) (NNS nations))"
            label = _SPLICE if all(self.deps[c] in ("amod", "compound") for c in kids) else \
                "QP" if role == "nummod" else "ADJP"
            return _Item(Tree(label, [self.leaf(j) for j in span]), span[0], span[-1])
        levels = [(label, False)]
        subjects = [it for it, c in zip(items, kids) if self.deps[c] in SUBJECT_DEPS and c < i]
        if subjects and coord is None:  # "found (S (NP the rates) (ADJP illegal))": a small clause
            for it in subjects:
                it.level = 1
            levels.append(("S", True))
        return self.project(i, items, levels, coord, bare_ok=bare_ok)

    def build_clause(self, v: int, role: str, skip, conj, glue) -> _Item:
        kids = self.kids(v, skip)
        items = {c: it for c, it in zip(kids, self._child_items(kids))}
        sbar_deps = [c for c in kids if self._is_sbar_dep(v, c)]
        subj = [c for c in kids if self.deps[c] in SUBJECT_DEPS and c not in sbar_deps]
        inverted = bool(subj) and min(subj) > v
        first_subj = min(subj) if subj else -1
        auxes = [c for c in kids if self.deps[c] in AUX_DEPS and first_subj < c < v]
        a = len(auxes)
        s_level, sbar_level = a + 1, a + 2
        has_to = any(self.tags[c] == "TO" for c in auxes)
        needs_s = bool(subj) or has_to or bool(sbar_deps) or role not in ("acl", "conj", "amod")
        for c, it in items.items():
            d = self.deps[c]
            if c in sbar_deps:
                it.level = sbar_level
            elif d in ("advmod", "neg") and any(m in sbar_deps and self.deps[m] == "mark" and c < m for m in kids):
                it.level = sbar_level  # "(SBAR even though S)": an adverb before the complementizer
            elif inverted or d in SUBJECT_DEPS or d == "punct":
                it.level = s_level
            elif c in auxes:
                it.level = a - auxes.index(c)
            elif d in AUX_DEPS or c > v:
                it.level = s_level if d in AUX_DEPS else 0
            else:  # left of the verb: inside the VP of the auxiliary before it, else at S level
                before = [x for x in auxes if x < c]
                it.level = a - auxes.index(before[-1]) if before else s_level
            if it.level == s_level and not needs_s:
                it.level = 0
        clause = "S"
        aux_first = any(self.deps[c] in AUX_DEPS and c < first_subj for c in kids) if subj else False
        wh_question = self.question and role == "ROOT" and bool(sbar_deps)
        if inverted or aux_first or wh_question:
            clause = "SQ" if self.question else "SINV"
        sbar = "SBARQ" if wh_question else "SBAR"
        labels = [("VP", False)] + [("VP", False)] * a + [(clause, needs_s), (sbar, False)]
        coord = None
        if conj:
            with_subj = any(self.deps[g] in SUBJECT_DEPS for c in conj for g in self.children[c])
            level = s_level if with_subj and subj else 0
            if level == 0 and any(self.deps[g] in AUX_DEPS and g < c for c in conj for g in self.children[c]):
                level = a  # "is appealing it and is considering ..": the conjuncts are whole VPs with their auxiliaries
            if sbar_deps and any(self._is_sbar_dep(c, g) for c in conj for g in self.children[c]):
                # "that .. and that ..", "who .. and who ..": (SBAR (SBAR that S) (CC and) (SBAR that S))
                level = sbar_level
            coord = (self._members(conj, glue, set(conj) | set(glue)), level)
        item = self.project(v, list(items.values()), labels, coord, bare_ok=False)
        separators = [p for p in kids if self.deps[p] == "punct" and self.words[p] in (";", ":", "--") and
                      any(self.deps[c] in ("ccomp", "parataxis") and c < p for c in kids)]
        if separators and item.tree.label() == "S":
            item = self._split_at_separator(item, max(separators))
        if item.tree.label() == "S" and (role == "relcl" or role == "ccomp" and self._finite(v, auxes)
                                         and v > self.heads[v] and not self._direct_speech(v, item.start)):
            item = _Item(Tree("SBAR", [item.tree]), item.start, item.end)  # zero complementizer / relativizer
        if role == "parataxis" and item.tree.label() in ("S", "SINV"):
            item.tree.set_label(item.tree.label() + "|PRN")  # ", analysts say ,": a PRN if commas enclose it
            self.parenthetical = True
        if role == "ROOT" and item.tree.label() == "S" and self._participial_caption(v, subj, auxes):
            item = self._as_noun_phrase_caption(item)
        if role == "ROOT" and item.tree.label() == "S":
            item.tree = _interposed_reporting_clause(item.tree)
        return item

    def _split_at_separator(self, item: _Item, sep: int) -> _Item:
        """``(S (S we left) (: ;) (NP they) (VP stayed))`` -> ``(S (S we left) (: ;) (S (NP they) (VP stayed)))``:
        a clause that spaCy hangs as the complement of the next one across a semicolon or a dash
        is coordinated with it, as PTB brackets independent clauses."""
        kids, pos = list(item.tree), item.start
        starts = []
        for child in kids:
            starts.append(pos)
            pos += len(child.leaves()) if isinstance(child, Tree) else 1
        if sep not in starts:
            return item
        k = starts.index(sep)
        end = len(kids)
        while end > k + 1 and kids[end - 1].label() in PUNCT_TAGS:
            end -= 1
        rest = kids[k + 1:end]
        if not any(c.label() == "VP" for c in rest) or not any(c.label() in ("S", "SBAR", "SINV") for c in kids[:k]):
            return item
        clause = Tree("S", rest)
        return _Item(Tree(item.tree.label(), kids[:k + 1] + [clause] + kids[end:]), item.start, item.end)

    def _direct_speech(self, v: int, start: int) -> bool:
        """A complement clause opened by a quote or a colon (``said , `` We left . ''``) is
        direct speech: an S in PTB, not a zero-complementizer SBAR."""
        return any(self.tags[j] in ("``", ":") for j in range(self.heads[v] + 1, start + 1))

    def _infinitival(self, v: int) -> bool:
        return any(self.deps[c] == "aux" and self.tags[c] == "TO" for c in self.children[v])

    def _finite(self, v: int, auxes: list[int]) -> bool:
        """Tensed clause? ("said he would go" yes; "expect the merger to be" / "help me carry" no)."""
        return any(self.tags[x] in ("VBD", "VBZ", "VBP", "MD") for x in auxes + [v]) and \
            not any(self.tags[x] == "TO" for x in auxes)

    def _participial_caption(self, v: int, subj: list[int], auxes: list[int]) -> bool:
        """"Two men in suits shaking hands": spaCy makes the participle a root with a subject;
        PTB (and benepar) read such captions as a noun phrase with a participial modifier."""
        return self.tags[v] in ("VBG", "VBN") and not auxes and len(subj) == 1 and \
            self.deps[subj[0]] == "nsubj" and self.cats[subj[0]] == "noun" and subj[0] < v

    def _as_noun_phrase_caption(self, item: _Item) -> _Item:
        """(S (NP (NP two men) (PP in suits)) (VP shaking hands)) -> (NP (NP two men) (PP ..) (VP ..))."""
        parts = list(item.tree)
        subject = parts[0] if parts and isinstance(parts[0], Tree) else None
        if subject is None or subject.label() != "NP":
            return item
        if isinstance(subject[0], Tree) and subject[0].label() == "NP" and len(subject) > 1 and \
                all(isinstance(c, Tree) and c.height() > 2 for c in subject[1:]):
            parts = list(subject) + parts[1:]  # the subject's own post-modified NP is this NP
        return _Item(Tree("NP", parts), item.start, item.end)

    def _conjunct_role(self, c: int) -> str:
        """The role of the first conjunct of the coordination that ``c`` belongs to."""
        for _ in range(len(self.words)):
            if self.deps[c] != "conj" or self.heads[c] == c:
                break
            c = self.heads[c]
        return self.deps[c]

    def _is_sbar_dep(self, v: int, c: int) -> bool:
        """Complementizers and the fronted wh-phrase of relative clauses and questions."""
        if self.deps[c] == "mark":
            return True
        role = self.deps[v]
        if role == "conj" and self._conjunct_role(v) == "relcl":
            role = "relcl"  # "who owns a shop and who lives ..": each conjunct its own relative clause
        if c > v or c != min(self.children[v]) or not (
                role in ("relcl", "advcl", "ccomp", "csubj", "pcomp", "xcomp") or role == "ROOT" and self.question):
            return False
        first = self._wh_word(c)
        if role == "relcl":
            return self.tags[first] in WH_TAGS or (self.words[c].lower() == "that" and c == first)
        return self.tags[first] in WH_TAGS


_SINGULAR_DETERMINERS = frozenset({"a", "an", "another", "each", "every", "this", "that"})
_PLURAL_DETERMINERS = frozenset({"these", "those", "both", "many", "several", "few"})


def _agrees(first_word: Tree, noun_tag: str) -> bool:
    """Can the determiner that opens a base NP (the preterminal ``first_word``) take a noun tagged
    ``noun_tag``? ``a`` takes no plural, ``those`` no singular; anything else takes both."""
    word = first_word[0].lower()
    if word in _SINGULAR_DETERMINERS:
        return noun_tag not in ("NNS", "NNPS")
    return not (word in _PLURAL_DETERMINERS and noun_tag in ("NN", "NNP"))


def _interposed_reporting_clause(tree: Tree) -> Tree:
    """``By doing so , Mr. Maxwell said , the funds grew .``: spaCy makes ``said`` the root and the
    clause after it its complement; PTB reads the words between commas as a parenthetical inside
    that clause, ``(S (PP By doing so) (PRN , (NP Mr. Maxwell) (VP said) ,) (NP the funds) (VP grew) .)``.
    Applies when the reporting verb's VP holds only the verb, a comma and the complement clause, and
    something other than the subject comes before the subject's comma.

    >>> t = Tree.fromstring("(S (ADVP (RB Now)) (, ,) (NP (PRP he)) (VP (VBD said) (, ,) (SBAR (S (NP (NNS prices)) "
    ...                     "(VP (VBD fell))))) (. .))")
    >>> print(_interposed_reporting_clause(t).pformat(margin=1000))
    (S (ADVP (RB Now)) (PRN (, ,) (NP (PRP he)) (VP (VBD said)) (, ,)) (NP (NNS prices)) (VP (VBD fell)) (. .))
    """
    kids = list(tree)
    labels = [c.label() for c in kids]
    if "VP" not in labels:
        return tree
    k = labels.index("VP")
    vp = kids[k]
    if k < 3 or labels[k - 1] != "NP" or labels[k - 2] != "," or len(vp) != 3 or not _preterminal(vp[0]) or \
            not vp[0].label().startswith("VB") or vp[1].label() != ",":
        return tree
    clause = vp[2][0] if vp[2].label() == "SBAR" and len(vp[2]) == 1 else vp[2]
    if clause.label() != "S" or "VP" not in [c.label() for c in clause]:
        return tree
    parenthetical = Tree("PRN", [kids[k - 2], kids[k - 1], Tree("VP", [vp[0]]), vp[1]])
    return Tree(tree.label(), kids[:k - 2] + [parenthetical] + list(clause) + kids[k + 1:])


def _base_np(node: Tree) -> bool:
    """An NP of words only, ``(NP (DT the) (NN dog))``."""
    return node.label() == "NP" and all(_preterminal(c) for c in node)


def _preterminal(node) -> bool:
    return isinstance(node, Tree) and isinstance(node[0], str)


def _opener(node) -> bool:
    return _preterminal(node) and (node.label() == "-LRB-" or node.label() == ":" and node[0] in ("--", "-"))


def _closes(node, opener: Tree) -> bool:
    if not _preterminal(node):
        return False
    return node.label() == "-RRB-" if opener.label() == "-LRB-" else node.label() == ":" and node[0] == opener[0]


def _is_comma(node) -> bool:
    return _preterminal(node) and node.label() == ","


def _mark_parentheticals(tree: Tree) -> Tree:
    """PTB's ``PRN``: one phrase between a pair of brackets or dashes,
    ``(PRN (-LRB- -LRB-) (NP ..) (-RRB- -RRB-))``, ``(PRN (: --) (PP ..) (: --))``, and a clause
    marked ``|PRN`` (a parenthetical ``, analysts say ,``) between commas. Changes ``tree``.

    >>> print(_mark_parentheticals(Tree.fromstring("(NP (NP (DT a) (NN fee)) (: --) (NP (CD 5) (NN %)) (: --))")))
    (NP (NP (DT a) (NN fee)) (PRN (: --) (NP (CD 5) (NN %)) (: --)))
    >>> t = Tree.fromstring("(S (NP (NNS Prices)) (S|PRN (, ,) (NP (PRP he)) (VP (VBD said))) (, ,) (VP (VBD fell)))")
    >>> print(_mark_parentheticals(t).pformat(margin=1000))
    (S (NP (NNS Prices)) (PRN (, ,) (S (NP (PRP he)) (VP (VBD said))) (, ,)) (VP (VBD fell)))
    """
    for child in tree:
        if not _preterminal(child):
            _mark_parentheticals(child)
    k = 0
    while k < len(tree):
        child = tree[k]
        if not _preterminal(child) and child.label().endswith("|PRN"):
            child.set_label(child.label()[:-4])
            inner = list(child)
            left = inner.pop(0) if inner and _is_comma(inner[0]) else None
            right = inner.pop() if inner and _is_comma(inner[-1]) else None
            lo, hi = k, k + 1
            if left is None and k > 0 and _is_comma(tree[k - 1]):
                left, lo = tree[k - 1], k - 1
            if right is None and k + 1 < len(tree) and _is_comma(tree[k + 1]):
                right, hi = tree[k + 1], k + 2
            if left is not None and right is not None and inner:
                tree[lo:hi] = [Tree("PRN", [left, Tree(child.label(), inner), right])]
                k = lo
            elif left is None and right is not None and inner and k > 0 and _preterminal(tree[k - 1]) and \
                    tree[k - 1].label() == "''":  # `` Now , '' (PRN (SINV says Mr. X) ,): quoted speech before it
                tree[lo:hi] = [Tree("PRN", [Tree(child.label(), inner), right])]
        elif k + 2 < len(tree) and _opener(child) and not _preterminal(tree[k + 1]) and _closes(tree[k + 2], child):
            tree[k:k + 3] = [Tree("PRN", tree[k:k + 3])]
        k += 1
    return tree


def dependency_to_constituency(words: Sequence[str], tags: Sequence[str], heads: Sequence[int],
                               deps: Sequence[str]) -> Tree:
    """Project a dependency parse into a PTB-style constituency tree rooted at ``TOP``.

    Args:
        words: the tokens.
        tags: their PTB part-of-speech tags.
        heads: ``heads[i]`` is the index of token ``i``'s head; a root points to itself.
        deps: ClearNLP dependency labels (``nsubj``, ``dobj``, ``prep``, ``pobj``, ...).

    >>> words = "two dogs are running on the grass".split()
    >>> tags = ["CD", "NNS", "VBP", "VBG", "IN", "DT", "NN"]
    >>> heads = [1, 3, 3, 3, 3, 6, 4]
    >>> deps = ["nummod", "nsubj", "aux", "ROOT", "prep", "det", "pobj"]
    >>> print(dependency_to_constituency(words, tags, heads, deps).pformat(margin=1000))
    (TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) (PP (IN on) (NP (DT the) (NN grass)))))))
    """
    if not (len(words) == len(tags) == len(heads) == len(deps)):
        raise ValueError(f"words, tags, heads and deps differ in length: "
                         f"{len(words)}, {len(tags)}, {len(heads)}, {len(deps)}")
    if not words:
        raise ValueError("cannot convert an empty sentence")
    for i, h in enumerate(heads):
        if not 0 <= h < len(words):
            raise ValueError(f"head {h} of token {i} ({words[i]!r}) is outside the sentence of {len(words)} tokens")
    converter = _Converter(words, tags, heads, deps)
    tree = converter.convert()
    leaves = _leaves(tree)
    # quotes come out as `` or '' (the comparison reads all three as one word)
    if leaves != converter.words and [_leaf_key(w) for w in leaves] != [_leaf_key(w) for w in converter.words]:
        # Unusual dependency structures (a coordinator with its own conjuncts, say) can defeat the
        # level assignment. Fall back to one flat phrase per head, which always keeps word order.
        logger.warning("dependency structure defeated the projection; flat fallback for %s", " ".join(words))
        FALLBACKS[0] += 1
        tree = Tree("TOP", [converter.flat_projection()])
    return tree


def _leaves(tree: Tree) -> list[str]:
    """``tree.leaves()``, faster (the check runs on every converted sentence)."""
    out: list[str] = []
    _collect_leaves(tree, out)
    return out


def _collect_leaves(node: Tree, out: list[str]) -> None:
    for child in node:
        if type(child) is str:
            out.append(child)
        else:
            _collect_leaves(child, out)


def _leaf_key(word: str) -> str:
    return '"' if word in ("``", "''", '"') else word


#: The pure-Python conversion: the reference, and what runs without a current compiled copy.
python_dependency_to_constituency = dependency_to_constituency


def _use_compiled_copy() -> None:
    """Run the Cython-compiled copy of this module's conversion when one is built from this very source
    (:mod:`crg.speedups`; about 1.7x faster, same trees). It shares this module's fallback counter and logger."""
    from crg.speedups import load_compiled

    compiled = load_compiled(__name__, __file__)
    if compiled is not None:
        global dependency_to_constituency
        compiled.FALLBACKS = FALLBACKS
        compiled.logger = logger
        dependency_to_constituency = compiled.dependency_to_constituency


_use_compiled_copy()
