"""Hard negatives of the generated world, each verified false of its image against the scene graph.

The same four CREPE types as :mod:`crg.hard_negatives`, made on a caption's logical form
(:mod:`features.world.semantics`) instead of its parse, then realised by the world's grammar
(:func:`features.world.grammar.realize`) so that a negative reads, and parses, like every other
caption of the world:

* **HN-SWAP**: exchange the descriptions of the two arguments of a relation ("a red ball left of a
  blue cube" -> "a blue cube left of a red ball"), in a clause or inside a noun phrase;
* **HN-ATOM**: replace one atom by another of its kind: a shape by a shape, a colour by a colour
  (size, material likewise), a relation by a relation;
* **HN-NEG**: "there is no ..." for the caption's description, or an attribute turned into a
  negated relative clause ("a ball that is not red");
* **HN-COMP**: rebind attributes across two objects of the caption (swap or move them), or, for a
  one-object caption, CREPE's compound split ("a red ball" -> "a blue ball and a red cone").

Every candidate is checked with :func:`features.world.semantics.holds` on the image's scene graph,
and its realised text is parsed back (:func:`features.world.grammar.parse_caption`) and checked
again; a candidate true of the image, or whose text does not parse back to something false, is
dropped and counted. So unlike corpus negatives (probably false), these are false by construction.

Text-to-image candidates (:meth:`WorldHardNegatives.distractor_images`): images whose scenes contain
every shape the caption names but of which the caption is false -- the images a model that only
matches nouns cannot tell from the right one.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from crg.hard_negatives import (
    HN_ATOM, HN_COMP, HN_NEG, HN_SWAP, HN_TYPES, Change, GenerationReport, HardNegative, HardNegativeConfig)
from features.world.grammar import MATERIAL_WORDS, NOUNS, PLURALS, SIZE_WORDS, parse_caption, realize
from features.world.scene import RELATIONS, Scene, WorldConfig
from features.world.semantics import ATTRIBUTE_KINDS, Caption, ObjectRef, holds

__all__ = ["WorldHardNegatives", "WorldCaptionNegatives", "WorldGenerationReport", "WorldNegativeConfig"]

_REL_TEXT = {r: r.replace("_", " ") for r in RELATIONS}


@dataclass(frozen=True)
class WorldNegativeConfig(HardNegativeConfig):
    """:class:`crg.hard_negatives.HardNegativeConfig` plus the world's own knobs.

    Attributes:
        realizations: surface forms drawn per negative; the one sharing most words with the source
            caption is kept, so that synonyms and word order do not give the negative away.
        distractor_images: text-to-image candidates kept per caption.
    """

    realizations: int = 8
    distractor_images: int = 5

    def __post_init__(self):
        super().__post_init__()
        if self.realizations < 1 or self.distractor_images < 0:
            raise ValueError(f"realizations must be >= 1 and distractor_images >= 0, got "
                             f"{self.realizations}, {self.distractor_images}")


@dataclass
class WorldCaptionNegatives:
    """One caption's verified negatives, why a type gave none, and the candidates dropped (by reason)."""

    negatives: list[HardNegative]
    skipped: dict[str, str]
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class WorldGenerationReport(GenerationReport):
    """:class:`GenerationReport` plus candidates dropped by the checker, per type and reason."""

    dropped: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, result) -> None:
        super().add(result)
        for t, reasons in result.dropped.items():
            bucket = self.dropped.setdefault(t, {})
            for reason, n in reasons.items():
                bucket[reason] = bucket.get(reason, 0) + n


# ---------------------------------------------------------------------------- logical-form surgery
Path = tuple  # steps from the caption to an ObjectRef: part index, or "r" for a relation's object


def _refs(node, path: Path = ()) -> Iterator[tuple[Path, ObjectRef]]:
    """Every object description of a caption, with its path, parents first."""
    if isinstance(node, ObjectRef):
        yield path, node
        if node.relation is not None:
            yield from _refs(node.relation[1], path + ("r",))
        return
    for i, part in enumerate(node.parts):
        yield from _refs(part, path + (i,))


