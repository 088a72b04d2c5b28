"""Held-out compounds: what a compositional split of the world keeps out of training, by construction.

In the spirit of CLEVR-CoGenT and CREPE's systematicity splits, a seeded set of *compounds* never occurs
in a training image nor in a training caption, while every atom (colour, shape, relation) and every
caption form still occurs often:

* attribute compounds ``(value, shape)``, e.g. ``("red", "cube")``: no training scene holds a red cube;
* relation compounds ``(shape, relation, shape)`` over the directional relations, e.g.
  ``("cube", "left_of", "ball")``: no training scene has a cube left of a ball. A fact and its inverse
  are one compound (a cube left of a ball *is* a ball right of a cube), so relation compounds are kept
  in a canonical direction (:func:`canonical_relation`).

Compounds are read from meanings, never from strings: a scene's from its objects and geometry
(:func:`scene_compounds`), a caption's from its logical form (:func:`caption_compounds`). The split roles
(:data:`ROLES`) are ``train`` and ``val`` (one distribution: no held-out compound, captions of at most
``max_train_atoms`` atoms), ``test_iid`` (no held-out compound; by default drawn as ``test_systematic`` is,
each caption mentioning one of a seeded set of *control* compounds that training does see: :func:`choose_control`),
``test_systematic`` (every caption holds a held-out compound, every image the objects it needs, captions no
longer than training's: only the combination is new) and ``test_productivity`` (no held-out compound, every
caption longer than any training caption: CREPE's productivity axis).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from features.world.scene import INVERSE, MARGIN, Scene, WorldConfig, sample_scene
from features.world.semantics import Caption, ObjectRef

__all__ = ["CompositionalConfig", "DIRECTIONAL", "HeldOut", "ROLES", "canonical_relation", "caption_compounds",
           "choose_control", "choose_held_out", "repair_scene", "scene_compounds", "force_compound"]

ROLES = ("train", "val", "test_iid", "test_systematic", "test_productivity")
# relations whose direction a swap flips; held-out relation compounds are of these (stacking is rare, next_to
# is symmetric)
DIRECTIONAL = ("left_of", "right_of", "in_front_of", "behind")
_CANONICAL = {"left_of": "left_of", "in_front_of": "in_front_of"}


@dataclass(frozen=True)
class CompositionalConfig:
    """How the world is split to test generalisation to new combinations.

    Attributes:
        split_fractions: shares of the images in :data:`ROLES` order.
        attribute_kind: the attribute whose combinations with shapes are held out (``color``).
        num_attribute_compounds: held-out ``(value, shape)`` pairs, at most one per value and
            ``ceil(n / shapes)`` per shape, so every atom keeps most of its partners in training.
        num_relation_compounds: held-out ``(shape, relation, shape)`` facts over two distinct shapes.
        max_train_atoms: training, validation and iid-test captions mention at most this many atoms
            (CREPE's complexity n); productivity captions mention more. 12 keeps 95% of the grammar's
            captions and a third of its two-clause sentences in training (docs/world.md).
        seed: which compounds are held out (independent of the world's seed).
        match_in_domain: draw ``test_iid`` as ``test_systematic`` is drawn, with seen *control* compounds
            (:func:`choose_control`) in place of the held-out ones: each ``test_iid`` image holds one, each of
            its captions mentions one. A caption that must mention a compound is longer than a free one
            (on the 4,000-image world, 6.98 against 5.72 atoms and 10.9 % against 22.1 % bare noun phrases
            when ``test_iid`` was drawn as training is; 7.02 and 12.4 % with control compounds), so without
            this the in-domain - systematic gap mixes caption form into composition. ``False``: ``test_iid``
            is drawn as ``train`` and ``val`` are (worlds before v4).
    """

    split_fractions: tuple[float, ...] = (0.6, 0.1, 0.1, 0.1, 0.1)
    attribute_kind: str = "color"
    num_attribute_compounds: int = 8
    num_relation_compounds: int = 6
    max_train_atoms: int = 12
    seed: int = 0
    match_in_domain: bool = True

    def __post_init__(self):
        if len(self.split_fractions) != len(ROLES) or abs(sum(self.split_fractions) - 1) > 1e-6 \
                or min(self.split_fractions) < 0:
            raise ValueError(f"split_fractions must be {len(ROLES)} non-negative shares ({', '.join(ROLES)}) "
                             f"summing to 1, got {self.split_fractions}")
        if self.attribute_kind not in ("color", "size", "material"):
            raise ValueError(f"attribute_kind must be color, size or material, got {self.attribute_kind!r}")
        if self.num_attribute_compounds < 0 or self.num_relation_compounds < 0 or self.max_train_atoms < 2:
            raise ValueError("the numbers of held-out compounds must be >= 0 and max_train_atoms >= 2, got "
                             f"{self.num_attribute_compounds}, {self.num_relation_compounds}, {self.max_train_atoms}")
        if self.num_attribute_compounds + self.num_relation_compounds == 0:
            raise ValueError("hold out at least one compound")


def canonical_relation(a: str, relation: str, b: str) -> tuple[str, str, str]:
    """One key for a directional fact and its inverse.

    >>> canonical_relation("ball", "right_of", "cube"), canonical_relation("cube", "left_of", "ball")
    (('cube', 'left_of', 'ball'), ('cube', 'left_of', 'ball'))
    """
    if relation in _CANONICAL:
        return a, relation, b
    return b, INVERSE[relation], a


@dataclass(frozen=True)
class HeldOut:
    """The held-out compounds of one world.

    Attributes:
        attribute_kind: the attribute of the attribute compounds.
        attributes: ``(value, shape)`` pairs.
        relations: canonical ``(shape, relation, shape)`` facts.
    """

    attribute_kind: str
    attributes: frozenset[tuple[str, str]]
    relations: frozenset[tuple[str, str, str]]

    def to_dict(self) -> dict:
        return {"attribute_kind": self.attribute_kind, "attributes": sorted(map(list, self.attributes)),
                "relations": sorted(map(list, self.relations))}

    def holds_any(self, compounds: Iterable[tuple]) -> bool:
        return any(c in self.attributes or c in self.relations for c in compounds)


def choose_held_out(world: WorldConfig, cfg: CompositionalConfig) -> HeldOut:
    """A seeded choice of compounds that leaves every atom many training partners.

    >>> h = choose_held_out(WorldConfig(), CompositionalConfig())
    >>> len(h.attributes), len(h.relations), len({v for v, _ in h.attributes})
    (8, 6, 8)
    """
    rng = random.Random(f"holdout:{cfg.seed}")
    values = list(getattr(world, cfg.attribute_kind + ("es" if cfg.attribute_kind == "size" else "s")))
    shapes = list(world.shapes)
    if cfg.num_attribute_compounds > len(values):
        raise ValueError(f"at most one held-out compound per {cfg.attribute_kind} value: {len(values)} values, "
                         f"{cfg.num_attribute_compounds} asked")
    rng.shuffle(values)
    per_shape = -(-cfg.num_attribute_compounds // len(shapes))  # ceil
    order = shapes * per_shape
    rng.shuffle(order)
    attributes = frozenset(zip(values[:cfg.num_attribute_compounds], order[:cfg.num_attribute_compounds]))
    facts = [(a, r, b) for a in shapes for r in _CANONICAL for b in shapes if a != b]
    rng.shuffle(facts)
    chosen: list[tuple[str, str, str]] = []
    for a, r, b in facts:  # a pair of shapes is held out in one relation at most: the other stays seen
        if len(chosen) == cfg.num_relation_compounds:
            break
        if any({a, b} == {x, y} for x, _, y in chosen):
            continue
        chosen.append((a, r, b))
    if len(chosen) < cfg.num_relation_compounds:
        raise ValueError(f"cannot hold out {cfg.num_relation_compounds} relation compounds over {len(shapes)} shapes")
    return HeldOut(cfg.attribute_kind, attributes, frozenset(chosen))


def choose_control(world: WorldConfig, cfg: CompositionalConfig, held: HeldOut) -> HeldOut:
    """Seen compounds of the same kinds and number as the held-out ones, under the same rules (one per value,
    ``ceil(n / shapes)`` per shape; one relation per pair of shapes): the in-domain test set is drawn around
    them as the systematic set is drawn around the held-out ones (``CompositionalConfig.match_in_domain``).

    >>> cfg = CompositionalConfig()
    >>> held = choose_held_out(WorldConfig(), cfg)
    >>> control = choose_control(WorldConfig(), cfg, held)
    >>> len(control.attributes), len(control.relations), bool(control.attributes & held.attributes)
    (8, 6, False)
    """
    rng = random.Random(f"control:{cfg.seed}")
    values = list(getattr(world, cfg.attribute_kind + ("es" if cfg.attribute_kind == "size" else "s")))
    shapes = list(world.shapes)
    rng.shuffle(values)
    per_shape = -(-cfg.num_attribute_compounds // len(shapes))  # ceil
    used = dict.fromkeys(shapes, 0)
    attributes = []
    for value in values:
        if len(attributes) == cfg.num_attribute_compounds:
            break
        options = [s for s in shapes if (value, s) not in held.attributes and used[s] < per_shape]
        if options:
            shape = rng.choice(options)
            used[shape] += 1
            attributes.append((value, shape))
    facts = [(a, r, b) for a in shapes for r in _CANONICAL for b in shapes if a != b]
    rng.shuffle(facts)
    chosen: list[tuple[str, str, str]] = []
    for a, r, b in facts:
        if len(chosen) == cfg.num_relation_compounds:
            break
        if (a, r, b) in held.relations or any({a, b} == {x, y} for x, _, y in chosen):
            continue
        chosen.append((a, r, b))
    return HeldOut(cfg.attribute_kind, frozenset(attributes), frozenset(chosen))


def scene_compounds(scene: Scene, attribute_kind: str = "color") -> set[tuple]:
    """Every attribute compound of the scene's objects and every directional fact between two shapes."""
    out: set[tuple] = {(getattr(o, attribute_kind), o.shape) for o in scene.objects}
    for a, rel, b in scene.relations():
        if rel in DIRECTIONAL:
            out.add(canonical_relation(scene.objects[a].shape, rel, scene.objects[b].shape))
    return out


def _ref_compounds(ref: ObjectRef, kind: str, out: set) -> None:
    if ref.shape is not None:
        out.update((value, ref.shape) for k, value in ref.attrs if k == kind)
    if ref.relation is not None:
        rel, other = ref.relation
        if rel in DIRECTIONAL and ref.shape is not None and other.shape is not None:
            out.add(canonical_relation(ref.shape, rel, other.shape))
        _ref_compounds(other, kind, out)


def caption_compounds(lf: Caption, attribute_kind: str = "color") -> set[tuple]:
    """The compounds a caption's logical form mentions (a shapeless "object" mentions none).

    >>> red_cube = ObjectRef("cube", (("color", "red"),))
    >>> sorted(caption_compounds(Caption("clause", (ObjectRef("ball"), red_cube), "right_of")))
    [('cube', 'left_of', 'ball'), ('red', 'cube')]
    """
    out: set[tuple] = set()
    if lf.kind == "two_clauses":
        for part in lf.parts:
            out |= caption_compounds(part, attribute_kind)
        return out
    for part in lf.parts:
        _ref_compounds(part, attribute_kind, out)
    if lf.kind == "clause" and lf.relation in DIRECTIONAL:
        subj, obj = lf.parts
        if subj.shape is not None and obj.shape is not None:
            out.add(canonical_relation(subj.shape, lf.relation, obj.shape))
    return out


def _violations(scene: Scene, held: HeldOut) -> list[tuple[int, int]]:
    """Object pairs ``(a, b)`` whose geometry makes a held-out relation fact true."""
    out = []
    for a, rel, b in scene.relations():
        if rel in DIRECTIONAL and canonical_relation(scene.objects[a].shape, rel, scene.objects[b].shape) \
                in held.relations:
            out.append((a, b))
    return out


def _free_to_move(scene: Scene, k: int) -> bool:
    obj = scene.objects[k]
    return obj.support == -1 and all(o.support != k for o in scene.objects)


def _clear_relation_cache(scene: Scene) -> None:
    for key in ("_relations", "_relation_set", "_outgoing"):
        scene.__dict__.pop(key, None)


def repair_scene(rng: random.Random, scene: Scene, world: WorldConfig, held: HeldOut, max_moves: int = 60) -> bool:
    """Make ``scene`` hold no held-out compound: recolour objects of a held-out attribute compound, move an
    object of a held-out relation fact to another place. Returns False when moves did not suffice (the
    caller samples another scene)."""
    kind = held.attribute_kind
    values = list(getattr(world, kind + ("es" if kind == "size" else "s")))
    for obj in scene.objects:
        while (getattr(obj, kind), obj.shape) in held.attributes:
            setattr(obj, kind, rng.choice(values))
    _clear_relation_cache(scene)
    for _ in range(max_moves):
        bad = _violations(scene, held)
        if not bad:
            return True
        a, b = bad[0]
        movable = [k for k in (a, b) if _free_to_move(scene, k)]
        if not movable:
            return False
        k = rng.choice(movable)
        obj = scene.objects[k]
        obj.x, obj.z = round(rng.uniform(0.05, 0.95), 4), round(rng.uniform(0.05, 0.95), 4)
        _clear_relation_cache(scene)
    return not _violations(scene, held)


def force_compound(rng: random.Random, scene: Scene, world: WorldConfig, held: HeldOut) -> tuple | None:
    """Make ``scene`` hold one held-out compound (drawn at random), changing one or two objects; returns it,
    or None (scene unchanged) when it holds relation compounds only and fewer than two objects are free to
    move."""
    options = sorted(held.attributes) + sorted(held.relations)
    compound = rng.choice(options)
    ground = [k for k in range(len(scene.objects)) if _free_to_move(scene, k)]
    if len(compound) == 2 or len(ground) < 2:
        if len(compound) == 3:  # a relation needs two free objects: fall back to an attribute compound
            if not held.attributes:
                return None
            compound = rng.choice(sorted(held.attributes))
        if len(compound) == 2:
            value, shape = compound
            obj = scene.objects[rng.randrange(len(scene.objects))]
            obj.shape = shape
            setattr(obj, held.attribute_kind, value)
            _clear_relation_cache(scene)
            return compound
    sa, rel, sb = compound
    a, b = rng.sample(ground, 2)
    oa, ob = scene.objects[a], scene.objects[b]
    oa.shape, ob.shape = sa, sb
    gap = rng.uniform(2 * MARGIN, 0.4)
    if rel == "left_of":  # oa left of ob, keeping both inside the floor
        ob.x = round(min(0.95, max(ob.x, 0.05 + gap)), 4)
        oa.x = round(ob.x - gap, 4)
    else:                 # in_front_of: oa nearer than ob
        ob.z = round(min(0.95, max(ob.z, 0.05 + gap)), 4)
        oa.z = round(ob.z - gap, 4)
    _clear_relation_cache(scene)
    return compound


def sample_role_scene(rng: random.Random, world: WorldConfig, image_id: str, role: str,
                      held: HeldOut, control: HeldOut | None = None) -> tuple[Scene, tuple | None]:
    """A scene for an image of ``role``, and the compound forced into it: a held-out one for test_systematic,
    a control one for test_iid when ``control`` is given (a scene then holding no held-out compound)."""
    if role == "test_systematic":
        for _ in range(100):
            scene = sample_scene(rng, world, image_id)
            forced = force_compound(rng, scene, world, held)
            if forced is not None:
                return scene, forced
        raise RuntimeError(f"{image_id}: no scene with two objects free to move in 100 tries")
    if role == "test_iid" and control is not None:
        kind = held.attribute_kind
        for _ in range(100):
            scene = sample_scene(rng, world, image_id)
            forced = force_compound(rng, scene, world, control)
            if forced is not None and repair_scene(rng, scene, world, held) \
                    and forced in scene_compounds(scene, kind):
                return scene, forced
        raise RuntimeError(f"{image_id}: no scene with a control compound and no held-out one in 100 tries")
    if role == "test_productivity":  # long captions need a few objects to talk about
        world = replace(world, min_objects=max(world.min_objects, min(4, world.max_objects)))
    for _ in range(100):
        scene = sample_scene(rng, world, image_id)
        if repair_scene(rng, scene, world, held):
            return scene, None
    raise RuntimeError(f"{image_id}: no scene without held-out compounds in 100 tries; hold out fewer compounds")


def caption_filter(role: str, held: HeldOut, cfg: CompositionalConfig,
                   control: HeldOut | None = None) -> Callable[[Caption], bool]:
    """Which sampled captions an image of ``role`` keeps (test_iid with ``control``: as test_systematic, with
    the control compounds in place of the held-out ones)."""
    kind = held.attribute_kind
    if role == "test_systematic":  # only the combination is new: no longer than training captions
        return lambda lf: lf.atoms() <= cfg.max_train_atoms and held.holds_any(caption_compounds(lf, kind))
    if role == "test_iid" and control is not None:
        return lambda lf: lf.atoms() <= cfg.max_train_atoms and control.holds_any(caption_compounds(lf, kind))
    if role == "test_productivity":
        return lambda lf: lf.atoms() > cfg.max_train_atoms
    return lambda lf: lf.atoms() <= cfg.max_train_atoms


def _ref_with(rng: random.Random, scene: Scene, k: int, must: str | None = None) -> ObjectRef:
    """Object ``k`` described by its shape and some attributes (always ``must``'s, when given)."""
    from features.world.semantics import ATTRIBUTE_KINDS

    obj = scene.objects[k]
    kinds = {kind for kind in ATTRIBUTE_KINDS if rng.random() < 0.4}
    if must is not None:
        kinds.add(must)
    return ObjectRef(obj.shape, tuple((kind, getattr(obj, kind)) for kind in ATTRIBUTE_KINDS if kind in kinds))


def _targeted(rng: random.Random, scene: Scene, role: str, held: HeldOut, cfg: CompositionalConfig,
              control: HeldOut | None = None) -> Caption | None:
    """A caption built to be accepted for ``role`` when sampling rarely finds one."""
    if role == "test_iid" and control is not None:
        return _targeted(rng, scene, "test_systematic", control, cfg)
    if role == "test_systematic":
        present = sorted(c for c in scene_compounds(scene, held.attribute_kind) if held.holds_any([c]))
        if not present:
            return None
        compound = rng.choice(present)
        if len(compound) == 2:
            value, shape = compound
            ks = [k for k, o in enumerate(scene.objects) if o.shape == shape
                  and getattr(o, held.attribute_kind) == value]
            ref = _ref_with(rng, scene, rng.choice(ks), must=held.attribute_kind)
            return Caption(rng.choice(("np", "there")), (ref,))
        pairs = [(a, rel, b) for a, rel, b in scene.relations() if rel in DIRECTIONAL
                 and canonical_relation(scene.objects[a].shape, rel, scene.objects[b].shape) == compound]
        a, rel, b = rng.choice(pairs)
        subj, obj = _ref_with(rng, scene, a), _ref_with(rng, scene, b)
        if rng.random() < 0.5:
            return Caption("clause", (subj, obj), rel)
        return Caption("np", (replace(subj, relation=(rel, obj)),))
    if role == "test_productivity":  # every attribute of every object named: two clauses, else four objects
        everything = ("size", "color", "material")

        def full(k: int) -> ObjectRef:
            obj = scene.objects[k]
            return ObjectRef(obj.shape, tuple((kind, getattr(obj, kind)) for kind in everything))

        relations = scene.relations()
        if len(relations) >= 2:
            (a, r1, b), (c, r2, d) = rng.sample(relations, 2)
            return Caption("two_clauses", (Caption("clause", (full(a), full(b)), r1),
                                           Caption("clause", (full(c), full(d)), r2)))
        picks = rng.sample(range(len(scene.objects)), min(4, len(scene.objects)))
        return Caption("and", tuple(full(k) for k in picks))
    return Caption("np", (ObjectRef(scene.objects[rng.randrange(len(scene.objects))].shape),))


def sample_role_captions(rng: random.Random, scene: Scene, n: int, role: str, held: HeldOut,
                         cfg: CompositionalConfig, tries_per_caption: int = 30,
                         control: HeldOut | None = None) -> list[tuple[str, Caption]]:
    """``n`` distinct true captions of ``scene`` that an image of ``role`` may carry (:func:`caption_filter`).

    Captions are drawn from the world's grammar as for any image and kept when they fit the role; when
    ``tries_per_caption`` draws find none, one is built for it (:func:`_targeted`), so rare requirements
    (a held-out relation between two particular objects) do not exhaust the draws.
    """
    from features.world.grammar import realize, sample_caption
    from features.world.semantics import holds

    accept = caption_filter(role, held, cfg, control)
    out: list[tuple[str, Caption]] = []
    seen: set[str] = set()
    for _ in range(n * 20):
        lf = None
        for _ in range(tries_per_caption):
            candidate = sample_caption(rng, scene)
            if accept(candidate):
                lf = candidate
                break
        if lf is None:
            lf = _targeted(rng, scene, role, held, cfg, control)
            if lf is None or not accept(lf) or not holds(scene, lf):
                continue
        text = realize(rng, lf)
        key = text.lower().rstrip(".")
        if key in seen:
            continue
        seen.add(key)
        out.append((text, lf))
        if len(out) == n:
            break
    return out
