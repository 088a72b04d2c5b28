"""Compound and atom divergence of each split of a compositional world against its training split.

    python benchmarks/world_split_divergences.py --world runs/world-v3-compositional-s0-n10000

For every evaluation split (``val``, ``test_iid``, ``test_systematic``, ``test_productivity``) against
``train``, with Keysers et al.'s Chernoff divergences (compounds alpha 0.1, atoms alpha 0.5;
:mod:`crg.divergence`), under three compound definitions:

* ``semantic``: the captions' ``compounds`` fields (features/world/semantic_compounds.py: attribute-shape and
  shape-relation-shape pairs and the object descriptions and attributed relation facts they sit in);
* ``semantic pairs``: the ``attr:`` and ``rel:`` pairs only;
* ``templates``: the CRG's predicate templates of the world's gold trees (what MCD splits of real corpora
  count, :func:`crg.mcd.image_count_matrices`).

Atoms: the captions' ``atoms`` fields (attribute values, shapes, relations) for the semantic rows, the CRG's
primitives for the template row. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from crg.divergence import atom_divergence, compound_divergence

SPLITS = ("val", "test_iid", "test_systematic", "test_productivity")


def semantic_counts(captions_path: Path, pairs_only: bool) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """Per split: compound counts and atom counts over all captions (each caption's set counted once)."""
    compounds: dict[str, Counter] = {}
    atoms: dict[str, Counter] = {}
    with open(captions_path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            record = json.loads(line)
            if "compounds" not in record or "atoms" not in record:
                raise SystemExit(f"{captions_path}:{line_no}: no compounds/atoms fields: generate the world with "
                                 f"today's generator (WORLD_VERSION >= 3)")
            split = record["split"]
            for comps, ats in zip(record["compounds"], record["atoms"]):
                compounds.setdefault(split, Counter()).update(
                    c for c in comps if not pairs_only or c.startswith(("attr:", "rel:")))
                atoms.setdefault(split, Counter()).update(ats)
    return compounds, atoms


def template_counts(captions_path: Path) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """Per split: CRG predicate-template counts (compounds) and primitive counts (atoms), gold trees."""
    from crg.graph_cache import get_or_build_graph
    from crg.mcd import image_count_matrices
    from features.world import gold_trees  # noqa: F401  registers --parser world with crg.parse

    compounds, atoms = {}, {}
    for split in ("train", *SPLITS):
        graph, _ = get_or_build_graph(captions_path, [split], parser_name="world", progress=False)
        c_index, a_index = {}, {}
        c, a = image_count_matrices(graph, c_index, a_index)
        c_sum, a_sum = np.asarray(c.sum(0)).ravel(), np.asarray(a.sum(0)).ravel()  # (V,), (A,)
        compounds[split] = Counter({t: c_sum[i] for t, i in c_index.items()})
        atoms[split] = Counter({t: a_sum[i] for t, i in a_index.items()})
    return compounds, atoms


def divergences(compounds, atoms, split: str) -> tuple[float, float]:
    vocab = sorted(set(compounds["train"]) | set(compounds[split]))
    atom_vocab = sorted(set(atoms["train"]) | set(atoms[split]))
    vec = lambda counter, keys: np.array([counter.get(k, 0) for k in keys], dtype=np.float64)  # noqa: E731
    return (compound_divergence(vec(compounds["train"], vocab), vec(compounds[split], vocab)),
            atom_divergence(vec(atoms["train"], atom_vocab), vec(atoms[split], atom_vocab)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True, help="a compositional world's directory")
    args = ap.parse_args(argv)
    captions = Path(args.world) / "captions.jsonl"
    definitions = {"semantic": semantic_counts(captions, False), "semantic pairs": semantic_counts(captions, True),
                   "templates": template_counts(captions)}
    n_images = Counter(json.loads(line)["split"] for line in open(captions, encoding="utf-8"))
    rows = {split: {d: divergences(c, a, split) for d, (c, a) in definitions.items()} for split in SPLITS}
    print("| split | images | CD semantic | CD semantic pairs | CD templates | AD semantic | AD templates |")
    print("|---|---|---|---|---|---|---|")
    for split, r in rows.items():
        print(f"| `{split}` | {n_images[split]:,} | {r['semantic'][0]:.3f} | {r['semantic pairs'][0]:.3f} | "
              f"{r['templates'][0]:.3f} | {r['semantic'][1]:.3f} | {r['templates'][1]:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
