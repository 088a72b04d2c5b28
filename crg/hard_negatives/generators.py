"""The four CREPE edits of one parsed caption, and :func:`caption_hard_negatives`, which runs and filters them.

Each ``_*_candidates`` function proposes edited token lists (:class:`_Candidate`) of one type, or
says why it has none; :func:`caption_candidates` draws from them with the caption's own random
stream, realises the text and drops any negative that repeats the caption or another negative;
:func:`caption_hard_negatives` keeps the first ``per_type`` of each type. With
``HardNegativeConfig.refinement`` set, the edits also include noun swaps (HN-SWAP) and negations
that do not lengthen the caption (HN-NEG), and :func:`crg.hard_negatives.corpus_hard_negatives`
selects among ``candidates_per_type`` candidates (:mod:`crg.hard_negatives.refine`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Iterable

from crg.blind import grammar_violations
from crg.dep_to_constituency import PUNCT_TAGS
from crg.extract import PRIMITIVE_TAGS, ConceptNode
from crg.hard_negatives.lexicon import (
    ARTICLES, AUXILIARIES, CLAUSE_LABELS, COLOR_WORDS, GENERIC_NOUNS, LEADING_DETERMINER_TAGS, NEGATORS,
    MASS_NOUNS, NO_DETERMINERS, NOMINAL_LABELS, QUANTIFIERS, RELATION_OPPOSITES, RELATIONAL_NOUNS, SIZE_POLES,
    SWAPPABLE_PREPOSITIONS, SYMMETRIC_CONNECTIVES, WITH_NEGATIONS, adjective_kind, is_list_between, is_order_free,
    is_place_chain, LIST_JOINERS, PLACE_PREPOSITIONS, PREPOSITION_SYNONYMS)
from crg.hard_negatives.morphology import (has_verb_reading, is_mistagged_noun, match_case, noun_in_number,
                                          related_words, vbz_base, verb_in_form, word_forms)
from crg.hard_negatives.parsed_caption import (
    EditToken, ParsedCaption, object_mentions, own_tokens, primitive_tokens, realize_source_form, realize_words)
from crg.hard_negatives.records import (
    HN_ATOM, HN_COMP, HN_NEG, HN_SWAP, CaptionCandidates, CaptionNegatives, Change, HardNegative, HardNegativeConfig,
    NegativeCandidate)
from crg.hard_negatives.vocabulary import AtomVocabulary

__all__ = ["caption_hard_negatives", "caption_candidates"]

#: HN-ATOM draws up to this many (slot, foil) pairs per negative wanted before giving up.
_MAX_TRIES = 20


@dataclass(frozen=True)
class _Candidate:
    """An edited caption before it is realised: its tokens and what was changed."""

    tokens: tuple[EditToken, ...]
    change: Change


def _normalize(text: str) -> str:
    """Lower-cased words without punctuation: two captions equal under it say the same."""
    return " ".join("".join(ch if ch.isalnum() or ch in " '" else " " for ch in text.lower()).split())


def _replace(toks: list[EditToken], i: int, word: str, tag: str | None = None) -> list[EditToken]:
    out = list(toks)
    out[i] = EditToken(match_case(word, toks[i].word), tag or toks[i].tag, True, toks[i].initial)
    return out


# ---------------------------------------------------------------------------- HN-SWAP
def _swap_candidates(parsed: ParsedCaption, extended: bool = False,
                     attributes: bool = True) -> tuple[list[_Candidate], str]:
    """HN-SWAP's candidates; ``extended`` adds swaps of nouns, relations, whole noun phrases and, with
    ``attributes``, adjectives (left to HN-COMP when it is made too: one text is one type's negative)."""
    toks, out, reason = parsed.edit_tokens(), [], "no predicate with two or more arguments"
    for node in parsed.root.walk():
        kids = node.children
        if node.predicate is None or len(kids) < 2:
            continue
        template_words = [parsed.tokens[i][0].lower() for i in own_tokens(node)
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
                if any(_in_compound(parsed, z) for z in (x, y)):
                    reason = "argument is part of a compound noun ('water area')" if not out else reason
                    continue
                if any(_head_word(parsed, z) in RELATIONAL_NOUNS for z in (x, y)):
                    reason = "argument is a spatial phrase (in front of, on top of)" if not out else reason
                    continue
                if _normalize(x.text) == _normalize(y.text):
                    reason = "identical arguments" if not out else reason
                    continue
                between = [parsed.tokens[i] for i in range(x.end, y.start) if parsed.tokens[i][1] not in PUNCT_TAGS]
                if b == a + 1 and is_order_free(between):
                    reason = "symmetric relation (next to, and, ...)" if not out else reason
                    continue
                if is_list_between(between):
                    reason = "items of one list (order-free)" if not out else reason
                    continue
                if is_place_chain(parsed.tokens[x.start - 1][0] if x.start else None, between):
                    reason = "two places in a row (both hold: 'on a plate on a table')" if not out else reason
                    continue
                if _keeps_meaning(parsed.tokens[x.start - 1][0] if x.start else None,
                                  parsed.tokens[y.start - 1][0] if y.start else None, between,
                                  _head_word(parsed, x), _head_word(parsed, y), whole=True):
                    reason = "two places of one thing, synonyms or an 'of' inversion (same meaning)" \
                        if not out else reason
                    continue
                # an argument's trailing punctuation (a parse that puts the final period inside the last
                # argument) stays where it is: the swap never moves "wall." into the middle of the caption
                x_end, y_end = _without_trailing_punct(parsed, x), _without_trailing_punct(parsed, y)
                first = [EditToken(t.word, t.tag, k == 0, t.initial) for k, t in enumerate(toks[y.start:y_end])]
                second = [EditToken(t.word, t.tag, k == 0, t.initial) for k, t in enumerate(toks[x.start:x_end])]
                new = toks[:x.start] + first + toks[x_end:y.start] + second + toks[y_end:]
                out.append(_Candidate(tuple(new), Change("swap_arguments", (x.text, y.text), (y.text, x.text),
                                                         node.predicate.template)))
    if extended:
        more = _noun_swap_candidates(parsed) + _relation_swap_candidates(parsed) + _phrase_swap_candidates(parsed) \
            + _count_swap_candidates(parsed) \
            + (_attribute_swap_candidates(parsed) if attributes else [])
        if not out and not more:
            reason += "; no two object nouns, prepositions or verbs of one tag to swap"
        out += more
    return out, reason


def _keeps_meaning(before_x: str | None, before_y: str | None, between, head_x: str, head_y: str,
                   whole: bool) -> bool:
    """Whether exchanging two objects (their nouns, or ``whole`` phrases) likely says what the caption
    said (issue 33's hand-read samples): two nouns of one synonym group ("on the beach lying on the wet
    sand"), two places of one thing, each after a preposition of place ("a motorcycle in the foreground
    parked in a dirt lot": both hold in either order), or whole phrases around a bare "of" ("a dish of
    yogurt" -> "yogurt of a dish"). ``before_*``: the word before each phrase; ``between``: the
    ``(word, tag)`` tokens between them, punctuation left out."""
    if related_words(head_x) & word_forms(head_y):
        return True
    if (before_x or "").lower() in PLACE_PREPOSITIONS and (before_y or "").lower() in PLACE_PREPOSITIONS:
        return True
    return whole and [w.lower() for w, _ in between] == ["of"]


def _in_compound(parsed: ParsedCaption, node: ConceptNode) -> bool:
    """Whether a nominal argument is a piece of a longer noun compound: a noun right before it or right
    after it ("water [area]", "[stone] block wall"); swapped, the compound falls apart."""
    nouns = ("NN", "NNS", "NNP", "NNPS")
    end = _without_trailing_punct(parsed, node)
    before = parsed.tokens[node.start - 1][1] if node.start > 0 else ""
    after = parsed.tokens[end][1] if end < len(parsed.tokens) else ""
    return parsed.tokens[node.start][1] in nouns + ("JJ",) and before in nouns or \
        parsed.tokens[end - 1][1] in nouns and after in nouns


def _verb_like_noun(toks: list[EditToken], i: int) -> bool:
    """A noun followed at once by a determiner is most often a verb the tagger missed ("a cat surf the
    web"); so is a plural noun with a verb reading after a singular noun phrase's noun ("a skateboarder
    balances on", "a woman stares as": "a skateboarder balances" cannot be a compound, "a" wants a
    singular). Swapped as a noun, it leaves no sentence."""
    if i + 1 < len(toks) and toks[i + 1].tag in ("DT", "PRP$") and toks[i + 1].word.lower() != "that":
        return True
    if toks[i].tag != "NNS" or i == 0 or toks[i - 1].tag != "NN" or not has_verb_reading(toks[i].word):
        return False
    j = i - 1
    while j >= 0 and toks[j].tag in ("NN", "JJ", "HYPH"):
        j -= 1
    return j >= 0 and toks[j].word.lower() in _SINGULAR_DETERMINERS


#: Determiners of a singular noun only: after "a skateboarder", a plural noun is a verb.
_SINGULAR_DETERMINERS = frozenset({"a", "an", "one", "each", "every", "another"})


_NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})


