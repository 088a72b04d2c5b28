"""What an MCD split counts as a compound and as an atom: three definitions, one count-matrix interface.

Keysers et al.'s compounds are the pieces of an example's structure that combine atoms; which pieces an
MCD splitter counts decides what the split holds out. A definition maps every image of a graph to two
sparse count rows over vocabularies shared by all graphs of one problem (:func:`count_matrices`):

* ``template`` -- the CRG's predicate templates (``[NP] left of [NP]``), one count per composition step of
  every caption (Zhang et al. 2021, Appendix B); atoms are the CRG's primitives, counted once per caption
  holding them. A template names the words *around* its arguments, so a held-out "red cube" leaves
  ``a red [NN]`` as common as ever: templates barely register what a compositional split holds out.
* ``template-heads`` -- the same steps with each argument's head noun written into its placeholder
  (``[NP:cube] left of [NP:ball]``, ``a red [NN:cube]``), for any corpus the CRG reads; same atoms. The head
  of a concept is found through the derivations (:func:`head_concepts`).
* ``semantic`` -- the compounds and atoms of the captions' logical forms, read from the records'
  per-caption ``"compounds"`` and ``"atoms"`` fields (what the generated world's ``captions.jsonl`` holds,
  ``features/world/semantic_compounds.py``): each caption's distinct compounds and atoms count once.
  Only a corpus with those fields has them (:func:`semantic_annotations` says so when they are missing).

The ``template`` counts are exactly what :func:`crg.mcd.image_count_matrices` always counted (same code,
same column order), so splits under the default definition are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import scipy.sparse as sp

from crg.extract import PRIMITIVE, PRIMITIVE_TAGS
from crg.graph import KIND_BITS, ConceptGraph

__all__ = [
    "COMPOUND_DEFINITIONS", "TEMPLATE", "TEMPLATE_HEADS", "SEMANTIC", "ImageCounts", "SemanticAnnotations",
    "check_definition", "head_slots", "head_concepts", "derivation_compounds", "image_count_matrices",
    "semantic_annotations", "count_matrices",
]

TEMPLATE, TEMPLATE_HEADS, SEMANTIC = "template", "template-heads", "semantic"
COMPOUND_DEFINITIONS = (TEMPLATE, TEMPLATE_HEADS, SEMANTIC)


@dataclass
class ImageCounts:
    """Per-image compound and atom counts of one graph under one definition.

    Shapes: ``I`` images of the graph, ``V`` / ``A`` the sizes of the shared vocabularies after counting.
    """

    compounds: sp.csr_matrix   # (I, V) compound counts per image
    atoms: sp.csr_matrix       # (I, A) atom counts per image


@dataclass
class SemanticAnnotations:
    """The logical-form compounds and atoms of every caption, by image id (``semantic`` definition).

    ``compounds[image_id][j]`` / ``atoms[image_id][j]`` are the strings of the image's ``j``-th caption.
    """

    compounds: dict[str, list[list[str]]]
    atoms: dict[str, list[list[str]]]
    source: str = ""           # where they were read, for error messages


def check_definition(name: str) -> str:
    """``name`` if it is a compound definition, else a ``ValueError`` listing them.

    >>> check_definition("template-heads")
    'template-heads'
    """
    if name not in COMPOUND_DEFINITIONS:
        raise ValueError(f"unknown compound definition {name!r}: choose one of {COMPOUND_DEFINITIONS} "
                         f"(--compounds)")
    return name


# ---------------------------------------------------------------------------------------- heads
def _is_placeholder(token: str) -> bool:
    """``[NP]``, ``[NN]``: an argument slot of a template (as :mod:`crg.extract` writes them)."""
    return len(token) > 2 and token[0] == "[" and token[-1] == "]" and token[1:-1].isupper()


def head_slots(templates: Iterable[str]) -> np.ndarray:
    """Which argument of each predicate template holds the head of the composed concept.

    The first placeholder, unless it starts a run of adjacent noun placeholders (``[NN] [NN]``: a noun-noun
    compound such as "tennis ball"), whose last noun is then the head. A phrase or clause argument
    (``[NP] on [NP]``, ``[NP] is running``) gives its first argument: the modified noun, or the subject.
    -1 for a template without arguments.

    >>> head_slots(["a [NN] [NN] on [NP]", "[NP] left of [NP]", "a small [NN]", "it is sunny"]).tolist()
    [1, 0, 0, -1]
    >>> head_slots(["[NNS] and [NNS]", "[NP] while [S]"]).tolist()
    [0, 0]
    """
    out = []
    for template in templates:
        slot, run = -1, False
        k = 0  # index of the next placeholder
        for tok in template.split():
            is_arg = _is_placeholder(tok)
            if not is_arg:
                if slot >= 0:
                    break
                continue
            if slot < 0:
                slot, run = k, tok[1:-1] in PRIMITIVE_TAGS
            elif run and tok[1:-1] in PRIMITIVE_TAGS:
                slot = k
            else:
                break
            k += 1
        out.append(slot)
    return np.asarray(out, dtype=np.int64)


def head_concepts(graph: ConceptGraph) -> np.ndarray:
    """The head noun of every concept, as a concept id (``(C,)`` int64; -1 when it has none).

    A primitive is its own head; any other concept takes the head of the argument in its first derivation's
    head slot (:func:`head_slots`), resolved bottom-up (a child's words are a strict part of its parent's,
    so the resolution ends after at most the tree height's passes).
    """
    c = graph.num_concepts
    head = np.full(c, -1, dtype=np.int64)
    prim = (graph.concept_kinds & KIND_BITS[PRIMITIVE]) > 0
    head[prim] = np.flatnonzero(prim)
    n_deriv = len(graph.deriv_parent)
    if n_deriv == 0:
        return head
    slot = head_slots(graph.predicate_templates)[graph.deriv_predicate]            # (D,)
    arity = np.diff(graph.deriv_child_ptr)
    ok = (slot >= 0) & (slot < arity)
    head_child = np.full(n_deriv, -1, dtype=np.int64)                               # (D,)
    head_child[ok] = graph.deriv_children[graph.deriv_child_ptr[:-1][ok] + slot[ok]]
    first = np.full(c, n_deriv, dtype=np.int64)                                     # (C,) first derivation
    np.minimum.at(first, graph.deriv_parent.astype(np.int64), np.arange(n_deriv))
    todo = np.flatnonzero(~prim & (first < n_deriv))
    child = head_child[first[todo]]
    for _ in range(c + 1):
        resolved = (child >= 0) & (head[np.maximum(child, 0)] >= 0)
        if not resolved.any():
            break
        head[todo[resolved]] = head[child[resolved]]
        todo, child = todo[~resolved], child[~resolved]
    return head


def derivation_compounds(graph: ConceptGraph, definition: str) -> list[str]:
    """The compound of every derivation (``(D,)`` strings) under ``template`` or ``template-heads``.

    ``template-heads`` writes the head noun of each argument into its placeholder: ``[NP:cube] left of
    [NP:ball]``; an argument without a head noun keeps its bare placeholder.
    """
    if definition == TEMPLATE:
        return [graph.predicate_templates[p] for p in graph.deriv_predicate]
    if definition != TEMPLATE_HEADS:
        raise ValueError(f"derivation_compounds counts {TEMPLATE!r} or {TEMPLATE_HEADS!r}, got {definition!r}")
    head = head_concepts(graph)
    parts = [t.split() for t in graph.predicate_templates]
    ptr, children, texts = graph.deriv_child_ptr, graph.deriv_children, graph.concept_texts
    out = []
    for d, p in enumerate(graph.deriv_predicate):
        args = iter(children[ptr[d]:ptr[d + 1]])
        words = []
        for tok in parts[p]:
            if _is_placeholder(tok):
                h = head[next(args)]
                words.append(tok if h < 0 else f"{tok[:-1]}:{texts[h]}]")
            else:
                words.append(tok)
        out.append(" ".join(words))
    return out


# ---------------------------------------------------------------------------------------- counts
def _atom_matrix(graph: ConceptGraph, atom_index: dict[str, int]) -> sp.csr_matrix:
    """Primitive concepts per image, each counted once per caption holding it."""
    n_img = len(graph.image_ids)
    prim = np.flatnonzero(graph.concept_kinds & KIND_BITS[PRIMITIVE])
    atom_col = np.full(graph.num_concepts, -1, dtype=np.int64)
    atom_col[prim] = [atom_index.setdefault(graph.concept_texts[c], len(atom_index)) for c in prim]
    rows = np.repeat(graph.caption_image.astype(np.int64), np.diff(graph.caption_concept_ptr))
    cols = atom_col[graph.caption_concepts]
    keep = cols >= 0
    atoms = sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])), shape=(n_img, len(atom_index)))
    atoms.sum_duplicates()
    return atoms


def _step_matrix(graph: ConceptGraph, deriv_col: np.ndarray, width: int) -> sp.csr_matrix:
    """Composition steps per image: every derivation of every caption counts its column once."""
    per_caption = np.diff(graph.caption_deriv_ptr)                                   # (N_cap,)
    rows = np.repeat(graph.caption_image.astype(np.int64), per_caption)             # (steps,)
    cols = deriv_col[graph.caption_derivs]                                            # (steps,)
    m = sp.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(len(graph.image_ids), width))
    m.sum_duplicates()
    return m


def image_count_matrices(graph: ConceptGraph, compound_index: dict[str, int],
                         atom_index: dict[str, int]) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Per-image ``template`` compound and atom counts of ``graph``, over vocabularies that grow as needed.

    Compounds: every composition step of every caption counts its predicate once (the caption's
    ``caption_derivs``, duplicates kept). Atoms: each primitive concept counts once per caption
    containing it (``caption_concepts`` are distinct per caption). New templates / primitive texts are
    appended to ``compound_index`` / ``atom_index``.

    Returns:
        ``(compounds, atoms)``: CSR matrices of shapes ``(I, len(compound_index))`` and
        ``(I, len(atom_index))`` (sizes after this call), ``I = len(graph.image_ids)``.
    """
    pred_col = np.fromiter((compound_index.setdefault(t, len(compound_index)) for t in graph.predicate_templates),
                           dtype=np.int64, count=graph.num_predicates)
    compounds = _step_matrix(graph, pred_col[graph.deriv_predicate], len(compound_index))
    atoms = _atom_matrix(graph, atom_index)
    return compounds, atoms


def semantic_annotations(records: Iterable, source: str = "") -> SemanticAnnotations:
    """The ``"compounds"`` / ``"atoms"`` fields of caption records (:class:`crg.corpus.ImageRecord` or dicts).

    Raises a ``ValueError`` naming the first record without them: only the generated world's captions
    carry logical forms (``--data world``); use ``--compounds template-heads`` for any other corpus.
    """
    compounds: dict[str, list[list[str]]] = {}
    atoms: dict[str, list[list[str]]] = {}
    for rec in records:
        raw = rec if isinstance(rec, Mapping) else rec.raw
        image_id = str(raw.get("image_id", getattr(rec, "image_id", "")))
        comps, ats = raw.get("compounds"), raw.get("atoms")
        if comps is None or ats is None:
            raise ValueError(f"--compounds semantic needs per-caption 'compounds' and 'atoms' fields (a logical "
                             f"form's), which only the generated world's captions.jsonl has (--data world); "
                             f"image {image_id!r} of {source or 'the corpus'} has none. Use --compounds "
                             f"template-heads (argument head nouns) for any other corpus")
        if len(comps) != len(ats):
            raise ValueError(f"image {image_id!r} of {source or 'the corpus'}: {len(comps)} compound lists but "
                             f"{len(ats)} atom lists (one of each per caption)")
        compounds[image_id], atoms[image_id] = comps, ats
    return SemanticAnnotations(compounds, atoms, source)


def _semantic_matrices(image_ids: list[str], annotations: SemanticAnnotations, compound_index: dict[str, int],
                       atom_index: dict[str, int]) -> ImageCounts:
    out = []
    for table, index in ((annotations.compounds, compound_index), (annotations.atoms, atom_index)):
        rows, cols = [], []
        for i, image_id in enumerate(image_ids):
            if image_id not in table:
                where = annotations.source or "the corpus"
                raise ValueError(f"image {image_id!r} has no semantic annotations in {where}: the graph and the "
                                 f"caption records disagree")
            for caption in table[image_id]:
                for item in dict.fromkeys(caption):  # distinct per caption, first-seen order
                    rows.append(i)
                    cols.append(index.setdefault(item, len(index)))
        m = sp.csr_matrix((np.ones(len(rows)), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
                          shape=(len(image_ids), len(index)))
        m.sum_duplicates()
        out.append(m)
    return ImageCounts(out[0], out[1])


def count_matrices(graph: ConceptGraph, definition: str, compound_index: dict[str, int],
                   atom_index: dict[str, int], annotations: SemanticAnnotations | None = None) -> ImageCounts:
    """Per-image counts of ``graph``'s images under ``definition`` (module docstring).

    Vocabularies grow as in :func:`image_count_matrices`; the returned matrices have their sizes after
    this call. ``annotations`` are needed (and only used) for ``semantic``.
    """
    check_definition(definition)
    if definition == TEMPLATE:
        return ImageCounts(*image_count_matrices(graph, compound_index, atom_index))
    if definition == SEMANTIC:
        if annotations is None:
            raise ValueError("--compounds semantic needs the captions' logical-form annotations "
                             "(crg.compounds.semantic_annotations of the corpus records)")
        return _semantic_matrices(graph.image_ids, annotations, compound_index, atom_index)
    texts = derivation_compounds(graph, definition)
    deriv_col = np.fromiter((compound_index.setdefault(t, len(compound_index)) for t in texts), dtype=np.int64,
                            count=len(texts))
    return ImageCounts(_step_matrix(graph, deriv_col, len(compound_index)), _atom_matrix(graph, atom_index))
