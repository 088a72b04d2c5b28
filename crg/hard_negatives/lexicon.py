"""The fixed word lists the generators consult: which atoms may replace which, which words never change.

No WordNet offline, so kinds of atoms (colours, sizes, spatial words), their opposites and the words
too generic or too close in meaning to be foils are listed here by hand. The corpus's own nouns and
colours, with counts, are in :class:`crg.hard_negatives.vocabulary.AtomVocabulary`.

>>> adjective_kind("red"), adjective_kind("tiny"), adjective_kind("wooden")
('color', 'size', None)
"""

from __future__ import annotations

from crg.extract import PRIMITIVE_TAGS

__all__ = [
    "NOMINAL_LABELS", "CLAUSE_LABELS", "SYMMETRIC_CONNECTIVES", "SYMMETRIC_RELATIONS", "is_order_free",
    "PLACE_PREPOSITIONS", "is_place_chain", "is_list_between", "COLOR_WORDS", "SIZE_POLES", "RELATION_OPPOSITES",
    "GENERIC_NOUNS", "SYNONYM_GROUPS", "RELATIONAL_NOUNS", "ARTICLES", "MASS_NOUNS", "PLURALIA_TANTUM",
    "LEADING_DETERMINER_TAGS", "QUANTIFIERS",
    "AUXILIARIES", "NEGATORS", "NO_DETERMINERS", "WITH_NEGATIONS", "SWAPPABLE_PREPOSITIONS", "PREPOSITION_SYNONYMS",
    "LIST_JOINERS", "adjective_kind",
]

#: Constituent labels of noun-like and clause-like arguments: a swap exchanges two of one kind.
NOMINAL_LABELS = frozenset({"NP", "NX"}) | PRIMITIVE_TAGS
CLAUSE_LABELS = frozenset({"S", "SBAR", "SBARQ", "SQ", "SINV"})
#: Words joining two arguments such that their order does not matter ("a dog and a cat").
SYMMETRIC_CONNECTIVES = frozenset({
    "and", "or", "nor", "while", "as", "as well as", "along with", "together with", "plus", "next to",
    "beside", "besides", "near", "alongside", "by", "and also", "and a", "with each other"})
#: Relations whose two arguments can change places without changing what is said: "a cat next to a
#: dog" is "a dog next to a cat"; "a man with a woman" is "a woman with a man" (issue 33: such swaps
#: are not false). Matched after any verbs, adverbs and auxiliaries before them ("sitting next to").
SYMMETRIC_RELATIONS = SYMMETRIC_CONNECTIVES | frozenset({
    "with", "near to", "close to", "nearby", "adjacent to", "next to each other", "beside each other",
    "by each other", "together", "opposite", "across from", "not far from", "not too far from", "not to far from",
    "like", "is", "are", "is the", "are the"})
_ORDER_FREE_LEAD_TAGS = ("VB", "RB", "MD")


def is_order_free(between) -> bool:
    """Whether two arguments joined by ``between`` (the ``(word, PTB tag)`` tokens between them,
    punctuation left out) can change places keeping the meaning: nothing between them, a
    coordination, or a symmetric relation (:data:`SYMMETRIC_RELATIONS`) after leading verbs,
    adverbs and auxiliaries.

    >>> is_order_free([("sitting", "VBG"), ("next", "JJ"), ("to", "IN")]), is_order_free([("with", "IN")])
    (True, True)
    >>> is_order_free([("is", "VBZ"), ("chasing", "VBG")]), is_order_free([("on", "IN")])
    (False, False)
    """
    words = [(w.lower(), t) for w, t in between]
    if not words or " ".join(w for w, _ in words) in SYMMETRIC_CONNECTIVES:
        return True
    for k in range(len(words)):  # "next" may be tagged RB: try every end of the leading run
        if k and not words[k - 1][1].startswith(_ORDER_FREE_LEAD_TAGS):
            break
        if " ".join(w for w, _ in words[k:]) in SYMMETRIC_RELATIONS:
            return True
    return False


#: Prepositions of place: two places in a row ("on a dirt road on the countryside", "on a plate on a
#: table") usually both hold, so swapping them keeps what is said (issue 33's hand-read sample).
PLACE_PREPOSITIONS = frozenset({"on", "in", "at", "inside", "by", "near", "beside", "along", "atop", "onto", "into"})


def is_place_chain(before_first: str | None, between) -> bool:
    """Whether two arguments are consecutive places: the first follows a place preposition
    (``before_first``) and only another one stands between them (``between``: ``(word, tag)``
    tokens, punctuation left out).

    >>> is_place_chain("on", [("on", "IN")]), is_place_chain("riding", [("on", "IN")])
    (True, False)
    """
    return (before_first or "").lower() in PLACE_PREPOSITIONS and len(between) == 1 and \
        between[0][0].lower() in PLACE_PREPOSITIONS


def is_list_between(between) -> bool:
    """Whether two items are in one list: only nouns, determiners, numbers, adjectives and list
    joiners (at least one) between them ("sink , toilet , and vanity"): their order is free.

    >>> is_list_between([("toilet", "NN"), ("and", "CC")]), is_list_between([("on", "IN"), ("and", "CC")])
    (True, False)
    """
    return any(w.lower() in LIST_JOINERS for w, _ in between) and \
        all(w.lower() in LIST_JOINERS or t.startswith(("NN", "DT", "CD", "JJ")) for w, t in between)


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
#: Indefinite articles: they must agree again with a word that is new after them.
ARTICLES = ("a", "an")

