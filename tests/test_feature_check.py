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
    """A clean store of five images ``100..104``, 3 to 7 regions each, 640x480, committed two at a time:
    block 0 holds 100, 101 (7 rows), block 1 holds 102, 103 (11 rows), block 2 holds 104 (7 rows)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "s.h5"
    with FeatureStoreWriter(path, commit_every=2) as w:
        for k in range(5):
            n = 3 + k
            boxes = np.tile(np.array([[10, 20, 300, 400]], np.float32), (n, 1))
            w.add(str(100 + k), rng.standard_normal((n, D)), boxes, 640, 480)
    return path


def rows(f, image_id):
    """``(block name, first row)`` of an image, from the index of the open file ``f``."""
    i = [s.decode() for s in f["index/image_id"][:]].index(image_id)
    return f"block_{int(f['index/block'][i]):06d}", int(f["index/row"][i])


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


def test_other_format_versions(store_path):
    with h5py.File(store_path, "a") as f:
        f.attrs["format_version"] = 99
    assert "upgrade grounded-composer" in only(validate_store(store_path), "version")
    with h5py.File(store_path, "a") as f:
        f.attrs["format_version"] = 1  # one dataset per image: no longer read
    msg = only(validate_store(store_path), "version")
    assert "format version 1" in msg and "convert the features again" in msg
    with pytest.raises(FeatureStoreError, match="reads version 2 only"):
        len(FeatureStore(store_path))
    with pytest.raises(FeatureStoreError, match="format version 1, this library writes 2; pass --overwrite"):
        FeatureStoreWriter(store_path)


def test_nan_and_inf(store_path):
    with h5py.File(store_path, "a") as f:
        block, row = rows(f, "102")
        f[f"features/{block}"][row + 1, 5] = np.nan
        block, row = rows(f, "103")
        f[f"boxes/{block}"][row, 2] = np.inf
    problems = validate_store(store_path)
    nan = [p for p in problems if p.code == "non_finite"]
    assert [p.image_id for p in nan] == ["102", "103"]
    assert "image '102': 1 NaN/Inf feature value(s), first at region 1 dim 5" in nan[0].message
    assert "image '103': NaN/Inf in boxes" in nan[1].message
    assert validate_store(store_path, check_values=False) == []  # a structure-only check cannot see values


def test_wrong_feature_dim_dtype_and_short_block(store_path):
    with h5py.File(store_path, "a") as f:
        del f["features/block_000000"]
        f["features"].create_dataset("block_000000", data=np.zeros((7, D + 1), np.float16))
        del f["features/block_000001"]
        f["features"].create_dataset("block_000001", data=np.zeros((11, D), np.float64))
        del f["features/block_000002"]
        f["features"].create_dataset("block_000002", data=np.zeros((5, D), np.float16))  # image 104 has 7 rows
    problems = validate_store(store_path)
    assert codes(problems) == ["shape", "dtype", "shape", "shape"]
    assert "features/block_000000 has shape (7, 13), expected (rows, 12) (2 image(s) ('100', '101'))" \
        in problems[0].message
    assert "features/block_000001 holds float64, the store says float16" in problems[1].message
    assert "image '104': the index puts its 7 rows at 0:7 of features/block_000002, which has 5 rows" \
        in problems[2].message
    assert "boxes/block_000002 has shape (7, 4), expected (5, 4) like its features" in problems[3].message
    assert [p.image_id for p in problems if p.severity == "error"] == ["100", "102", "104", "104"]


def test_block_rows_the_index_does_not_account_for(store_path):
    with h5py.File(store_path, "a") as f:
        f["index/row"][3] = 4  # image 103 (6 rows from row 5) now overlaps 102 (rows 0:5)
        del f["features/block_000002"], f["boxes/block_000002"]
        f["features"].create_dataset("block_000002", data=np.zeros((9, D), np.float16))  # 2 rows too many
        f["boxes"].create_dataset("block_000002", data=np.zeros((9, 4), np.float32))
    problems = validate_store(store_path)
    assert codes(problems) == ["index", "index"]
    assert "images '102' and '103' share rows of features/block_000001 (0:5 and 4:10)" in problems[0].message
    assert "features/block_000002 has 9 rows but its 1 image(s) ('104') own 7 of them" in problems[1].message


def test_boxes_shape_and_outside_the_image(store_path):
    with h5py.File(store_path, "a") as f:
        del f["boxes/block_000000"]
        f["boxes"].create_dataset("block_000000", data=np.zeros((7, 5), np.float32))
        block, row = rows(f, "103")
        f[f"boxes/{block}"][row] = [10, 20, 900, 400]  # x2 beyond the 640-pixel width
    problems = validate_store(store_path)
    assert "boxes/block_000000 has shape (7, 5), expected (7, 4) like its features" in only(problems, "shape")
    assert "bad_box" not in codes(problems)  # values are scanned only once the structure is sound
    with h5py.File(store_path, "a") as f:
        del f["boxes/block_000000"]
        f["boxes"].create_dataset("block_000000", data=np.tile(np.array([[0, 0, 5, 5]], np.float32), (7, 1)))
    msg = only(validate_store(store_path), "bad_box")
    assert "image '103': 1 box(es) outside the 640x480 image" in msg and "swapped" in msg


def test_index_referencing_a_missing_block(store_path):
    with h5py.File(store_path, "a") as f:
        del f["features/block_000001"]
    msg = only(validate_store(store_path), "index")
    assert "2 image(s) ('102', '103') are indexed in block 1, but there is no dataset features/block_000001" in msg
    with pytest.raises(FeatureStoreError, match=r"image '102' is indexed in block_000001 but its rows cannot be read"):
        FeatureStore(store_path).read("102")  # offsets are checked at open: the reader falls back, then fails
    with h5py.File(store_path, "a") as f:
        del f["boxes/block_000002"]
    assert "features/block_000002 has no boxes/block_000002 (1 image(s) ('104'))" in \
        [p.message for p in validate_store(store_path) if p.code == "index"][1]


def test_stale_offsets_are_a_warning(store_path):
    with h5py.File(store_path, "a") as f:
        f["index/features_offset"][2] += 2  # as if the file had been rewritten
    problems = validate_store(store_path)
    assert codes(problems) == [] and "reads go through h5py" in only(problems, "offsets")


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
    with h5py.File(store_path, "a") as f:  # an interrupted commit: its blocks written, the index not extended
        f["features"].create_dataset("block_000003", data=np.zeros((2, D), np.float16))
        f["boxes"].create_dataset("block_000003", data=np.zeros((2, 4), np.float32))
    problems = validate_store(store_path, ["100"])
    assert {p.code: p.severity for p in problems} == {"orphan": "warning", "extra_image": "warning"}
    assert "2 dataset(s) written but never committed" in only(problems, "orphan")
    require_valid_store(store_path, ["100"])  # warnings do not stop training


def test_require_valid_store_lists_problems_in_one_message(store_path):
    with h5py.File(store_path, "a") as f:
        for k in range(5):
            block, row = rows(f, str(100 + k))
            f[f"features/{block}"][row, 0] = np.inf
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
        f["features/block_000000"][0, 0] = np.nan
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
