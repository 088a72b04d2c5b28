"""COMPOSER and the flat baseline under DistributedDataParallel: two CPU processes (gloo), as on two GPUs.

DDP without ``find_unused_parameters`` fails at the second step when a parameter takes no part in the
loss; the CT's last co-attention once had a visual half that nothing read.

Retrieval validation under Lightning's DDP: global rank 0 alone scores the evaluation set, and both
processes end with its report.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from composer.models.composer.config import composer_config
from composer.models.flat.model import FlatCrossTransformer
from composer.models.composer.model import Composer
from composer.models.composer.predicate_transformer import TemplateTokenizer
from composer.models.composer.program import ConceptProgram, ProgramBatch

R, DR = 7, 11  # regions, region feature size of the tiny config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_two_steps(rank: int, world: int, port: int, model_name: str, result_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same initial weights on both ranks, as Lightning's seed_everything gives
        cfg = composer_config("tiny", ct_layers=5)  # two co-attention blocks: one with, one without a visual half
        model = (Composer if model_name == "composer" else FlatCrossTransformer).from_config(cfg)
        ddp = torch.nn.parallel.DistributedDataParallel(model)  # find_unused_parameters=False, the default
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        tok = TemplateTokenizer.from_config(cfg)
        programs = ProgramBatch.collate([
            ConceptProgram.from_derivations([("two dogs", "two [NNS]", ["dogs"]), ("the grass", "the [NN]", ["grass"]),
                                             ("two dogs run on the grass", "[NP] run on [NP]",
                                              ["two dogs", "the grass"])]),
            ConceptProgram.from_derivations([("a man", "a [NN]", ["man"]), ("a man sleeps", "[NP] sleeps", ["a man"])]),
        ], tok)
        gen = torch.Generator().manual_seed(rank)  # each rank its own data
        for _ in range(3):
            regions, geometry = torch.randn(2, R, DR, generator=gen), torch.rand(2, R, 5, generator=gen)
            mask = torch.ones(2, R, dtype=torch.bool)
            pairs = (torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 0, 1]))
            if model_name == "composer":
                out = ddp(regions, geometry, mask, programs, *pairs)
                loss = out.root_scores.sum() + out.node_scores.sum()
            else:
                enc = tok.encode_sentences(["two dogs run on the grass", "a man sleeps"])
                loss = ddp(regions, geometry, mask, enc.ids, enc.mask, *pairs).scores.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        torch.save(flat, os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("model_name", ["composer", "flat"])
def test_ddp_two_processes_every_parameter_in_the_loss(model_name, tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    mp.spawn(_train_two_steps, args=(2, _free_port(), model_name, str(tmp_path)), nprocs=2, join=True)
    a, b = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    torch.testing.assert_close(a, b)  # gradients were averaged across the ranks: the replicas stay equal


def _validate_on_two_ranks(rank: int, world: int, port: int, world_dir: str, result_dir: str, fail: bool) -> None:
    """``trainer.validate`` and ``trainer.test`` under Lightning's DDP, this process being ``rank``; with
    ``fail``, scoring raises (on rank 0, the only one that scores) and each rank records its error."""
    # the processes exist already: Lightning's environment sees LOCAL_RANK and launches none
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), NODE_RANK="0",
                      LOCAL_RANK=str(rank))
    import lightning as L

    from composer.models.common.retrieval_module import OptimConfig

    from composer.models.composer.module import ComposerModule
    from composer.training.data import CompositionDataModule, DataConfig
    from composer.training.fit import close_process_group

    L.seed_everything(0)  # the same weights on both ranks
    module = ComposerModule(composer_config("tiny", visual={"region_dim": 256}), OptimConfig(), seed=3)
    scored = []
    evaluate = module.evaluate_retrieval
    module.evaluate_retrieval = lambda eval_set: scored.append(eval_set.name) or evaluate(eval_set)
    data = DataConfig(data=os.path.join(world_dir, "captions.jsonl"), features=os.path.join(world_dir, "features.h5"),
                      batch_size=4, max_regions=12, eval_images=6)
    dm = CompositionDataModule(data, module.tokenizer)
    trainer = L.Trainer(accelerator="cpu", devices=world, strategy="ddp", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False)
    try:
        _validate_and_record(trainer, module, dm, scored, rank, result_dir, fail)
    finally:  # as the library's train() does: an open gloo group aborts the process at exit (SIGABRT)
        close_process_group()


def _validate_and_record(trainer, module, dm, scored, rank, result_dir, fail) -> None:
    if fail:
        def broken(eval_set):
            raise ValueError("a broken feature store")

        module.evaluate_retrieval = broken
        try:
            trainer.validate(module, datamodule=dm, verbose=False)
            error = None
        except Exception as err:  # noqa: BLE001 - what each rank saw is the result
            error = f"{type(err).__name__}: {err}"
        with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"error": error}, f)
        return
    logged = trainer.validate(module, datamodule=dm, verbose=False)
    trainer.test(module, datamodule=dm, verbose=False)
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"global_rank": trainer.global_rank, "results": module.results, "scored": scored, "logged": logged}, f)


def _prepare_graphs(tiny_world) -> None:
    """Build the graph cache here, not in two processes at once."""
    from composer.training.data import CompositionDataModule, DataConfig

    CompositionDataModule(DataConfig(data=str(tiny_world / "captions.jsonl"),
                                     features=str(tiny_world / "features.h5"))).prepare_data()


def test_retrieval_validation_scores_on_rank_zero_and_every_rank_gets_its_report(tiny_world, tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    _prepare_graphs(tiny_world)
    mp.spawn(_validate_on_two_ranks, args=(2, _free_port(), str(tiny_world), str(tmp_path), False), nprocs=2, join=True)
    a, b = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (a["global_rank"], b["global_rank"]) == (0, 1)
    assert a["scored"] == ["val", "test"] and b["scored"] == []       # scored once, by global rank 0
    assert set(a["results"]) == {"val", "test"}
    assert a["results"] == b["results"]                               # timings included: one report, broadcast
    assert a["results"]["val"]["num_captions"] > 0 and set(a["results"]["val"]["sentence"]) == {"R@1", "R@5", "R@10"}
    assert a["logged"] == b["logged"] and a["logged"][0]["val/R@1"] == pytest.approx(a["results"]["val"]["sentence"]["R@1"])


def test_a_scoring_error_on_rank_zero_stops_every_rank_instead_of_hanging(tiny_world, tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    _prepare_graphs(tiny_world)
    context = mp.spawn(_validate_on_two_ranks, args=(2, _free_port(), str(tiny_world), str(tmp_path), True), nprocs=2,
                       join=False)
    deadline = time.monotonic() + 600
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for p in context.processes:
                p.kill()
            pytest.fail("a rank still waits for rank 0 after 10 minutes")
    a, b = (json.loads((tmp_path / f"rank{r}.json").read_text())["error"] for r in (0, 1))
    assert a == "ValueError: a broken feature store"
    assert b == "RuntimeError: val retrieval failed on global rank 0: ValueError: a broken feature store"
