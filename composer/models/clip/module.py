"""CLIP, codebook-CLIP and IL-CLIP (Zheng et al., 2024) as a LightningModule on COMPOSER's batches.

Every kind trains CLIP's symmetric InfoNCE over the batch's B positive pairs (column 0 of
``TrainBatch.pair_image`` / ``pair_caption``; the sampled negatives of the other columns are not
used: every other caption and image of the batch is a negative, as in CLIP):

* ``clip`` -- the dual encoder, no codebook;
* ``codebook_clip`` -- representations through the shared sparse codebook (§3.2);
* ``il_clip`` -- codebook-CLIP with iterated learning (§3.3): the phase of each step is a pure
  function of the global step (:meth:`composer.models.clip.iterated_learning.ILConfig.phase_at`); at the first
  step of each generation the language agent is re-initialised (its AdamW moments cleared), the old
  one kept as a frozen teacher for the distillation phase, then dropped;
* ``negclip`` -- CLIP trained with NegCLIP's two negatives (``ILConfig.negclip``, on for this kind): a
  word-swap negative per caption and each caption's nearest images from a running pool of recent image
  embeddings (:class:`composer.models.clip.negatives.ImagePool`). ``il_clip`` with ``negclip`` is the
  paper's IL-NegCLIP (Table 8).

Structural negatives (a recipe option, :class:`composer.training.data.StructuralNegativeConfig`): the
batch's verified-false captions of a positive's own image are extra text columns of that image only.

Optimiser and schedule come from :class:`composer.models.clip.iterated_learning.ILConfig` (Table 5: AdamW 5e-4,
weight decay 0.1, betas (0.9, 0.98), cosine with a warm-up per generation) for all three kinds; of
:class:`composer.models.common.retrieval_module.OptimConfig` only ``grad_clip`` (read by the Trainer) applies. Set the
trainer's ``max_steps`` to ``il.total_steps``.

Exact resume: the schedule and the phase follow ``global_step``; the spawned agent's weights come
from a generator seeded by (seed, generation), not from the global RNG; a checkpoint written during
distillation carries the teacher.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
from torch import nn

from composer.models.clip.model import KINDS, ClipConfig, ClipModel, agent_generator
from composer.models.clip.negatives import ImagePool
from composer.models.clip.iterated_learning import (
    ILConfig,
    ILPhase,
    clip_contrastive_loss,
    distillation_loss,
    spawn,
    swap_two_words,
)
from composer.models.common.retrieval_module import OptimConfig, RetrievalModule, fused_optimizer_supported

__all__ = ["ClipModule", "ProbeCurve", "StepLoss"]

logger = logging.getLogger(__name__)

PHASE_CODE = {"warmup": 0, "distill": 1, "interact": 2}  # logged as numbers (loggers take scalars)
_PROBE_SALT = 7_777_777  # the probe's new language agent: the same initial weights in every probe run


@dataclass
class StepLoss:
    """One training step's losses (unused terms are 0) and in-batch accuracies."""

    total: torch.Tensor
    contrastive: torch.Tensor
    distill: torch.Tensor
    image_to_text: torch.Tensor
    text_to_image: torch.Tensor


@dataclass
class ProbeCurve:
    """The easy-to-learn probe (§4.4, Figure 4): a new language agent learning a frozen vision agent."""

    accuracy: list[float] = field(default_factory=list)       # in-batch image-to-text top-1, before each update
    text_to_image: list[float] = field(default_factory=list)  # in-batch text-to-image top-1
    loss: list[float] = field(default_factory=list)


@dataclass
class _Teacher:
    """The old agent during a distillation phase (a plain holder: not a sub-module, so it never enters
    the state dict or the optimiser)."""

    agent: nn.Module
    which: str
    generation: int


