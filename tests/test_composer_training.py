"""Training plumbing: deterministic batches, the loss step, and an exact resume after a kill."""

import lightning as L
import pytest
import torch

from composer.models.composer.config import composer_config
from composer.evaluation.sentence_retrieval import SentenceRetrievalSet, score_sentence_retrieval
from composer.training.data import CompositionDataModule, DataConfig, EpochBatchSampler
from composer.models.common.retrieval_module import OptimConfig
from composer.models.composer.module import ComposerModule
from kill_switch import Killed, KillAt


def make(tiny_world, *, dropout: float = 0.1):
    data = DataConfig(data=str(tiny_world / "captions.jsonl"), features=str(tiny_world / "features.h5"),
                      batch_size=4, max_regions=12, eval_images=6, seed=3)
    cfg = composer_config("tiny", visual={"region_dim": 256}, text={"dropout": dropout},
                          composition={"dropout": dropout})
    module = ComposerModule(cfg, OptimConfig(lr=1e-3, epochs=2, warmup_epochs=0.5, decay_epochs=(1,)), seed=3)
    dm = CompositionDataModule(data, module.tokenizer)
    return module, dm


def trainer(tmp_path, **kw):
    return L.Trainer(default_root_dir=tmp_path, accelerator="cpu", devices=1, logger=False,
                     enable_progress_bar=False, num_sanity_val_steps=0, limit_val_batches=0,
                     enable_model_summary=False, **kw)


def test_epoch_batches_are_seeded_and_resume_skips_what_was_done():
    epoch = [0]
    s = EpochBatchSampler(10, 3, seed=1, epoch_fn=lambda: epoch[0])
    assert len(s) == 3 and s.global_batches(0) == EpochBatchSampler(10, 3, seed=1).global_batches(0)
    assert s.global_batches(0) != s.global_batches(1)
    assert [[i for _, _, i in b] for b in s] == s.global_batches(0)
    assert [b[0][1] for b in s] == [0, 1, 2]  # each batch carries its index (it seeds the negatives)
    epoch[0] = 1
    assert [[i for _, _, i in b] for b in s] == s.global_batches(1)  # the order follows the trainer's epoch
    s.resume_at(1, 2)
    assert [[i for _, _, i in b] for b in s] == s.global_batches(1)[2:]
    assert len(list(s)) == 3  # the skip applies to one pass only


def test_ddp_replicas_split_the_one_global_order_into_disjoint_equal_shares():
    """3 processes, 23 captions in batches of 2: 11 global batches, 3 rounds of 3 (the last 2 batches
    dropped so that every process steps equally); each process's batches keep their global index."""
    shares = [EpochBatchSampler(23, 2, seed=4, num_replicas=3, rank=r) for r in range(3)]
    everyone = shares[0].global_batches(0)
    assert len(everyone) == 11 and all(len(s) == 3 for s in shares)
    passes = [list(s) for s in shares]
    for r, batches in enumerate(passes):
        assert [b[0][1] for b in batches] == [r, r + 3, r + 6]
        assert [[i for _, _, i in b] for b in batches] == everyone[r:9:3]
    seen = [i for batches in passes for b in batches for _, _, i in b]
    assert len(seen) == len(set(seen)) == 18
    shares[1].resume_at(0, 2)  # resuming skips this process's own batches
    assert [b[0][1] for b in shares[1]] == [7]
    with pytest.raises(ValueError, match="rank 3"):
        EpochBatchSampler(23, 2, seed=4, num_replicas=3, rank=3)


def test_collated_batch_layout_and_negatives(tiny_world):
    module, dm = make(tiny_world)
    dm.setup()
    batch = dm.collate_train([(0, 0, c) for c in range(4)])
    assert batch.pair_image.shape == (4, 1 + 2 + 1)
    g = dm.graphs["train"]
    for row in range(4):
        positive = batch.programs.programs[int(batch.pair_caption[row, 0])]
        assert positive.texts[-1] == g.concept_texts[g.caption_root[row]]
        # caption negatives keep the positive image; image negatives keep the positive caption
        assert (batch.pair_image[row, :3] == batch.pair_image[row, 0]).all()
        assert batch.pair_caption[row, 3] == batch.pair_caption[row, 0]
        assert batch.pair_image[row, 3] != batch.pair_image[row, 0]
    assert batch.regions.shape[1] == 13 and batch.region_mask[:, 0].all()  # global region + 12
    again = dm.collate_train([(0, 0, c) for c in range(4)])
    assert torch.equal(again.pair_image, batch.pair_image) and torch.equal(again.pair_caption, batch.pair_caption)


class _Grads(L.Callback):
    """Each step's gradients: all finite? how many parameters got a non-zero one?"""

    def __init__(self):
        self.finite, self.nonzero = [], []

    def on_after_backward(self, trainer, module):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        self.finite.append(all(torch.isfinite(g).all() for g in grads))
        self.nonzero.append(sum(int(g.abs().sum() > 0) for g in grads))


