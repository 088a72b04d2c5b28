"""Minimal-pair twins: Winoground-style groups of two captions with the same words and two images that
differ only where the captions do.

For a test caption whose meaning allows it, a *twin caption* has the same multiset of words and a
different truth, and a *twin image* is the same scene with the change that makes the twin true:

* ``relation``: the two noun phrases around a directional relation exchange places ("a red cube left of a
  blue ball" / "a blue ball left of a red cube"); the twin image exchanges the two objects' positions;
* ``binding``: two noun phrases exchange the values of one attribute ("a red cube and a blue ball" /
  "a blue cube and a red ball"); the twin image exchanges that attribute between the two objects.

Every group is verified from the scene graphs: caption 0 is true of image 0 and false of image 1, caption
1 the reverse. Both images are featurized afresh with the same random draws, so they differ only in the
exchanged objects, and both captions are realised with the same word choices (:func:`canonical_text`), so
any scorer that ignores word order ties on a group; ties count as failures (Winoground's text, image and
group scores: :func:`composer.evaluation.twins.twin_scores`).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from features.world.compositional import DIRECTIONAL
from features.world.scene import Scene
from features.world.semantics import Caption, ObjectRef, holds, matching_objects

__all__ = ["Twin", "TWIN_KINDS", "binding_twin", "canonical_text", "find_twin", "relation_twin"]

TWIN_KINDS = ("relation", "binding")


class _FirstChoice(random.Random):
    """A random source that always makes the first choice: one canonical surface string per meaning."""

    def choice(self, seq):
        return seq[0]

    def random(self) -> float:
        return 0.99  # lower case, no period; "X, and Y" for two clauses


def canonical_text(lf: Caption) -> str:
    """The canonical realisation of a logical form: the first synonym and style everywhere.

    >>> from features.world.semantics import ObjectRef
    >>> canonical_text(Caption("clause", (ObjectRef("cube", (("color", "red"),)), ObjectRef("ball")), "left_of"))
    'a red cube is to the left of a ball'
    """
    from features.world.grammar import realize

    return realize(_FirstChoice(), lf)


def _plain(ref: ObjectRef) -> bool:
    return ref.count is None and ref.negated_attr is None and ref.relation is None and ref.shape is not None


def relation_twin(lf: Caption) -> Caption | None:
    """The caption with the two noun phrases of its directional relation exchanged, or None.

    >>> a, b = ObjectRef("cube", (("color", "red"),)), ObjectRef("ball", (("color", "blue"),))
    >>> relation_twin(Caption("clause", (a, b), "left_of")) == Caption("clause", (b, a), "left_of")
    True
    """
    if lf.kind == "clause" and lf.relation in DIRECTIONAL:
        subj, obj = lf.parts
        if _plain(subj) and _plain(obj) and subj != obj:
            return Caption("clause", (obj, subj), lf.relation)
    if lf.kind in ("np", "there") and lf.parts[0].relation is not None:
        ref = lf.parts[0]
        rel, other = ref.relation
        head = replace(ref, relation=None)
        if rel in DIRECTIONAL and _plain(head) and _plain(other) and head != other:
            return Caption(lf.kind, (replace(other, relation=(rel, head)),))
    return None


def _swap_attr(a: ObjectRef, b: ObjectRef, kind: str) -> tuple[ObjectRef, ObjectRef]:
    va, vb = dict(a.attrs)[kind], dict(b.attrs)[kind]
    swap = {va: vb, vb: va}
    return (replace(a, attrs=tuple((k, swap[v] if k == kind else v) for k, v in a.attrs)),
            replace(b, attrs=tuple((k, swap[v] if k == kind else v) for k, v in b.attrs)))


def _words(lf: Caption) -> list[str]:
    return sorted(canonical_text(lf).split())


def binding_twin(lf: Caption) -> tuple[Caption, str] | None:
    """The caption with one attribute's values exchanged between its two noun phrases, and the attribute.

    The first attribute whose exchange keeps the words: an exchange can move a vowel-initial value ("orange")
    to or from the front of its noun phrase, and the article follows it ("a big orange cube and a red ball" /
    "a big red cube and an orange ball"); such an exchange is skipped rather than written with a wrong
    article, so a scorer blind to word order still ties on every group.

    >>> a, b = ObjectRef("cube", (("color", "red"),)), ObjectRef("ball", (("color", "blue"),))
    >>> twin, kind = binding_twin(Caption("and", (a, b)))
    >>> canonical_text(twin), kind
    ('a blue cube and a red ball', 'color')
    >>> big_orange = ObjectRef("cube", (("size", "large"), ("color", "orange")))
    >>> binding_twin(Caption("and", (big_orange, b))) is None
    True
    """
    if lf.kind == "and" and len(lf.parts) == 2:
        a, b = lf.parts
    elif lf.kind == "clause":
        a, b = lf.parts
    else:
        return None
    if not (_plain(a) and _plain(b)) or a.shape == b.shape:
        return None
    da, db = dict(a.attrs), dict(b.attrs)
    for kind in ("color", "material", "size"):
        if kind in da and kind in db and da[kind] != db[kind]:
            a2, b2 = _swap_attr(a, b, kind)
            twin = Caption(lf.kind, (a2, b2), lf.relation)
            if _words(twin) == _words(lf):
                return twin, kind
    return None


@dataclass(frozen=True)
class Twin:
    """A verified minimal pair: ``caption_1`` (same words as ``caption_0``) is true of ``scene_1`` only."""

    kind: str
    caption_0: Caption
    caption_1: Caption
    scene_1: Scene


def _pairs(scene: Scene, lf: Caption) -> Iterator[tuple[int, int]]:
    """Witness objects ``(a, b)`` of the caption's two noun phrases, distinct."""
    if lf.kind in ("np", "there"):
        ref = lf.parts[0]
        first, second = replace(ref, relation=None), ref.relation[1]
    else:
        first, second = lf.parts
    for a in matching_objects(scene, first):
        for b in matching_objects(scene, second):
            if a != b:
                yield a, b


def find_twin(scene: Scene, lf: Caption, kind: str,
              allowed: Callable[[Caption, Scene], bool] | None = None) -> Twin | None:
    """A verified twin of kind ``kind`` for a caption true of ``scene``, or None; with ``allowed``, only a twin
    whose caption and image it accepts (``allowed(caption_1, scene_1)``: e.g. no held-out compound in an
    in-domain group)."""
    if kind == "relation":
        twin_lf = relation_twin(lf)
    elif kind == "binding":
        got = binding_twin(lf)
        twin_lf, attr = got if got is not None else (None, None)
    else:
        raise ValueError(f"kind must be one of {TWIN_KINDS}, got {kind!r}")
    if twin_lf is None or not holds(scene, lf) or holds(scene, twin_lf):
        return None
    for a, b in _pairs(scene, lf):
        other = Scene(scene.image_id, copy.deepcopy(scene.objects))
        oa, ob = other.objects[a], other.objects[b]
        if kind == "relation":
            if oa.support != -1 or ob.support != -1 or any(o.support in (a, b) for o in other.objects):
                continue
            oa.x, ob.x, oa.z, ob.z = ob.x, oa.x, ob.z, oa.z
        else:
            va, vb = getattr(oa, attr), getattr(ob, attr)
            setattr(oa, attr, vb)
            setattr(ob, attr, va)
        if holds(other, twin_lf) and not holds(other, lf) and (allowed is None or allowed(twin_lf, other)):
            return Twin(kind, lf, twin_lf, other)
    return None
