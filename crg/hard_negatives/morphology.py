"""Word forms: plurals and singulars, 3rd-person verbs' base forms (from ``lemminflect``), articles,
capitalisation.

Enough English for edits of captions: a foil must not be a form of the word it replaces (nor a
near-synonym), an article must agree with a new word after it, and "plays" negates as "does not play".
Noun and verb forms come from lemminflect (a lemma and inflection table built from a large lexicon, with
rules for unknown words), not from suffix rules: those miss "leaves" -> "leaf" and "knives" -> "knife".
"""

from __future__ import annotations

from functools import lru_cache

import lemminflect

from crg.hard_negatives.lexicon import PLURALIA_TANTUM, SYNONYM_GROUPS

__all__ = ["VBZ_BASE", "has_verb_reading", "is_mistagged_noun", "noun_in_number", "verb_in_form", "word_forms",
           "related_words", "article_for", "vbz_base", "match_case"]

#: Base forms of the auxiliaries, which lemminflect reads as forms of "be"/"have"/"do" too; kept so the
#: negation's do-support never depends on a lexicon lookup for them.
VBZ_BASE = {"has": "have", "does": "do", "goes": "go", "is": "be"}


@lru_cache(maxsize=65536)
def _noun_forms(w: str) -> frozenset[str]:
    lemmas = set(lemminflect.getLemma(w, upos="NOUN")) or {w}
    out = {w} | lemmas
    for lemma in lemmas:
        for tag in ("NN", "NNS"):
            out.update(lemminflect.getInflection(lemma, tag=tag))
    return frozenset(x.lower() for x in out)


@lru_cache(maxsize=65536)
def is_mistagged_noun(word: str) -> bool:
    """Whether a word the tagger called a noun is one the lexicon knows, but never as a noun ("bad" in
    "a hospital bad", "eat"): swapped as a noun, it leaves a sentence without grammar. A word the
    lexicon does not know (a brand, "frisbee", a typo) is taken as the tagger says.

    >>> is_mistagged_noun("bad"), is_mistagged_noun("ride"), is_mistagged_noun("frisbee")
    (True, False, False)
    """
    readings = lemminflect.getAllLemmas(word.lower())
    return bool(readings) and "NOUN" not in readings and "PROPN" not in readings


@lru_cache(maxsize=65536)
def has_verb_reading(word: str) -> bool:
    """Whether lemminflect reads ``word`` as a form of some verb ("balances", "stares"; not "desks").

    >>> has_verb_reading("balances"), has_verb_reading("desks"), has_verb_reading("Stares")
    (True, False, True)
    """
    return "VERB" in lemminflect.getAllLemmas(word.lower())


@lru_cache(maxsize=65536)
def noun_in_number(word: str, tag: str, like: str) -> str | None:
    """Common noun ``word`` (tagged ``tag``, NN or NNS) in the number of tag ``like`` (NN or NNS), from
    lemminflect; ``None`` where the number cannot be changed safely: a word whose lemma does not give it
    back, one with a single form for both numbers ("sheep", "people"), or a plural with no singular in
    use (``PLURALIA_TANTUM``: "jeans", "scissors"). Whether a singular is a count use ("a ball") or a
    mass use ("in grass": "two grasses" reads as an error) the caller tells from its determiner. A swap
    of two nouns of different numbers keeps each slot's number: "two dogs chasing a ball" -> "two balls
    chasing a dog".

    >>> noun_in_number("dog", "NN", "NNS"), noun_in_number("men", "NNS", "NN"), noun_in_number("cats", "NNS", "NNS")
    ('dogs', 'man', 'cats')
    >>> [noun_in_number(w, "NNS", "NN") for w in ("sheep", "jeans", "people")]
    [None, None, None]
    >>> noun_in_number("leaves", "NNS", "NN"), noun_in_number("knife", "NN", "NNS")  # leaf or leave: unsure
    (None, 'knives')
    """
    if tag not in ("NN", "NNS") or like not in ("NN", "NNS"):
        return None
    w = word.lower()
    if tag == like:
        return w
    found = set()
    for lemma in lemminflect.getLemma(w, upos="NOUN"):
        singular = lemminflect.getInflection(lemma, tag="NN")
        plural = lemminflect.getInflection(lemma, tag="NNS")
        if not singular or not plural or w != (singular[0] if tag == "NN" else plural[0]):
            continue
        if plural[0] == singular[0] or w in PLURALIA_TANTUM or plural[0] in PLURALIA_TANTUM:
            return None
        found.add(plural[0] if like == "NNS" else singular[0])
    return found.pop() if len(found) == 1 else None  # two lemmas ("leaves": leaf, leave): unsure


