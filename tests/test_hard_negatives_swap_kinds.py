"""HN-SWAP's like-with-like swaps (issue 33's coverage bar): nouns of different numbers and verbs of
different forms swap keeping each slot's form, two objects' counts and compound modifiers change
places, and the word forms behind them come from lemminflect. Hand-made parses, no models."""

from __future__ import annotations

from nltk import Tree

from crg.hard_negatives import HN_SWAP, HardNegativeConfig, ParsedCaption, RefinementConfig, caption_candidates
from crg.hard_negatives.morphology import has_verb_reading, noun_in_number, verb_in_form
from crg.hard_negatives.reasons import false_because
from crg.hard_negatives.records import Change


def _swaps(tree: str, op: str | None = None, **cfg) -> list[tuple[str, Change]]:
    config = HardNegativeConfig(types=(HN_SWAP,), refinement=RefinementConfig(), **cfg)
    r = caption_candidates(ParsedCaption.from_tree(Tree.fromstring(tree)), config=config, limit=20)
    return [(c.negative.text, c.negative.change) for c in r.candidates.get(HN_SWAP, [])
            if op is None or c.negative.change.op == op]


def _texts(tree: str, op: str | None = None, **cfg) -> list[str]:
    return sorted(t for t, _ in _swaps(tree, op, **cfg))


# ------------------------------------------------------------------ word forms
def test_noun_in_number_gives_the_other_number_only_when_sure():
    assert [noun_in_number(w, t, like) for w, t, like in (("dog", "NN", "NNS"), ("men", "NNS", "NN"),
                                                          ("knife", "NN", "NNS"), ("children", "NNS", "NN"),
                                                          ("bus", "NN", "NNS"), ("cats", "NNS", "NNS"))] == \
        ["dogs", "man", "knives", "child", "buses", "cats"]
    # one form for both numbers, pluralia tantum, two lemmas (leaf / leave), not a noun tag
    for args in (("sheep", "NNS", "NN"), ("people", "NNS", "NN"), ("jeans", "NNS", "NN"), ("scissors", "NNS", "NN"),
                 ("leaves", "NNS", "NN"), ("dog", "NNP", "NNS"), ("dog", "NN", "VBZ")):
        assert noun_in_number(*args) is None, args


def test_verb_in_form_keeps_the_slot_form_and_refuses_what_it_cannot_give_back():
    assert verb_in_form("riding", "VBG", "VBZ") == "rides"
    assert verb_in_form("holds", "VBZ", "VBG") == "holding"
    assert verb_in_form("sat", "VBD", "VBG") == "sitting"
    assert verb_in_form("flys", "VBZ", "VBG") is None  # a misspelling: no lemma gives it back
    assert verb_in_form("riding", "VBG", "NN") is None
    assert has_verb_reading("balances") and has_verb_reading("Stares") and not has_verb_reading("desks")


# ------------------------------------------------------------------ number-keeping noun swaps
TWO_DOGS = "(TOP (S (NP (CD Two) (NNS dogs)) (VP (VBP chase) (NP (DT {det}) (NN {noun}))) (. .)))"


def test_nouns_of_different_numbers_swap_keeping_each_slot_number():
    got = _swaps(TWO_DOGS.format(det="a", noun="ball"), "swap_nouns")
    assert [t for t, _ in got] == ["Two balls chase a dog."]
    change = got[0][1]
    assert change.before == ("dogs", "ball") and change.after == ("balls", "dog") and "number" in change.where
    # "the" is a count use too, unless the noun is a mass noun or a place there is one of
    assert _texts(TWO_DOGS.format(det="the", noun="ball"), "swap_nouns") == ["Two balls chase the dog."]
    assert _texts(TWO_DOGS.format(det="the", noun="grass"), "swap_nouns") == []
    # no determiner: a bare singular is likely a mass use ("dogs chase water")
    bare = "(TOP (S (NP (CD Two) (NNS dogs)) (VP (VBP chase) (NP (NN ball))) (. .)))"
    assert _texts(bare, "swap_nouns") == []


def test_a_plural_noun_after_a_singular_noun_phrase_is_a_missed_verb_and_never_swapped():
    # "A skateboarder balances on a ramp": "balances" tagged NNS; as a noun it would swap with "ramp"
    tree = ("(TOP (NP (NP (DT A) (NN skateboarder) (NNS balances)) (PP (IN on) (NP (DT a) (NN ramp))) (. .)))")
    texts = [t for t, c in _swaps(tree) if c.op in ("swap_nouns", "swap_phrases", "swap_counts")]
    assert not any("balance " in t.lower() or "ramps" in t.lower() for t in texts), texts
    # the same shape with a plural determiner is a compound ("two coffee mugs on a table"): swapped
    tree = "(TOP (NP (NP (CD Two) (NN coffee) (NNS mugs)) (PP (IN on) (NP (DT a) (NN table))) (. .)))"
    assert "Two coffee tables on a mug." in _texts(tree, "swap_nouns")


# ------------------------------------------------------------------ counts
def test_two_objects_counts_change_places_with_their_nouns_number():
    tree = "(TOP (NP (NP (CD Two) (NNS dogs)) (VP (VBG chasing) (NP (DT a) (NN ball))) (. .)))"
    got = _swaps(tree, "swap_counts")
    assert [t for t, _ in got] == ["A dog chasing two balls."]
    assert got[0][1].before == ("two dogs", "a ball") and got[0][1].after == ("a dog", "two balls")
    # with a finite verb the subject's number changes: "a dog chase" breaks agreement and is dropped
    assert _texts(TWO_DOGS.format(det="a", noun="ball"), "swap_counts", drop_ungrammatical=False) == \
        ["A dog chase two balls."]
    assert _texts(TWO_DOGS.format(det="a", noun="ball"), "swap_counts") == []
    # the article agrees with the word after it again
    tree = "(TOP (NP (NP (CD Three) (NNS apples)) (PP (IN on) (NP (DT an) (JJ old) (NN plate))) (. .)))"
    assert _texts(tree, "swap_counts") == ["An apple on three old plates."]
    # digits keep their spelling
    tree = "(TOP (NP (NP (DT A) (NN cat)) (PP (IN near) (NP (CD 2) (NNS printers))) (. .)))"
    assert _texts(tree, "swap_counts") == ["2 cats near a printer."]


