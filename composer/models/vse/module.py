"""The two-tower VSE baseline of §5.1 as a LightningModule, on COMPOSER's batches
(:class:`composer.training.data.TrainBatch`) with its schedule, exact resume and retrieval evaluation
(:class:`composer.models.common.retrieval_module.RetrievalModule`): trained with the triplet hinge over the
batch's B positive pairs (column 0 of ``pair_image`` / ``pair_caption``): every other image of the batch is
a negative for a caption, every caption of another image a negative for an image. The sampled negatives of
columns 1.. are not used by the loss, except structural negatives (a recipe option: captions verified false of
the row's image, extra caption negatives of that image); they give ``train/match_acc``, the same (1 + K)-way accuracy the
cross-modal models log.
"""

from __future__ import annotations

import torch

from composer.models.common.retrieval_module import OptimConfig, RetrievalModule
from composer.models.common.config import plain_config
from composer.models.vse.model import VSE, VSEConfig, vse_hinge_loss

__all__ = ["VSEModule"]


class VSEModule(RetrievalModule):
    """Trains a :class:`composer.models.vse.model.VSE` with the in-batch triplet hinge (``VSEConfig.loss``)."""

    def __init__(self, model_cfg: VSEConfig, optim: OptimConfig, *, eval_max_pairs: int = 4096,
                 load_pretrained: bool = True, seed: int = 0):
        super().__init__(optim, eval_max_pairs=eval_max_pairs, seed=seed)
        self.model_cfg = model_cfg
        self.model = VSE.from_config(model_cfg, load_pretrained=load_pretrained)
        self.tokenizer = self.model.tokenizer
        self.save_hyperparameters({"kind": "vse", "model": plain_config(model_cfg), "optim": plain_config(optim), "seed": seed})

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        b = batch.pair_image.shape[0]
        x = self.model.encode_images(batch.regions, batch.geometry, batch.region_mask)   # (I, E)
        y = self.model.encode_programs(batch.programs)                                   # (C, E)
        candidates, target = torch.unique(batch.pair_image[:, 0], return_inverse=True)  # (U,), (B,)
        scores = y[batch.pair_caption[:, 0]] @ x[candidates].T                            # (B, U)
        own = own_valid = None
        S = batch.structural_negatives
        if S:  # the last S caption-negative columns: captions verified false of the row's own image
            kc = batch.num_caption_negatives
            own = (y[batch.pair_caption[:, 1 + kc - S:1 + kc]]
                   * x[batch.pair_image[:, 0]][:, None]).sum(-1)                           # (B, S)
            own_valid = batch.structural_valid
        loss = vse_hinge_loss(scores, target, margin=self.model_cfg.loss.margin,
                              negatives=self.model_cfg.loss.negatives, own_negatives=own, own_valid=own_valid)
        self.mark_trained(batch_idx)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite VSE loss at step {self.global_step}: {loss.item()}")
        with torch.no_grad():
            match = (x[batch.pair_image] * y[batch.pair_caption]).sum(-1)                 # (B, 1 + K)
            acc = (match.argmax(1) == 0).float().mean()
            in_batch = (scores.argmax(1) == target).float().mean()                        # caption -> image R@1
        self.log_dict({"train/loss": loss, "train/match_acc": acc, "train/inbatch_acc": in_batch},
                      prog_bar=True, batch_size=b)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=b)
        return loss