def _without_trailing_punct(parsed: ParsedCaption, node: ConceptNode) -> int:
    """The end of ``node``'s span less any punctuation tokens it ends with."""
    end = node.end
    while end > node.start + 1 and parsed.tokens[end - 1][1] in PUNCT_TAGS:
        end -= 1
    return end


#: Verb tags whose words can change places (auxiliaries excepted): "riding ... holding" -> "holding ... riding".
_VERB_TAGS = frozenset({"VBG", "VBZ", "VBP", "VBD", "VBN"})


def _relation_swap_candidates(parsed: ParsedCaption) -> list[_Candidate]:
    """Two relations change places: two prepositions of place ("a cat on a bed in a room" -> "a cat in
    a bed on a room") or two verbs of one tag ("a man riding a horse holding a flag" -> "a man holding
    a horse riding a flag"), CREPE's swap of two atoms of the same type applied to relations. A
    preposition inside a spatial phrase ("in front of") stays."""
    toks, out = parsed.edit_tokens(), []
    words = [t.word.lower() for t in toks]
    preps = [i for i, t in enumerate(toks) if t.tag == "IN" and words[i] in SWAPPABLE_PREPOSITIONS
             and not (i + 1 < len(toks) and words[i + 1] in RELATIONAL_NOUNS)
             and not (i > 0 and toks[i - 1].tag in _HEADED_PREPOSITION_TAGS)]  # "far from", "full of", "out of"
    verbs = [i for i, t in enumerate(toks) if t.tag in _VERB_TAGS and words[i] not in AUXILIARIES
             and words[i].isalpha()]
    for kind, slots in (("preposition", preps), ("verb", verbs)):
        for a in range(len(slots)):
            for b in range(a + 1, len(slots)):
                i, j = slots[a], slots[b]
                if words[i] == words[j]:
                    continue
                into_i, into_j = words[j], words[i]
                if toks[i].tag != toks[j].tag:  # two verbs of other forms: each slot keeps its form
                    if kind != "verb":
                        continue
                    into_i, into_j = verb_in_form(words[j], toks[j].tag, toks[i].tag), \
                        verb_in_form(words[i], toks[i].tag, toks[j].tag)
                    if into_i is None or into_j is None or into_i == words[i]:
                        continue
                if kind == "verb" and all(w in LIST_JOINERS for w in words[i + 1:j]):
                    continue  # "driving and observing": coordinated verbs keep the meaning swapped
                if kind == "verb" and (_complement_kind(toks, i) != _complement_kind(toks, j)
                                       or _complement_kind(toks, i) == "other"):
                    continue  # "getting messy ... eating his cake": one verb's complement does not fit the other
                if kind == "preposition" and any({words[i], words[j]} <= g for g in PREPOSITION_SYNONYMS):
                    continue  # "in ... into": as good as the same preposition
                new = _replace(_replace(toks, i, into_i), j, into_j)
                out.append(_Candidate(tuple(new), Change("swap_relations", (words[i], words[j]), (into_i, into_j),
                                                         kind)))
    return out


#: A preposition after one of these belongs to the word before it ("far from", "full of", "out of"): it
#: does not swap with another preposition.
_HEADED_PREPOSITION_TAGS = frozenset({"JJ", "JJR", "RB", "RBR", "RP"})


