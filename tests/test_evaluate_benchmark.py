"""The benchmark evaluation: a trained model scores the real SugarCrepe text against a synthetic feature store
keyed by its COCO ids; images the store lacks are counted, not dropped; the scoring rules on hand-made scores."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from composer.cli import evaluate_benchmark, train_composer
from composer.evaluation.benchmark import (benchmark_pairs, clip_benchmark_metrics, evaluate_benchmark as evaluate,
                                           record_correct)
from crg.benchmarks import Benchmark, BenchmarkRecord, read_benchmark

SUGARCREPE = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "sugarcrepe"
LIMIT = 4  # records per subset: 28 records, 56 texts to parse and score


@pytest.fixture(scope="module")
def sugarcrepe() -> Path:
    if not (SUGARCREPE / "swap_obj.json").is_file():
        pytest.skip(f"SugarCrepe text not found at {SUGARCREPE}")
    return SUGARCREPE


@pytest.fixture(scope="module")
def tiny_model(tiny_world, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench_run") / "composer"
    assert train_composer.main(["--data", str(tiny_world / "captions.jsonl"), "--features",
                                str(tiny_world / "features.h5"), "--preset", "tiny", "--batch-size", "8",
                                "--max-regions", "6", "--eval-images", "6", "--epochs", "1", "--max-steps", "2",
                                "--accelerator", "cpu", "--quiet", "--out", str(out)]) == 0
    return out / "model"


def _coco_store(path: Path, image_ids: list[str], dim: int) -> Path:
    from features.store import FeatureStoreWriter

    rng = np.random.default_rng(3)
    with FeatureStoreWriter(path, feature_dim=dim, source="synthetic, keyed by SugarCrepe's COCO ids") as w:
        for k, image_id in enumerate(image_ids):
            n = 3 + k % 4
            x1 = rng.uniform(0, 200, n)
            boxes = np.stack([x1, x1 / 2, x1 + 50, x1 / 2 + 60], 1).astype(np.float32)
            w.add(image_id, rng.standard_normal((n, dim)).astype(np.float32), boxes, 640, 480)
    return path


def test_sugarcrepe_on_a_synthetic_store_counts_the_missing_images(sugarcrepe, tiny_model, tiny_world, tmp_path):
    from features.store import FeatureStore

    bench = read_benchmark("sugarcrepe", sugarcrepe, limit=LIMIT)
    ids = sorted({str(int(r.image_id.split(".")[0])) for r in bench.records})
    left_out = ids[0]  # one image the store lacks: its records must be counted, not scored
    dim = FeatureStore(tiny_world / "features.h5").feature_dim
    store = _coco_store(tmp_path / "coco.h5", ids[1:], dim)
    out, table = tmp_path / "res.json", tmp_path / "runs.csv"
    args = ["--benchmark", "sugarcrepe", "--data-root", str(sugarcrepe), "--features", str(store), "--model",
            str(tiny_model), "--limit", str(LIMIT), "--out", str(out), "--csv", str(table), "--device", "cpu"]
    assert evaluate_benchmark.main(args) == 0
    res = json.loads(out.read_text())
    assert set(res) >= {"dataset", "model", "pretrained", "task", "metrics"}
    assert res["dataset"] == "sugarcrepe" and res["model"] == "composer"
    subsets = res["details"]["subsets"]
    assert set(subsets) == {"add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj"}
    expected_missing = {s: sum(1 for r in bench.records if r.subset == s and r.image_id.lstrip("0").startswith(
        left_out + ".")) for s in subsets}
    assert sum(expected_missing.values()) >= 1
    for name, s in subsets.items():
        assert s["records"] == LIMIT
        assert s["missing_image"] == expected_missing[name]
        assert s["scored"] + s["missing_image"] + s["unscorable_text"] == LIMIT
        assert s["acc"] is None or 0.0 <= s["acc"] <= 100.0
        assert res["metrics"][f"{name}_acc"] == s["acc"]
    assert res["missing_images"]["count"] == 1 and res["missing_images"]["first"] == [left_out]
    accs = [subsets[s]["acc"] for s in ("swap_obj", "swap_att")]
    if None not in accs:
        assert res["metrics"]["swap_avg"] == pytest.approx(sum(accs) / 2, abs=0.01)
    # the CSV has one row per metric, and a second run appends to it
    assert evaluate_benchmark.main(args) == 0
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 2 * len(res["metrics"])
    assert {r["metric"] for r in rows} == set(res["metrics"])


def test_the_scores_are_the_models_own(sugarcrepe, tiny_model, tiny_world, tmp_path):
    """Recompute one subset's accuracy from score_text_image_pairs directly: the command adds nothing."""
    from composer.cli.evaluate import load_model
    from composer.evaluation.text_pairs import programs_for_texts, score_text_image_pairs
    from features.store import FeatureStore

    bench = read_benchmark("sugarcrepe", sugarcrepe, limit=LIMIT)
    recs = [r for r in bench.records if r.subset == "replace_rel"]
    key = lambda raw: str(int(raw.split(".")[0]))
    dim = FeatureStore(tiny_world / "features.h5").feature_dim
    store_path = _coco_store(tmp_path / "s.h5", sorted({key(r.image_id) for r in bench.records}), dim)
    out = tmp_path / "r.json"
    assert evaluate_benchmark.main(["--benchmark", "sugarcrepe", "--data-root", str(sugarcrepe), "--features",
                                    str(store_path), "--model", str(tiny_model), "--limit", str(LIMIT), "--out",
                                    str(out), "--device", "cpu"]) == 0
    loaded = load_model(tiny_model)
    texts = [t for r in recs for t in r.texts]
    programs = programs_for_texts(texts)
    usable = [r for r in recs if all(programs[t] is not None for t in r.texts)]
    with FeatureStore(store_path) as store:
        wins = 0
        for r in usable:
            s = score_text_image_pairs(loaded.model, loaded.tokenizer, [(key(r.image_id), r.positives[0]),
                                                                        (key(r.image_id), r.negatives[0])],
                                       programs, store, max_regions=6)
            wins += bool(s[0] > s[1])
    got = json.loads(out.read_text())["details"]["subsets"]["replace_rel"]
    assert got["scored"] == len(usable)
    assert got["acc"] == round(100.0 * wins / len(usable), 2)


