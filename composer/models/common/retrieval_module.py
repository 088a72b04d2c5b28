"""The LightningModule base every model trains with: the paper's schedule, exact-resume random states, and
text-to-image retrieval at the end of each validation epoch (each model's own module, in its folder, adds
the training step and its losses).

Retrieval validation and test: the loaders' one batch is the split's evaluation set (a
``composer.evaluation.sentence_retrieval.SentenceRetrievalSet``, from
``composer.training.data.CompositionDataModule.retrieval_set``; this module reads it through its methods and
imports neither). ``validation_step`` only keeps it; ``on_validation_epoch_end`` scores it on global rank 0
(every caption against every image) and broadcasts the report, so every process logs, checkpoints on and
returns the same numbers.

Schedule (Appendix C): Adam, learning rate warmed up linearly from 0 to 4e-5 over 2 epochs, divided
by 10 after epoch 10 and again after epoch 15, 20 epochs, batch 64.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch

from composer.models.common.retrieval import score_matrix

__all__ = ["OptimConfig", "RetrievalModule", "fused_optimizer_supported"]

logger = logging.getLogger(__name__)


def fused_optimizer_supported(params) -> bool:
    """Whether torch's fused Adam / AdamW kernels can update ``params``: floating point, on CPU or CUDA.

    Why: one fused pass per step instead of a dozen elementwise ops per tensor. On one CPU core (a study
    worker) the ``small`` models' update (5M weights, most of them the 30,522-word embedding) takes 30 ms
    with the default (foreach) path and 9 ms fused (benchmarks/bench_optimizer.py), of a ~0.5 s COMPOSER
    step at batch 32. The update is the same Adam, rounded differently in the last bits (3e-8 after 50 steps).
    """
    params = list(params)
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


@dataclass
class OptimConfig:
    """Optimisation (paper: Adam, 4e-5 peak after a 2-epoch warm-up, /10 at epochs 10 and 15, 20 epochs)."""

    lr: float = 4e-5
    warmup_epochs: float = 2.0
    decay_epochs: tuple[int, ...] = (10, 15)
    decay_factor: float = 0.1
    epochs: int = 20
    grad_clip: float = 0.0  # 0 = none (the paper states none)
    use_mvsa: bool = True
    use_order: bool = True

    def __post_init__(self):
        if self.lr <= 0 or self.epochs < 1 or not 0 < self.decay_factor <= 1:
            raise ValueError(f"need lr > 0, epochs >= 1, 0 < decay_factor <= 1; got {self.lr}, {self.epochs}, "
                             f"{self.decay_factor}")

    def factor(self, epoch_float: float) -> float:
        """Learning-rate multiplier at a (fractional) epoch."""
        warm = min(1.0, epoch_float / self.warmup_epochs) if self.warmup_epochs > 0 else 1.0
        decays = sum(1 for e in self.decay_epochs if epoch_float >= e)
        return warm * self.decay_factor ** decays


class RetrievalModule(L.LightningModule):
    """What every model trained here shares: the learning-rate schedule, random states saved in
    checkpoints (exact resume), and text-to-image retrieval at validation and test.

    Subclasses set ``self.model`` (anything with :meth:`composer.models.composer.model.Composer.score_pairs`'s
    signature) and ``self.tokenizer``, and implement ``training_step``; they call
    :meth:`mark_trained` in it so that a checkpoint knows which batches were trained on. A model with a
    faster way to score a whole set overrides :meth:`retrieval_scores`.

    Retrieval: a validation (test) batch is a :class:`SentenceRetrievalSet`; the step keeps it, and at the
    epoch's end global rank 0 scores it (:meth:`evaluate_retrieval`) and broadcasts the report to the other
    processes. Every process then logs ``val/R@1`` etc. and holds the report in ``results["val"]``
    (``results["test"]``). The other processes wait for rank 0 meanwhile (within the process group's
    timeout, 30 minutes by default).
    """

    def __init__(self, optim: OptimConfig, *, eval_max_pairs: int = 4096, seed: int = 0):
        super().__init__()
        self.optim = optim
        self.eval_max_pairs = eval_max_pairs
        self.seed = seed
        self.results: dict = {}                                # set name ("val", "test", ...) -> its last report
        self._retrieval_sets: dict = {}  # stage -> its SentenceRetrievalSet, kept by the steps until the epoch ends

    @classmethod
    def from_recipe(cls, recipe, model_cfg, *, load_pretrained: bool = True) -> RetrievalModule:
        """The module that trains ``recipe`` (a :class:`composer.training.recipes.TrainingRecipe`) with model
        config ``model_cfg`` (``load_pretrained``: the text encoder's pretrained weights where the config
        names them); a model whose module takes more than the config, the optimisation and the seed
        overrides this."""
        return cls(model_cfg, recipe.optim, seed=recipe.data.seed, load_pretrained=load_pretrained)

    def mark_trained(self, batch_idx: int) -> None:
        """Record the batch as trained on (before the checkpoint callbacks run at the batch's end)."""
        mark = getattr(self.trainer.datamodule, "mark_trained", None)  # CompositionDataModule's
        if mark is not None:
            mark(self.current_epoch, batch_idx)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Adam at the peak rate (the paper's) over the trainable weights; override for another optimiser."""
        params = [p for p in self.parameters() if p.requires_grad]  # frozen ones get no state (TextConfig)
        return torch.optim.Adam(params, lr=self.optim.lr, fused=self.fused_optimizer_allowed(params))

    def fused_optimizer_allowed(self, params) -> bool:
        """:func:`fused_optimizer_supported`, unless :meth:`clips_under_mixed_precision`."""
        return fused_optimizer_supported(params) and not self.clips_under_mixed_precision()

    def clips_under_mixed_precision(self) -> bool:
        """Whether the Trainer clips gradients under mixed precision. Why it matters: Lightning's
        mixed-precision plugin refuses to clip a fused optimizer's gradients (a fused optimizer unscales fp16
        gradients itself, after the clip would have run), and it says so for bf16 too; such a run takes the
        default (foreach) optimizer, the same update."""
        trainer = self._trainer
        return trainer is not None and bool(trainer.gradient_clip_val) and "mixed" in str(trainer.precision)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Random states, so that dropout after a resume draws what it would have drawn."""
        name, keys, pos, has_gauss, cached = np.random.get_state()
        checkpoint["rng"] = {"torch": torch.get_rng_state(),  # plain types only: weights_only loading
                             "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
                             "python": random.getstate()}
        if torch.cuda.is_available():
            checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state_all()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        rng = checkpoint.get("rng")
        if rng:
            torch.set_rng_state(rng["torch"])
            name, keys, pos, has_gauss, cached = rng["numpy"]
            np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
            random.setstate(rng["python"])
            if "cuda" in rng and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])

    def configure_optimizers(self):
        opt = self.make_optimizer()
        dm = self.trainer.datamodule
        if hasattr(dm, "steps_per_epoch"):  # CompositionDataModule: fixed by the data, not by a resumed loader's length
            steps_per_epoch = dm.steps_per_epoch()
        else:
            steps_per_epoch = max(1, self.trainer.estimated_stepping_batches // max(1, self.trainer.max_epochs))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: self.optim.factor(step / steps_per_epoch))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------------ retrieval evaluation
    def validation_step(self, batch, batch_idx: int) -> None:
        self._keep_retrieval_set("val", batch)

    def test_step(self, batch, batch_idx: int) -> None:
        self._keep_retrieval_set("test", batch)

    def on_validation_epoch_end(self) -> None:
        self._report_retrieval("val")

    def on_test_epoch_end(self) -> None:
        self._report_retrieval("test")

    def _keep_retrieval_set(self, stage: str, batch) -> None:
        if not all(hasattr(batch, a) for a in ("name", "report", "read_regions", "programs")):
            raise TypeError(f"a {stage} batch must be a SentenceRetrievalSet (CompositionDataModule.retrieval_set), "
                            f"got {type(batch).__name__}")
        self._retrieval_sets[stage] = batch

    def _report_retrieval(self, stage: str) -> None:
        """Score the kept set on global rank 0, broadcast the report, log it on every process, forget the set."""
        eval_set = self._retrieval_sets.pop(stage, None)
        if eval_set is None:  # no batch this epoch (limit_val_batches=0)
            return
        trainer = self.trainer
        report = None
        if trainer.is_global_zero:
            precision = trainer.precision_plugin  # the steps' autocast (bf16-mixed on a GPU) applies here too
            context = precision.test_step_context() if stage == "test" else precision.val_step_context()
            try:
                with context:
                    report = self.evaluate_retrieval(eval_set)
            except Exception as err:
                if trainer.world_size > 1:  # the other processes wait in the broadcast below: release them
                    trainer.strategy.broadcast((None, f"{type(err).__name__}: {err}"), src=0)
                raise
        report, failure = trainer.strategy.broadcast((report, None), src=0)
        if failure is not None:
            raise RuntimeError(f"{stage} retrieval failed on global rank 0: {failure}")
        self.results[eval_set.name] = report  # "val", "test", or a further set's name ("systematic", ...)
        # equal on every process already; the max of equal values is exact, and a synced metric is what
        # Lightning expects of epoch-level logging under DDP
        self.log_dict({f"{eval_set.name}/{k}": v for k, v in report["sentence"].items()}, batch_size=1,
                      sync_dist=True, reduce_fx="max")

    @torch.no_grad()
    def evaluate_retrieval(self, eval_set) -> dict:
        """The set's sentence-retrieval report (:meth:`SentenceRetrievalSet.report`: R@1/5/10, and where the
        dataset knows its truth the any-true protocol and the oracle ceilings) of :meth:`retrieval_scores`."""
        scores, seconds = self.retrieval_scores(eval_set)
        return eval_set.report(scores, seconds=seconds)

    @torch.no_grad()
    def retrieval_scores(self, eval_set) -> tuple[np.ndarray, float]:
        """``(scores (C, I), seconds)``: every caption on every image by full cross-scoring with ``self.model``
        (:func:`composer.models.common.retrieval.score_matrix`), on this module's device, in eval mode. A model with a
        faster way to score a whole set overrides this."""
        regions, geometry, mask = (t.to(self.device) for t in eval_set.read_regions())
        was_training = self.model.training
        self.model.eval()
        try:
            res = score_matrix(self.model, regions, geometry, mask, list(eval_set.programs), self.tokenizer,
                               max_pairs=self.eval_max_pairs, image_labels=eval_set.image_ids)
        finally:
            self.model.train(was_training)
        return res.scores, res.seconds
