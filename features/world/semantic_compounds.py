"""The atoms and compounds a caption mentions, read from its logical form: ``captions.jsonl``'s
``"atoms"`` and ``"compounds"`` fields, which the MCD splitter reads (``--compounds semantic``).

Why from meanings: a CRG built from parses names compounds by words ("red ball", "red sphere"), and a
parser's mistakes become compounds. The logical form says exactly which attribute goes with which shape
and which shapes a relation joins, whatever the synonyms or sentence form.

* atoms: the attribute values (``red``, ``small``, ``metal``), shapes (``ball``) and relation names
  (``right_of``, as mentioned) of the caption;
* compounds, the connected pieces of the logical form of two or more atoms (as Keysers et al.'s compounds
  are the sub-graphs of an example's structure, not only its pairs):

  - ``attr:<value>|<shape>`` for every attribute of every shaped object (all attribute kinds);
  - ``rel:<shape>|<relation>|<shape>`` for every relation between two shaped objects, in one canonical
    direction per fact: ``left_of``, ``in_front_of`` and ``on_top_of`` (their inverses are flipped, as
    :func:`features.world.compositional.canonical_relation` does for the held-out compounds) and
    ``next_to`` with its shapes in alphabetical order (it is symmetric);
  - ``obj:<shape>|<value>|<value>...`` for an object described with two or more attributes (values sorted);
  - ``fact:<object>|<relation>|<object>`` for a relation whose arguments carry attributes, each argument
    written ``<shape>+<value>+...`` (values sorted), in the same canonical direction as ``rel:``.

  A held-out pair (a red cube) therefore also makes new the larger pieces it sits in (a small red cube, a
  red cube left of a ball), as in the MCD papers; :func:`semantic_compounds` with ``pairs_only=True``
  gives the pairs alone (docs/world.md reports both).

A shapeless "object" or "thing" makes no compound, as in :func:`features.world.compositional.caption_compounds`.
"""

from __future__ import annotations

from features.world.scene import INVERSE
from features.world.semantics import Caption, ObjectRef

__all__ = ["caption_atoms", "semantic_compounds", "canonical_fact"]

_FLIPPED = ("right_of", "behind", "under")  # written as their inverses
_SYMMETRIC = ("next_to",)


def canonical_fact(a: str, relation: str, b: str) -> tuple[str, str, str]:
    """One key for a relation fact, its inverse and, for a symmetric relation, its converse.

    >>> canonical_fact("ball", "right_of", "cube"), canonical_fact("cube", "under", "ball")
    (('cube', 'left_of', 'ball'), ('ball', 'on_top_of', 'cube'))
    >>> canonical_fact("ring", "next_to", "cone")
    ('cone', 'next_to', 'ring')
    """
    if relation in _FLIPPED:
        return b, INVERSE[relation], a
    if relation in _SYMMETRIC and b < a:
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


def _described(ref: ObjectRef) -> str:
    return "+".join([ref.shape, *sorted(value for _, value in ref.attrs)])


def semantic_compounds(lf: Caption, *, pairs_only: bool = False) -> list[str]:
    """Sorted compounds of the caption (see the module docstring): ``attr:`` and ``rel:`` pairs, and unless
    ``pairs_only`` the ``obj:`` and ``fact:`` pieces they sit in.

    >>> red_cube = ObjectRef("cube", (("color", "red"), ("material", "metal")))
    >>> semantic_compounds(Caption("clause", (ObjectRef("ball"), red_cube), "right_of"), pairs_only=True)
    ['attr:metal|cube', 'attr:red|cube', 'rel:cube|left_of|ball']
    >>> semantic_compounds(Caption("clause", (ObjectRef("ball"), red_cube), "right_of"))[-2:]
    ['obj:cube|metal|red', 'rel:cube|left_of|ball']
    >>> semantic_compounds(Caption("clause", (ObjectRef("ball"), red_cube), "right_of"))[0]
    'attr:metal|cube'
    >>> [c for c in semantic_compounds(Caption("clause", (ObjectRef("ball"), red_cube), "right_of"))
    ...  if c.startswith("fact:")]
    ['fact:cube+metal+red|left_of|ball']
    """
    refs, facts = _walk(lf)
    shaped = [(a, relation, b) for a, relation, b in facts if a.shape is not None and b.shape is not None]
    out = {f"attr:{value}|{ref.shape}" for ref in refs if ref.shape is not None for _, value in ref.attrs}
    out |= {"rel:" + "|".join(canonical_fact(a.shape, relation, b.shape)) for a, relation, b in shaped}
    if not pairs_only:
        out |= {"obj:" + "|".join([ref.shape, *sorted(value for _, value in ref.attrs)])
                for ref in refs if ref.shape is not None and len(ref.attrs) >= 2}
        out |= {"fact:" + "|".join(canonical_fact(_described(a), relation, _described(b)))
                for a, relation, b in shaped if a.attrs or b.attrs}
    return sorted(out)