def test_a_store_with_none_of_the_images_is_refused_naming_the_id_format(sugarcrepe, tiny_model, tiny_world,
                                                                         tmp_path):
    from features.store import FeatureStore

    dim = FeatureStore(tiny_world / "features.h5").feature_dim
    bench = read_benchmark("sugarcrepe", sugarcrepe, limit=1)
    # the store is keyed by the file names' stems ("000000222235"), the default id format is int
    store = _coco_store(tmp_path / "stems.h5", sorted({r.image_id[:-4] for r in bench.records}), dim)
    with pytest.raises(SystemExit, match="try --id-format stem"):
        evaluate_benchmark.main(["--benchmark", "sugarcrepe", "--data-root", str(sugarcrepe), "--features",
                                 str(store), "--model", str(tiny_model), "--limit", "1", "--device", "cpu"])


def test_a_csv_with_other_columns_is_refused(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match="choose another file"):
        evaluate_benchmark.append_csv(path, [])
    assert path.read_text() == "a,b\n1,2\n"


# ---------------------------------------------------------------- the scoring rules, on hand-made scores
def _records():
    return [BenchmarkRecord("1", ("p",), ("n",), "a", category="on", where="r0"),
            BenchmarkRecord("1", ("q",), ("n", "m"), "a", category="in", where="r1"),
            BenchmarkRecord("2", ("p",), ("n",), "b", where="r2"),
            BenchmarkRecord("3", ("p",), ("z",), "b", where="r3"),
            BenchmarkRecord("4", ("p",), ("n",), "b", where="r4")]


