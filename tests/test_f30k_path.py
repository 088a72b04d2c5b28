"""``--data f30k`` end to end on a 100-image slice of the real Flickr30K captions (issue 19).

benchmarks/bench_f30k_path.py writes a synthetic bottom-up-attention TSV for the slice's images (in the
real format: base64 float32 boxes and 2048-d features, in 4 parts), converts it with
``features.convert_butd_tsv``, checks the store with ``features.check``, trains COMPOSER for a few steps
with ``train_composer.py --data f30k``, scores the slice's whole test split, trains a VSE first stage and
reranks its shortlist with ``gc-evaluate``. The full-size run (31,014 images, 1K x 5K test) is in
docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_f30k_path_end_to_end_on_a_100_image_slice(shared_data, tmp_path):
    work = tmp_path / "f30k100"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_f30k_path.py"), "--captions",
           str(shared_data / "flickr30k" / "captions.jsonl"), "--images", "100", "--work", str(work),
           "--steps", "4", "--batch-size", "4", "--rerank-k", "5"]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:]
    bench = json.loads((work / "bench.json").read_text())
    assert bench["images"] == {"train": 70, "val": 15, "test": 15}
    assert set(bench["timings_s"]) == {"write_tsv", "convert", "check", "train", "train_vse", "vse_scores", "rerank"}
    check = (work / "logs" / "check.log").read_text()
    assert "OK: " in check and "2048-d" in check and "all 100 corpus images present" in check

    results = json.loads((work / "composer" / "results.json").read_text())
    assert results["global_step"] == 4
    assert results["config"]["data"]["data"] == "f30k" and results["config"]["model"]["visual"]["region_dim"] == 2048
    assert results["config"]["model"]["text_model"] is None             # --preset small, not the paper's BERT
    test = results["test"]
    assert (test["num_images"], test["num_captions"]) == (15, 75)      # every test image and caption of the slice
    assert (work / "composer" / "model" / "model.safetensors").exists()

    rerank = bench["rerank"]
    assert rerank["k"] == 5 and rerank["pairs_scored"] == 75 * 5 and rerank["pairs_full"] == 75 * 15
    assert rerank["first_stage"] == bench["first_stage_vse"]          # the VSE scores gc-evaluate saved
    assert 0 <= rerank["shortlist_recall"] <= 100
    # the reranked R@K of a K inside the shortlist cannot beat what the shortlist holds
    assert rerank["reranked"]["R@5"] <= rerank["shortlist_recall"] + 1e-9
