"""Free texts against stored images: parse any texts as the CRG builder parses captions, and score
``(image_id, text)`` pairs with any model's ``score_pairs``. No Lightning.

Hard negatives, benchmark captions and twin captions are texts that are in no CRG yet.
:func:`programs_for_texts` parses them exactly as :func:`crg.build.build_crg` parses captions (same
normalisation, parser, parse cache and, for Table 7, the same branch pruning); :func:`score_text_image_pairs`
scores the pairs in chunks; :func:`hard_negative_accuracy` hands a hard-negative set's scores to
:func:`composer.evaluation.hard_negatives.evaluate_pair_scores`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from composer.evaluation.hard_negatives import eval_pairs, evaluate_pair_scores, restrict_eval_set
from composer.models.composer.program import ConceptProgram, ProgramBatch

__all__ = ["add_twin_scores", "hard_negative_accuracy", "programs_for_texts", "score_text_image_pairs",
           "twin_group_scores"]


class _ParserOnDemand:
    """A parser built on its first parse: when every text is in the parse cache, only its cache key is
    needed, and that is read without loading the model (:func:`crg.graph_cache.parser_cache_key`)."""

    def __init__(self, name: str, model: str | None):
        from crg.graph_cache import parser_cache_key

        self.name, self._model = name, model
        self._key = parser_cache_key(name, model)
        self._parser = None

    def _get(self):
        if self._parser is None:
            from crg.parse import make_parser

            self._parser = make_parser(self.name, self._model)
        return self._parser

    def cache_key(self) -> str:
        return self._key if self._key is not None else self._get().cache_key()

    def parse_texts(self, texts):
        return self._get().parse_texts(texts)


def programs_for_texts(texts: Sequence[str], *, parser_name: str = "spacy", parser_model: str | None = None,
                       prune_probability: float = 0.0, prune_seed: int = 0,
                       cache_path: str | Path | None = None) -> dict[str, ConceptProgram | None]:
    """Each text's composition program, parsed as :func:`crg.build.build_crg` parses captions.

    Returns ``text -> program``, ``None`` for a text the builder would skip (empty, too long, not
    English) or whose parse fails. Parses come from (and go to) the parse cache.
    """
    from composer.evaluation.interpretation import program_from_concepts
    from crg.build import analyze_captions
    from crg.caption_filter import caption_problem, normalize_caption
    from crg.parse_cache import ParseCache, default_cache_path

    distinct = list(dict.fromkeys(texts))
    usable = [t for t in distinct if caption_problem(t) is None]
    out: dict[str, ConceptProgram | None] = {t: None for t in distinct}
    if not usable:
        return out
    parser = _ParserOnDemand(parser_name, parser_model)
    normalized = [normalize_caption(t) for t in usable]
    with ParseCache(cache_path or default_cache_path()) as cache:
        results = analyze_captions(normalized, parser, cache=cache, progress=False,
                                   prune_probability=prune_probability, prune_seed=prune_seed)
        for text, (_, root) in zip(usable, results):
            out[text] = None if root is None else program_from_concepts(root)
    return out


@torch.no_grad()
def score_text_image_pairs(model, tokenizer, pairs: Sequence[tuple[str, str]],
                           programs: Mapping[str, ConceptProgram], store, *, max_regions: int,
                           device: str | torch.device = "cpu", max_pairs: int = 4096) -> np.ndarray:
    """(P,) scores of ``(image_id, text)`` pairs by ``model.score_pairs``.

    Pairs are taken in chunks of at most ``max_pairs``; each chunk reads its distinct images' regions
    (``store.read_batch``, ``max_regions`` plus the global region, as in training) and collates its
    distinct texts' programs once.

    Args:
        model: anything with :meth:`composer.models.composer.model.Composer.score_pairs`'s signature (put in eval mode here).
        tokenizer: the model's ``TemplateTokenizer``.
        programs: ``text -> ConceptProgram`` for every text of ``pairs`` (:func:`programs_for_texts`).
        store: a :class:`features.store.FeatureStore` holding every image of ``pairs``.
    """
    missing = sorted({t for _, t in pairs if programs.get(t) is None})
    if missing:
        raise ValueError(f"{len(missing)} texts have no program (first: {missing[:3]}); drop them first "
                         f"(restrict_eval_set)")
    was_training = model.training
    model.eval()
    out = np.empty(len(pairs), dtype=np.float64)
    try:
        for start in range(0, len(pairs), max_pairs):
            chunk = pairs[start:start + max_pairs]
            images = list(dict.fromkeys(i for i, _ in chunk))
            texts = list(dict.fromkeys(t for _, t in chunk))
            img_slot = {im: k for k, im in enumerate(images)}
            txt_slot = {t: k for k, t in enumerate(texts)}
            batch = store.read_batch(images, max_regions, add_global=True)
            regions = torch.from_numpy(batch.features).to(device)          # (I, R, Dr)
            geometry = torch.from_numpy(batch.geometry).to(device)         # (I, R, 5)
            mask = torch.from_numpy(batch.mask).to(device)                 # (I, R)
            progs = ProgramBatch.collate([programs[t] for t in texts], tokenizer)
            pair_image = torch.tensor([img_slot[i] for i, _ in chunk], dtype=torch.long, device=device)  # (Q,)
            pair_text = torch.tensor([txt_slot[t] for _, t in chunk], dtype=torch.long, device=device)   # (Q,)
            scores = model.score_pairs(regions, geometry, mask, progs, pair_image, pair_text)            # (Q,)
            out[start:start + len(chunk)] = scores.float().cpu().numpy()
    finally:
        model.train(was_training)
    return out


def hard_negative_accuracy(model, tokenizer, eval_set: Mapping, programs: Mapping[str, ConceptProgram | None],
                           store, *, max_regions: int, device: str | torch.device = "cpu",
                           max_pairs: int = 4096) -> dict:
    """I2T (per type), T2I, group accuracy and the recursive average of ``eval_set`` for one model.

    Texts without a program are left out first (counted in ``dropped``).
    """
    kept, dropped = restrict_eval_set(eval_set, programs)
    if not kept["items"]:
        raise ValueError(f"hard-negative set {eval_set.get('name')!r}: no item left with a parsed caption")
    pairs = eval_pairs(kept)
    started = time.perf_counter()
    scores = score_text_image_pairs(model, tokenizer, pairs, programs, store, max_regions=max_regions,
                                    device=device, max_pairs=max_pairs)
    out = evaluate_pair_scores(kept, scores)
    out.update({"dropped": dropped, "num_pairs": len(pairs), "seconds": round(time.perf_counter() - started, 2)})
    return out


def twin_group_scores(model, tokenizer, groups: Sequence[Mapping], store, *, max_regions: int,
                      parser_name: str = "spacy", parser_model: str | None = None,
                      device: str | torch.device = "cpu", max_pairs: int = 4096) -> dict | None:
    """Winoground text / image / group scores of minimal-pair twin groups for one model
    (:func:`composer.evaluation.twins.twin_scores`, overall and per kind), and under ``"interaction"`` how
    much the caption preference depends on the image (:func:`composer.evaluation.twin_interaction.twin_interaction`:
    a 0 group score from a model blind to the difference vs one reading it the wrong way).

    ``groups`` are records with ``caption_0``, ``caption_1``, ``image_0``, ``image_1`` and ``kind`` (a generated
    world's ``twins.jsonl``); caption ``k`` is true of image ``k``. The captions are parsed as the CRG's are
    (``parser_name``); a group whose captions have no program is left out and counted (``dropped``). None when
    no group is left.
    """
    from composer.evaluation.twin_interaction import twin_interaction
    from composer.evaluation.twins import twin_scores

    texts = [g[f"caption_{k}"] for g in groups for k in (0, 1)]
    programs = programs_for_texts(texts, parser_name=parser_name, parser_model=parser_model)
    kept = [g for g in groups if programs.get(g["caption_0"]) is not None and programs.get(g["caption_1"]) is not None]
    if not kept:
        return None
    pairs = [(g[f"image_{i}"], g[f"caption_{c}"]) for g in kept for c in (0, 1) for i in (0, 1)]  # (G * 4,)
    scores = score_text_image_pairs(model, tokenizer, pairs, programs, store, max_regions=max_regions,
                                    device=device, max_pairs=max_pairs)
    grid = scores.reshape(len(kept), 2, 2)                                        # (G, caption, image)
    kinds = [g["kind"] for g in kept]
    out = twin_scores(grid, kinds)
    out["interaction"] = twin_interaction(grid, kinds)
    out["dropped"] = len(groups) - len(kept)
    return out


def add_twin_scores(module, dm, results: dict) -> None:
    """Each test set's twin groups (a compositional world's minimal pairs) of the data module ``dm``
    (:class:`composer.training.data.CompositionDataModule`), scored by the trained ``module``'s model:
    ``results[role]["twins"]`` = text / image / group scores, overall and per kind."""
    for role in ("test", *dm.eval_roles()):
        groups = dm.twin_groups(role)
        if groups and results.get(role):
            name, model = dm.parser()
            results[role]["twins"] = twin_group_scores(
                module.model, module.tokenizer, groups, dm.store, max_regions=dm.cfg.max_regions, parser_name=name,
                parser_model=model, device=module.device, max_pairs=module.eval_max_pairs)