def _complement_kind(toks: list[EditToken], i: int) -> str:
    """What follows verb ``i``: a noun phrase, a prepositional phrase, nothing, or something else (an
    adjective, an adverb: "getting messy"); two verbs swap only where their complements are alike."""
    nxt = toks[i + 1].tag if i + 1 < len(toks) else "."
    if nxt in ("DT", "PRP$", "PRP", "CD", "PDT", "NN", "NNS", "NNP", "NNPS", "JJ") and not (
            nxt == "JJ" and (i + 2 >= len(toks) or toks[i + 2].tag not in PRIMITIVE_TAGS | {"JJ"})):
        return "object"
    if nxt in ("IN", "TO", "RP"):
        return "phrase"
    if nxt in PUNCT_TAGS or nxt == "CC":
        return "none"
    return "other"


def _noun_swap_candidates(parsed: ParsedCaption) -> list[_Candidate]:
    """Two object nouns change places, their determiners and adjectives staying where they were
    (CREPE's "swap two atoms of the same type": "yellow vase on top of television" -> "yellow
    television on top of vase"). Same POS tag only (no "a men"); never two forms of one noun, a
    spatial noun ("front"), or two alike-modified objects joined by an order-free word ("a dog and
    a cat", "a dog next to a cat": the swap keeps the meaning)."""
    toks, out = parsed.edit_tokens(), []
    mentions = object_mentions(parsed)

    def modifiers(m) -> list[str]:
        start = m.determiner if m.determiner is not None else m.run_start
        return ["a" if toks[i].word.lower() == "an" else toks[i].word.lower() for i in range(start, m.head)]

    def content(m) -> list[str]:  # the modifiers that say something of the object (no articles, quantities)
        start = m.determiner if m.determiner is not None else m.run_start
        return [w for i, w in zip(range(start, m.head), modifiers(m))
                if toks[i].tag not in ("DT", "CD", "PRP$", "PDT") and w not in QUANTIFIERS]

    for a in range(len(mentions)):
        for b in range(a + 1, len(mentions)):
            x, y = mentions[a], mentions[b]
            tx, ty = toks[x.head], toks[y.head]
            numbers = _number_swap(toks, x, y) if tx.tag != ty.tag else None  # each noun in the other's number
            if (tx.tag != ty.tag and numbers is None) or word_forms(tx.word) & word_forms(ty.word) or \
                    {tx.word.lower(), ty.word.lower()} & RELATIONAL_NOUNS or \
                    is_mistagged_noun(tx.word) or is_mistagged_noun(ty.word) or \
                    _verb_like_noun(toks, x.head) or _verb_like_noun(toks, y.head):
                continue  # (a word the lexicon never reads as a noun: "a hospital bad" is a tagging error)
            y_start = y.determiner if y.determiner is not None else y.run_start
            between = [(toks[i].word, toks[i].tag) for i in range(x.head + 1, y_start) if toks[i].tag not in PUNCT_TAGS]
            if modifiers(x) == modifiers(y) and is_order_free(between):
                continue
            x_start = x.determiner if x.determiner is not None else x.run_start
            if is_place_chain(toks[x_start - 1].word if x_start else None, between):
                continue  # "on a bicycle on a sidewalk": both places hold, swapped too
            if _keeps_meaning(toks[x_start - 1].word if x_start else None, toks[y_start - 1].word, between,
                              tx.word, ty.word, whole=False):
                continue
            if is_list_between(between):
                continue  # "a sink , toilet , and vanity": items of one list, order-free
            if between and between[0][0].lower() in LIST_JOINERS and \
                    not any(t.startswith(("VB", "IN")) and w.lower() != "of" for w, t in between):
                continue  # "pastries and several kinds of doughnuts": two items of one list, order-free
            bare_y = y.determiner is None and y.run_start == y.head
            if bare_y and between and all(w.lower() in LIST_JOINERS for w, _ in between):
                continue  # "wooden spoons and utensils": the second item shares the first's modifiers
            if not content(x) and not content(y) and all(w.lower() in LIST_JOINERS for w, _ in between) and \
                    y.head == max(y.head, x.head) and not any(toks[k].tag.startswith(("VB", "IN"))
                                                              for k in range(x.head + 1, y_start)):
                continue  # "a toilet and sink", "plates, bowls": items of one list, order-free
            proper = tx.tag in ("NNP", "NNPS")
            wx, wy = (tx.word, ty.word) if proper else (tx.word.lower(), ty.word.lower())
            if numbers is not None:  # each slot keeps its number: "two dogs chasing a ball" -> "two balls chasing a dog"
                into_x, into_y = numbers
                new = _replace(_replace(toks, x.head, into_x), y.head, into_y)
                out.append(_Candidate(tuple(new), Change("swap_nouns", (wx, wy), (into_x, into_y),
                                                         "nouns, each slot keeping its number")))
                continue
            new = _replace(_replace(toks, x.head, wy), y.head, wx)
            out.append(_Candidate(tuple(new), Change("swap_nouns", (wx, wy), (wy, wx), "nouns")))
    return out


#: Determiners that make a singular noun a count use ("a ball", "each plate"; not "the grass", "some
#: water"): only such a noun is put in the plural by a number-keeping swap.
_COUNT_DETERMINERS = frozenset({"a", "an", "one", "each", "every", "another", "this", "that"})
#: Determiners of count and mass nouns alike: a noun after them goes plural unless it is in ``MASS_NOUNS``.
_DEFINITE_DETERMINERS = frozenset({"the", "his", "her", "its", "their", "my", "your", "our"})


def _number_swap(toks: list[EditToken], x, y) -> tuple[str, str] | None:
    """The two nouns of mentions ``x`` and ``y`` (one singular NN, one plural NNS) each in the other's
    number: ``(y's noun for x's slot, x's noun for y's slot)``; ``None`` unless both forms are sure
    (:func:`crg.hard_negatives.morphology.noun_in_number`) and the singular is a count use (its
    determiner is "a", "one", "each", ...: "two grasses" is never made of "in the grass")."""
    tx, ty = toks[x.head], toks[y.head]
    if {tx.tag, ty.tag} != {"NN", "NNS"}:
        return None
    singular = x if tx.tag == "NN" else y
    det = toks[singular.determiner].word.lower() if singular.determiner is not None else None
    if det not in _COUNT_DETERMINERS and not (det in _DEFINITE_DETERMINERS and
                                              toks[singular.head].word.lower() not in MASS_NOUNS):
        return None
    into_x, into_y = noun_in_number(ty.word, ty.tag, tx.tag), noun_in_number(tx.word, tx.tag, ty.tag)
    return None if into_x is None or into_y is None else (into_x, into_y)


