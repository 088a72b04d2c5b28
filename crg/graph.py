"""The Concept & Relation Graph: concepts, predicates, the derivations joining them, denotations.

Nodes:

* **concepts** -- sentences, phrases and primitives, identified by their lower-cased text. A text
  can play several roles ("dogs" is a primitive, and the sentence of the caption "Dogs.");
  ``concept_kinds`` is a bit mask of the roles seen (1 sentence, 2 phrase, 4 primitive).
* **predicates** -- templates with typed placeholders (``[NP] are running on [NP]``); arity and
  argument types are read off the template.

Edges are **derivations** ``parent = predicate(child_1, ..., child_n)``, each distinct one stored
once. Every caption records the derivations of its own concept tree (bottom-up), so the exact
composition of any caption can be replayed, and the **denotation** of a concept is the set of
images with a caption containing it.

Everything is stored as flat integer arrays (CSR for variable-length lists) plus string tables:
``graph.npz`` (loaded with ``allow_pickle=False``) and ``graph_strings.json.gz``.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from crg.extract import PHRASE, PRIMITIVE, PRIMITIVE_TAGS, SENTENCE, ConceptNode, Predicate

__all__ = ["ConceptGraph", "GraphBuilder", "GraphPart", "PartCaption", "Concept", "Derivation", "KIND_BITS",
           "load_graph"]

KIND_BITS = {SENTENCE: 1, PHRASE: 2, PRIMITIVE: 4}
_ARRAYS = ("concept_kinds", "deriv_parent", "deriv_predicate", "deriv_child_ptr", "deriv_children",
           "caption_image", "caption_index", "caption_root", "caption_height", "caption_deriv_ptr",
           "caption_derivs", "caption_concept_ptr", "caption_concepts", "concept_image_ptr", "concept_images")
_STRINGS = ("image_ids", "image_splits", "concept_texts", "concept_labels", "predicate_templates", "caption_texts")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Concept:
    """A concept node: its id, text, syntactic label and the roles it plays (``kinds``)."""

    id: int
    text: str
    label: str
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Derivation:
    """``parent = predicate(children...)``, one composition step of the graph."""

    id: int
    parent: int
    predicate: Predicate
    children: tuple[int, ...]


@dataclass
class ConceptGraph:
    """The saved graph. Build it with :class:`GraphBuilder` or :func:`crg.build.build_crg`."""

    image_ids: list[str]
    image_splits: Sequence[str | None]   # list, or crg.graph_store.CodedStrings when memory-mapped
    concept_texts: Sequence[str]         # list, or crg.graph_store.StringTable (also the tables below)
    concept_labels: list[str]
    predicate_templates: list[str]
    caption_texts: list[str]
    concept_kinds: np.ndarray          # (C,) uint8 bit mask, KIND_BITS
    deriv_parent: np.ndarray           # (D,) int32 concept id
    deriv_predicate: np.ndarray        # (D,) int32 predicate id
    deriv_child_ptr: np.ndarray        # (D+1,) int64 CSR offsets into deriv_children
    deriv_children: np.ndarray         # (sum arity,) int32 concept ids, in placeholder order
    caption_image: np.ndarray          # (N,) int32 image index
    caption_index: np.ndarray          # (N,) int16 caption's position among its image's captions
    caption_root: np.ndarray           # (N,) int32 sentence concept id
    caption_height: np.ndarray         # (N,) int16 height of the caption's concept tree
    caption_deriv_ptr: np.ndarray      # (N+1,) int64 CSR offsets into caption_derivs
    caption_derivs: np.ndarray         # derivation ids of each caption, children before parents
    caption_concept_ptr: np.ndarray    # (N+1,) int64 CSR offsets into caption_concepts
    caption_concepts: np.ndarray       # distinct concept ids of each caption
    concept_image_ptr: np.ndarray      # (C+1,) int64 CSR offsets into concept_images
    concept_images: np.ndarray         # sorted image indices of each concept's denotation
    meta: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ sizes and statistics
    @property
    def num_concepts(self) -> int:
        return len(self.concept_texts)

    @property
    def num_predicates(self) -> int:
        return len(self.predicate_templates)

    @property
    def num_captions(self) -> int:
        return len(self.caption_root)

    @property
    def num_primitives(self) -> int:
        return int(np.count_nonzero(self.concept_kinds & KIND_BITS[PRIMITIVE]))

    def stats(self) -> dict:
        """Table 1's columns plus a few more, for ``stats.json``."""
        kinds = self.concept_kinds
        return {
            "num_concepts": self.num_concepts,
            "num_predicates": self.num_predicates,
            "num_primitives": self.num_primitives,
            "avg_height": round(float(self.caption_height.mean()), 4) if self.num_captions else 0.0,
            "height_definition": "edges on the longest path from the sentence concept down to a primitive "
                                 "(a one-noun caption such as 'Dogs.' is its primitive: height 0)",
            "num_sentence_concepts": int(np.count_nonzero(kinds & KIND_BITS[SENTENCE])),
            "num_phrase_concepts": int(np.count_nonzero(kinds & KIND_BITS[PHRASE])),
            "num_derivations": int(len(self.deriv_parent)),
            "num_images": len(self.image_ids),
            "num_captions": self.num_captions,
        }

    # ------------------------------------------------------------------ lookups
    @cached_property
    def _concept_index(self):
        return _text_index(self.concept_texts)

    @cached_property
    def _predicate_index(self):
        return _text_index(self.predicate_templates)

    @cached_property
    def _image_index(self):
        return _text_index(self.image_ids)

    @cached_property
    def _parent_derivations(self) -> tuple[np.ndarray, np.ndarray]:
        """Inverse of ``deriv_children``: for each concept, the derivations it is an argument of."""
        arity = np.diff(self.deriv_child_ptr)
        owner = np.repeat(np.arange(len(self.deriv_parent), dtype=np.int64), arity)
        order = np.argsort(self.deriv_children, kind="stable")
        counts = np.bincount(self.deriv_children, minlength=self.num_concepts)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        return ptr, owner[order]

    def concept_id(self, text: str) -> int:
        """The id of the concept with this text (case and spacing are normalised)."""
        key = " ".join(text.lower().split())
        try:
            return self._concept_index[key]
        except KeyError:
            raise KeyError(f"no concept {key!r} in the graph ({self.num_concepts} concepts)") from None

    def concept(self, ref: int | str) -> Concept:
        cid = self.concept_id(ref) if isinstance(ref, str) else int(ref)
        bits = int(self.concept_kinds[cid])
        kinds = tuple(k for k, b in KIND_BITS.items() if bits & b)
        return Concept(cid, self.concept_texts[cid], self.concept_labels[cid], kinds)

    def predicate(self, pid: int) -> Predicate:
        return Predicate(self.predicate_templates[pid])

    def predicate_id(self, template: str) -> int:
        return self._predicate_index[template]

    def derivation(self, did: int) -> Derivation:
        lo, hi = self.deriv_child_ptr[did], self.deriv_child_ptr[did + 1]
        return Derivation(int(did), int(self.deriv_parent[did]), self.predicate(int(self.deriv_predicate[did])),
                          tuple(int(c) for c in self.deriv_children[lo:hi]))

    def children(self, ref: int | str) -> list[Derivation]:
        """The ways this concept is composed: one derivation per distinct (predicate, children)."""
        cid = self.concept_id(ref) if isinstance(ref, str) else int(ref)
        return [self.derivation(int(d)) for d in np.flatnonzero(self.deriv_parent == cid)]

    def parents(self, ref: int | str) -> list[Derivation]:
        """The derivations in which this concept is an argument."""
        cid = self.concept_id(ref) if isinstance(ref, str) else int(ref)
        ptr, derivs = self._parent_derivations
        return [self.derivation(int(d)) for d in derivs[ptr[cid]:ptr[cid + 1]]]

    def denotation(self, ref: int | str) -> list[str]:
        """Ids of the images with at least one caption containing the concept."""
        cid = self.concept_id(ref) if isinstance(ref, str) else int(ref)
        lo, hi = self.concept_image_ptr[cid], self.concept_image_ptr[cid + 1]
        return [self.image_ids[i] for i in self.concept_images[lo:hi]]

    def denotation_indices(self, cid: int) -> np.ndarray:
        return self.concept_images[self.concept_image_ptr[cid]:self.concept_image_ptr[cid + 1]]

    def caption_concept_ids(self, caption: int) -> np.ndarray:
        return self.caption_concepts[self.caption_concept_ptr[caption]:self.caption_concept_ptr[caption + 1]]

    def caption_derivations(self, caption: int) -> list[Derivation]:
        """The caption's composition steps, children before parents (the order COMPOSER runs them)."""
        lo, hi = self.caption_deriv_ptr[caption], self.caption_deriv_ptr[caption + 1]
        return [self.derivation(int(d)) for d in self.caption_derivs[lo:hi]]

    def captions_of_image(self, image_id: str) -> list[int]:
        idx = self._image_index[str(image_id)]
        return [int(c) for c in np.flatnonzero(self.caption_image == idx)]

    def sample_phrase_queries(self, per_caption: int = 5, *, seed: int = 0,
                              captions: Iterable[int] | None = None,
                              kinds: Sequence[str] = (PHRASE, PRIMITIVE)) -> list[tuple[int, int]]:
        """Sample non-sentence concepts of each caption as phrase-to-image queries (§5.3: 5 per caption).

        Returns ``(caption, concept_id)`` pairs; a caption with fewer candidates gives all of them.
        The image of the caption is the single positive; :meth:`denotation` gives all positives.
        """
        mask = sum(KIND_BITS[k] for k in kinds)
        rng = random.Random(seed)
        out = []
        for cap in (range(self.num_captions) if captions is None else captions):
            root = self.caption_root[cap]
            cands = [int(c) for c in self.caption_concept_ids(cap)
                     if c != root and self.concept_kinds[c] & mask]
            cands.sort()
            picked = cands if len(cands) <= per_caption else rng.sample(cands, per_caption)
            out.extend((int(cap), c) for c in sorted(picked))
        return out

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path, *, columnar: bool = False) -> None:
        """Write ``graph.npz`` and ``graph_strings.json.gz`` into ``directory`` (atomically); ``columnar``: the
        memory-mapped layout instead (:mod:`crg.graph_store`: ``graph.json`` + ``graph/``), for big graphs."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if columnar:
            from crg.graph_store import write_columnar

            write_columnar(self, directory, _ARRAYS, _STRINGS)
            return
        arrays = {name: np.asarray(getattr(self, name)) for name in _ARRAYS}
        tmp = directory / "graph.npz.tmp.npz"
        np.savez_compressed(tmp, **arrays)
        strings = {name: list(getattr(self, name)) for name in _STRINGS}
        strings["meta"] = self.meta
        strings["format_version"] = FORMAT_VERSION
        tmp_s = directory / "graph_strings.json.gz.tmp"
        with gzip.open(tmp_s, "wt", encoding="utf-8", compresslevel=3) as f:
            json.dump(strings, f, ensure_ascii=False)
        os.replace(tmp, directory / "graph.npz")
        os.replace(tmp_s, directory / "graph_strings.json.gz")
        for name in ("graph.json", "graph"):  # a columnar graph saved here before: one graph per folder
            stale = directory / name
            if stale.is_dir():
                import shutil

                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)

    @classmethod
    def load(cls, directory: str | Path, *, mmap: bool = True) -> "ConceptGraph":
        """Read a saved graph, either layout. A columnar one is memory-mapped (``mmap=False``: read into memory):
        its arrays are read-only and its string tables :class:`crg.graph_store.StringTable` sequences."""
        directory = Path(directory)
        from crg.graph_store import is_columnar, read_columnar

        if is_columnar(directory):
            return cls(**read_columnar(directory, _ARRAYS, _STRINGS, mmap=mmap))
        npz, strs = directory / "graph.npz", directory / "graph_strings.json.gz"
        for p in (npz, strs):
            if not p.exists():
                raise FileNotFoundError(f"{directory} holds no saved graph: {p.name} is missing (and there is no "
                                        f"columnar graph.json) "
                                        f"(build one with experiments/build_crg.py)")
        with np.load(npz, allow_pickle=False) as data:
            arrays = {name: data[name] for name in _ARRAYS}
        with gzip.open(strs, "rt", encoding="utf-8") as f:
            strings = json.load(f)
        if strings.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{strs}: graph format {strings.get('format_version')}, expected {FORMAT_VERSION}; "
                             f"rebuild the graph")
        meta = strings.pop("meta", {})
        strings.pop("format_version")
        return cls(**strings, **arrays, meta=meta)


def _text_index(table: Sequence[str]):
    """Text -> id: a memory-mapped table's saved hash index (no string decoded but the few compared), else a
    dictionary of the whole table."""
    lookup = getattr(table, "lookup", None)
    return lookup if lookup is not None else {t: i for i, t in enumerate(table)}


def load_graph(directory: str | Path, *, mmap: bool = True) -> ConceptGraph:
    """The graph saved in ``directory`` (either layout; a columnar one memory-mapped unless ``mmap=False``)."""
    return ConceptGraph.load(directory, mmap=mmap)


@dataclass
class PartCaption:
    """One caption of a :class:`GraphPart`; ``root``, ``derivs`` and ``concepts`` are the part's own ids."""

    image: int              # image index in the whole corpus (the merged graph's image table)
    index: int              # the caption's position among its image's captions
    text: str
    root: int
    height: int
    derivs: list[int]       # derivation ids, children before parents (as GraphBuilder.add_caption visits)
    concepts: list[int]     # distinct concept ids


