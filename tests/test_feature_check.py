"""Every broken-store case gives a specific message, from the check tool and from require_valid_store alike."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from features.check import main as check_main
from features.check import require_valid_store, validate_store
from features.store import FeatureStore, FeatureStoreError, FeatureStoreWriter

D = 12


@pytest.fixture
def store_path(tmp_path):
    """A clean store of five images ``100..104``, 3 to 7 regions each, 640x480."""
    rng = np.random.default_rng(0)
    path = tmp_path / "s.h5"
    with FeatureStoreWriter(path) as w:
        for k in range(5):
            n = 3 + k
            boxes = np.tile(np.array([[10, 20, 300, 400]], np.float32), (n, 1))
            w.add(str(100 + k), rng.standard_normal((n, D)), boxes, 640, 480)
    return path


def codes(problems):
    return [p.code for p in problems if p.severity == "error"]


def only(problems, code):
    found = [p for p in problems if p.code == code]
    assert found, f"no {code!r} problem among {[str(p) for p in problems]}"
    return found[0].message


def test_clean_store_passes(store_path):
    assert validate_store(store_path, [str(i) for i in range(100, 105)]) == []
    assert codes(validate_store(store_path, ["100", "104"])) == []  # a warning: 3 images not in the corpus
    require_valid_store(store_path, ["100"])


def test_missing_file(tmp_path):
    msg = only(validate_store(tmp_path / "nope.h5"), "missing_file")
    assert "nope.h5 does not exist" in msg and "docs/features.md" in msg


def test_truncated_file(store_path):
    data = store_path.read_bytes()
    store_path.write_bytes(data[: len(data) * 2 // 3])
    msg = only(validate_store(store_path), "truncated")
    assert "the file is truncated" in msg and "copy it again" in msg
    with pytest.raises(FeatureStoreError, match="truncated"):  # readers say the same
        len(FeatureStore(store_path))


def test_not_hdf5_and_not_a_store(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"<html>404 Not Found</html>" * 10)  # what a dead download link leaves behind
    assert "not an HDF5 file" in only(validate_store(junk), "not_hdf5")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["features"] = np.zeros((3, 4))
    assert "not a grounded-composer feature store" in only(validate_store(other), "not_a_store")
    with pytest.raises(FeatureStoreError, match="not a grounded-composer feature store"):
        FeatureStore(other).read("x")


def test_newer_format_version(store_path):
    with h5py.File(store_path, "a") as f:
        f.attrs["format_version"] = 99
    assert "upgrade grounded-composer" in only(validate_store(store_path), "version")


def test_nan_and_inf(store_path):
    with h5py.File(store_path, "a") as f:
        f["features/102"][1, 5] = np.nan
        f["boxes/103"][0, 2] = np.inf
    problems = validate_store(store_path)
    nan = [p for p in problems if p.code == "non_finite"]
    assert [p.image_id for p in nan] == ["102", "103"]
    assert "image '102': 1 NaN/Inf feature value(s), first at region 1 dim 5" in nan[0].message
    assert "image '103': NaN/Inf in boxes" in nan[1].message
    assert validate_store(store_path, check_values=False) == []  # a structure-only check cannot see values


def test_wrong_feature_dim_dtype_and_region_count(store_path):
    with h5py.File(store_path, "a") as f:
        del f["features/100"]
        f["features"].create_dataset("100", data=np.zeros((3, D + 1), np.float16))
        del f["features/101"]
        f["features"].create_dataset("101", data=np.zeros((4, D), np.float64))
        del f["features/102"]
        f["features"].create_dataset("102", data=np.zeros((9, D), np.float16))
    problems = validate_store(store_path)
    assert codes(problems) == ["shape", "dtype", "shape"]
    assert "image '100': features have shape (3, 13), expected (N, 12)" in problems[0].message
    assert "image '101': features are float64, the store says float16" in problems[1].message
    assert "image '102': 9 feature rows but the index says 5" in problems[2].message


def test_boxes_shape_and_outside_the_image(store_path):
    with h5py.File(store_path, "a") as f:
        del f["boxes/100"]
        f["boxes"].create_dataset("100", data=np.zeros((3, 5), np.float32))
        f["boxes/101"][0] = [10, 20, 900, 400]  # x2 beyond the 640-pixel width
    problems = validate_store(store_path)
    assert "image '100': boxes have shape (3, 5), expected (3, 4)" in only(problems, "shape")
    assert "bad_box" not in codes(problems)  # values are scanned only once the structure is sound
    with h5py.File(store_path, "a") as f:
        del f["boxes/100"]
        f["boxes"].create_dataset("100", data=np.tile(np.array([[0, 0, 5, 5]], np.float32), (3, 1)))
    msg = only(validate_store(store_path), "bad_box")
    assert "image '101': 1 box(es) outside the 640x480 image" in msg and "swapped" in msg


def test_indexed_image_without_datasets(store_path):
    with h5py.File(store_path, "a") as f:
        del f["features/103"]
    msg = only(validate_store(store_path), "index")
    assert "image '103' is indexed but has no features dataset" in msg


def test_corpus_images_missing_from_the_store(store_path):
    msg = only(validate_store(store_path, ["100", "101", "555", "556"]), "missing_image")
    assert "2 of 4 images" in msg and "'555', '556'" in msg and "converters resume" in msg


def test_ids_spelled_differently_from_the_corpus(tmp_path):
    path = tmp_path / "files.h5"
    with FeatureStoreWriter(path) as w:
        for i in (391895, 60623):
            w.add(f"COCO_val2014_{i:012d}", np.ones((2, D)), np.array([[0, 0, 1, 1]] * 2, np.float32), 10, 10)
    msg = only(validate_store(path, ["391895", "60623"]), "id_mismatch")
    assert "none of the 2 image ids" in msg and "--id-format int" in msg


def test_feature_dim_the_model_expects(store_path):
    msg = only(validate_store(store_path, feature_dim=2048), "feature_dim")
    assert "holds 12-d features but 2048-d are expected" in msg


def test_orphans_and_extra_images_are_warnings(store_path):
    with h5py.File(store_path, "a") as f:
        f["features"].create_dataset("999", data=np.zeros((2, D), np.float16))
    problems = validate_store(store_path, ["100"])
    assert {p.code: p.severity for p in problems} == {"orphan": "warning", "extra_image": "warning"}
    require_valid_store(store_path, ["100"])  # warnings do not stop training


def test_require_valid_store_lists_problems_in_one_message(store_path):
    with h5py.File(store_path, "a") as f:
        for k in range(5):
            f[f"features/{100 + k}"][0, 0] = np.inf
    with pytest.raises(FeatureStoreError) as err:
        require_valid_store(store_path, ["100", "777"], max_listed=3)
    text = str(err.value)
    assert text.startswith(f"feature store {store_path} is not usable (6 problem(s), first 3 shown):")
    assert "[non_finite] image '100'" in text and "python -m features.check" in text
    assert "[missing_image]" not in text  # beyond the first 3


def test_require_valid_store_scans_values_once_per_file_version(store_path, monkeypatch):
    import features.check as check

    scans = []
    real = check._check_values
    monkeypatch.setattr(check, "_check_values", lambda *a: scans.append(1) or real(*a))
    require_valid_store(store_path)
    require_valid_store(store_path)
    assert len(scans) == 1  # the clean scan was remembered
    with h5py.File(store_path, "a") as f:  # the file changes: scan again, and find it
        f["features/100"][0, 0] = np.nan
    with pytest.raises(FeatureStoreError, match="non_finite"):
        require_valid_store(store_path)
    assert len(scans) == 2


def test_cli_exit_status_and_report(store_path, tmp_path, capsys):
    corpus = tmp_path / "caps.jsonl"
    corpus.write_text("".join(json.dumps({"image_id": str(i), "split": s, "captions": ["a cat."]}) + "\n"
                              for i, s in [(100, "train"), (101, "test"), (500, "test")]))
    assert check_main([str(store_path), "--captions", str(corpus), "--split", "train", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "OK: " in out and "5 images, 12-d float16 features, regions per image 3-7" in out
    assert "all 1 corpus images present" in out
    assert check_main([str(store_path), "--captions", str(corpus), "--split", "test", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "error: [missing_image] 1 of 2 images" in out and "FAIL" in out
