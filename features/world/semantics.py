"""Meaning in the generated world: logical forms of phrases and captions, and their truth in a scene.

A noun phrase denotes a set of objects (:class:`ObjectRef`); a caption is true of a scene when its
logical form holds there. Captions are generated from logical forms (:mod:`features.world.grammar`),
and any phrase of the world's language can be parsed back into one, so every caption can be
*verified* against its scene graph and every phrase has an exact denotation (the set of images it is
true of).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import permutations

from features.world.scene import Scene, relation_holds

__all__ = ["ObjectRef", "Caption", "matching_objects", "holds", "denotes"]

ATTRIBUTE_KINDS = ("size", "color", "material")


@dataclass(frozen=True)
class ObjectRef:
    """A description of objects: ``the small red ball to the left of a cube``.

    Attributes:
        shape: canonical shape, or ``None`` for "object"/"thing".
        attrs: ``(kind, value)`` pairs, kind in size/color/material.
        relation: ``(relation, other)``: the object stands in ``relation`` to some ``other``.
        count: exact number of such objects ("two red balls"), ``None`` for "at least one".
        negated_attr: an attribute the object must NOT have ("a ball that is not red"; hard negatives).
    """

    shape: str | None
    attrs: tuple[tuple[str, str], ...] = ()
    relation: tuple[str, "ObjectRef"] | None = None
    count: int | None = None
    negated_attr: tuple[str, str] | None = None

    def atoms(self) -> int:
        """Number of atoms (objects, attributes, relations) mentioned: CREPE's complexity n."""
        n = 1 + len(self.attrs) + (1 if self.negated_attr else 0)
        if self.relation:
            n += 1 + self.relation[1].atoms()
        return n

    def without_count(self) -> "ObjectRef":
        return replace(self, count=None)


@dataclass(frozen=True)
class Caption:
    """A caption's logical form.

    ``kind``: ``"np"`` (a noun phrase: something like this exists), ``"there"`` (there is/are ...),
    ``"clause"`` (``subject`` stands in ``relation`` to ``object``), ``"and"`` (all of ``parts``
    exist, as different objects), ``"two_clauses"`` (both ``parts`` hold, each a clause),
    ``"negation"`` ("there is no ..."; hard negatives).
    """

    kind: str
    parts: tuple = ()
    relation: str | None = None

    def atoms(self) -> int:
        n = sum(p.atoms() for p in self.parts)
        return n + (1 if self.relation else 0)


def matching_objects(scene: Scene, ref: ObjectRef) -> list[int]:
    """Indices of the objects of ``scene`` that fit ``ref`` (its count aside)."""
    out = []
    shape, attrs, negated = ref.shape, ref.attrs, ref.negated_attr
    others = None
    for k, obj in enumerate(scene.objects):
        if shape is not None and obj.shape != shape:
            continue
        if any(getattr(obj, kind) != value for kind, value in attrs):
            continue
        if negated and getattr(obj, negated[0]) == negated[1]:
            continue
        if ref.relation is not None:
            rel, other = ref.relation
            if others is None:
                others = matching_objects(scene, other)
            if other.count is not None and len(others) != other.count:
                continue
            if not any(relation_holds(scene, k, rel, b) for b in others):
                continue
        out.append(k)
    return out


def denotes(scene: Scene, ref: ObjectRef) -> bool:
    """Is the noun phrase true of the scene: some such object exists (exactly ``count`` of them)?"""
    found = matching_objects(scene, ref)
    return len(found) == ref.count if ref.count is not None else bool(found)


def holds(scene: Scene, caption: Caption) -> bool:
    """Is the caption true of the scene?"""
    if caption.kind in ("np", "there"):
        return denotes(scene, caption.parts[0])
    if caption.kind == "negation":
        return not denotes(scene, caption.parts[0])
    if caption.kind == "clause":
        subj, obj = caption.parts
        subjects, objects = matching_objects(scene, subj), matching_objects(scene, obj)
        if subj.count is not None and len(subjects) != subj.count:
            return False
        if obj.count is not None and len(objects) != obj.count:
            return False
        if subj.count is not None:  # "two balls are left of a cube": each of them
            return all(any(relation_holds(scene, a, caption.relation, b) for b in objects) for a in subjects)
        return any(relation_holds(scene, a, caption.relation, b) for a in subjects for b in objects)
    if caption.kind == "and":
        return _distinct_witnesses(scene, caption.parts)
    if caption.kind == "two_clauses":
        return all(holds(scene, p) for p in caption.parts)
    raise ValueError(f"unknown caption kind {caption.kind!r}")


def _distinct_witnesses(scene: Scene, refs) -> bool:
    """Coordinated noun phrases name different objects: find an injective assignment."""
    sets = []
    for ref in refs:
        found = matching_objects(scene, ref)
        if ref.count is not None and len(found) != ref.count:
            return False
        sets.append(found)
    need = [r.count or 1 for r in refs]
    pool = sorted({k for s in sets for k in s})
    if sum(need) > len(pool):
        return False
    slots = [k for k, n in enumerate(need) for _ in range(n)]
    for perm in permutations(pool, len(slots)):
        if all(obj in sets[slot] for obj, slot in zip(perm, slots)):
            return True
    return False
