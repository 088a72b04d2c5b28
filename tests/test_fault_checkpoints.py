"""Checkpoints and saved models under faults (issue 35): a full disk or a kill mid-write never leaves a truncated
``last.ckpt``; ``--resume`` continues from the intact checkpoint beside a damaged one (or names the file in one
line), and ends as the uninterrupted run; two identical trainings save byte-identical ``model.safetensors``.

The trainings are real (VSE ``tiny`` on the 36-image world, 2 epochs of 18 steps); the full disk is a patched ``torch.save``
that writes half the checkpoint and then fails with ``ENOSPC``."""

from __future__ import annotations

import errno
import hashlib
import io
import logging

import pytest
import torch
from kill_switch import KillAt, Killed

from composer.training.checkpoint_io import (
    AtomicCheckpointIO,
    UnusableCheckpoint,
    resume_checkpoint,
)
from composer.training.fit import TrainerOptions, train
from composer.training.recipes import RecipeOverrides, named_recipe
from crg.outputs import OutputDirError

BATCH = 8


def _recipe(world):
    return named_recipe("vse", str(world / "captions.jsonl"), RecipeOverrides(
        preset="tiny", features=str(world / "features.h5"), batch_size=BATCH, max_regions=6, eval_images=6,
        epochs=2, lr=1e-3))


def _options(**kw):
    return TrainerOptions(accelerator="cpu", progress=False, test=False, ckpt_every_n_steps=4, **kw)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checkpoint(step: int) -> dict:
    return {"state_dict": {"w": torch.full((64, 64), float(step))}, "global_step": step, "epoch": 0}


class FullDisk:
    """``torch.save`` that writes the first half of what it would write, then fails as a full disk does
    (from the ``fail_on``-th call on)."""

    def __init__(self, fail_on: int = 1):
        self.real, self.calls, self.fail_on = torch.save, 0, fail_on

    def __call__(self, obj, f, *args, **kwargs):
        self.calls += 1
        if self.calls < self.fail_on:
            return self.real(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        self.real(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")


# ---------------------------------------------------------------------------- the writer
def test_a_full_disk_mid_write_keeps_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    io_ = AtomicCheckpointIO()
    last = tmp_path / "checkpoints" / "last.ckpt"
    io_.save_checkpoint(_checkpoint(4), last)
    before = last.read_bytes()
    monkeypatch.setattr(torch, "save", FullDisk())
    with pytest.raises(OSError, match="No space left"):
        io_.save_checkpoint(_checkpoint(8), last)
    monkeypatch.undo()
    assert last.read_bytes() == before                                 # was: truncated in place
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]   # the half-written temporary is gone
    assert torch.load(last, weights_only=True)["global_step"] == 4


def test_the_writer_replaces_a_checkpoint_whole_and_loads_back(tmp_path):
    io_ = AtomicCheckpointIO()
    last = tmp_path / "last.ckpt"
    io_.save_checkpoint(_checkpoint(4), last)
    io_.save_checkpoint(_checkpoint(8), last)
    loaded = io_.load_checkpoint(last, weights_only=True)
    assert loaded["global_step"] == 8 and torch.equal(loaded["state_dict"]["w"], torch.full((64, 64), 8.0))
    with pytest.raises(TypeError, match="storage_options"):           # Lightning's contract kept
        io_.save_checkpoint(_checkpoint(9), last, storage_options={"x": 1})


# ---------------------------------------------------------------------------- which checkpoint --resume takes
def _damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"not a checkpoint\n" * 50)
    elif how == "not_lightning":
        torch.save({"weights": torch.zeros(3)}, path)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "not_lightning"])
def test_resume_takes_the_intact_step_checkpoint_beside_a_damaged_last(tmp_path, caplog, how):
    io_ = AtomicCheckpointIO()
    io_.save_checkpoint(_checkpoint(4), tmp_path / "epoch=0-step=4.ckpt")
    io_.save_checkpoint(_checkpoint(8), tmp_path / "epoch=0-step=8.ckpt")
    io_.save_checkpoint(_checkpoint(8), tmp_path / "last.ckpt")
    _damage(tmp_path / "last.ckpt", how)
    with caplog.at_level(logging.WARNING, logger="composer.training.checkpoint_io"):
        chosen = resume_checkpoint(tmp_path)
    assert chosen == tmp_path / "epoch=0-step=8.ckpt"                 # the latest intact one
    assert "last.ckpt cannot be loaded" in caplog.text and "step 8" in caplog.text


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "not_lightning"])
def test_resume_with_no_intact_checkpoint_is_one_error_naming_the_file(tmp_path, how):
    AtomicCheckpointIO().save_checkpoint(_checkpoint(4), tmp_path / "last.ckpt")
    _damage(tmp_path / "last.ckpt", how)
    before = _digest(tmp_path / "last.ckpt")
    with pytest.raises(UnusableCheckpoint, match=r"no checkpoint in .* can be loaded \(.*last.ckpt: .*--overwrite"):
        resume_checkpoint(tmp_path)
    assert issubclass(UnusableCheckpoint, OutputDirError)             # the programs print it as one line
    assert _digest(tmp_path / "last.ckpt") == before                   # left for the user to inspect