def test_a_training_step_gives_finite_loss_and_gradients(tiny_world, tmp_path):
    module, dm = make(tiny_world)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    grads = _Grads()
    # two steps: the warm-up's learning rate is 0 at the first
    t = L.Trainer(default_root_dir=tmp_path, accelerator="cpu", max_steps=2, logger=False, enable_progress_bar=False,
                  enable_model_summary=False, limit_val_batches=0, enable_checkpointing=False, callbacks=[grads])
    t.fit(module, datamodule=dm)
    assert t.global_step == 2 and grads.finite == [True, True] and min(grads.nonzero) > 0
    m = t.callback_metrics
    for term in ("match", "mvsa", "order"):  # every loss of §3.3 takes part
        assert torch.isfinite(m[f"train/{term}"]) and m[f"train/{term}"] > 0, term
    assert m["train/loss"] == pytest.approx(float(m["train/match"] + m["train/mvsa"] + m["train/order"]), rel=1e-5)
    changed = [k for k, v in module.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("model.") for k in changed)
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_validation_scores_the_eval_set_and_keeps_the_report(tiny_world, tmp_path):
    module, dm = make(tiny_world)
    t = L.Trainer(default_root_dir=tmp_path, accelerator="cpu", logger=False, enable_progress_bar=False,
                  enable_model_summary=False)
    logged = t.validate(module, datamodule=dm, verbose=False)
    eval_set = next(iter(dm.val_dataloader()))             # the loader's one batch: the whole evaluation set
    ev = dm.eval_set("val")
    assert isinstance(eval_set, SentenceRetrievalSet) and eval_set.image_ids == ev.image_ids
    g = dm.graphs["val"]
    assert eval_set.texts == [g.concept_texts[g.caption_root[c]] for c in ev.captions]  # the sentences CLIP scores
    assert eval_set.caption_image.tolist() == ev.caption_image.tolist()
    report = module.results["val"]
    assert set(report) == {"sentence", "num_images", "num_captions", "pairs_per_second", "seconds", "chance_R@1",
                           "sentence_by_length", "unseen_in_training"}
    assert (report["num_images"], report["num_captions"]) == (len(ev.image_ids), len(ev.captions))
    regions, geometry, mask = eval_set.read_regions()
    direct = score_sentence_retrieval(module.model, module.tokenizer, regions, geometry, mask, eval_set.programs,
                                      eval_set.caption_image)
    assert direct["sentence"] == report["sentence"]
    assert logged == [{f"val/{k}": pytest.approx(v) for k, v in report["sentence"].items()}]
    assert not module._retrieval_sets                       # the set is let go at the epoch's end


def test_resume_after_a_kill_mid_epoch_ends_with_the_same_weights(tiny_world, tmp_path):
    L.seed_everything(0)
    module, dm = make(tiny_world)
    full = trainer(tmp_path / "full", max_epochs=2)
    full.fit(module, datamodule=dm)
    reference = {k: v.clone() for k, v in module.state_dict().items()}
    steps_per_epoch = full.global_step // 2
    assert steps_per_epoch >= 4

    L.seed_everything(0)
    module, dm = make(tiny_world)
    kill_at = steps_per_epoch + 2  # mid-way through the second epoch
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=kill_at, save_last=True)
    first = trainer(tmp_path / "run", max_epochs=2, callbacks=[ckpt, KillAt(kill_at)])
    with pytest.raises(Killed):
        first.fit(module, datamodule=dm)
    assert first.global_step == kill_at

    L.seed_everything(123)  # a fresh process would not share the first one's random state
    module, dm = make(tiny_world)
    second = trainer(tmp_path / "run", max_epochs=2)
    second.fit(module, datamodule=dm, ckpt_path=str(tmp_path / "ck" / "last.ckpt"))
    assert second.global_step == full.global_step
    for k, v in module.state_dict().items():
        assert torch.equal(v, reference[k]), k


def test_cpu_runs_use_deterministic_algorithms_unless_told():
    """Two-thread CPU runs of one seed differed in the loss's seventh digit without them (docs: TrainerOptions)."""
    from composer.cli.train_composer import build_argparser
    from composer.training.fit import TrainerOptions, deterministic_algorithms

    assert deterministic_algorithms(TrainerOptions(accelerator="cpu")) is True
    assert deterministic_algorithms(TrainerOptions(accelerator="cpu", deterministic=False)) is False
    ap = build_argparser()
    assert ap.parse_args(["--out", "o"]).deterministic is None
    assert ap.parse_args(["--out", "o", "--no-deterministic"]).deterministic is False


class _OptimizerKind(L.Callback):
    def on_train_start(self, trainer, pl_module):
        self.fused = bool(trainer.optimizers[0].defaults.get("fused"))


@pytest.mark.parametrize("model", ["composer", "clip"])
def test_gradient_clipping_under_mixed_precision_trains_with_the_foreach_optimizer(tiny_world, tmp_path, model):
    """Lightning's mixed-precision plugin refuses to clip a fused optimizer's gradients (the first H100 run
    of benchmarks/gpu_check.py died on it, bf16-mixed + grad_clip 1): such a run takes the foreach Adam,
    and fp32 keeps the fused one."""
    from composer.training.fit import TrainerOptions, train
    from composer.training.recipes import RecipeOverrides, named_recipe

    kinds = {}
    for precision in ("bf16-mixed", "32-true"):
        recipe = named_recipe(model, str(tiny_world / "captions.jsonl"), RecipeOverrides(
            preset="tiny", features=str(tiny_world / "features.h5"), batch_size=8, max_regions=6, eval_images=6,
            grad_clip=1.0, **({"il": {"t_warm": 2, "generations": 0, "t_extend": 0}} if model == "clip"
                              else {"epochs": 1})))
        seen = _OptimizerKind()
        results = train(recipe, TrainerOptions(accelerator="cpu", precision=precision, progress=False, test=False),
                        tmp_path / precision, callbacks=[seen])
        assert results["global_step"] >= 2
        kinds[precision] = seen.fused
    assert kinds == {"bf16-mixed": False, "32-true": True}