def _clauses(cap: Caption, path: Path = ()) -> Iterator[tuple[Path, Caption]]:
    if cap.kind == "clause":
        yield path, cap
    for i, part in enumerate(cap.parts):
        if isinstance(part, Caption):
            yield from _clauses(part, path + (i,))


def _set(node, path: Path, value):
    """``node`` with the element at ``path`` replaced by ``value`` (frozen dataclasses: copies)."""
    if not path:
        return value
    step, rest = path[0], path[1:]
    if step == "r":
        rel, other = node.relation
        return replace(node, relation=(rel, _set(other, rest, value)))
    parts = list(node.parts)
    parts[step] = _set(parts[step], rest, value)
    return replace(node, parts=tuple(parts))


def _get(node, path: Path):
    for step in path:
        node = node.relation[1] if step == "r" else node.parts[step]
    return node


def _sorted_attrs(attrs) -> tuple:
    return tuple(sorted(attrs, key=lambda a: ATTRIBUTE_KINDS.index(a[0])))


def _phrase(ref: ObjectRef) -> str:
    """A short readable name of a description, for :class:`Change` records."""
    words = [v for _, v in ref.attrs] + [ref.shape or "object"]
    if ref.count:
        words.insert(0, str(ref.count))
    return " ".join(words)


def _head_swap(a: ObjectRef, b: ObjectRef) -> tuple[ObjectRef, ObjectRef]:
    """Exchange what two descriptions say about their own object (shape, attributes, count)."""
    return (replace(a, shape=b.shape, attrs=b.attrs, count=b.count, negated_attr=b.negated_attr),
            replace(b, shape=a.shape, attrs=a.attrs, count=a.count, negated_attr=a.negated_attr))


# ---------------------------------------------------------------------------- candidates per type
def _atom_candidates(cap: Caption, world: WorldConfig) -> list[tuple[Caption, Change]]:
    values = {"color": world.colors, "size": world.sizes, "material": world.materials}
    out = []
    for path, ref in _refs(cap):
        if ref.shape is not None:
            for s in world.shapes:
                if s != ref.shape:
                    out.append((_set(cap, path, replace(ref, shape=s)),
                                Change("replace_shape", (ref.shape,), (s,), "shape")))
        for k, (kind, value) in enumerate(ref.attrs):
            for v in values[kind]:
                if v != value:
                    attrs = ref.attrs[:k] + ((kind, v),) + ref.attrs[k + 1:]
                    out.append((_set(cap, path, replace(ref, attrs=attrs)),
                                Change("replace_attribute", (value,), (v,), kind)))
        if ref.relation is not None:
            rel, other = ref.relation
            for r in RELATIONS:
                if r != rel:
                    out.append((_set(cap, path, replace(ref, relation=(r, other))),
                                Change("replace_relation", (_REL_TEXT[rel],), (_REL_TEXT[r],), "relation")))
    for path, clause in _clauses(cap):
        for r in RELATIONS:
            if r != clause.relation:
                out.append((_set(cap, path, replace(clause, relation=r)),
                            Change("replace_relation", (_REL_TEXT[clause.relation],), (_REL_TEXT[r],), "relation")))
    return out


def _swap_candidates(cap: Caption) -> list[tuple[Caption, Change]]:
    out = []
    for path, clause in _clauses(cap):
        subj, obj = clause.parts
        if _phrase(subj) != _phrase(obj):
            s2, o2 = _head_swap(subj, obj)
            out.append((_set(cap, path, replace(clause, parts=(s2, o2))),
                        Change("swap_arguments", (_phrase(subj), _phrase(obj)), (_phrase(obj), _phrase(subj)),
                               _REL_TEXT[clause.relation])))
    for path, ref in _refs(cap):
        if ref.relation is not None:
            rel, other = ref.relation
            if _phrase(ref) != _phrase(other):
                a2, b2 = _head_swap(ref, other)
                out.append((_set(cap, path, replace(a2, relation=(rel, b2))),
                            Change("swap_arguments", (_phrase(ref), _phrase(other)), (_phrase(other), _phrase(ref)),
                                   _REL_TEXT[rel])))
    return out


