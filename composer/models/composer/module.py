"""COMPOSER as a LightningModule: the losses of §3.3 on ViLBERT-style negatives, with the shared schedule,
exact resume and retrieval validation of :class:`composer.models.common.retrieval_module.RetrievalModule`."""

from __future__ import annotations

import torch

from composer.models.common.retrieval_module import OptimConfig, RetrievalModule
from composer.models.common.config import plain_config
from composer.models.composer.config import ComposerConfig
from composer.models.composer.losses import MVSAScores, OrderScores, composer_loss
from composer.models.composer.model import Composer
from composer.models.composer.negative_sampling import mvsa_scores

__all__ = ["ComposerModule"]


class ComposerModule(RetrievalModule):
    """Trains a :class:`Composer`; ``datamodule`` provides batches and the retrieval sets."""

    def __init__(self, model_cfg: ComposerConfig, optim: OptimConfig, *, eval_max_pairs: int = 4096,
                 load_pretrained: bool = True, seed: int = 0):
        super().__init__(optim, eval_max_pairs=eval_max_pairs, seed=seed)
        self.model_cfg = model_cfg
        self.model = Composer.from_config(model_cfg, load_pretrained=load_pretrained)
        self.tokenizer = self.model.make_tokenizer()
        self.save_hyperparameters({"kind": "composer", "model": plain_config(model_cfg), "optim": plain_config(optim),
                                   "seed": seed})

    # ------------------------------------------------------------------ training
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        b, k1 = batch.pair_image.shape
        out = self.model(batch.regions, batch.geometry, batch.region_mask, batch.programs,
                         batch.pair_image.reshape(-1), batch.pair_caption.reshape(-1))
        match_scores = out.root_scores.view(b, k1)                       # (B, 1 + K), positive first
        mvsa = self._mvsa(out, b, k1, batch.num_caption_negatives) if self.optim.use_mvsa else None
        order = None
        if self.optim.use_order:
            edges = out.edge_scores()
            e = edges.parent.shape[1]
            order = OrderScores(edges.parent.view(b, k1, e)[:, 0], edges.child.view(b, k1, e)[:, 0],
                                edges.mask.view(b, k1, e)[:, 0])
        loss = composer_loss(match_scores, mvsa, order, self.model_cfg.loss)
        self.mark_trained(batch_idx)
        if not torch.isfinite(loss.total):
            raise FloatingPointError(f"non-finite loss at step {self.global_step}: match {loss.match.item()}, "
                                     f"mvsa {loss.mvsa.item()}, order {loss.order.item()}")
        acc = (match_scores.argmax(1) == 0).float().mean()
        self.log_dict({"train/loss": loss.total, "train/match": loss.match, "train/mvsa": loss.mvsa,
                       "train/order": loss.order, "train/match_acc": acc}, prog_bar=True, batch_size=b)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=b)
        return loss.total

    def _mvsa(self, out, b: int, k1: int, kc: int) -> MVSAScores:
        """MVSA tensors (:func:`composer.models.composer.negative_sampling.mvsa_scores`), drawn from a generator seeded by
        (seed, global step): a resumed run draws what the uninterrupted one did."""
        n = out.node_scores.shape[1]
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(self.global_step))
        return mvsa_scores(out.node_scores.view(b, k1, n), out.concept_mask().view(b, k1, n), kc, gen)  # (B, 1 + K, N)