#: Nouns captions use as mass nouns or for a place there is one of ("the grass", "the sky", "the
#: street"): a number-keeping swap never puts them in the plural ("two grasses").
MASS_NOUNS = frozenset({
    "grass", "snow", "air", "water", "sky", "dirt", "sand", "rain", "sun", "ground", "ocean", "sea", "food", "meat",
    "bread", "rice", "broccoli", "cheese", "hair", "luggage", "traffic", "furniture", "ice", "mud", "fog", "smoke",
    "sunlight", "daylight", "weather", "equipment", "fruit", "hay", "milk", "juice", "coffee", "wine", "beer", "tea",
    "soup", "pasta", "sauce", "lettuce", "chicken", "beef", "pork", "fish", "salad", "cream", "chocolate", "sugar",
    "background", "foreground", "distance", "dark", "darkness", "outside", "inside", "daytime", "night", "time", "way",
    "view", "left", "right", "day", "street", "road", "beach", "sidewalk", "floor", "field", "city", "tarmac", "zoo",
    "shore", "pavement", "infield", "outfield", "lawn", "forest", "jungle", "countryside", "wilderness",
    "surf", "shade", "sunshine", "light", "wind", "clothing", "paper", "wood", "metal", "glass", "plastic", "stone",
    "concrete", "brick", "tile", "foliage", "greenery", "vegetation", "scenery", "kitchen", "bathroom", "airport",
    "park", "yard", "runway", "court", "pitch", "dusk", "sunset", "sunrise", "evening", "morning",
    "rest", "weekend", "area", "space", "room", "home", "town", "downtown", "world", "internet"})

#: Plural nouns with no singular in captions' use: a swap never makes "a pant" or "a jean" of them.
PLURALIA_TANTUM = frozenset({"pants", "jeans", "shorts", "trousers", "glasses", "sunglasses", "goggles", "scissors",
                             "clothes", "tongs", "pajamas", "overalls", "binoculars", "headphones", "earphones",
                             "leggings", "tights", "stairs", "remains", "surroundings", "belongings", "outskirts",
                             "groceries", "greens", "suds", "contents", "goods"})
#: Tags of words before a noun phrase's adjectives ("the", "two", "his", "all").
LEADING_DETERMINER_TAGS = frozenset({"DT", "CD", "PRP$", "PDT"})
#: Quantifying words dropped when a noun-phrase caption becomes "there is no ...".
QUANTIFIERS = frozenset({"several", "many", "some", "few", "various", "numerous", "multiple", "lots", "both"})
#: Verbs negated by a "not" after them (no do-support).
AUXILIARIES = frozenset({"is", "are", "was", "were", "am", "be", "been", "can", "could", "will", "would",
                         "shall", "should", "may", "might", "must", "does", "do", "did", "has", "have", "had",
                         "'s", "'re", "'m"})
#: Words that already negate a verb: a negated caption loses its negator instead.
NEGATORS = frozenset({"not", "n't", "never"})
#: Determiners that "no" replaces in a negation as long as its caption ("two dogs" -> "no dogs").
NO_DETERMINERS = frozenset({"a", "an", "the", "some", "one", "two", "three", "four", "five", "six", "seven", "eight",
                            "nine", "ten", "several", "many", "multiple"})
#: Prepositions of place and accompaniment that two of can change places ("a cat on a bed in a room"
#: -> "a cat in a bed on a room"); "of", "to", "for" mostly mark structure, not a relation.
#: Prepositions that say about the same: swapping two of one group keeps the meaning, or near enough
#: ("in his mouth ... into his hand", "lying on the sand ... played in the waves", "by an aircraft
#: parked at the gate": places, issue 33's hand-read sample).
PREPOSITION_SYNONYMS = (frozenset({"in", "into", "inside", "on", "onto", "upon", "atop", "at", "by"}),
                        frozenset({"near", "beside", "by", "next"}),
                        frozenset({"under", "underneath", "beneath", "below"}),
                        frozenset({"over", "above"}), frozenset({"toward", "towards"}))
#: Words that join the items of a list: two items joined only by these keep the meaning swapped.
LIST_JOINERS = frozenset({"and", "or", ",", "&", "plus"})
#: Not "with", "at", "around", "by", "near", "beside": they say too little of where things are, so a swap
#: with one of them reads as about the same scene ("a woman with flowers in her hair" -> "a woman in flowers
#: with her hair", "sit at a table around a cake" -> "sit around a table at a cake": issue 33's hand-read).
SWAPPABLE_PREPOSITIONS = frozenset({
    "on", "in", "under", "over", "behind", "above", "below", "inside", "into", "onto",
    "across", "along", "through", "from", "toward", "towards", "underneath", "beneath",
    "outside", "against", "past", "down", "up"})
#: Prepositions and their negations of the same length ("a man with a hat" -> "a man without a hat").
WITH_NEGATIONS = {"with": "without", "without": "with"}


def adjective_kind(word: str) -> str | None:
    """``"color"`` or ``"size"`` for an adjective of a known kind, else ``None`` (an object takes one of each)."""
    if word in COLOR_WORDS:
        return "color"
    if any(word in pole for pole in SIZE_POLES):
        return "size"
    return None
