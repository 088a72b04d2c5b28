"""The study's evaluations of one trained model on the generated world, every model through its ``score_pairs``
(:func:`composer.models.common.retrieval.score_matrix`), so all numbers come from one code path: sentence
retrieval on each test set (with twin groups and the generalisation gap) or on val, the MCD split, the
compound-divergence windows, phrase retrieval, hard negatives, and the CLIP family's easy-to-learn probe.
docs/evaluation.md ("Running the study", "Evaluation") says what each measures.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from composer.evaluation.eval_sets import EvalSets
from composer.evaluation.phrase_retrieval import evaluate_phrase_retrieval
from composer.evaluation.sentence_retrieval import flat_report, generalisation_gap, sentence_retrieval
from composer.evaluation.text_pairs import add_twin_scores, hard_negative_accuracy

__all__ = ["evaluate_suite"]


def _cycle(loader):
    while True:
        yield from loader


def evaluate_suite(module, dm, tokenizer, sets: EvalSets, mcd: dict, evals: Sequence[str], *, eval_images: int,
                   max_pairs: int, phrases_per_caption: int, probe_steps: int, probe_lr: float, prune: float = 0.0,
                   parser: str = "world") -> dict:
    """The evaluations ``evals`` (:data:`composer.study.config.EVALS`) of ``module.model`` (a trained
    LightningModule's; the study puts its saved model there) with ``tokenizer``: the test sets (the first
    ``eval_images`` images) and val of its data module ``dm``, and ``sets``' split files (the MCD split ``mcd``,
    its windows), phrases and hard negatives (parses built with ``parser``, pruned with probability ``prune``).
    Returns each result by name and each evaluation's seconds (``eval_seconds_by``)."""
    model = module.model
    device = next(model.parameters()).device
    max_regions, mp = dm.cfg.max_regions, max_pairs
    result: dict = {"eval_seconds_by": {}}

    def timed(name, fn):
        t = time.perf_counter()
        value = fn()
        result["eval_seconds_by"][name] = round(time.perf_counter() - t, 1)
        return value

    if "val" in evals:  # the recipe search's criterion
        result["val"] = timed("val", lambda: flat_report(module.evaluate_retrieval(
            dm.retrieval_set("val", dm.cfg.val_images or eval_images))))  # the plateau's monitor set
    if "test" in evals:  # in-domain test and, on the compositional world, the systematic (productivity) set
        for role in ("test", *(r for r in dm.eval_roles() if r != "productivity" or "productivity" in evals)):
            result[role] = timed(role, lambda: flat_report(module.evaluate_retrieval(
                dm.retrieval_set(role, eval_images))))
        if "systematic" in result:  # the generalisation gap, per seed (the tables average it)
            result["gap"] = generalisation_gap(result["test"], result["systematic"])
        timed("twins", lambda: add_twin_scores(module, dm, result))
    test = sets.test(prune, max_regions, parser) if "phrase" in evals else None
    if "mcd" in evals:
        split = sets.split_file(mcd["path"], mcd["num_images"], prune, max_regions, parser)
        result["mcd"] = {**timed("mcd", lambda: sentence_retrieval(model, tokenizer, split, device=device,
                                                                   max_pairs=mp)),
                         "compound_divergence": mcd["compound_divergence"]}
    if "windows" in evals:
        result["windows"] = timed("windows", lambda: [
            {**{k: w[k] for k in ("target", "compound_divergence", "atom_divergence", "window_start")},
             **sentence_retrieval(model, tokenizer, sets.split_file(w["path"], w["num_images"], prune, max_regions,
                                                                    parser), device=device, max_pairs=mp)}
            for w in mcd["windows"]])
    if "phrase" in evals:
        result["phrase"] = timed("phrase", lambda: evaluate_phrase_retrieval(
            model, test.regions.to(device), test.geometry.to(device), test.region_mask.to(device), tokenizer,
            test.graph, test.image_ids, truth=test.truth, captions=test.captions, per_caption=phrases_per_caption,
            seed=0, max_pairs=mp))
    if "hard_negatives" in evals:
        programs = sets.hn_programs(prune, parser)
        result["hard_negatives"] = timed("hard_negatives", lambda: hard_negative_accuracy(
            model, tokenizer, sets.hn_set, programs, dm.store, max_regions=max_regions, device=device, max_pairs=mp))
    if hasattr(module, "easy_to_learn_probe") and probe_steps > 0:  # the CLIP family's (§4.4)
        def probe():
            curve = module.easy_to_learn_probe(_cycle(dm.train_dataloader()), steps=probe_steps, lr=probe_lr, seed=0)
            return {"accuracy": curve.accuracy, "text_to_image": curve.text_to_image, "loss": curve.loss}
        result["probe"] = timed("probe", probe)
    return result