def _swappable_mentions(parsed: ParsedCaption, toks: list[EditToken], x, y) -> bool:
    """Whether two object mentions may change places (whole phrases): not two forms of one noun, no
    spatial noun, and not joined by an order-free word, a list or a chain of places (the swap would
    keep the meaning)."""
    tx, ty = toks[x.head], toks[y.head]
    if word_forms(tx.word) & word_forms(ty.word) or {tx.word.lower(), ty.word.lower()} & RELATIONAL_NOUNS:
        return False
    if is_mistagged_noun(tx.word) or is_mistagged_noun(ty.word) or _verb_like_noun(toks, x.head) or \
            _verb_like_noun(toks, y.head):
        return False  # a tagging error ("a hospital bad", "surf the web"): the phrase is not what the parse says
    x_start = x.determiner if x.determiner is not None else x.run_start
    y_start = y.determiner if y.determiner is not None else y.run_start
    between = [(toks[i].word, toks[i].tag) for i in range(x.head + 1, y_start) if toks[i].tag not in PUNCT_TAGS]
    if not between or is_order_free(between) or is_list_between(between):
        return False
    if any(x0 > 0 and toks[x0 - 1].tag in ("NN", "NNS", "NNP", "NNPS") for x0 in (x_start, y_start)):
        return False  # the end of a longer name or compound ("Darth [Vader]"): it would fall apart
    if any(toks[i].word in (",", ";", ":") for i in range(x.head + 1, y_start)):
        return False  # across a comma: an apposition or another clause ("one pink , the other yellow")
    if is_place_chain(toks[x_start - 1].word if x_start else None, between):
        return False
    if _keeps_meaning(toks[x_start - 1].word if x_start else None, toks[y_start - 1].word, between, tx.word, ty.word,
                      whole=True):
        return False
    return not all(w.lower() in LIST_JOINERS for w, _ in between)


def _article_free(word: str) -> str:
    """A modifier word as a noun swap leaves it: lower-cased, "an" as "a" (it agrees again)."""
    w = word.lower()
    return "a" if w == "an" else w


def _phrase_swap_candidates(parsed: ParsedCaption) -> list[_Candidate]:
    """Two object noun phrases change places whole, determiner and adjectives with their noun
    ("a man holding a fragile piece of glass" -> "a fragile piece holding a man of glass"): CREPE's
    swap of two atoms, with each atom's own modifiers, across whatever relation joins them."""
    toks, out = parsed.edit_tokens(), []
    mentions = object_mentions(parsed)
    for a in range(len(mentions)):
        for b in range(a + 1, len(mentions)):
            x, y = mentions[a], mentions[b]
            if not _swappable_mentions(parsed, toks, x, y):
                continue
            xs = x.determiner if x.determiner is not None else x.run_start
            ys = y.determiner if y.determiner is not None else y.run_start
            if [_article_free(t.word) for t in toks[xs:x.head]] == [_article_free(t.word) for t in toks[ys:y.head]]:
                continue  # alike modifiers ("a cat" / "a bed", bare nouns): the same text as swap_nouns
            first = [EditToken(t.word, t.tag, k == 0, t.initial) for k, t in enumerate(toks[ys:y.head + 1])]
            second = [EditToken(t.word, t.tag, k == 0, t.initial) for k, t in enumerate(toks[xs:x.head + 1])]
            new = toks[:xs] + first + toks[x.head + 1:ys] + second + toks[y.head + 1:]
            px, py = realize_words([t.word for t in toks[xs:x.head + 1]]), realize_words([t.word for t in toks[ys:y.head + 1]])
            out.append(_Candidate(tuple(new), Change("swap_phrases", (px, py), (py, px), "noun phrases")))
    return out


def _attribute_swap_candidates(parsed: ParsedCaption) -> list[_Candidate]:
    """Two objects' adjectives change places (SugarCrepe's swap-att: "a white dog on a black couch"
    -> "a black dog on a white couch"), and so do two objects' noun modifiers, a compound's first noun
    (materials and kinds: "a stone bench by a brick wall" -> "a brick bench by a stone wall"): like
    with like, so each slot stays plausible; never between two mentions of one noun, nor a word the
    other object already has."""
    toks, out = parsed.edit_tokens(), []
    mentions = object_mentions(parsed)
    slots = {m.head: (list(m.adjectives), [] if _verb_like_noun(toks, m.head) else _noun_modifiers(toks, m))
             for m in mentions}
    attributed = [m for m in mentions if any(slots[m.head])]
    for a in range(len(attributed)):
        for b in range(a + 1, len(attributed)):
            x, y = attributed[a], attributed[b]
            if word_forms(toks[x.head].word) & word_forms(toks[y.head].word):
                continue
            hx, hy = toks[x.head].word.lower(), toks[y.head].word.lower()
            xw = {toks[k].word.lower() for k in range(x.run_start, x.head)}
            yw = {toks[k].word.lower() for k in range(y.run_start, y.head)}
            for kind, xs, ys in (("attribute binding", slots[x.head][0], slots[y.head][0]),
                                 ("noun modifier binding", slots[x.head][1], slots[y.head][1])):
                for i in xs:
                    for j in ys:
                        wi, wj = toks[i].word.lower(), toks[j].word.lower()
                        if wi in yw or wj in xw or word_forms(wi) & word_forms(wj) or \
                                any({wi, wj} <= pole for pole in SIZE_POLES) or related_words(wi) & {wj}:
                            continue  # (one size pole: "a little girl ... a small dessert" says the same swapped)
                        new = _replace(_replace(toks, i, wj), j, wi)
                        out.append(_Candidate(tuple(new), Change("swap_attributes", (f"{wi} {hx}", f"{wj} {hy}"),
                                                                 (f"{wj} {hx}", f"{wi} {hy}"), kind)))
    return out


#: Numerals a count swap exchanges ("a"/"an"/"one" count 1); "some", "many" say no number.
_NUMERALS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
             "ten": 10, "a": 1, "an": 1}