class ClipModule(RetrievalModule):
    """Trains a :class:`composer.models.clip.model.ClipModel` as ``kind`` in :data:`KINDS`."""

    def __init__(self, kind: str, model_cfg: ClipConfig, il: ILConfig, optim: OptimConfig, *,
                 eval_max_pairs: int = 4096, seed: int = 0):
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; choose one of {KINDS}")
        use_codebook = kind == "codebook_clip" or (kind == "il_clip" and il.use_codebook)
        if kind == "il_clip" and not use_codebook and il.distill_target == "codes":
            raise ValueError("ILConfig.distill_target='codes' needs the codebook; with use_codebook=False "
                             "use distill_target='embedding'")
        if kind == "negclip" and not il.negclip:  # the kind is NegCLIP's training: its negatives are on
            il = replace(il, negclip=True)
        super().__init__(optim, eval_max_pairs=eval_max_pairs, seed=seed)
        self.kind, self.model_cfg, self.il = kind, model_cfg, il
        # NegCLIP's running pool of recent image representations (saved in checkpoints: exact resume)
        self.image_pool = ImagePool(il.image_pool_size) if il.pool_negatives else None
        self.model = ClipModel(model_cfg, use_codebook=use_codebook, seed=seed)
        self.tokenizer = self.model.tokenizer
        self._teacher: _Teacher | None = None
        self.save_hyperparameters({"kind": kind, "model": asdict(model_cfg), "il": asdict(il),
                                   "optim": asdict(optim), "seed": seed})

    @classmethod
    def from_recipe(cls, recipe, model_cfg, *, load_pretrained: bool = True) -> ClipModule:
        """The module of ``recipe.model`` (the kind) on its step schedule ``recipe.il`` (``load_pretrained``:
        unused, the agents start from random weights)."""
        return cls(recipe.model, model_cfg, recipe.il, recipe.optim, seed=recipe.data.seed)

    # ------------------------------------------------------------------ schedule
    @property
    def iterated(self) -> bool:
        return self.kind == "il_clip"

    def phase_at(self, step: int) -> ILPhase:
        """IL's phase for ``il_clip``; plain contrastive training (generation 0) for the other kinds."""
        return self.il.phase_at(step) if self.iterated else ILPhase(0, "warmup", step)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """AdamW (Table 5); weight decay on matrices, embeddings and codes, none on gains, biases, t, [CLS]."""
        return _adamw(self.model, self.il, fused=not self.clips_under_mixed_precision())

    def configure_optimizers(self):
        opt = self.make_optimizer()
        restarts = self.iterated
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: self.il.lr_at(s, restarts=restarts) / self.il.lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_fit_start(self) -> None:
        if self.trainer.max_steps != self.il.total_steps:
            logger.warning("trainer max_steps=%s but the %s schedule has %d steps (ILConfig.total_steps): the "
                           "cosine ends at step %d", self.trainer.max_steps, self.kind, self.il.total_steps,
                           self.il.total_steps)

    # ------------------------------------------------------------------ iterated learning
    def spawn_generation(self, generation: int, optimizer: torch.optim.Optimizer | None = None) -> str:
        """Start ``generation``: re-initialise its agent, keep the old one as the teacher, clear the
        new agent's optimiser state (its moments belonged to the old weights). Returns the agent's name."""
        which = self.il.spawn_target(generation)
        teacher = spawn(self.model, which, agent_generator(self.seed, 100 + generation))
        self._teacher = _Teacher(teacher, which, generation) if self.il.t_distill > 0 else None
        if optimizer is not None:
            for p in self.model.agent(which).parameters():
                optimizer.state.pop(p, None)
        logger.info("step %d: generation %d spawns a new %s agent (distil %d steps, codebook %s, then interact)",
                    self.il.generation_start(generation), generation, which, self.il.t_distill,
                    "frozen" if self.il.freeze_codebook and self.model.codebook is not None else "trained")
        return which

    def step_loss(self, batch, phase: ILPhase, step: int) -> StepLoss:
        """The loss of one step in ``phase`` (no side effects: spawning is :meth:`spawn_generation`)."""
        zero = self.model.logit_scale.new_zeros(())
        if phase.phase != "distill":
            out = self.contrastive(self.model, batch, step, pool=self.image_pool)
            return StepLoss(out.loss, out.loss, zero, out.image_to_text, out.text_to_image)
        t = self._teacher
        if t is None or t.generation != phase.generation:
            raise RuntimeError(f"step {step} is in generation {phase.generation}'s distillation but no teacher of "
                               f"that generation is held (have: {None if t is None else t.generation}); resume "
                               f"from a checkpoint written by this module (it saves the teacher)")
        frozen = self.il.freeze_codebook
        teacher = t.agent.to(self.model.logit_scale.device)
        if t.which == "language":
            inputs = self.model.tokenize(_sentences(batch, range(batch.programs.num_captions)))
        else:
            inputs = (batch.regions, batch.geometry, batch.region_mask)
        student_emb, student_w = self.model.represent(self.model.agent(t.which)(*inputs), frozen_codebook=frozen)
        with torch.no_grad():
            teacher_emb, teacher_w = self.model.represent(teacher(*inputs), frozen_codebook=True)
        if self.il.distill_target == "codes":
            distill = distillation_loss(student_w, teacher_w, "codes")
        else:
            distill = distillation_loss(student_emb, teacher_emb, "embedding")
        total = distill
        i2t = t2i = contrastive = zero
        if self.il.distill_contrastive_weight > 0:
            out = self.contrastive(self.model, batch, step, frozen_codebook=frozen, pool=self.image_pool)
            total = total + self.il.distill_contrastive_weight * out.loss
            contrastive, i2t, t2i = out.loss, out.image_to_text, out.text_to_image
        return StepLoss(total, contrastive, distill, i2t, t2i)

    def contrastive(self, model: ClipModel, batch, step: int, *, frozen_codebook: bool = False,
                    pool: ImagePool | None = None, hard_negatives: bool = True):
        """CLIP's InfoNCE over the batch's B positive pairs (+ NegCLIP's word swaps when configured, + the
        nearest images of ``pool``, which then takes this batch's images, + the batch's structural negatives;
        ``hard_negatives=False``: none of them, plain CLIP)."""
        pos_image, pos_caption = batch.pair_image[:, 0].long(), batch.pair_caption[:, 0].long()   # (B,), (B,)
        images, image_slot = torch.unique(pos_image, return_inverse=True)
        device = model.logit_scale.device
        images = images.to(batch.regions.device)
        img, _ = model.image_features(batch.regions[images], batch.geometry[images], batch.region_mask[images],
                                      frozen_codebook=frozen_codebook)                              # (U, E)
        B = pos_caption.shape[0]
        sentences = _sentences(batch, pos_caption.tolist())
        hard, hard_valid = None, None
        if self.il.text_swaps and hard_negatives:
            swapped = negclip_text_swaps(batch, pos_caption.tolist(), pos_image.tolist(),
                                         np.random.default_rng([self.seed, step, 11]))
            hard_valid = torch.tensor([s is not None for s in swapped], device=device)
            sentences = sentences + [s if s is not None else "" for s in swapped]
        own_hard, own_valid = None, None
        S = getattr(batch, "structural_negatives", 0) if hard_negatives else 0
        if S:  # the last S caption-negative columns: verified false of the row's own image
            kc = batch.num_caption_negatives
            structural = batch.pair_caption[:, 1 + kc - S:1 + kc].long()                             # (B, S)
            own_valid = batch.structural_valid.to(device)                                            # (B, S)
            sentences = sentences + _sentences(batch, structural.reshape(-1).tolist())
        txt, _ = model.text_features(*model.tokenize(sentences), frozen_codebook=frozen_codebook)  # (B [+ B] [+ BS], E)
        if S:
            txt, own_hard = txt[:-B * S], txt[-B * S:].view(B, S, -1)                              # (B, S, E)
        if hard_valid is not None:
            txt, hard = txt[:B], txt[B:]
        slot = image_slot.to(device)
        same_image = slot[:, None] == slot[None, :]                                                 # (B, B)
        near = near_valid = None
        if pool is not None and self.il.pool_negatives:
            ids = _image_ids(batch)
            unique_ids = [ids[i] for i in images.tolist()]
            query_ids = [unique_ids[u] for u in image_slot.tolist()]
            found = pool.neighbours(img[slot].detach(), query_ids, self.il.pool_negatives, exclude=unique_ids)
            near, near_valid = found.embeddings.to(img.dtype), found.valid                          # (B, k, E), (B, k)
            pool.push(img.detach(), unique_ids)
        return clip_contrastive_loss(img[slot], txt, model.scale(), same_image=same_image, hard_text=hard,
                                     hard_valid=hard_valid, hard_images=near, hard_images_valid=near_valid,
                                     own_hard_text=own_hard, own_hard_valid=own_valid)

    # ------------------------------------------------------------------ Lightning hooks
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        step = int(self.global_step)
        phase = self.phase_at(step)
        if self.iterated and self.il.is_spawn_step(step):
            opt = self.optimizers()
            self.spawn_generation(phase.generation, getattr(opt, "optimizer", opt))
        if phase.phase != "distill" and self._teacher is not None:
            self._teacher = None  # distillation is over
        loss = self.step_loss(batch, phase, step)
        self.mark_trained(batch_idx)
        if not torch.isfinite(loss.total):
            raise FloatingPointError(f"non-finite {self.kind} loss at step {step} (generation {phase.generation}, "
                                     f"{phase.phase}): contrastive {loss.contrastive.item()}, "
                                     f"distill {loss.distill.item()}")
        b = batch.pair_image.shape[0]
        logs = {"train/loss": loss.total, "train/contrastive": loss.contrastive, "train/acc_i2t": loss.image_to_text,
                "train/acc_t2i": loss.text_to_image, "train/logit_scale": self.model.scale().detach()}
        if self.iterated:
            logs.update({"train/distill": loss.distill, "il/generation": float(phase.generation),
                         "il/phase": float(PHASE_CODE[phase.phase])})
        self.log_dict(logs, prog_bar=False, batch_size=b, on_step=True, on_epoch=False)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=b, on_step=True, on_epoch=False)
        return loss.total

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.image_pool is not None:
            checkpoint["negclip_image_pool"] = self.image_pool.state_dict()
        t = self._teacher
        nxt = int(self.global_step)  # the step a resumed run starts with
        if self.iterated and t is not None and self.il.phase_at(nxt).phase == "distill" \
                and not self.il.is_spawn_step(nxt):
            checkpoint["il_teacher"] = {"which": t.which, "generation": t.generation,
                                        "state_dict": {k: v.detach().cpu() for k, v in t.agent.state_dict().items()}}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        if self.image_pool is not None and "negclip_image_pool" in checkpoint:
            self.image_pool.load_state_dict(checkpoint["negclip_image_pool"])
        saved = checkpoint.get("il_teacher")
        self._teacher = None
        if saved is not None:
            agent = self.model.frozen_copy(saved["which"])
            agent.load_state_dict(saved["state_dict"])
            self._teacher = _Teacher(agent, saved["which"], int(saved["generation"]))

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def retrieval_scores(self, eval_set) -> tuple[np.ndarray, float]:
        """``(scores (C, I), seconds)`` by one matrix product of unit embeddings (each image and caption
        encoded once; equal to cross-scoring with ``score_pairs``, which the tests check)."""
        regions, geometry, mask = (t.to(self.device) for t in eval_set.read_regions())
        was_training = self.model.training
        self.model.eval()
        try:
            started = time.perf_counter()
            scores = self.model.cross_scores(regions, geometry, mask, eval_set.texts)     # (C, I)
            seconds = time.perf_counter() - started
        finally:
            self.model.train(was_training)
        return scores.detach().float().cpu().numpy(), seconds

    # ------------------------------------------------------------------ §4.4: easy to learn
    def easy_to_learn_probe(self, batches, *, steps: int, lr: float | None = None, seed: int = 0) -> ProbeCurve:
        """Train a new language agent against this model's frozen vision agent (and codebook, and
        temperature) with plain CLIP's contrastive loss (no NegCLIP or structural negatives, whatever
        the model trained with); return its in-batch accuracy at each step (Figure 4).

        The new agent's initial weights depend on ``seed`` only, so probes of different models start
        from the same agent, as in the paper. The module itself is not changed.

        Args:
            batches: an iterable of :class:`TrainBatch` (e.g. a data module's ``train_dataloader()``).
            steps: updates to run (fewer if ``batches`` runs out).
            lr: AdamW learning rate (constant); default ``ILConfig.lr``.
        """
        model = copy.deepcopy(self.model)
        model.train()
        model.requires_grad_(False)
        model.language.reset_parameters(agent_generator(seed, _PROBE_SALT))
        model.language.requires_grad_(True)
        opt = _adamw(model.language, self.il, lr=lr)
        curve = ProbeCurve()
        device = model.logit_scale.device
        for _, batch in zip(range(steps), batches):
            # plain CLIP for every model: the probe compares vision agents, not training losses
            out = self.contrastive(model, batch.to(device), 0, frozen_codebook=True, hard_negatives=False)
            curve.accuracy.append(float(out.image_to_text))
            curve.text_to_image.append(float(out.text_to_image))
            curve.loss.append(out.loss.item())
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
        return curve