def test_accuracy_ties_non_finite_missing_and_unscorable_against_a_naive_loop():
    bench = Benchmark("toy", _records(), {"both": ("a", "b")})
    scores = {("1", "p"): 1.0, ("1", "n"): 0.5, ("1", "q"): 0.7, ("1", "m"): 0.7,   # r1: a tie with m
              ("2", "p"): float("nan"), ("2", "n"): 0.0}                            # r2: non-finite
    res = evaluate(bench, scores, missing_images={"4"}, unscorable_texts={"z"})
    a, b = res["subsets"]["a"], res["subsets"]["b"]
    assert (a["acc"], a["scored"], a["correct"]) == (50.0, 2, 1)
    assert a["categories"] == {"in": {"acc": 0.0, "n": 1}, "on": {"acc": 100.0, "n": 1}} and a["macro_acc"] == 50.0
    assert (b["acc"], b["scored"], b["missing_image"], b["unscorable_text"]) == (0.0, 1, 1, 1)
    assert res["averages"] == {"both": 25.0}
    assert res["overall"] == {"acc": round(100 / 3, 2), "scored": 3, "records": 5, "correct": 1, "missing_image": 1,
                              "unscorable_text": 1}
    naive = [all(math.isfinite(scores[r.image_id, t]) for t in r.texts)
             and all(scores[r.image_id, p] > scores[r.image_id, n] for p in r.positives for n in r.negatives)
             for r in _records()[:3]]
    assert naive == [True, False, False]
    assert clip_benchmark_metrics(res) == {"acc": round(100 / 3, 2), "a_acc": 50.0, "a_macro_acc": 50.0,
                                           "b_acc": 0.0, "both_avg": 25.0}


def test_a_pair_left_unscored_is_an_error_naming_the_record():
    with pytest.raises(KeyError, match="r0: no score for the pair"):
        evaluate(Benchmark("toy", _records()[:1]), {("1", "p"): 1.0})


def test_an_average_over_a_subset_with_nothing_scored_is_none():
    res = evaluate(Benchmark("toy", _records()[2:3], {"b": ("b",)}), {}, missing_images={"2"})
    assert res["subsets"]["b"]["acc"] is None and res["averages"] == {"b": None}


def test_winoground_text_image_and_group_scores():
    recs = [BenchmarkRecord("i0", ("c0",), ("c1",), "w", group="0"), BenchmarkRecord("i1", ("c1",), ("c0",), "w",
                                                                                     group="0"),
            BenchmarkRecord("j0", ("d0",), ("d1",), "w", group="1"), BenchmarkRecord("j1", ("d1",), ("d0",), "w",
                                                                                     group="1")]
    scores = {("i0", "c0"): 3, ("i0", "c1"): 1, ("i1", "c1"): 2, ("i1", "c0"): 0,  # all right
              ("j0", "d0"): 3, ("j0", "d1"): 1, ("j1", "d1"): 2, ("j1", "d0"): 0.5}
    scores[("j1", "d0")] = 3.5   # j1 prefers d0: text wrong; d0 prefers j1: image wrong too
    res = evaluate(Benchmark("w", recs), {k: float(v) for k, v in scores.items()})
    assert res["winoground"] == {"text": 50.0, "image": 50.0, "group": 50.0, "groups": 2, "groups_not_scored": 0}
    scores[("j1", "d0")] = 0.5
    scores[("i1", "c0")] = 2.5   # i1 now prefers c0 (2.5 > 2): text wrong; c0 still prefers i0 (3 > 2.5)
    res = evaluate(Benchmark("w", recs), {k: float(v) for k, v in scores.items()})
    assert res["winoground"]["text"] == 50.0 and res["winoground"]["image"] == 100.0
    assert res["winoground"]["group"] == 50.0


def test_benchmark_pairs_are_distinct_and_keyed_like_the_store():
    recs = [BenchmarkRecord("000000000042.jpg", ("a",), ("b",), "s"), BenchmarkRecord("000000000042.jpg", ("b",),
                                                                                      ("a",), "s")]
    assert benchmark_pairs(recs, lambda raw: str(int(raw[:-4]))) == [("42", "a"), ("42", "b")]
    assert record_correct([1.0, 2.0], [0.5]) and not record_correct([1.0, 2.0], [1.5])