def _count_swap_candidates(parsed: ParsedCaption) -> list[_Candidate]:
    """Two objects' counts change places, each noun taking the other's number ("two dogs chasing a
    ball" -> "a dog chasing two balls"): the numbers bind to other objects, the objects and relations
    stay. Only numerals (digits, "two" ... "ten") against another numeral or "a"/"an"/"one"; never
    between two mentions of one noun, and only nouns whose other number lemminflect gives for sure."""
    toks, out = parsed.edit_tokens(), []

    def count(m) -> int | None:
        if m.determiner is None or toks[m.head].tag not in ("NN", "NNS") or _verb_like_noun(toks, m.head) or \
                any(t.word.lower() in QUANTIFIERS | {"couple", "pair", "lot", "bunch"}
                    for t in toks[m.determiner + 1:m.head + 1]):
            return None  # "a few office desks", "a couple of": no count of the head to swap
        w = toks[m.determiner].word.lower()
        n = int(w) if w.isdigit() else _NUMERALS.get(w)
        if n is None or (n == 1) != (toks[m.head].tag == "NN"):
            return None  # "two dog", "a people": the parse is not what it seems
        return n

    counted = [(m, count(m)) for m in object_mentions(parsed)]
    counted = [(m, n) for m, n in counted if n is not None]
    for a in range(len(counted)):
        for b in range(a + 1, len(counted)):
            (x, nx), (y, ny) = counted[a], counted[b]
            if nx == ny or (nx == 1 and ny == 1) or word_forms(toks[x.head].word) & word_forms(toks[y.head].word):
                continue
            new, ok = list(toks), True
            for m, n_new, m_other in ((x, ny, y), (y, nx, x)):
                head = toks[m.head]
                noun = noun_in_number(head.word, head.tag, "NN" if n_new == 1 else "NNS")
                if noun is None:
                    ok = False
                    break
                numeral = toks[m_other.determiner].word.lower()
                if n_new == 1:
                    numeral = "one" if numeral == "one" else "a"
                det = toks[m.determiner]
                new[m.determiner] = EditToken(match_case(numeral, det.word), "CD" if n_new > 1 else "DT", True,
                                              det.initial)
                if m.determiner + 1 < m.head:  # an article agrees with the next word again
                    new[m.determiner + 1] = replace(new[m.determiner + 1], fresh=True)
                if noun != head.word.lower():
                    new[m.head] = EditToken(match_case(noun, head.word), "NN" if n_new == 1 else "NNS", True,
                                            head.initial)
                else:
                    new[m.head] = replace(new[m.head], fresh=True)
            if not ok:
                continue
            before = tuple(realize_words([t.word.lower() for t in toks[m.determiner:m.head + 1]]) for m in (x, y))
            after = tuple(realize_words([t.word.lower() for t in new[m.determiner:m.head + 1]]) for m in (x, y))
            out.append(_Candidate(tuple(new), Change("swap_counts", before, after, "counts")))
    return out


def _noun_modifiers(toks: list[EditToken], m) -> list[int]:
    """A mention's compound modifier: the one common noun right before its head, itself after the
    determiner or an adjective ("a [stone] bench", "the old [brick] wall"; not in "a cell phone case",
    nor a spatial or generic noun, nor a word the lexicon never reads as a noun: "[living] room")."""
    i = m.head - 1
    if i < m.run_start or toks[i].tag != "NN" or (i > 0 and toks[i - 1].tag in _NOUN_TAGS | {"HYPH", "POS"}):
        return []
    w = toks[i].word.lower()
    if not w.isalpha() or w in RELATIONAL_NOUNS or w in GENERIC_NOUNS or is_mistagged_noun(w):
        return []
    return [i]


def _head_word(parsed: ParsedCaption, node: ConceptNode) -> str:
    """The first noun of a concept's span (lower-cased), "" if it has none."""
    return next((parsed.tokens[i][0].lower() for i in range(node.start, node.end)
                 if parsed.tokens[i][1] in PRIMITIVE_TAGS), "")


# ---------------------------------------------------------------------------- HN-ATOM
def _atom_slots(parsed: ParsedCaption, vocab: AtomVocabulary | None, cfg: HardNegativeConfig,
                banned: set[str]) -> tuple[list[tuple[int, str, list[str]]], bool]:
    """``(token, kind, foils)`` for every atom of the caption; the flag says whether any atom exists."""
    slots, any_atom = [], False
    caption_words = {w for w in parsed.words()}
    for i in primitive_tokens(parsed):
        word, tag = parsed.tokens[i]
        if word.lower() in GENERIC_NOUNS:
            continue
        any_atom = True
        pool = vocab.noun_foils(tag, cfg.min_atom_count) if vocab else []
        related = related_words(word)
        pool = [w for w in pool if w not in related and not (word_forms(w) & banned)]
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


def _foil_weights(kind: str, pool: list[str], vocab: AtomVocabulary | None) -> list[float] | None:
    """Cumulative weights of a slot's foils by their corpus counts (``foil_sampling="frequency"``): the
    foils' word distribution then follows the captions' own, so that a bag-of-words model learns no
    "rare word = negative" rule (uniform draws over-use rare nouns). ``None``: uniform (no counts)."""
    if vocab is None:
        return None
    if kind.startswith("noun:"):
        counts = vocab.nouns.get(kind.split(":", 1)[1], {})
    elif kind == "color":
        counts = vocab.colors
    else:
        return None
    total, out = 0.0, []
    for w in pool:
        total += max(counts.get(w, 0), 1)
        out.append(total)
    return out


def _atom_candidates(parsed: ParsedCaption, vocab, cfg, banned, rng: random.Random) -> tuple[list[_Candidate], str]:
    slots, any_atom = _atom_slots(parsed, vocab, cfg, banned)
    if not slots:
        return [], ("no atom of a known kind (noun, colour, size, spatial word)" if not any_atom
                    else "no foil of the same kind (vocabulary empty, or every foil used for this image)")
    toks, out, seen = parsed.edit_tokens(), [], set()
    weights = [_foil_weights(kind, pool, vocab) if cfg.foil_sampling == "frequency" else None
               for _, kind, pool in slots]
    for _ in range(_MAX_TRIES * cfg.per_type):
        if len(out) >= cfg.per_type:
            break
        k = rng.randrange(len(slots))
        i, kind, pool = slots[k]
        foil = pool[rng.randrange(len(pool))] if weights[k] is None else rng.choices(pool, cum_weights=weights[k])[0]
        if (i, foil) in seen:
            continue
        seen.add((i, foil))
        words = foil.split()
        new = toks[:i] + [EditToken(match_case(w, toks[i].word) if k == 0 else w, toks[i].tag, True,
                                    toks[i].initial and k == 0) for k, w in enumerate(words)] + toks[i + 1:]
        op = "replace_" + kind.split(":")[0]
        out.append(_Candidate(tuple(new), Change(op, (toks[i].word.lower(),), (foil,), kind)))
    return out, ""


