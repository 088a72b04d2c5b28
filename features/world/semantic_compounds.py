"""The atoms and compounds a caption mentions, read from its logical form: ``captions.jsonl``'s
``"atoms"`` and ``"compounds"`` fields, which the MCD splitter reads (``--compounds semantic``).

Why from meanings: a CRG built from parses names compounds by words ("red ball", "red sphere"), and a
parser's mistakes become compounds. The logical form says exactly which attribute goes with which shape
and which shapes a relation joins, whatever the synonyms or sentence form.

* atoms: the attribute values (``red``, ``small``, ``metal``), shapes (``ball``) and relation names
  (``right_of``, as mentioned) of the caption;
* compounds, the connected pieces of the logical form of two to four atoms, as Keysers et al.'s compounds
  are the sub-graphs of an example's structure up to a size, not only its pairs (objects are nodes, their
  shape and attributes its atoms, a relation an edge whose atom is its name):

  - ``attr:<value>|<shape>``: an attribute of a shaped object (all attribute kinds);
  - ``attrs:<value>+<value>[+<value>]|<shape>``: two or three attributes of one object (values sorted);
  - ``rel:<shape>|<relation>|<shape>``: a relation between two shaped objects, in one canonical direction per
    fact: ``left_of``, ``in_front_of`` and ``on_top_of`` (their inverses are flipped, as
    :func:`features.world.compositional.canonical_relation` does for the held-out compounds) and ``next_to``
    with its shapes in alphabetical order (it is symmetric);
  - ``fact:<object>|<relation>|<object>``: such a relation with one attribute of one of its objects, the object
    written ``<value>+<shape>`` (four atoms).

  A held-out pair (a red cube) thus also makes new the pieces it sits in (a small red cube, a red cube left
  of a ball). ``pairs_only=True`` gives the ``attr:`` and ``rel:`` pieces alone; docs/world.md reports both.

A shapeless "object" or "thing" makes no compound, as in :func:`features.world.compositional.caption_compounds`.
"""

from __future__ import annotations

from itertools import combinations

from features.world.scene import INVERSE
from features.world.semantics import Caption, ObjectRef

__all__ = ["caption_atoms", "semantic_compounds", "canonical_fact"]

_FLIPPED = ("right_of", "behind", "under")  # written as their inverses
_SYMMETRIC = ("next_to",)


def canonical_fact(a: str, relation: str, b: str, *, order: tuple[str, str] | None = None) -> tuple[str, str, str]:
    """One key for a relation fact, its inverse and, for a symmetric relation, its converse. ``order`` (the two
    objects' shapes) decides a symmetric relation's direction when ``a`` / ``b`` carry more than the shape.

    >>> canonical_fact("ball", "right_of", "cube"), canonical_fact("cube", "under", "ball")
    (('cube', 'left_of', 'ball'), ('ball', 'on_top_of', 'cube'))
    >>> canonical_fact("ring", "next_to", "cone")
    ('cone', 'next_to', 'ring')
    """
    if relation in _FLIPPED:
        return b, INVERSE[relation], a
    if relation in _SYMMETRIC and (order[1] < order[0] if order else b < a):
        return b, relation, a
    return a, relation, b


def _walk(lf: Caption) -> tuple[list[ObjectRef], list[tuple[ObjectRef, str, ObjectRef]]]:
    """Every object description of ``lf`` and every relation fact ``(subject, relation, object)`` in it."""
    refs: list[ObjectRef] = []
    facts: list[tuple[ObjectRef, str, ObjectRef]] = []

    def visit(ref: ObjectRef) -> None:
        refs.append(ref)
        if ref.relation is not None:
            relation, other = ref.relation
            facts.append((ref, relation, other))
            visit(other)

    for part in lf.parts:
        if isinstance(part, Caption):  # two_clauses
            sub_refs, sub_facts = _walk(part)
            refs += sub_refs
            facts += sub_facts
        else:
            visit(part)
    if lf.kind == "clause":
        facts.append((lf.parts[0], lf.relation, lf.parts[1]))
    return refs, facts


def caption_atoms(lf: Caption) -> list[str]:
    """Sorted attribute values, shapes and relation names the caption mentions.

    >>> red_cube = ObjectRef("cube", (("color", "red"), ("material", "metal")))
    >>> caption_atoms(Caption("clause", (ObjectRef("ball"), red_cube), "right_of"))
    ['ball', 'cube', 'metal', 'red', 'right_of']
    """
    refs, facts = _walk(lf)
    atoms = {value for ref in refs for _, value in ref.attrs + ((ref.negated_attr,) if ref.negated_attr else ())}
    atoms |= {ref.shape for ref in refs if ref.shape is not None}
    atoms |= {relation for _, relation, _ in facts}
    return sorted(atoms)


def semantic_compounds(lf: Caption, *, pairs_only: bool = False) -> list[str]:
    """Sorted compounds of the caption (see the module docstring): ``attr:`` and ``rel:`` pairs, and unless
    ``pairs_only`` the larger pieces they sit in (``attrs:``, ``fact:``).

    >>> red_cube = ObjectRef("cube", (("color", "red"), ("material", "metal")))
    >>> lf = Caption("clause", (ObjectRef("ball"), red_cube), "right_of")
    >>> semantic_compounds(lf, pairs_only=True)
    ['attr:metal|cube', 'attr:red|cube', 'rel:cube|left_of|ball']
    >>> [c for c in semantic_compounds(lf) if c.startswith(("attrs:", "fact:"))]
    ['attrs:metal+red|cube', 'fact:metal+cube|left_of|ball', 'fact:red+cube|left_of|ball']
    """
    refs, facts = _walk(lf)
    out = set()
    for ref in refs:
        if ref.shape is None:
            continue
        values = sorted(value for _, value in ref.attrs)
        out |= {f"attr:{value}|{ref.shape}" for value in values}
        if not pairs_only:
            out |= {f"attrs:{'+'.join(group)}|{ref.shape}" for k in (2, 3) for group in combinations(values, k)}
    for a, relation, b in facts:
        if a.shape is None or b.shape is None:
            continue
        out.add("rel:" + "|".join(canonical_fact(a.shape, relation, b.shape)))
        if pairs_only:
            continue
        for value in sorted(v for _, v in a.attrs):
            out.add("fact:" + "|".join(canonical_fact(f"{value}+{a.shape}", relation, b.shape, order=(a.shape, b.shape))))
        for value in sorted(v for _, v in b.attrs):
            out.add("fact:" + "|".join(canonical_fact(a.shape, relation, f"{value}+{b.shape}", order=(a.shape, b.shape))))
    return sorted(out)
