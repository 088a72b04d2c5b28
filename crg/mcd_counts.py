"""Per-image compound and atom counts saved with a graph: what an MCD split reads instead of the graph objects.

Why: :func:`crg.compounds.image_count_matrices` counts an MCD problem's ``template`` compounds and atoms from a
graph's caption arrays; for a candidate pool of millions of captions those arrays are the bulk of the graph.
The partitioned build writes the counts beside the graph (each shard its block of image rows, which are
contiguous), as two sparse matrices in the graph's own ids:

* ``compounds`` -- ``(I, P)``: per image, the composition steps of its captions by predicate id;
* ``atoms`` -- ``(I, C)``: per image, the captions holding each concept, non-zero for primitives only.

Both are CSR, stored as ``graph/mcd_{compounds,atoms}.{data,indices,indptr}.npy`` and memory-mapped on load
(:func:`read_graph_counts`); :func:`counts_from_graph` computes the same from any graph (the reference, and
what a graph saved without them falls back to). :func:`template_matrices` turns them into the shared-vocabulary
matrices of an MCD problem, equal to :func:`crg.compounds.image_count_matrices`: only the predicate templates and
the primitives' texts are read, never a caption.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from crg.extract import PRIMITIVE
from crg.graph import KIND_BITS, ConceptGraph
from crg.graph_store import FOLDER, MANIFEST, map_or_read

__all__ = ["GraphCounts", "counts_from_graph", "read_graph_counts", "template_matrices", "COUNT_NAMES"]

COUNT_NAMES = ("mcd_compounds", "mcd_atoms")


@dataclass
class GraphCounts:
    """A graph's per-image counts in its own ids (shapes: ``I`` images, ``P`` predicates, ``C`` concepts)."""

    compounds: sp.csr_matrix     # (I, P) composition steps per predicate id
    atoms: sp.csr_matrix         # (I, C) captions holding each primitive concept


def counts_from_graph(graph: ConceptGraph) -> GraphCounts:
    """The counts of ``graph`` computed from its caption arrays (what the partitioned build saves)."""
    return GraphCounts(*caption_block_counts(graph.caption_image, graph.caption_deriv_ptr, graph.caption_derivs,
                                             graph.caption_concept_ptr, graph.caption_concepts, graph.deriv_predicate,
                                             graph.concept_kinds, graph.num_predicates, len(graph.image_ids), 0))


def caption_block_counts(caption_image, deriv_ptr, derivs, concept_ptr, concepts, deriv_predicate, concept_kinds,
                         num_predicates: int, num_images: int, first_image: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The count rows of images ``[first_image, first_image + num_images)`` from their captions' arrays (global
    ids; ``deriv_ptr`` / ``concept_ptr`` are the block's own CSR offsets, ``(n+1,)``)."""
    image = np.asarray(caption_image, dtype=np.int64) - first_image
    deriv_ptr, concept_ptr = np.asarray(deriv_ptr), np.asarray(concept_ptr)
    steps = np.asarray(derivs[deriv_ptr[0]:deriv_ptr[-1]], dtype=np.int64)
    rows = np.repeat(image, np.diff(deriv_ptr))
    cols = np.asarray(deriv_predicate, dtype=np.int64)[steps] if len(steps) else np.zeros(0, np.int64)
    compounds = sp.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(num_images, num_predicates))
    held = np.asarray(concepts[concept_ptr[0]:concept_ptr[-1]], dtype=np.int64)
    rows = np.repeat(image, np.diff(concept_ptr))
    prim = (np.asarray(concept_kinds)[held] & KIND_BITS[PRIMITIVE]) > 0 if len(held) else np.zeros(0, bool)
    atoms = sp.csr_matrix((np.ones(int(prim.sum())), (rows[prim], held[prim])), shape=(num_images, len(concept_kinds)))
    compounds.sum_duplicates()
    atoms.sum_duplicates()
    return compounds, atoms


def read_graph_counts(directory: str | Path, graph: ConceptGraph | None = None) -> GraphCounts:
    """The counts saved in a columnar graph folder, memory-mapped; computed from ``graph`` (loaded from
    ``directory`` when not given) when the folder has none (a graph saved by another engine)."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else {}
    shapes = manifest.get("counts", {})
    if not all(name in shapes for name in COUNT_NAMES):
        from crg.graph import load_graph

        return counts_from_graph(graph if graph is not None else load_graph(directory))
    out = []
    for name in COUNT_NAMES:
        parts = []
        for piece in ("data", "indices", "indptr"):
            path = directory / FOLDER / f"{name}.{piece}.npy"
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: the counts saved with the graph in {directory} are "
                                        f"incomplete; rebuild the graph")
            parts.append(map_or_read(path))
        out.append(sp.csr_matrix(tuple(parts), shape=tuple(shapes[name])))
    return GraphCounts(*out)


def template_matrices(counts: GraphCounts, predicate_templates, concept_texts, concept_kinds,
                      compound_index: dict[str, int], atom_index: dict[str, int]) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``counts`` over the shared vocabularies of an MCD problem, which grow as needed: the same matrices (values,
    shapes, vocabulary order) as :func:`crg.compounds.image_count_matrices` of the graph."""
    pred_col = np.fromiter((compound_index.setdefault(t, len(compound_index)) for t in predicate_templates),
                           dtype=np.int64, count=len(predicate_templates))
    prim = np.flatnonzero(np.asarray(concept_kinds) & KIND_BITS[PRIMITIVE])
    atom_col = np.full(len(concept_kinds), -1, dtype=np.int64)
    atom_col[prim] = [atom_index.setdefault(concept_texts[int(c)], len(atom_index)) for c in prim]
    out = []
    for m, col, width in ((counts.compounds, pred_col, len(compound_index)), (counts.atoms, atom_col, len(atom_index))):
        m = sp.csr_matrix(m)
        cols = col[np.asarray(m.indices, dtype=np.int64)]
        if len(cols) and cols.min() < 0:
            raise ValueError("the saved atom counts hold a concept that is not a primitive: the counts do not belong "
                             "to this graph")
        remapped = sp.csr_matrix((np.asarray(m.data, dtype=np.float64), cols, np.asarray(m.indptr)),
                                 shape=(m.shape[0], width))
        remapped.sum_duplicates()
        out.append(remapped)
    return out[0], out[1]