# ---------------------------------------------------------------------------- HN-NEG
def _negation_candidates(parsed: ParsedCaption, extended: bool = False) -> tuple[list[_Candidate], str]:
    toks = parsed.edit_tokens()
    out, reason = _sentence_negations(parsed, toks)
    for obj in object_mentions(parsed):  # "a yellow vase" -> "a vase that is not yellow"
        for a in obj.adjectives:
            be = "are" if toks[obj.head].tag in ("NNS", "NNPS") else "is"
            adj = toks[a].word.lower()
            new = toks[:a] + toks[a + 1:obj.head + 1] + [EditToken("that", "WDT"), EditToken(be, "VBZ"),
                                                         EditToken("not", "RB"), EditToken(adj, "JJ")] \
                + toks[obj.head + 1:]
            if a == obj.run_start and a > 0:  # the noun (or next adjective) now follows the article
                new[a] = replace(new[a], fresh=True)
            out.append(_Candidate(tuple(new), Change("negate_attribute", (f"{adj} {toks[obj.head].word.lower()}",),
                                                     (f"{toks[obj.head].word.lower()} that {be} not {adj}",),
                                                     "attribute")))
    if extended:
        out += _short_negation_candidates(parsed, toks)
        out += _short_negation_candidates(parsed, toks, drop_adjectives=True)
        out += _sentence_negations(parsed, toks, drop_adjectives=True)[0]
    if not out and not reason:
        reason = "no negatable verb, noun phrase or attribute"
    return out, reason


def _droppable_adjectives(toks: list[EditToken], mentions, after: int) -> list[int]:
    """Adjectives of ``mentions`` after token ``after`` that can go without leaving "a red and train"
    or "a very dog" (none that follows a comma, conjunction or adverb)."""
    return sorted(a for m in mentions for a in m.adjectives
                  if a > after and a > 0 and toks[a - 1].tag not in PUNCT_TAGS | {"CC", "RB", "RBR", "RBS"})


def _without(toks: list[EditToken], drop: Iterable[int]) -> list[EditToken]:
    """``toks`` less the tokens at ``drop``; the token after each gap is fresh (an article agrees again)."""
    drop, out, gap = set(drop), [], False
    for i, t in enumerate(toks):
        if i in drop:
            gap = True
            continue
        out.append(replace(t, fresh=True) if gap else t)
        gap = False
    return out


def _dropped(change: Change, toks: list[EditToken], drop: list[int]) -> Change:
    """``change`` noting the adjectives a negation left out: inside its scope ("no ..." and "not ..."
    are downward entailing) leaving a modifier out makes the negative claim stronger, so it stays false
    of an image its caption is true of ("a young man rides a brown horse" -> "no man rides a horse")."""
    words = tuple(toks[a].word.lower() for a in drop)
    return Change(change.op, change.before + words, change.after, f"{change.where}; without {' '.join(words)}")


def _sentence_negations(parsed: ParsedCaption, toks: list[EditToken],
                        drop_adjectives: bool = False) -> tuple[list[_Candidate], str]:
    """CREPE's caption negation: "there is/are no ..." of a noun-phrase caption, "not" (or do-support)
    after a sentence's finite verb. ``drop_adjectives``: the variant without the adjectives in the
    negation's scope (the whole noun-phrase caption; what follows the verb), only where there are any."""
    out, reason = [], ""
    root = parsed.root
    mentions = object_mentions(parsed)
    content = [i for i, t in enumerate(toks) if t.tag not in PUNCT_TAGS]
    if root.label in NOMINAL_LABELS or root.label == "FRAG" and any(t.tag in PRIMITIVE_TAGS for t in toks):
        # "a man in a blue shirt" -> "there is no man in a blue shirt"
        k = content[0] if content else 0
        while k < len(toks) and (toks[k].tag in LEADING_DETERMINER_TAGS or toks[k].word.lower() in QUANTIFIERS):
            k += 1
        heads = [i for i in primitive_tokens(parsed) if i >= k]
        if heads and k < len(toks):
            be = "are" if toks[heads[0]].tag in ("NNS", "NNPS") else "is"
            drop = _droppable_adjectives(toks, mentions, k - 1) if drop_adjectives else []
            kept = _without(toks, drop)
            rest = [replace(t, word=t.word[:1].lower() + t.word[1:] if t.initial and t.tag not in ("NNP", "NNPS")
                            else t.word, initial=False) for t in kept[k:]]
            new = [EditToken("there", "EX", True, True), EditToken(be, "VBZ"), EditToken("no", "DT")] + rest
            change = Change("negate_caption", (realize_words([t.word for t in toks[:k]]),), (f"there {be} no",),
                            root.label)
            if drop or not drop_adjectives:
                out.append(_Candidate(tuple(new), _dropped(change, toks, drop) if drop else change))
        else:
            reason = "noun-phrase caption without a head noun"
    elif root.label in CLAUSE_LABELS:
        verb = _finite_verb(parsed)
        if verb is None:
            reason = "no finite verb in the sentence's predicate"
        else:
            drop = _droppable_adjectives(toks, mentions, verb) if drop_adjectives else []
            cand = _negate_verb(_without(toks, drop), verb)
            if cand is None:
                reason = "past-tense verb without auxiliary (no lemmatiser for do-support)"
            elif drop or not drop_adjectives:
                out.append(_Candidate(cand.tokens, _dropped(cand.change, toks, drop)) if drop else cand)
    else:
        reason = f"caption of type {root.label} has no negatable form"
    return out, reason


