"""The flat ViLBERT-style cross-modal transformer of §5.1 as a LightningModule:
:class:`composer.models.flat.model.FlatCrossTransformer` with l_MATCH over each positive and its K sampled
negatives, exactly as :class:`composer.models.composer.module.ComposerModule` trains COMPOSER, on COMPOSER's
batches with its schedule, exact resume and retrieval evaluation.

**MVSA for the flat model** (Table 5's "ViLBERT + MVSA", ``OptimConfig.use_mvsa``). The flat model
has no intermediate concepts, but it can score any text on any image; Table 5 shows MVSA improving
ViLBERT's *phrase* retrieval, so its phrases must have been trained as queries. Here, for each
positive pair (x_i, y_i), up to ``mvsa_concepts`` phrase concepts c of y_i (non-primitive,
non-sentence CRG nodes, drawn at random) are fed to the flat model as texts of their own, and
l_MVSA (:func:`composer.models.composer.losses.mvsa_loss`, hinge, margin alpha = 0.8) compares s(x_i, c) with

* s(x_i, c^-): a concept c^- drawn from each negative caption (any non-primitive node, its sentence
  included), scored on the positive image;
* s(x^-, c): the same concept on each negative image;

and the sentence itself enters as one more concept, its negatives being the batch's sampled
negative captions and images (scores the match loss computes anyway). Each phrase costs
1 + K extra pairs. The order loss needs a parent/child structure the flat model does not have, so
``OptimConfig.use_order`` is ignored here. The sampling is :func:`composer.models.composer.negative_sampling.flat_mvsa_plan`
(re-exported here with :class:`FlatMVSAPlan`).
"""

from __future__ import annotations

import random

import torch

from composer.models.common.retrieval_module import OptimConfig, RetrievalModule
from composer.models.common.config import plain_config
from composer.models.composer.config import ComposerConfig
from composer.models.composer.losses import composer_loss
from composer.models.composer.negative_sampling import FlatMVSAPlan, flat_mvsa_plan, flat_mvsa_scores
from composer.models.flat.model import FlatCrossTransformer

__all__ = ["FlatMVSAPlan", "FlatModule", "flat_mvsa_plan"]


class FlatModule(RetrievalModule):
    """Trains a :class:`FlatCrossTransformer` with l_MATCH, plus its phrase-level MVSA when
    ``optim.use_mvsa`` (module docstring); ``model_cfg.loss`` gives alpha, lambda1 and hinge/NLL."""

    def __init__(self, model_cfg: ComposerConfig, optim: OptimConfig, *, eval_max_pairs: int = 4096,
                 load_pretrained: bool = True, mvsa_concepts: int = 2, seed: int = 0):
        super().__init__(optim, eval_max_pairs=eval_max_pairs, seed=seed)
        if mvsa_concepts < 1:
            raise ValueError(f"mvsa_concepts={mvsa_concepts} must be >= 1 (turn MVSA off with use_mvsa=False)")
        self.model_cfg = model_cfg
        self.mvsa_concepts = mvsa_concepts
        self.model = FlatCrossTransformer.from_config(model_cfg, load_pretrained=load_pretrained)
        self.tokenizer = self.model.make_tokenizer()
        self.save_hyperparameters({"kind": "flat", "model": plain_config(model_cfg), "optim": plain_config(optim), "seed": seed,
                                   "mvsa_concepts": mvsa_concepts})

    @classmethod
    def from_recipe(cls, recipe, model_cfg, *, load_pretrained: bool = True) -> FlatModule:
        return cls(model_cfg, recipe.optim, seed=recipe.data.seed, mvsa_concepts=recipe.mvsa_concepts,
                   load_pretrained=load_pretrained)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        b, k1 = batch.pair_image.shape
        kc = batch.num_caption_negatives
        programs = batch.programs.programs
        texts = [p.texts[p.root] for p in programs]                                   # (C,) sentences
        pair_image, pair_caption = batch.pair_image.reshape(-1), batch.pair_caption.reshape(-1)  # (B (1 + K),)
        plan = None
        if self.optim.use_mvsa:
            rng = random.Random(self.seed * 1_000_003 + int(self.global_step))
            plan = flat_mvsa_plan(programs, batch.pair_image.cpu(), batch.pair_caption.cpu(), kc,
                                  self.mvsa_concepts, rng)
            device = pair_image.device
            pair_image = torch.cat([pair_image, plan.pair_image.to(device)])
            pair_caption = torch.cat([pair_caption, plan.pair_text.to(device) + len(texts)])
            texts = texts + plan.texts
        enc = self.tokenizer.encode_sentences(texts)
        out = self.model(batch.regions, batch.geometry, batch.region_mask, enc.ids, enc.mask, pair_image,
                         pair_caption)
        match_scores = out.scores[:b * k1].view(b, k1)                                 # (B, 1 + K), positive first
        mvsa = None if plan is None else flat_mvsa_scores(match_scores, out.scores[b * k1:], plan, kc)
        loss = composer_loss(match_scores, mvsa, None, self.model_cfg.loss)
        self.mark_trained(batch_idx)
        if not torch.isfinite(loss.total):
            raise FloatingPointError(f"non-finite loss at step {self.global_step}: match {loss.match.item()}, "
                                     f"mvsa {loss.mvsa.item()}")
        acc = (match_scores.argmax(1) == 0).float().mean()
        self.log_dict({"train/loss": loss.total, "train/match": loss.match, "train/mvsa": loss.mvsa,
                       "train/match_acc": acc}, prog_bar=True, batch_size=b)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=b)
        return loss.total