def _adamw(module: nn.Module, il: ILConfig, *, lr: float | None = None, fused: bool = True) -> torch.optim.AdamW:
    """AdamW with decay on parameters of 2+ dimensions only (open_clip's rule); fused where torch can and
    ``fused`` allows (:meth:`RetrievalModule.clips_under_mixed_precision`)."""
    params = [p for p in module.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": il.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr or il.lr, betas=il.betas, eps=il.eps,
                             fused=fused and fused_optimizer_supported(params))


def _sentences(batch, captions) -> list[str]:
    """The sentences (program roots) of caption slots ``captions`` of the batch."""
    progs = batch.programs.programs
    return [progs[c].texts[progs[c].root] for c in captions]


def negclip_text_swaps(batch, captions: list[int], images: list[int], rng: np.random.Generator) -> list[str | None]:
    """NegCLIP's text negative of each positive (caption slot, image slot): two of its words swapped
    (:func:`swap_two_words`). A swap that reads as any caption of the same image in the batch (case and
    spacing aside) is no negative (None), and neither is the positive itself (a swap always changes a word)."""
    by_image: dict[int, set[str]] = {}
    for c, i in zip(batch.pair_caption[:, 0].tolist(), batch.pair_image[:, 0].tolist()):
        by_image.setdefault(int(i), set()).add(_norm(_sentences(batch, [c])[0]))
    out = []
    for c, i, s in zip(captions, images, _sentences(batch, captions)):
        swapped = swap_two_words(s, _primitive_words(batch, c), rng)
        out.append(None if swapped is None or _norm(swapped) in by_image.get(int(i), {_norm(s)}) | {_norm(s)}
                   else swapped)
    return out


def _norm(sentence: str) -> str:
    return " ".join(sentence.lower().replace(".", " ").replace(",", " ").split())


def _image_ids(batch) -> list[str]:
    """The batch's image ids (row order of its regions): NegCLIP's pool knows images by id."""
    ids = getattr(batch, "image_ids", None)
    if ids is None:
        raise ValueError("NegCLIP's image pool needs the batch's image ids (TrainBatch.image_ids, set by "
                         "CompositionDataModule.collate_train)")
    return list(ids)


def _primitive_words(batch, caption: int) -> list[str]:
    """The caption's CRG primitives (its program's leaves): the words a NegCLIP swap exchanges first."""
    p = batch.programs.programs[caption]
    return [text for text, template in zip(p.texts, p.templates) if template is None]
