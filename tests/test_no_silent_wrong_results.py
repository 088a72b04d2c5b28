"""Paths that used to give a wrong number or lose a result without a word (issue: no silent wrong
results). Each test reproduces the report's case and checks for a clear refusal or a correct result."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import torch

from composer.models.common.retrieval import NonFiniteScoreError, recall_at_k, recall_at_k_multi, score_matrix


# ---------------------------------------------------------------------------- non-finite scores
def test_recall_counts_a_non_finite_score_as_a_miss():
    assert recall_at_k(np.full((150, 30), np.nan), np.arange(150) // 5) == {"R@1": 0.0, "R@5": 0.0, "R@10": 0.0}
    scores = np.tile(np.arange(30.0), (150, 1))                   # image 29 wins every query
    target = np.arange(150) // 5
    clean = recall_at_k(scores, target)
    scores[:, 29] = np.nan                                           # the winner's features are damaged
    damaged = recall_at_k(scores, target)
    assert damaged["R@1"] <= clean["R@1"] and damaged["R@1"] == 0.0  # NaN neither wins nor helps a query
    one = np.array([[np.nan, 1.0, 0.5]])
    assert recall_at_k_multi(one, np.array([[True, False, False]]), ks=(1, 2)) == {"R@1": 0.0, "R@2": 0.0}
    assert recall_at_k_multi(-one, np.array([[False, True, False]]), ks=(1,)) == {"R@1": 0.0}  # NaN negative beats


class _NaNOnImage:
    """A scorer whose score is NaN on one image (as a damaged region feature makes it)."""

    def __init__(self, bad_image: int):
        self.bad_image = bad_image

    def score_pairs(self, regions, geometry, region_mask, chunk, pair_image, pair_caption):
        s = regions[pair_image, 0, 0].clone()                          # (P,)
        s[pair_image == self.bad_image] = float("nan")
        return s


def test_score_matrix_refuses_non_finite_scores_naming_caption_and_image(monkeypatch):
    from composer.models.composer import program

    monkeypatch.setattr(program.ProgramBatch, "collate", staticmethod(lambda programs, tokenizer: _Chunk(len(programs))))
    regions = torch.arange(4.0).view(4, 1, 1)
    with pytest.raises(NonFiniteScoreError, match=r"first: caption 'two dogs' \(row 0\) on image 'im2'"):
        score_matrix(_NaNOnImage(2), regions, regions, regions > -1, ["p0", "p1"], None,
                     caption_labels=["two dogs", "a cat"], image_labels=["im0", "im1", "im2", "im3"])
    res = score_matrix(_NaNOnImage(99), regions, regions, regions > -1, ["p0", "p1"], None)
    assert res.scores.shape == (2, 4)


class _Chunk:
    def __init__(self, n: int):
        self.num_captions = n


def test_evaluation_refuses_a_store_with_a_nan_value(tiny_world, tmp_path):
    from composer.evaluation.eval_sets import load_eval_data
    from features.store import FeatureStoreError

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    data = load_eval_data(str(world / "captions.jsonl"), features=str(world / "features.h5"), split="test",
                          eval_images=6, max_regions=6)
    assert len(data.image_ids) > 0
    data.store.close()
    with h5py.File(world / "features.h5", "a") as f:
        block = sorted(f["features"])[0]
        f[f"features/{block}"][0, 0] = np.nan
    with pytest.raises(FeatureStoreError, match="non_finite|NaN"):
        load_eval_data(str(world / "captions.jsonl"), features=str(world / "features.h5"), split="test",
                       eval_images=6, max_regions=6)


# ---------------------------------------------------------------------------- training run folders
def _train_vse(tiny_world, out, *extra):
    from composer.cli import train_baseline

    return train_baseline.main(["--model", "vse", "--data", str(tiny_world / "captions.jsonl"),
                                "--features", str(tiny_world / "features.h5"), "--preset", "tiny", "--batch-size", "8",
                                "--max-regions", "6", "--eval-images", "6", "--epochs", "1", "--lr", "1e-3",
                                "--accelerator", "cpu", "--ckpt-every-n-steps", "5", "--out", str(out), "--quiet",
                                *extra])


def test_training_refuses_to_mix_runs_and_saves_the_model_it_evaluated(tiny_world, tmp_path):
    import json

    out = tmp_path / "run"
    with pytest.raises(SystemExit, match="no run of train vse to resume"):
        _train_vse(tiny_world, out, "--resume")
    assert _train_vse(tiny_world, out) == 0
    results = json.loads((out / "results.json").read_text())
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    # the checkpoint holds the weights of the end of training, not of the last every-N-steps save
    assert ckpt["global_step"] == results["global_step"] > 5 and results["global_step"] % 5 != 0
    assert not list((out / "checkpoints").glob("last-v*.ckpt"))

    with pytest.raises(SystemExit, match="--resume to continue it or --overwrite to replace it"):
        _train_vse(tiny_world, out)
    with pytest.raises(SystemExit, match=r"other settings \(recipe\.optim\.lr: 0\.001 there, 0\.002 now"):
        _train_vse(tiny_world, out, "--resume", "--lr", "2e-3")
    with pytest.raises(SystemExit, match="recipe.preset: tiny there, small now"):
        _train_vse(tiny_world, out, "--resume", "--preset", "small")
    assert _train_vse(tiny_world, out, "--resume") == 0                 # same settings: continues (nothing left)
    assert json.loads((out / "results.json").read_text())["global_step"] == results["global_step"]
    assert _train_vse(tiny_world, out, "--overwrite", "--lr", "2e-3") == 0
    assert json.loads((out / "run.json").read_text())["settings"]["recipe"]["optim"]["lr"] == 2e-3
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["version_0"]  # the old run's logs are gone


# ---------------------------------------------------------------------------- build_crg
def _build(*args, tmp_path):
    from crg.cli.build_crg import main

    return main([*map(str, args), "--cache", str(tmp_path / "cache.sqlite"), "--quiet"])


def test_build_crg_output_folder_policy_and_stale_dump(tmp_path):
    from conftest import ROOT

    toy = ROOT / "crg" / "data" / "toy_captions.jsonl"
    out = tmp_path / "g"
    assert _build("--captions", toy, "--split", "train", "--out", out, "--dump", tmp_path=tmp_path) == 0
    assert (out / "captions.jsonl").exists()
    with pytest.raises(SystemExit, match="--resume to continue it or --overwrite"):
        _build("--captions", toy, "--split", "train", "--out", out, tmp_path=tmp_path)
    with pytest.raises(SystemExit, match="dump: True there, False now"):
        _build("--captions", toy, "--split", "train", "--out", out, "--resume", tmp_path=tmp_path)
    # a rebuild without --dump must not leave the old dump beside the new graph
    assert _build("--captions", toy, "--split", "train,val", "--out", out, "--overwrite", tmp_path=tmp_path) == 0
    assert not (out / "captions.jsonl").exists()
    assert _build("--captions", toy, "--split", "train,val", "--out", out, "--resume", tmp_path=tmp_path) == 0


def test_build_crg_refuses_empty_binary_and_folder_corpora(tmp_path):
    from conftest import ROOT

    toy = ROOT / "crg" / "data" / "toy_captions.jsonl"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit, match="has no caption"):
        _build("--captions", empty, "--out", tmp_path / "a", tmp_path=tmp_path)
    with pytest.raises(SystemExit, match=r"no images in split\(s\) \['nosuchsplit'\]; the corpus has"):
        _build("--captions", toy, "--split", "nosuchsplit", "--out", tmp_path / "b", tmp_path=tmp_path)
    binary = tmp_path / "caps.tsv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe\tbinary")
    with pytest.raises(SystemExit, match=r"caps\.tsv: not UTF-8 text"):
        _build("--captions", binary, "--out", tmp_path / "c", tmp_path=tmp_path)
    unknown = tmp_path / "caps.dat"
    unknown.write_bytes(b"\xff\xfe\x00binary\n")
    with pytest.raises(SystemExit, match=r"caps\.dat: not UTF-8 text"):
        _build("--captions", unknown, "--out", tmp_path / "d", tmp_path=tmp_path)
    with pytest.raises(SystemExit, match="is a folder: give the caption file"):
        _build("--captions", tmp_path, "--out", tmp_path / "e", tmp_path=tmp_path)
    scan = tmp_path / "test_caps.txt"
    scan.write_text("a dog runs\n")
    with pytest.raises(SystemExit, match="--scan-ids FILE"):
        _build("--captions", scan, "--out", tmp_path / "f", tmp_path=tmp_path)
    assert not any((tmp_path / d).exists() and any((tmp_path / d).iterdir()) for d in "abcdef")


# ---------------------------------------------------------------------------- the world
def test_regenerating_a_world_with_other_settings_is_refused(tmp_path):
    import json

    from crg.outputs import OutputDirError
    from features.check import validate_store
    from features.world.generate import GenerateConfig, generate_world
    from features.world.scene import WorldConfig

    out = tmp_path / "w"
    cfg = GenerateConfig(num_images=30, seed=1, render=0, workers=1)
    generate_world(out, cfg, progress=False)
    first = (out / "captions.jsonl").read_bytes()
    other = GenerateConfig(num_images=30, seed=1, render=0, workers=1, world=WorldConfig(max_objects=3))
    with pytest.raises(OutputDirError, match=r"other settings \(config\.world\.max_objects: \d+ there, 3 now"):
        generate_world(out, other, progress=False)
    assert (out / "captions.jsonl").read_bytes() == first             # nothing was touched
    generate_world(out, cfg, progress=False)                          # same settings: resumes, same bytes
    assert (out / "captions.jsonl").read_bytes() == first
    generate_world(out, other, progress=False, mode="overwrite")      # told to: a consistent new world
    world = json.loads((out / "world.json").read_text())
    assert world["config"]["world"]["max_objects"] == 3
    scenes = [json.loads(line) for line in __import__("gzip").open(out / "scenes.jsonl.gz", "rt")]
    assert max(len(s["objects"]) for s in scenes) <= 3
    from crg.corpus import read_corpus

    assert [p for p in validate_store(out / "features.h5", read_corpus(out / "captions.jsonl"))
            if p.severity == "error"] == []
    stray = tmp_path / "mine"
    stray.mkdir()
    (stray / "notes.txt").write_text("keep me")
    with pytest.raises(OutputDirError, match="pass --overwrite"):
        generate_world(stray, cfg, progress=False)


def test_a_store_damaged_in_place_with_its_mtime_restored_is_scanned_again(tiny_world, tmp_path):
    import os

    from features.check import require_valid_store
    from features.store import FeatureStoreError

    store = tmp_path / "features.h5"
    shutil.copy(tiny_world / "features.h5", store)
    require_valid_store(store)                                  # clean: remembered
    before = os.stat(store)
    with h5py.File(store, "a") as f:
        block = sorted(f["features"])[0]
        f[f"features/{block}"][0, 0] = np.nan
    os.utime(store, ns=(before.st_atime_ns, before.st_mtime_ns))  # hide the write from size + mtime
    with pytest.raises(FeatureStoreError, match="non_finite|NaN"):
        require_valid_store(store)


def test_a_run_without_a_terminal_logs_its_progress(tiny_world, tmp_path, caplog):
    import logging

    from composer.training.fit import TrainerOptions, train
    from composer.training.recipes import RecipeOverrides, named_recipe

    recipe = named_recipe("vse", str(tiny_world / "captions.jsonl"), RecipeOverrides(
        preset="tiny", features=str(tiny_world / "features.h5"), batch_size=8, max_regions=6, eval_images=6,
        epochs=1, lr=1e-3))
    with caplog.at_level(logging.INFO, logger="composer.training.fit"):
        train(recipe, TrainerOptions(accelerator="cpu", progress=False, test=False, log_every_seconds=0.0),
              tmp_path / "run")
    lines = [r.getMessage() for r in caplog.records if "steps/s" in r.getMessage()]
    assert lines and lines[-1].startswith("step ") and "ETA" in lines[-1]