def _negation_candidates(cap: Caption) -> list[tuple[Caption, Change]]:
    out = []
    if cap.kind in ("np", "there", "and"):
        for ref in cap.parts:
            out.append((Caption("negation", (ref.without_count(),)),
                        Change("negate_caption", (_phrase(ref),), (f"there is no {_phrase(ref.without_count())}",),
                               cap.kind)))
    for _, clause in _clauses(cap):
        subj, obj = clause.parts
        if subj.relation is None:
            ref = replace(subj.without_count(), relation=(clause.relation, obj))
            rel = _REL_TEXT[clause.relation]
            after = f"there is no {_phrase(subj.without_count())} {rel} {_phrase(obj)}"
            out.append((Caption("negation", (ref,)),
                        Change("negate_caption", (f"{_phrase(subj)} {rel} {_phrase(obj)}",), (after,), "clause")))
    for path, ref in _refs(cap):
        if ref.negated_attr is not None:
            continue
        for k, (kind, value) in enumerate(ref.attrs):
            new = replace(ref, attrs=ref.attrs[:k] + ref.attrs[k + 1:], negated_attr=(kind, value))
            out.append((_set(cap, path, new), Change("negate_attribute", (f"{value} {ref.shape or 'object'}",),
                                                     (f"{ref.shape or 'object'} that is not {value}",), kind)))
    return out


def _comp_candidates(cap: Caption, world: WorldConfig) -> tuple[list, list]:
    """Attribute rebinding across two objects, and (separately) CREPE's compound splits."""
    refs = list(_refs(cap))
    binding = []
    for ia, (pa, a) in enumerate(refs):
        for ib, (pb, b) in enumerate(refs):
            if ia == ib:
                continue
            b_kinds = {k for k, _ in b.attrs}
            for ka, (kind_a, va) in enumerate(a.attrs):
                rest_a = a.attrs[:ka] + a.attrs[ka + 1:]
                for kb, (kind_b, vb) in enumerate(b.attrs):  # swap, each unordered pair of objects once
                    if ia > ib or (kind_a, va) == (kind_b, vb):
                        continue
                    rest_b = b.attrs[:kb] + b.attrs[kb + 1:]
                    if kind_a != kind_b and (kind_b in {k for k, _ in rest_a} or kind_a in {k for k, _ in rest_b}):
                        continue
                    a2 = replace(a, attrs=_sorted_attrs(rest_a + ((kind_b, vb),)))
                    b2 = replace(_get(_set(cap, pa, a2), pb), attrs=_sorted_attrs(rest_b + ((kind_a, va),)))
                    new = _set(_set(cap, pa, a2), pb, b2)
                    binding.append((new, Change("swap_attributes", (f"{va} {a.shape or 'object'}",
                                                                    f"{vb} {b.shape or 'object'}"),
                                                (f"{vb} {a.shape or 'object'}", f"{va} {b.shape or 'object'}"),
                                                "attribute binding")))
                if kind_a not in b_kinds:  # move
                    a2 = replace(a, attrs=rest_a)
                    b2 = replace(_get(_set(cap, pa, a2), pb), attrs=_sorted_attrs(b.attrs + ((kind_a, va),)))
                    new = _set(_set(cap, pa, a2), pb, b2)
                    binding.append((new, Change("move_attribute", (f"{va} {a.shape or 'object'}", b.shape or "object"),
                                                (a.shape or "object", f"{va} {b.shape or 'object'}"),
                                                "attribute binding")))
    split = []
    if cap.kind in ("np", "there") and len(refs) == 1:
        (_, a), = refs
        values = {"color": world.colors, "size": world.sizes, "material": world.materials}
        for k, (kind, value) in enumerate(a.attrs):
            for v in values[kind]:
                for s in world.shapes:
                    if v == value or s == a.shape:
                        continue
                    first = replace(a, attrs=a.attrs[:k] + ((kind, v),) + a.attrs[k + 1:])
                    second = ObjectRef(s, ((kind, value),))
                    split.append((Caption("and", (first, second)),
                                  Change("split_compound", (f"{value} {a.shape or 'object'}",),
                                         (f"{v} {a.shape or 'object'}", f"{value} {s}"), "compound")))
    return binding, split


