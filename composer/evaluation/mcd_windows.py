"""Figure 4's evaluation data: a dataset's MCD split (held-out images whose compounds diverge most from training)
and splits of the same size along the ranking at evenly spaced compound divergences, written as split files
(``eval.jsonl``) that :func:`composer.evaluation.eval_sets.load_eval_data` reads (the study's ``OUT/data/mcd``)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

__all__ = ["candidate_split_labels", "make_mcd_windows"]

logger = logging.getLogger(__name__)


def candidate_split_labels(spec, roles) -> list[str]:
    """The world's split labels of the MCD candidates' roles: ``val``, ``test`` (every test set: on the
    compositional world ``test_iid``, ``test_systematic`` and ``test_productivity``) or a label itself.

    >>> from features.catalog import DatasetSpec
    >>> spec = DatasetSpec("world", Path("c"), None, test_splits=("test_iid",),
    ...                    eval_splits={"systematic": ("test_systematic",)})
    >>> candidate_split_labels(spec, ("val", "test"))
    ['val', 'test_iid', 'test_systematic']
    """
    by_role = {"train": list(spec.train_splits), "val": list(spec.val_splits),
               "test": [*spec.test_splits, *(s for labels in spec.eval_splits.values() for s in labels)]}
    return list(dict.fromkeys(label for role in roles for label in by_role.get(role, [role])))


def make_mcd_windows(spec, out: Path, *, num_images: int, num_windows: int, candidate_roles=("val", "test"),
                     compounds: str = "semantic", parser: str = "world") -> dict:
    """The MCD split of ``spec``'s (a :class:`features.catalog.DatasetSpec`) candidate splits (the roles'
    labels: :func:`candidate_split_labels`) against its train split, of ``num_images`` images (at most half the
    eligible candidates, to leave room to slide the window), and ``num_windows`` windows of as many images evenly
    spaced over the range of window divergences, with the project's splitter, into ``out``; every graph built with
    ``parser``. Returns the split's description (paths, divergences, the windows)."""
    from crg.compounds import SEMANTIC, semantic_annotations
    from crg.corpus import read_corpus
    from crg.graph_cache import get_or_build_graph
    from crg.mcd import MCDConfig, build_problem, eligible_candidates, make_mcd_split
    from crg.mcd_output import GraphOptions, MCDCorpora, write_mcd_split

    captions = spec.captions
    candidate_splits = candidate_split_labels(spec, candidate_roles)
    graph, _ = get_or_build_graph(captions, None, parser_name=parser, progress=False)
    splits = np.asarray(graph.image_splits, dtype=object)
    annotations = (semantic_annotations(read_corpus(captions).images, str(captions))
                   if compounds == SEMANTIC else None)
    problem = build_problem(graph, graph, train_images=np.flatnonzero(np.isin(splits, list(spec.train_splits))),
                            candidate_images=np.flatnonzero(np.isin(splits, candidate_splits)),
                            compounds=compounds, annotations=annotations)
    eligible = int(eligible_candidates(problem)[0].sum())
    k = min(num_images, max(1, eligible // 2))  # leave room to slide the window
    if k < num_images:
        logger.warning("MCD split: %d eligible candidates; using %d images instead of %d", eligible, k,
                       num_images)
    scan = make_mcd_split(problem, MCDConfig(num_images=k, num_random=0))
    lo, hi = float(scan.curve_compound.min()), float(scan.curve_compound.max())
    targets = sorted({round(float(t), 3) for t in np.linspace(lo, hi, num_windows)})
    written = write_mcd_split(MCDCorpora(str(captions), list(spec.train_splits), candidate_splits=candidate_splits),
                              out, MCDConfig(num_images=k, target_cds=tuple(targets), progress=False),
                              graphs=GraphOptions(parser_name=parser, progress=False),
                              compounds=compounds)
    report = written.report
    windows = [{"target": t["target"], "compound_divergence": t["compound_divergence"],
                "atom_divergence": t["atom_divergence"], "window_start": t["window_start"],
                "num_images": t["num_images"], "path": str(Path(d) / "eval.jsonl")}
               for t, d in zip(report["targets"], written.target_dirs)]
    return {"dir": str(out), "path": str(out / "eval.jsonl"), "num_images": k, "eligible": eligible,
            "compounds": compounds, "compound_divergence": report["compound_divergence"],
            "atom_divergence": report["atom_divergence"], "compound_divergences": report["compound_divergences"],
            "random_compound_divergence": report["random_compound_divergence"],
            "ranking_direction": report["ranking_direction"], "windows": windows}
