"""Scenes of the generated world: objects with attributes on a ground plane, relations from geometry.

A scene holds 2-8 objects. Each has a shape, colour, size and material, a position ``x`` (left to
right, in [0, 1]) and a depth ``z`` (near to far, in [0, 1]); a small object may rest on top of a
larger one. Relations are *derived* from the geometry, never sampled, so they are true by
construction and can be checked for any pair:

* ``left_of`` / ``right_of``: horizontal gap larger than :data:`MARGIN`;
* ``in_front_of`` / ``behind``: depth gap larger than :data:`MARGIN`;
* ``next_to``: close in both position and depth, neither stacked on the other;
* ``on_top_of`` / ``under``: stacking.

Pairs whose gaps fall inside the margin satisfy neither direction: a caption never relies on an
ambiguous relation, and a hard negative that swaps a relation is verifiably false.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

__all__ = ["WorldConfig", "SceneObject", "Scene", "sample_scene", "relation_holds", "RELATIONS", "MARGIN"]

MARGIN = 0.08
NEXT_TO_DISTANCE = 0.22
RELATIONS = ("left_of", "right_of", "in_front_of", "behind", "next_to", "on_top_of", "under")
INVERSE = {"left_of": "right_of", "right_of": "left_of", "in_front_of": "behind", "behind": "in_front_of",
           "next_to": "next_to", "on_top_of": "under", "under": "on_top_of"}


@dataclass(frozen=True)
class WorldConfig:
    """The world's vocabularies and difficulty knobs (see docs/world.md for why each value).

    Attributes:
        shapes, colors, sizes, materials: attribute vocabularies (canonical values).
        min_objects, max_objects: objects per scene.
        stack_probability: chance that a small object is placed on top of a larger one.
        feature_dim: region feature size D in the feature store.
        noise: norm of the Gaussian noise added to every region feature, relative to the unit-norm code.
        confusion: probability that the detector encodes an attribute as a similar value
            (red as orange, metal as glass, ...) for one region.
        background_regions, part_regions: (min, max) extra non-object regions per image.
        image_size: rendered image width and height in pixels.
    """

    shapes: tuple[str, ...] = ("ball", "cube", "cylinder", "cone", "pyramid", "ring")
    colors: tuple[str, ...] = ("red", "orange", "yellow", "green", "cyan", "blue", "purple", "pink",
                               "brown", "gray", "black", "white")
    sizes: tuple[str, ...] = ("small", "medium", "large")
    materials: tuple[str, ...] = ("metal", "rubber", "wooden", "glass", "plastic")
    min_objects: int = 2
    max_objects: int = 8
    stack_probability: float = 0.15
    feature_dim: int = 256
    noise: float = 0.5
    confusion: float = 0.08
    background_regions: tuple[int, int] = (2, 4)
    part_regions: tuple[int, int] = (0, 3)
    image_size: tuple[int, int] = (320, 240)

    def __post_init__(self):
        if not 1 <= self.min_objects <= self.max_objects:
            raise ValueError(f"need 1 <= min_objects <= max_objects, got {self.min_objects}, {self.max_objects}")
        for name in ("shapes", "colors", "sizes", "materials"):
            if len(set(getattr(self, name))) < 2:
                raise ValueError(f"{name} needs at least two distinct values, got {getattr(self, name)}")
        if self.feature_dim < 1:
            raise ValueError(f"feature_dim (--feature-dim) must be at least 1, got {self.feature_dim}")
        if not 0 <= self.noise < float("inf"):  # also refuses NaN
            raise ValueError(f"noise (--noise) must be a finite number >= 0, got {self.noise}")
        if not 0 <= self.confusion < 1 or not 0 <= self.stack_probability < 1:
            raise ValueError(f"confusion and stack_probability must lie in [0, 1), got "
                             f"{self.confusion}, {self.stack_probability}")


@dataclass
class SceneObject:
    """One object. ``support`` is the index of the object it rests on, or -1 on the ground."""

    shape: str
    color: str
    size: str
    material: str
    x: float
    z: float
    support: int = -1

    def attribute(self, kind: str) -> str:
        return getattr(self, kind)


@dataclass
class Scene:
    """A scene: its id and objects. :meth:`relations` lists every true relation triple."""

    image_id: str
    objects: list[SceneObject] = field(default_factory=list)

    def relations(self) -> list[tuple[int, str, int]]:
        """Every true ``(a, relation, b)``; computed once per scene (objects do not move)."""
        cached = self.__dict__.get("_relations")
        if cached is None:
            cached = _all_relations(self.objects)
            self.__dict__["_relations"] = cached
            self.__dict__["_relation_set"] = set(cached)
        return cached

    def has_relation(self, a: int, relation: str, b: int) -> bool:
        if "_relation_set" not in self.__dict__:
            self.relations()
        if relation not in INVERSE:
            raise ValueError(f"unknown relation {relation!r}; choose one of {RELATIONS}")
        return (a, relation, b) in self.__dict__["_relation_set"]

    def to_dict(self) -> dict:
        return {"image_id": self.image_id, "objects": [asdict(o) for o in self.objects],
                "relations": [list(t) for t in self.relations()]}

    @classmethod
    def from_dict(cls, d: dict) -> "Scene":
        return cls(d["image_id"], [SceneObject(**o) for o in d["objects"]])


def relation_holds(scene: Scene, a: int, relation: str, b: int) -> bool:
    """Is ``objects[a] relation objects[b]`` true in this scene's geometry?"""
    return scene.has_relation(a, relation, b)