# ---------------------------------------------------------------------------- the generator
def _words(text: str) -> list[str]:
    return text.lower().replace(",", " ").replace(".", " ").split()


def _synonym_table() -> dict[str, tuple[str, bool]]:
    """word -> (the value it names, plural?) for the grammar's one-word synonyms (nouns, sizes, materials)."""
    table = {}
    for shape, words in NOUNS.items():
        for w in words:
            table[w] = ("shape:" + shape, False)
            table[PLURALS.get(w, w + "s")] = ("shape:" + shape, True)
    for kind, lexicon in (("size", SIZE_WORDS), ("material", MATERIAL_WORDS)):
        for value, words in lexicon.items():
            for w in words:
                table[w] = (f"{kind}:{value}", False)
    return table


_SYNONYMS = _synonym_table()


def _align_synonyms(text: str, source: str) -> str:
    """Use the source's word wherever the negative names the same value with a synonym ("tiny" for
    "little"), so that no word differs except where the meaning does."""
    chosen: dict[tuple[str, bool], set[str]] = {}
    for w in _words(source):
        if w in _SYNONYMS:
            chosen.setdefault(_SYNONYMS[w], set()).add(w)
    out = []
    for tok in text.split(" "):
        core = tok.rstrip(".,")
        words = chosen.get(_SYNONYMS.get(core.lower(), ("", False)), set())
        if len(words) == 1 and core.lower() not in words:
            tok = next(iter(words)) + tok[len(core):]
        out.append(tok)
    return " ".join(out)


def _styled(text: str, source: str) -> str:
    """``text`` with the source's casing and final period (realize draws them at random)."""
    body = text.strip().rstrip(".").lower()
    if source[:1].isupper():
        body = body[:1].upper() + body[1:]
    return body + "." if source.rstrip().endswith(".") else body


