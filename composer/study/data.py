"""The study's data, made once per study directory: the world, its MCD split and compound-divergence windows,
the hard-negative set (``OUT/data/``), which each process reads as its
:class:`composer.evaluation.eval_sets.EvalSets`.

Every graph of the study is built as its training graphs are: from the world's gold trees (docs/world.md,
"Gold parses"), also the MCD split's, the hard negatives' and the windows'.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from pathlib import Path

from composer.models.common.config import plain_config
from composer.study.config import StudyProfile
from crg.outputs import settings_diff, write_json_atomic

__all__ = ["PRUNE_SEED", "STUDY_PARSER", "check_study_dir", "prepare_data"]

STUDY_PARSER = "world"
PRUNE_SEED = 0  # Table 7's degraded parses are data: the same for every model seed

logger = logging.getLogger(__name__)


def check_study_dir(out: Path, profile: StudyProfile, data: str) -> None:
    """Refuse to mix profiles in one directory (seeds and runs may grow). A profile setting added to the
    library later with None as "as before" (absent in the folder's ``study.json``) is no difference, as for a
    run's settings (:func:`crg.outputs.settings_diff`): a long study survives such an update."""
    path = out / "study.json"
    # seeds, runs and jobs may change between invocations of one study
    settings = {k: v for k, v in plain_config(profile).items() if k not in ("seeds", "runs", "jobs")}
    want = {"data": data, "profile": settings}
    if path.exists():
        have = json.loads(path.read_text())
        differ = settings_diff(have, json.loads(json.dumps(want)))  # (tuples as the file holds them: lists)
        if differ:
            raise SystemExit(f"error: {out} holds a study with other settings (profile {have['profile']['name']!r}, "
                             f"data {have['data']!r}; {'; '.join(differ)}); use another --out, or "
                             f"delete {out} to start over")
    else:
        write_json_atomic(path, want)


def prepare_data(profile: StudyProfile, out: Path) -> dict:
    """The world, its MCD split and windows, and the hard-negative set (once per study directory)."""
    path = out / "data" / "study_data.json"
    if path.exists():
        return _study_paths(json.loads(path.read_text()), lambda p: str(out / p))
    started = time.perf_counter()
    from composer.evaluation.eval_sets import select_eval_images
    from composer.evaluation.hard_negatives import world_hard_negative_set
    from composer.evaluation.mcd_windows import make_mcd_windows
    from crg.graph_cache import get_or_build_graph
    from features.catalog import resolve_dataset

    spec = resolve_dataset("world", **profile.world_data())
    logger.info("world: %s", spec.world_dir)
    mcd = make_mcd_windows(spec, out / "data" / "mcd", num_images=profile.mcd_images, num_windows=profile.num_windows,
                           candidate_roles=profile.mcd_candidate_splits, compounds=profile.mcd_compounds,
                           parser=STUDY_PARSER)

    test_graph, _ = get_or_build_graph(spec.captions, list(spec.test_splits), parser_name=STUDY_PARSER, progress=False)
    chosen = select_eval_images(test_graph, profile.hn_images)  # the images evaluation scores, as in training
    captions = [(test_graph.image_ids[test_graph.caption_image[c]], test_graph.caption_texts[c])
                for c in chosen.captions]
    pool = select_eval_images(test_graph, 10 ** 9).image_ids  # distractors: held-out test images only
    hn_set, hn_summary = world_hard_negative_set(spec.world_dir, captions, distractor_pool=pool,
                                                 per_type=profile.hn_per_type,
                                                 distractor_images=profile.hn_distractors, seed=0)
    hn_path = out / "data" / "hard_negatives.json"
    write_json_atomic(hn_path, hn_set)
    logger.info("hard negatives: %d captions of %d test images, %d negatives %s", len(captions),
                len(chosen.image_ids), hn_summary["negatives"], hn_summary["negatives_by_type"])
    data = {"world": {"dir": str(spec.world_dir), "captions": str(spec.captions), "features": str(spec.features),
                      "images": profile.world_images},
            "mcd": mcd, "hard_negatives": {"path": str(hn_path), **hn_summary},
            "seconds": round(time.perf_counter() - started, 1)}
    write_json_atomic(path, _study_paths(data, lambda p: os.path.relpath(p, out)))
    return data


def _study_paths(data: dict, convert) -> dict:
    """A copy of ``data`` with the paths inside the study folder (MCD split, windows, hard negatives) passed
    through ``convert``. Why: ``study_data.json`` keeps them relative to the folder and :func:`prepare_data`
    joins them to it, so that a study folder can be moved or reached under another mount point (an older
    file's absolute paths stay as they are: ``out / "/abs"`` is ``/abs``). The world lies outside the folder."""
    data = copy.deepcopy(data)
    mcd = data["mcd"]
    mcd["dir"], mcd["path"] = convert(mcd["dir"]), convert(mcd["path"])
    for window in mcd["windows"]:
        window["path"] = convert(window["path"])
    data["hard_negatives"]["path"] = convert(data["hard_negatives"]["path"])
    return data