def _short_negation_candidates(parsed: ParsedCaption, toks: list[EditToken],
                               drop_adjectives: bool = False) -> list[_Candidate]:
    """Negations as long as the caption, so that length does not give them away: "with" <->
    "without" ("a man with a hat" -> "a man without a hat"), and "no" for the determiner of the
    caption's first noun phrase, of one after "with", or of one after "there is/are" ("two dogs
    play" -> "no dogs play", "a man with a hat" -> "a man with no hat"). ``drop_adjectives``: the
    variants, shorter than the caption, without the adjectives in the negation's scope (the object
    of "with"; the whole caption for its first noun phrase's "no"), only where there are any."""
    out = []
    words = [t.word.lower() for t in toks]
    first = next((i for i, t in enumerate(toks) if t.tag not in PUNCT_TAGS), None)
    mentions = object_mentions(parsed)

    def after(i):  # the object mention that starts right after token i
        return [m for m in mentions if (m.determiner if m.determiner is not None else m.run_start) == i + 1]

    for i, w in enumerate(words):
        if w in WITH_NEGATIONS and toks[i].tag == "IN" and i + 1 < len(toks) \
                and toks[i + 1].tag in LEADING_DETERMINER_TAGS | PRIMITIVE_TAGS | {"JJ"} \
                and (i == 0 or words[i - 1] not in ("along", "together")) and words[i + 1] not in ("each", "one"):
            # only "with" -> "without" negates (and has a downward scope to drop adjectives from)
            drop = _droppable_adjectives(toks, after(i), i) if drop_adjectives and w == "with" else []
            if drop_adjectives and not drop:
                continue
            new = _replace(_without(toks, drop), i, WITH_NEGATIONS[w])
            change = Change("negate_with", (w,), (WITH_NEGATIONS[w],), "preposition")
            out.append(_Candidate(tuple(new), _dropped(change, toks, drop) if drop else change))
    for obj in mentions:
        d = obj.determiner
        if d is None or words[d] not in NO_DETERMINERS:
            continue
        if d == first:
            where, scope = "subject", mentions
        elif d > 0 and words[d - 1] == "with":
            where, scope = "with", [obj]
        elif d > 1 and words[d - 2] == "there" and words[d - 1] in ("is", "are"):
            where, scope = "there is", [obj]
        else:
            continue
        drop = _droppable_adjectives(toks, scope, d) if drop_adjectives else []
        if drop_adjectives and not drop:
            continue
        new = _without(toks, drop)
        new[d] = EditToken(match_case("no", toks[d].word), "DT", False, toks[d].initial)
        change = Change("negate_determiner", (words[d],), ("no",), where)
        out.append(_Candidate(tuple(new), _dropped(change, toks, drop) if drop else change))
    return out


def _finite_verb(parsed: ParsedCaption) -> int | None:
    """The first finite verb among the sentence predicate's own words (after its subject)."""
    root = parsed.root
    subject_end = root.children[0].end if root.children and root.children[0].start == root.start else root.start
    for i in own_tokens(root):
        if i >= subject_end and parsed.tokens[i][1] in ("VBZ", "VBP", "VBD", "MD"):
            return i
    return None


def _negate_verb(toks: list[EditToken], v: int) -> _Candidate | None:
    word, tag = toks[v].word, toks[v].tag
    w = word.lower()
    nxt = toks[v + 1] if v + 1 < len(toks) else None
    if nxt is not None and nxt.word.lower() in NEGATORS:
        new = toks[:v + 1] + toks[v + 2:]
        return _Candidate(tuple(new), Change("remove_negation", (f"{w} {nxt.word.lower()}",), (w,), "verb"))
    main_have = w in ("has", "have", "had") and not (nxt is not None and nxt.tag in ("VBN", "VBG", "RB", "TO"))
    if w in AUXILIARIES and not main_have:
        new = toks[:v + 1] + [EditToken("not", "RB")] + toks[v + 1:]
        return _Candidate(tuple(new), Change("negate_verb", (w,), (f"{w} not",), "verb"))
    if tag == "VBP" or (main_have and w == "have"):
        do, base = "do", w
    elif tag == "VBZ":
        do, base = "does", vbz_base(w)
    elif w == "had":
        do, base = "did", "have"
    else:
        return None
    new = toks[:v] + [EditToken(match_case(do, word), "VBZ", False, toks[v].initial), EditToken("not", "RB"),
                      EditToken(base, "VB")] + toks[v + 1:]
    return _Candidate(tuple(new), Change("negate_verb", (w,), (f"{do} not {base}",), "verb"))


# ---------------------------------------------------------------------------- HN-COMP
def _comp_candidates(parsed: ParsedCaption, vocab, cfg, banned, rng: random.Random,
                     extended: bool = False) -> tuple[list[_Candidate], str]:
    toks = parsed.edit_tokens()
    objects = object_mentions(parsed)
    attributed = [o for o in objects if o.adjectives]
    if not attributed:
        return [], "no object with an attribute (adjective)"
    binding: list[_Candidate] = []
    for a_obj in attributed:
        a_words = {toks[k].word.lower() for k in a_obj.adjectives}
        for b_obj in objects:
            if b_obj.head == a_obj.head or word_forms(toks[b_obj.head].word) & word_forms(toks[a_obj.head].word):
                continue
            b_words = {toks[k].word.lower() for k in b_obj.adjectives}
            b_kinds = {adjective_kind(w) for w in b_words} - {None}
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
                if adjective_kind(wa) in b_kinds or not cfg.move_attributes:
                    continue
                new = []
                for i, t in enumerate(toks):
                    if i == b_obj.run_start:
                        new.append(EditToken(wa, "JJ", True, False))
                    if i == a:
                        continue
                    new.append(replace(t, fresh=True) if i == a + 1 and a == a_obj.run_start else t)
                binding.append(_Candidate(tuple(new), Change(
                    "move_attribute", (f"{wa} {toks[a_obj.head].word.lower()}", toks[b_obj.head].word.lower()),
                    (toks[a_obj.head].word.lower(), f"{wa} {toks[b_obj.head].word.lower()}"), "attribute binding")))
    split = _split_candidates(parsed, toks, attributed, vocab, cfg, banned, rng,
                              _SPLIT_DRAWS_EXTENDED if extended else 1)
    picked = rng.sample(binding, min(len(binding), cfg.per_type))
    picked += rng.sample(split, min(len(split), cfg.per_type - len(picked)))
    if not picked:
        return [], ("attributes already shared by the objects, and no colour/size foil for a compound split"
                    if len(attributed) > 1 or len(objects) > 1 else
                    "one attributed object and no colour/size foil for a compound split")
    return picked, ""


#: Foil pairs drawn per (object, attribute) for compound splits when refinement widens the edits.
_SPLIT_DRAWS_EXTENDED = 4