class WorldHardNegatives:
    """Hard negatives and text-to-image candidates for captions of a generated world.

    >>> from features.world.scene import SceneObject
    >>> s = Scene("im", [SceneObject("ball", "red", "small", "metal", 0.2, 0.5),
    ...                  SceneObject("cube", "blue", "large", "wooden", 0.7, 0.5)])
    >>> gen = WorldHardNegatives({"im": s}, config=WorldNegativeConfig(types=("HN-SWAP",)))
    >>> [n.text for n in gen.caption_negatives("im", "A red ball is left of a blue cube.").negatives]
    ['A blue cube is left of a red ball.']
    """

    def __init__(self, scenes: dict[str, Scene], world: WorldConfig = WorldConfig(),
                 config: WorldNegativeConfig = WorldNegativeConfig()):
        self.scenes = scenes
        self.world = world
        self.config = config
        self._shapes = {i: frozenset(o.shape for o in s.objects) for i, s in scenes.items()}
        self._order = sorted(scenes)

    # -------------------------------------------------------------- one caption
    def caption_negatives(self, image_id: str, text: str) -> WorldCaptionNegatives:
        """Verified hard negatives of one caption of ``image_id`` (at most ``per_type`` per type)."""
        scene = self._scene(image_id)
        cfg = self.config
        lf = parse_caption(text, self.world)
        if lf is None:
            return WorldCaptionNegatives([], {t: "caption not of the world's language" for t in cfg.types})
        if not holds(scene, lf):
            raise ValueError(f"caption {text!r} is not true of image {image_id!r}: not a positive to negate")
        negatives, skipped, dropped = [], {}, {}
        seen = {" ".join(_words(text))}
        for hn_type in cfg.types:
            rng = random.Random(f"{cfg.seed}:{hn_type}:{image_id}:{text}")
            if hn_type == HN_ATOM:
                groups = [_atom_candidates(lf, self.world)]
            elif hn_type == HN_SWAP:
                groups = [_swap_candidates(lf)]
            elif hn_type == HN_NEG:
                groups = [_negation_candidates(lf)]
            else:
                groups = list(_comp_candidates(lf, self.world))  # rebinding first, then splits
            if not any(groups):
                skipped[hn_type] = _NO_CANDIDATE[hn_type]
                continue
            kept = 0
            for group in groups:
                for cand, change in rng.sample(group, len(group)):
                    if kept >= cfg.per_type:
                        break
                    got, why = self._verified(scene, cand, text, f"{cfg.seed}:{hn_type}:{image_id}:{text}:{kept}")
                    if got is None:
                        bucket = dropped.setdefault(hn_type, {})
                        bucket[why] = bucket.get(why, 0) + 1
                        continue
                    key = " ".join(_words(got))
                    if key in seen:
                        bucket = dropped.setdefault(hn_type, {})
                        bucket["repeats the caption or another negative"] = \
                            bucket.get("repeats the caption or another negative", 0) + 1
                        continue
                    seen.add(key)
                    negatives.append(HardNegative(hn_type, got, text, change, image_id))
                    kept += 1
            if kept == 0:
                skipped[hn_type] = "every candidate is true of the image (dropped by the checker)"
        return WorldCaptionNegatives(negatives, skipped, dropped)

    def _verified(self, scene: Scene, lf: Caption, source: str, key: str) -> tuple[str | None, str]:
        """``(text, "")``: ``lf`` realised, false of ``scene`` and parsing back false; else ``(None, why)``."""
        if holds(scene, lf):
            return None, "true of the image"
        src = set(_words(source))
        best, best_score = None, -1.0
        for k in range(self.config.realizations):
            text = realize(random.Random(f"{key}:{k}"), lf)
            words = set(_words(text))
            score = len(words & src) / max(len(words | src), 1)
            if score > best_score:
                best, best_score = text, score
        text = _styled(_align_synonyms(best.lower(), source), source)
        back = parse_caption(text, self.world)
        if back is None:
            return None, "realised text does not parse back"
        if holds(scene, back):
            return None, "realised text true of the image"
        return text, ""

    def distractor_images(self, image_id: str, text: str, k: int | None = None) -> list[str]:
        """Text-to-image candidates: other images holding every shape the caption names, of which it is false."""
        lf = parse_caption(text, self.world)
        if lf is None:
            return []
        shapes = frozenset(ref.shape for _, ref in _refs(lf) if ref.shape is not None)
        cands = [i for i in self._order if i != image_id and shapes <= self._shapes[i]
                 and not holds(self.scenes[i], lf)]
        k = self.config.distractor_images if k is None else k
        rng = random.Random(f"{self.config.seed}:t2i:{image_id}:{text}")
        return rng.sample(cands, min(k, len(cands)))

    # -------------------------------------------------------------- a corpus
    def generate(self, captions: Iterable[tuple[str, str]]
                 ) -> tuple[list[HardNegative], WorldGenerationReport, dict[tuple[str, str], list[str]]]:
        """Negatives, a report, and text-to-image candidates for ``(image_id, caption)`` pairs."""
        report, out, distractors = WorldGenerationReport(), [], {}
        for image_id, text in captions:
            result = self.caption_negatives(image_id, text)
            report.add(result)
            out.extend(result.negatives)
            if self.config.distractor_images:
                distractors[(image_id, text)] = self.distractor_images(image_id, text)
        return out, report, distractors

    def _scene(self, image_id: str) -> Scene:
        try:
            return self.scenes[image_id]
        except KeyError:
            raise KeyError(f"no scene for image {image_id!r} ({len(self.scenes)} scenes loaded)") from None


_NO_CANDIDATE = {
    HN_ATOM: "no atom to replace",
    HN_SWAP: "no relation between two different descriptions",
    HN_NEG: "nothing to negate",
    HN_COMP: "no attribute to rebind (no attributed object, or nothing to move it to)",
}
assert set(_NO_CANDIDATE) == set(HN_TYPES)