@lru_cache(maxsize=65536)
def verb_in_form(word: str, tag: str, like: str) -> str | None:
    """Verb ``word`` (tagged ``tag``: VBG, VBZ, VBP, VBD, VBN) in the form of tag ``like``, from
    lemminflect; ``None`` unless exactly one lemma gives ``word`` back in its own form (so a swap of
    two verbs of different forms keeps each slot's form: "a man riding a horse holds a flag" -> "a man
    holding a horse rides a flag").

    >>> verb_in_form("riding", "VBG", "VBZ"), verb_in_form("holds", "VBZ", "VBG"), verb_in_form("sat", "VBD", "VBG")
    ('rides', 'holding', 'sitting')
    >>> verb_in_form("flys", "VBZ", "VBG") is None  # a misspelling lemminflect cannot give back
    True
    """
    tags = ("VBG", "VBZ", "VBP", "VBD", "VBN")
    if tag not in tags or like not in tags:
        return None
    w = word.lower()
    found = set()
    for lemma in lemminflect.getLemma(w, upos="VERB"):
        own = lemminflect.getInflection(lemma, tag=tag)
        other = lemminflect.getInflection(lemma, tag=like)
        if own and other and own[0] == w:
            found.add(other[0])
    return found.pop() if len(found) == 1 else None


def word_forms(word: str) -> set[str]:
    """The word with its singular and plural forms (to never replace a noun by itself, nor swap or
    move between two mentions of one noun), from lemminflect.

    >>> sorted(word_forms("Puppies")), sorted(word_forms("leaves") & {"leaf", "leave"}), sorted(word_forms("knife"))
    (['puppies', 'puppy'], ['leaf', 'leave'], ['knife', 'knives'])
    """
    return set(_noun_forms(word.lower()))


def related_words(word: str) -> set[str]:
    """The word's forms and every word sharing a synonym group with one of them (never its foils).

    >>> sorted(related_words("men") & {"man", "guy", "guys", "woman"})
    ['guy', 'guys', 'man']
    """
    forms = word_forms(word)
    out = set(forms)
    for group in SYNONYM_GROUPS:
        if forms & group:
            for w in group:
                out |= word_forms(w)
    return out


def article_for(word: str) -> str:
    """The indefinite article before ``word``, by its spelling and the usual exceptions.

    >>> [article_for(w) for w in ("apple", "umbrella", "unicorn", "hour", "dog")]
    ['an', 'an', 'a', 'an', 'a']
    """
    w = word.lower()
    if w.startswith(("uni", "use", "usu", "eu", "one", "once", "ur")):
        return "a"
    if w.startswith(("hour", "honest", "honor", "heir")):
        return "an"
    return "an" if w[:1] in "aeiou" else "a"


def vbz_base(w: str) -> str:
    """Base form of a 3rd-person singular verb (lemminflect; ``VBZ_BASE`` for the auxiliaries).

    >>> [vbz_base(w) for w in ("plays", "watches", "tries", "goes", "has", "rides", "leaves", "fixes")]
    ['play', 'watch', 'try', 'go', 'have', 'ride', 'leave', 'fix']
    """
    if w in VBZ_BASE:
        return VBZ_BASE[w]
    lemmas = lemminflect.getLemma(w, upos="VERB")
    return lemmas[0] if lemmas else w


def match_case(word: str, like: str) -> str:
    """``word`` capitalised when ``like`` is (a replacement keeps the replaced word's first letter), all
    in capitals when ``like`` is (a caption written in capitals stays so).

    >>> match_case("cat", "Dog"), match_case("cat", "dog"), match_case("playing", "HAVING")
    ('Cat', 'cat', 'PLAYING')
    """
    if len(like) > 1 and like.isupper():
        return word.upper()
    return word[:1].upper() + word[1:] if like[:1].isupper() else word