def _split_candidates(parsed, toks, attributed, vocab, cfg, banned, rng, draws: int = 1) -> list[_Candidate]:
    """CREPE's compound foil: "a pink car" -> "a pink toy and a blue car" (atoms split over two objects);
    ``draws`` foil pairs per attributed object and colour/size adjective."""
    slots = {i: (kind, pool) for i, kind, pool in _atom_slots(parsed, vocab, cfg, banned)[0]}
    out = []
    for obj in attributed:
        head_slot = slots.get(obj.head)
        if head_slot is None:
            continue
        for a in (a for a in obj.adjectives for _ in range(draws)):
            if a not in slots or slots[a][0] not in ("color", "size"):
                continue
            noun_foil = head_slot[1][rng.randrange(len(head_slot[1]))]
            adj_foil = slots[a][1][rng.randrange(len(slots[a][1]))].split()[0]
            start = obj.determiner if obj.determiner is not None else obj.run_start
            phrase = toks[start:obj.head + 1]
            first = [t if k != obj.head - start else EditToken(match_case(noun_foil, t.word), t.tag, True, t.initial)
                     for k, t in enumerate(phrase)]
            second = [EditToken(t.word[:1].lower() + t.word[1:] if t.initial else t.word, t.tag, False, False)
                      if k != a - start else EditToken(adj_foil, t.tag, True, False) for k, t in enumerate(phrase)]
            if second and second[0].word.lower() in ARTICLES:
                second[0] = EditToken(second[0].word, second[0].tag, False, False)
                if len(second) > 1:
                    second[1] = EditToken(second[1].word, second[1].tag, True, False)
            new = toks[:start] + first + [EditToken("and", "CC")] + second + toks[obj.head + 1:]
            head = toks[obj.head].word.lower()
            adj = toks[a].word.lower()
            out.append(_Candidate(tuple(new), Change("split_compound", (f"{adj} {head}",),
                                                     (f"{adj} {noun_foil}", f"{adj_foil} {head}"), "compound")))
    return out


# ---------------------------------------------------------------------------- one caption
def caption_candidates(parsed: ParsedCaption, *, vocabulary: AtomVocabulary | None = None,
                       config: HardNegativeConfig = HardNegativeConfig(), image_id: str | None = None,
                       image_words: Iterable[str] = (), limit: int | None = None) -> CaptionCandidates:
    """Distinct candidate negatives of one parsed caption, per type, with their tagged tokens.

    Args as :func:`caption_hard_negatives`; ``limit``: candidates kept per type (default
    ``config.per_type``; refinement asks for ``config.refinement.candidates_per_type``). The first
    ``per_type`` candidates of a type are the same whatever the limit above it, except HN-COMP's
    (it samples ``limit`` rebindings at once).
    """
    limit = config.per_type if limit is None else limit
    draw = config if limit == config.per_type else replace(config, per_type=limit, refinement=None)
    extended = config.extended_edits
    banned = {w.lower() for w in image_words} | set(parsed.words())
    source = parsed.text
    candidates, skipped, dropped = {}, {}, {}
    source_violations = grammar_violations(parsed.tokens) if config.drop_ungrammatical else 0
    seen = {_normalize(source)}
    for hn_type in config.types:
        rng = random.Random(f"{config.seed}:{hn_type}:{image_id}:{source}")
        if hn_type == HN_SWAP:
            cands, reason = _swap_candidates(parsed, extended, attributes=HN_COMP not in config.types)
        elif hn_type == HN_ATOM:
            cands, reason = _atom_candidates(parsed, vocabulary, draw, banned, rng)
        elif hn_type == HN_NEG:
            cands, reason = _negation_candidates(parsed, extended)
        else:
            cands, reason = _comp_candidates(parsed, vocabulary, draw, banned, rng, extended)
        if hn_type in (HN_SWAP, HN_NEG):
            cands = rng.sample(cands, len(cands))
        kept: list[NegativeCandidate] = []
        for cand in cands:
            if len(kept) >= limit:
                break
            text, tagged, spans = realize_source_form(list(cand.tokens), parsed)
            key = _normalize(text)
            if key in seen:
                continue
            seen.add(key)
            if config.drop_ungrammatical and grammar_violations(tagged) > source_violations:
                dropped[hn_type] = dropped.get(hn_type, 0) + 1
                continue
            kept.append(NegativeCandidate(HardNegative(hn_type, text, source, cand.change, image_id, spans),
                                          tuple(tagged)))
        if kept:
            candidates[hn_type] = kept
        elif dropped.get(hn_type):
            skipped[hn_type] = "every candidate ungrammatical (agreement) or a repeat"
        else:
            skipped[hn_type] = reason or "every candidate repeats the caption or another negative"
    return CaptionCandidates(candidates, skipped, dropped)


def caption_hard_negatives(parsed: ParsedCaption, *, vocabulary: AtomVocabulary | None = None,
                           config: HardNegativeConfig = HardNegativeConfig(), image_id: str | None = None,
                           image_words: Iterable[str] = ()) -> CaptionNegatives:
    """Hard negatives of one parsed caption (at most ``config.per_type`` per type, unrefined).

    Args:
        parsed: the caption's parse (:meth:`ParsedCaption.from_tree`).
        vocabulary: the corpus's atoms (foils for HN-ATOM and compound splits); without it only
            colour, size and spatial words are replaced.
        config: how many, which types, seed. Its ``refinement`` only widens the edits here
            (``extended_edits``); selection against blind scorers needs the whole corpus
            (:func:`crg.hard_negatives.corpus_hard_negatives`).
        image_id: the image the caption describes (recorded, and part of the random stream's key).
        image_words: words of every caption of the same image: never used as foils.

    >>> from nltk import Tree
    >>> p = ParsedCaption.from_tree(Tree.fromstring(
    ...     "(TOP (NP (NP (DT A) (NN dog)) (VP (VBG chasing) (NP (DT a) (NN cat))) (. .)))"))
    >>> [n.text for n in caption_hard_negatives(p, config=HardNegativeConfig(types=(HN_SWAP,))).negatives]
    ['A cat chasing a dog.']
    """
    result = caption_candidates(parsed, vocabulary=vocabulary, config=config, image_id=image_id,
                                image_words=image_words)
    negatives = [c.negative for t in config.types for c in result.candidates.get(t, ())]
    return CaptionNegatives(negatives, result.skipped, result.ungrammatical)