def test_resume_prefers_an_intact_last_and_removes_temporaries_of_a_killed_write(tmp_path):
    io_ = AtomicCheckpointIO()
    io_.save_checkpoint(_checkpoint(4), tmp_path / "epoch=0-step=4.ckpt")
    io_.save_checkpoint(_checkpoint(6), tmp_path / "last.ckpt")
    (tmp_path / ".last.ckpt.4242.tmp").write_bytes(b"half")           # what a kill -9 mid-write leaves
    (tmp_path / "notes.tmp").write_text("mine")
    assert resume_checkpoint(tmp_path) == tmp_path / "last.ckpt"
    assert not (tmp_path / ".last.ckpt.4242.tmp").exists() and (tmp_path / "notes.tmp").exists()
    assert resume_checkpoint(tmp_path / "none") is None                # no checkpoint yet: train from the start


# ---------------------------------------------------------------------------- real trainings
@pytest.fixture(scope="module")
def uninterrupted(tiny_world, tmp_path_factory):
    """The reference run (36 steps, checkpoints every 4) and the digest of its saved weights."""
    out = tmp_path_factory.mktemp("full") / "run"
    results = train(_recipe(tiny_world), _options(), out)
    return results, _digest(out / "model" / "model.safetensors")


def test_two_identical_trainings_save_byte_identical_weights(tiny_world, tmp_path, uninterrupted):
    results, digest = uninterrupted
    again = train(_recipe(tiny_world), _options(), tmp_path / "again")
    assert again["global_step"] == results["global_step"] > 8
    assert _digest(tmp_path / "again" / "model" / "model.safetensors") == digest


def test_saving_one_model_many_times_gives_one_file(tmp_path):
    """safetensors orders its metadata by a per-map random hash: before the fix, 3 saves in 6 differed."""
    from composer.models.vse.model import VSE, vse_config

    torch.manual_seed(0)
    model = VSE(vse_config("tiny", visual={"region_dim": 8}), load_pretrained=False)
    digests = set()
    for i in range(10):
        model.save_pretrained(tmp_path / str(i))
        digests.add(_digest(tmp_path / str(i) / "model.safetensors"))
    assert len(digests) == 1
    raw = (tmp_path / "0" / "model.safetensors").read_bytes()
    assert b'{"__metadata__":{"format":"pt","model_type":"vse"}' in raw[:200]
    assert VSE.from_pretrained(tmp_path / "0").state_dict().keys() == model.state_dict().keys()


def test_resume_beside_a_truncated_last_ends_as_the_uninterrupted_run(tiny_world, tmp_path, caplog, uninterrupted):
    results, digest = uninterrupted
    out = tmp_path / "run"
    with pytest.raises(Killed):
        train(_recipe(tiny_world), _options(), out, callbacks=[KillAt(6)])   # checkpoints at step 4
    ckpts = out / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    _damage(ckpts / "last.ckpt", "truncated")                          # as a full disk left it before the fix
    with caplog.at_level(logging.WARNING, logger="composer.training.checkpoint_io"):
        resumed = train(_recipe(tiny_world), _options(resume=True), out)
    assert "resuming from" in caplog.text and "epoch=0-step=4.ckpt" in caplog.text
    assert resumed["global_step"] == results["global_step"]
    assert _digest(out / "model" / "model.safetensors") == digest


def test_a_full_disk_during_training_leaves_a_whole_last_ckpt_to_resume_from(tiny_world, tmp_path, monkeypatch,
                                                                            uninterrupted):
    results, digest = uninterrupted
    out = tmp_path / "run"
    full = FullDisk(fail_on=3)  # step 4's step checkpoint and last.ckpt are written; step 8's fails halfway
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match="No space left"):
        train(_recipe(tiny_world), _options(), out)
    monkeypatch.undo()
    ckpts = out / "checkpoints"
    assert not [p for p in ckpts.iterdir() if p.name.endswith(".tmp")]
    assert torch.load(ckpts / "last.ckpt", weights_only=True)["global_step"] == 4   # whole, the previous one
    resumed = train(_recipe(tiny_world), _options(resume=True), out)
    assert resumed["global_step"] == results["global_step"]
    assert _digest(out / "model" / "model.safetensors") == digest


def test_the_training_command_names_an_unusable_checkpoint_in_one_line(tiny_world, tmp_path):
    from composer.cli.train_baseline import main

    out = tmp_path / "run"
    args = ["--model", "vse", "--preset", "tiny", "--data", str(tiny_world / "captions.jsonl"),
            "--features", str(tiny_world / "features.h5"), "--batch-size", str(BATCH), "--max-regions", "6",
            "--eval-images", "6", "--epochs", "2", "--lr", "1e-3", "--no-test", "--quiet", "--out", str(out),
            "--accelerator", "cpu"]
    assert main([*args, "--max-steps", "1"]) == 0        # --max-steps is no setting of the run: it may resume
    last = out / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])            # truncated, no other checkpoint beside it
    before = _digest(last)
    with pytest.raises(SystemExit, match=r"error: --resume: no checkpoint in .*checkpoints can be loaded "
                                         r"\(.*last.ckpt: "):
        main([*args, "--resume"])
    assert _digest(last) == before                        # left as it was for the user to inspect