def _all_relations(objects: list[SceneObject]) -> list[tuple[int, str, int]]:
    """Every ``(a, relation, b)`` the geometry makes true: pairs in order, relations in :data:`RELATIONS` order.

    One pass over the ordered pairs, tests written out: scenes' relations were the world generator's
    largest single cost when each (pair, relation) was a function call.
    """
    out = []
    for a, oa in enumerate(objects):
        ax, az = oa.x, oa.z
        for b, ob in enumerate(objects):
            if a == b:
                continue
            if oa.support == b:  # stacked pairs stand only in the stacking relations
                out.append((a, "on_top_of", b))
                continue
            if ob.support == a:
                out.append((a, "under", b))
                continue
            bx, bz = ob.x, ob.z
            # (these exact float expressions: ax - bx < -MARGIN flips pairs exactly MARGIN apart)
            if ax < bx - MARGIN:
                out.append((a, "left_of", b))
            elif ax > bx + MARGIN:
                out.append((a, "right_of", b))
            if az < bz - MARGIN:
                out.append((a, "in_front_of", b))
            elif az > bz + MARGIN:
                out.append((a, "behind", b))
            if abs(ax - bx) < NEXT_TO_DISTANCE and abs(az - bz) < NEXT_TO_DISTANCE:
                out.append((a, "next_to", b))
    return out


def sample_scene(rng: random.Random, cfg: WorldConfig, image_id: str) -> Scene:
    """Sample a scene: attributes uniformly, positions spread so objects rarely overlap."""
    n = rng.randint(cfg.min_objects, cfg.max_objects)
    objects: list[SceneObject] = []
    rank = {size: i for i, size in enumerate(cfg.sizes)}
    supporting: set[int] = set()  # objects something already rests on
    for _ in range(n):
        size = rng.choice(cfg.sizes)
        obj = SceneObject(shape=rng.choice(cfg.shapes), color=rng.choice(cfg.colors), size=size,
                          material=rng.choice(cfg.materials), x=0.0, z=0.0)
        # a larger object on the ground with nothing on it yet
        bases = [k for k, o in enumerate(objects) if o.support == -1 and rank[o.size] > rank[size]
                 and k not in supporting]
        if bases and rng.random() < cfg.stack_probability:
            k = rng.choice(bases)
            supporting.add(k)
            obj.support, obj.x, obj.z = k, objects[k].x, objects[k].z
        else:
            obj.x, obj.z = _free_position(rng, objects)
        objects.append(obj)
    return Scene(image_id, objects)


def _free_position(rng: random.Random, objects: list[SceneObject]) -> tuple[float, float]:
    """A ground position away from the others (best of a few tries)."""
    best, best_gap = None, -1.0
    for _ in range(12):
        x, z = rng.uniform(0.05, 0.95), rng.uniform(0.05, 0.95)
        gap = min((max(abs(x - o.x), abs(z - o.z)) for o in objects if o.support == -1), default=1.0)
        if gap > best_gap:
            best, best_gap = (round(x, 4), round(z, 4)), gap
        if gap > 0.12:
            break
    return best
