"""gc-evaluate-benchmark's CLIP_benchmark files: the keys its ``eval`` command writes (dataset, model,
pretrained, task, metrics, language), one file per SugarCrepe subset named as CLIP_benchmark names them
(sugar_crepe/<subset>), accuracy as a fraction of the counts, and files its ``build`` command can merge
(each file's metrics flattened into the row beside the other keys, model_fullname = model + pretrained,
as its README documents; re-done here, not imported)."""

import csv
import io
import json

import pytest

from composer.evaluation.benchmark import (
    CLIP_BENCHMARK_KEYS, clip_benchmark_filename, clip_benchmark_results, evaluate_benchmark,
    write_clip_benchmark_results)
from crg.benchmarks import Benchmark, BenchmarkRecord

#: CLIP_benchmark's README: ``--dataset=sugar_crepe/<TASK>``, TASK among these seven.
SUGAR_CREPE_DATASETS = {f"sugar_crepe/{t}" for t in ("add_att", "add_obj", "replace_att", "replace_obj",
                                                     "replace_rel", "swap_att", "swap_obj")}


def _toy_sugarcrepe():
    subsets = sorted(d.split("/")[1] for d in SUGAR_CREPE_DATASETS)
    records, scores = [], {}
    for k, sub in enumerate(subsets):
        for j in range(k + 1):  # subset k has k + 1 records, the first k right
            image = f"{sub}{j}"
            records.append(BenchmarkRecord(image, (f"pos {sub} {j}",), (f"neg {sub} {j}",), sub, where=f"{sub}:{j}"))
            scores[image, f"pos {sub} {j}"] = 1.0 if j < k else 0.0
            scores[image, f"neg {sub} {j}"] = 0.5
    return Benchmark("sugarcrepe", records, {"all": tuple(subsets)}), scores, subsets


def build_rows(files):
    """CLIP_benchmark's ``build`` as documented: one row per file, metrics flattened next to the other keys."""
    rows = []
    for path in files:
        data = json.loads(path.read_text())
        row = dict(data["metrics"])
        row.update({k: v for k, v in data.items() if k != "metrics"})
        row["model_fullname"] = row["model"] + " " + row["pretrained"]
        rows.append(row)
    return rows


def test_one_result_per_subset_with_clip_benchmarks_keys_and_fractions(tmp_path):
    bench, scores, subsets = _toy_sugarcrepe()
    result = evaluate_benchmark(bench, scores)
    results = clip_benchmark_results(result, benchmark="sugarcrepe", model="composer", pretrained="runs/x/model")
    assert {r["dataset"] for r in results} == SUGAR_CREPE_DATASETS
    for r in results:
        assert tuple(r) == CLIP_BENCHMARK_KEYS == ("dataset", "model", "pretrained", "task", "metrics", "language")
        assert r["task"] == "image_caption_selection" and r["language"] == "en"
        k = subsets.index(r["dataset"].split("/")[1])
        assert r["metrics"] == {"acc": pytest.approx(k / (k + 1))}  # a fraction, not a percentage
        assert 0.0 <= r["metrics"]["acc"] <= 1.0
        assert r["metrics"]["acc"] * 100 == pytest.approx(result["subsets"][r["dataset"].split("/")[1]]["acc"], abs=0.01)
    files = write_clip_benchmark_results(tmp_path / "cb", results)
    assert len({p.name for p in files}) == 7 and all(p.parent == tmp_path / "cb" for p in files)
    assert "benchmark_sugar_crepe_swap_att_model_composer_en_image_caption_selection.json" in {p.name for p in files}
    rows = build_rows(files)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=sorted({k for r in rows for k in r}))
    writer.writeheader()
    writer.writerows(rows)
    table = list(csv.DictReader(io.StringIO(buffer.getvalue())))
    assert {r["dataset"] for r in table} == SUGAR_CREPE_DATASETS
    assert {r["model_fullname"] for r in table} == {"composer runs/x/model"}
    assert all(0.0 <= float(r["acc"]) <= 1.0 for r in table)


def test_subsets_without_a_scored_record_have_no_result_and_other_benchmarks_keep_their_name():
    result = {"subsets": {"a": {"acc": None, "correct": 0, "scored": 0}, "b": {"acc": 100.0, "correct": 2, "scored": 2}}}
    out = clip_benchmark_results(result, benchmark="crepe", model="m", pretrained="p", language="de")
    assert [(r["dataset"], r["metrics"]["acc"], r["language"]) for r in out] == [("crepe/b", 1.0, "de")]
    assert clip_benchmark_filename(out[0]) == "benchmark_crepe_b_p_m_de_image_caption_selection.json"