def test_counts_are_not_swapped_without_two_different_numerals_or_between_one_noun():
    no_numeral = "(TOP (NP (NP (DT A) (NN dog)) (PP (IN on) (NP (DT a) (NN bed))) (. .)))"
    same_count = "(TOP (NP (NP (CD Two) (NNS dogs)) (PP (IN on) (NP (CD two) (NNS beds))) (. .)))"
    one_noun = "(TOP (NP (NP (CD Two) (NNS dogs)) (VP (VBG chasing) (NP (DT a) (NN dog))) (. .)))"
    quantified = ("(TOP (NP (NP (DT A) (JJ few) (NN office) (NNS desks)) (PP (IN with) (NP (CD three) (NNS computers)))"
                  " (. .)))")
    mass = "(TOP (NP (NP (CD Two) (NNS sheep)) (PP (IN on) (NP (DT a) (NN hill))) (. .)))"
    for tree in (no_numeral, same_count, one_noun, quantified, mass):
        assert _texts(tree, "swap_counts") == [], tree
    assert "counts of 'two dogs' and 'a ball'" in false_because(
        Change("swap_counts", ("two dogs", "a ball"), ("a dog", "two balls"), "counts")).concept


# ------------------------------------------------------------------ compound modifiers and verbs
def test_compound_modifiers_swap_like_adjectives():
    tree = ("(TOP (NP (NP (DT A) (NN stone) (NN bench)) (PP (IN by) (NP (DT a) (NN brick) (NN wall))) (. .)))")
    got = _swaps(tree, "swap_attributes")
    assert [t for t, _ in got] == ["A brick bench by a stone wall."]
    assert got[0][1].where == "noun modifier binding"
    # a three-noun compound ("cell phone case") and a spatial noun have no swappable modifier
    tree = ("(TOP (NP (NP (DT A) (NN cell) (NN phone) (NN case)) (PP (IN by) (NP (DT a) (NN brick) (NN wall)))"
            " (. .)))")
    assert _texts(tree, "swap_attributes") == []
    # adjectives swap with adjectives only, never with a noun modifier
    tree = "(TOP (NP (NP (DT A) (JJ red) (NN bench)) (PP (IN by) (NP (DT a) (NN brick) (NN wall))) (. .)))"
    assert _texts(tree, "swap_attributes") == []


def test_verbs_of_different_forms_swap_keeping_each_slot_form():
    tree = ("(TOP (S (NP (NP (DT A) (NN man)) (VP (VBG riding) (NP (DT a) (NN horse)))) "
            "(VP (VBZ holds) (NP (DT a) (NN flag))) (. .)))")
    got = _swaps(tree, "swap_relations")
    assert [t for t, _ in got] == ["A man holding a horse rides a flag."]
    assert got[0][1].before == ("riding", "holds") and got[0][1].after == ("holding", "rides")
    # complements of different kinds (an object, a prepositional phrase): no swap
    tree = ("(TOP (S (NP (NP (DT A) (NN man)) (VP (VBG sitting) (PP (IN on) (NP (DT a) (NN bench))))) "
            "(VP (VBZ holds) (NP (DT a) (NN flag))) (. .)))")
    assert _texts(tree, "swap_relations") == []


# ------------------------------------------------------------------ swaps that keep the meaning
def test_no_swap_between_synonyms_two_places_of_one_thing_or_around_a_bare_of():
    # two nouns of one synonym group: "a man chasing a guy" says the same swapped
    synonyms = "(TOP (NP (NP (DT A) (NN man)) (VP (VBG chasing) (NP (DT a) (NN guy))) (. .)))"
    assert _texts(synonyms) == []
    assert _texts(synonyms.replace("guy", "dog")) != []  # the same caption with a dog swaps
    # two places of the motorcycle: both hold in either order; the motorcycle itself still swaps
    places = ("(TOP (NP (NP (DT A) (NN motorcycle)) (PP (IN in) (NP (DT the) (NN foreground))) "
              "(VP (VBN parked) (PP (IN in) (NP (DT a) (NN lot)))) (. .)))")
    texts = _texts(places)
    assert not any(t.startswith("A motorcycle in") and "parked in the foreground" in t for t in texts), texts
    assert not any("in the lot" in t or "in a foreground" in t for t in texts), texts
    assert "A lot in the foreground parked in a motorcycle." in texts
    # whole phrases around a bare "of": "a dish of yogurt" is "yogurt of a dish"
    of = "(TOP (NP (NP (DT A) (NN dish)) (PP (IN of) (NP (JJ fresh) (NN yogurt))) (. .)))"
    assert "Fresh yogurt of a dish." not in _texts(of)


def test_attributes_of_one_size_pole_or_synonyms_never_swap():
    tree = "(TOP (NP (NP (DT A) (JJ little) (NN girl)) (PP (IN with) (NP (DT a) (JJ {adj}) (NN cake))) (. .)))"
    assert _texts(tree.format(adj="small"), "swap_attributes") == []
    assert _texts(tree.format(adj="red"), "swap_attributes") == ["A red girl with a little cake."]