@dataclass
class PartDerivation:
    """``parent = predicate(children)`` in a part's own concept and predicate ids."""

    parent: int
    predicate: int
    children: list[int]


@dataclass
class GraphPart:
    """The captions of one shard as a graph of their own: string tables and ids local to the shard.

    Made by :meth:`GraphBuilder.part` on a worker; :meth:`GraphBuilder.add_part` merges parts in shard
    order into exactly the graph that adding their captions one by one would give (ids are assigned by
    first occurrence, and a part lists its concepts, predicates and derivations in first-occurrence order),
    so the merging process handles each distinct string of a shard once and never sees a parse tree.
    """

    concept_texts: Sequence[str]         # list, or crg.graph_store.StringTable (also the tables below)
    concept_labels: list[str]     # the label of each concept's first occurrence in the shard
    concept_kinds: list[int]      # KIND_BITS masks, OR-ed over the shard
    predicate_templates: list[str]
    derivations: list[PartDerivation]
    captions: list[PartCaption]


class GraphBuilder:
    """Accumulates caption concept trees into a :class:`ConceptGraph`, one caption at a time."""

    def __init__(self, image_ids: Sequence[str], image_splits: Sequence[str | None]):
        self.image_ids = [str(i) for i in image_ids]
        self.image_splits = list(image_splits)
        self._concepts: dict[str, int] = {}
        self._concept_kinds: list[int] = []
        self._concept_labels: list[str] = []
        self._predicates: dict[str, int] = {}
        self._derivs: dict[tuple, int] = {}
        self._deriv_rows: list[tuple[int, int, tuple[int, ...]]] = []
        self._cap_image: list[int] = []
        self._cap_index: list[int] = []
        self._cap_root: list[int] = []
        self._cap_height: list[int] = []
        self._cap_derivs: list[np.ndarray] = []
        self._cap_concepts: list[np.ndarray] = []
        self._cap_texts: list[str] = []

    def _concept(self, node: ConceptNode) -> int:
        cid = self._concepts.get(node.text)
        if cid is None:
            cid = self._concepts[node.text] = len(self._concept_kinds)
            self._concept_kinds.append(0)
            self._concept_labels.append(node.label)
        self._concept_kinds[cid] |= KIND_BITS[node.kind]
        if node.predicate is None and node.label in PRIMITIVE_TAGS:
            self._concept_kinds[cid] |= KIND_BITS[PRIMITIVE]  # a one-noun sentence is also a primitive
        return cid

    def add_caption(self, image_index: int, caption_index: int, caption: str, root: ConceptNode) -> None:
        derivs: list[int] = []
        concepts: set[int] = set()

        def visit(node: ConceptNode) -> int:
            child_ids = tuple(visit(c) for c in node.children)
            cid = self._concept(node)
            concepts.add(cid)
            if node.predicate is not None:
                pid = self._predicates.setdefault(node.predicate.template, len(self._predicates))
                key = (cid, pid, child_ids)
                did = self._derivs.get(key)
                if did is None:
                    did = self._derivs[key] = len(self._deriv_rows)
                    self._deriv_rows.append(key)
                derivs.append(did)
            return cid

        root_id = visit(root)
        self._cap_image.append(image_index)
        self._cap_index.append(caption_index)
        self._cap_root.append(root_id)
        self._cap_height.append(root.height)
        self._cap_derivs.append(np.asarray(derivs, dtype=np.int32))
        self._cap_concepts.append(np.asarray(sorted(concepts), dtype=np.int32))
        self._cap_texts.append(caption)

    def part(self) -> GraphPart:
        """The captions added so far as a :class:`GraphPart` (this builder's ids; the image table is not used)."""
        return GraphPart(
            concept_texts=list(self._concepts), concept_labels=list(self._concept_labels),
            concept_kinds=list(self._concept_kinds), predicate_templates=list(self._predicates),
            derivations=[PartDerivation(p, q, list(c)) for p, q, c in self._deriv_rows],
            captions=[PartCaption(int(i), int(j), t, int(r), int(h), d.tolist(), c.tolist()) for i, j, t, r, h, d, c in
                      zip(self._cap_image, self._cap_index, self._cap_texts, self._cap_root, self._cap_height,
                          self._cap_derivs, self._cap_concepts)])

    def add_part(self, part: GraphPart) -> None:
        """Merge a shard's :class:`GraphPart`: its ids are mapped to this builder's, adding what is new.

        Adding parts in shard order gives the same graph as adding their captions in that order.
        """
        concept_map = np.empty(len(part.concept_texts), dtype=np.int64)
        for k, (text, label, kinds) in enumerate(zip(part.concept_texts, part.concept_labels, part.concept_kinds)):
            cid = self._concepts.get(text)
            if cid is None:
                cid = self._concepts[text] = len(self._concept_kinds)
                self._concept_kinds.append(0)
                self._concept_labels.append(label)
            self._concept_kinds[cid] |= int(kinds)
            concept_map[k] = cid
        predicate_map = [self._predicates.setdefault(t, len(self._predicates)) for t in part.predicate_templates]
        deriv_map = np.empty(len(part.derivations), dtype=np.int64)
        for k, d in enumerate(part.derivations):
            children = tuple(int(concept_map[c]) for c in d.children)
            key = (int(concept_map[d.parent]), predicate_map[d.predicate], children)
            did = self._derivs.get(key)
            if did is None:
                did = self._derivs[key] = len(self._deriv_rows)
                self._deriv_rows.append(key)
            deriv_map[k] = did
        for cap in part.captions:
            self._cap_image.append(cap.image)
            self._cap_index.append(cap.index)
            self._cap_root.append(int(concept_map[cap.root]))
            self._cap_height.append(cap.height)
            self._cap_derivs.append(deriv_map[np.asarray(cap.derivs, dtype=np.int64)].astype(np.int32))
            self._cap_concepts.append(np.sort(concept_map[np.asarray(cap.concepts, dtype=np.int64)]).astype(np.int32))
            self._cap_texts.append(cap.text)

    def build(self, meta: dict | None = None) -> ConceptGraph:
        n_concepts = len(self._concept_kinds)
        arity = np.asarray([len(r[2]) for r in self._deriv_rows], dtype=np.int64)
        deriv_children = np.fromiter((c for r in self._deriv_rows for c in r[2]), dtype=np.int32,
                                     count=int(arity.sum()))
        caption_image = np.asarray(self._cap_image, dtype=np.int32)
        cap_concept_ptr = _offsets(self._cap_concepts)
        cap_concepts = np.concatenate(self._cap_concepts) if self._cap_concepts else np.zeros(0, np.int32)
        # denotation: (concept, image) pairs from every caption, deduplicated, as CSR by concept
        pair_image = np.repeat(caption_image.astype(np.int64), np.diff(cap_concept_ptr))
        pairs = np.unique(cap_concepts.astype(np.int64) * max(len(self.image_ids), 1) + pair_image)
        pair_concept = pairs // max(len(self.image_ids), 1)
        concept_images = (pairs % max(len(self.image_ids), 1)).astype(np.int32)
        concept_image_ptr = np.concatenate([[0], np.cumsum(np.bincount(pair_concept, minlength=n_concepts))])
        return ConceptGraph(
            image_ids=self.image_ids,
            image_splits=self.image_splits,
            concept_texts=list(self._concepts),
            concept_labels=self._concept_labels,
            predicate_templates=list(self._predicates),
            caption_texts=self._cap_texts,
            concept_kinds=np.asarray(self._concept_kinds, dtype=np.uint8),
            deriv_parent=np.asarray([r[0] for r in self._deriv_rows], dtype=np.int32),
            deriv_predicate=np.asarray([r[1] for r in self._deriv_rows], dtype=np.int32),
            deriv_child_ptr=np.concatenate([[0], np.cumsum(arity)]).astype(np.int64),
            deriv_children=deriv_children,
            caption_image=caption_image,
            caption_index=np.asarray(self._cap_index, dtype=np.int16),
            caption_root=np.asarray(self._cap_root, dtype=np.int32),
            caption_height=np.asarray(self._cap_height, dtype=np.int16),
            caption_deriv_ptr=_offsets(self._cap_derivs),
            caption_derivs=np.concatenate(self._cap_derivs) if self._cap_derivs else np.zeros(0, np.int32),
            caption_concept_ptr=cap_concept_ptr,
            caption_concepts=cap_concepts,
            concept_image_ptr=concept_image_ptr.astype(np.int64),
            concept_images=concept_images,
            meta=dict(meta or {}),
        )


def _offsets(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(c) for c in chunks], dtype=np.int64)]).astype(np.int64)
