"""Why a hard negative is false: the edit, and the concept of the caption it contradicts.

A corpus negative is false by construction, not by a check against the image (there is no scene
graph): what makes it false is structural -- which atom, binding or predicate of the caption's CRG the
edit changed. Issue 33 asks for that reason per negative so that a reader can judge it; it is written
into ``negatives.jsonl`` as ``false_because`` (:func:`false_because`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from crg.hard_negatives.records import Change

__all__ = ["FalseReason", "false_because"]


@dataclass(frozen=True)
class FalseReason:
    """Attributes:
        concept: the caption's concept the negative contradicts (an atom, a binding, a predicate with
            its arguments in order), in the caption's words.
        reason: one sentence: what the edit did to it.
    """

    concept: str
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def false_because(change: Change) -> FalseReason:
    """The structural reason a negative made by ``change`` is false of the caption's image.

    >>> false_because(Change("replace_noun", ("dog",), ("cat",), "noun:NN")).concept
    "atom 'dog' (noun:NN)"
    >>> false_because(Change("swap_arguments", ("a dog", "a cat"), ("a cat", "a dog"), "[NP] chasing [NP]")).reason
    "the arguments of '[NP] chasing [NP]' change places: 'a cat' first, 'a dog' second"
    """
    op, b, a, where = change.op, change.before, change.after, change.where
    if op.startswith("replace_"):
        return FalseReason(f"atom {b[0]!r} ({where})",
                           f"{b[0]!r} becomes {a[0]!r}, another {where.split(':')[0]} (not a form or listed synonym "
                           f"of it, used by no caption of the image)")
    if op == "swap_arguments":
        return FalseReason(f"predicate {where!r} with arguments {b[0]!r}, {b[1]!r}",
                           f"the arguments of {where!r} change places: {a[0]!r} first, {a[1]!r} second")
    if op == "swap_nouns":
        return FalseReason(f"the objects {b[0]!r} and {b[1]!r} in their roles",
                           f"{b[0]!r} and {b[1]!r} change places, their modifiers and relations staying")
    if op == "swap_phrases":
        return FalseReason(f"the objects {b[0]!r} and {b[1]!r} in their roles",
                           f"{b[0]!r} and {b[1]!r} change places with their modifiers, the relations staying")
    if op == "swap_counts":
        return FalseReason(f"the counts of {b[0]!r} and {b[1]!r}",
                           f"the two objects' counts change places: now {a[0]!r} and {a[1]!r}")
    if op == "swap_relations":
        return FalseReason(f"the {where}s {b[0]!r} and {b[1]!r} each with its arguments",
                           f"the {where}s {b[0]!r} and {b[1]!r} change places, their arguments staying")
    if op in ("swap_attributes", "move_attribute"):
        verb = "swapped between" if op == "swap_attributes" else "moved from one object to the other of"
        return FalseReason(f"attribute bindings {b[0]!r}, {b[1]!r}",
                           f"attributes {verb} {b[0]!r} and {b[1]!r}: now {a[0]!r}, {a[1]!r}")
    if op == "split_compound":
        return FalseReason(f"attribute binding {b[0]!r}",
                           f"{b[0]!r} is split over two objects, {a[0]!r} and {a[1]!r}: the attribute no longer "
                           f"binds the caption's object")
    if op in ("negate_caption", "negate_verb", "negate_attribute", "negate_with", "negate_determiner"):
        return FalseReason(f"{where or 'statement'} {b[0]!r}", f"{b[0]!r} is negated as {a[0]!r}")
    if op == "remove_negation":
        return FalseReason(f"negated {where} {b[0]!r}", f"the negation of {b[0]!r} is removed: {a[0]!r}")
    return FalseReason(f"{where} {b!r}", f"{op}: {b!r} -> {a!r}")
