"""Converters round-trip synthesised files in each real format: BUTD/LXMERT TSV, SCAN .npy, LMDB; plus the
caption corpora they pair with (Karpathy JSON, SCAN caps), resume after a kill, and broken records."""

from __future__ import annotations

import base64
import json
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import lmdb
import numpy as np
import pytest

from crg.corpus import parse_splits, read_corpus
from features.check import validate_store
from features.convert_butd_tsv import convert_butd_tsv
from features.convert_butd_tsv import main as tsv_main
from features.convert_lmdb import convert_lmdb, encode_npz_record
from features.convert_lmdb import main as lmdb_main
from features.convert_scan_npy import convert_scan_npy
from features.convert_scan_npy import main as scan_main
from features.ingest import ConversionError
from features.store import FeatureStore

ROOT = Path(__file__).resolve().parents[1]
D = 20


def synth(n_images=6, seed=0, ids=None):
    """``[(image_id, features (N, D) float32, boxes (N, 4) float32, w, h)]`` with varied N."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_images):
        n = 2 + (k * 3) % 7
        w, h = int(rng.integers(100, 640)), int(rng.integers(80, 480))
        x1, y1 = rng.uniform(0, w / 2, n), rng.uniform(0, h / 2, n)
        boxes = np.stack([x1, y1, x1 + rng.uniform(1, w / 2, n), y1 + rng.uniform(1, h / 2, n)], 1)
        image_id = ids[k] if ids else str(391895 + 7 * k)
        out.append((image_id, np.abs(rng.standard_normal((n, D))).astype(np.float32), boxes.astype(np.float32), w, h))
    return out


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.float32).tobytes()).decode("ascii")


def butd_line(image_id, f, b, w, h) -> str:
    return "\t".join([image_id, str(w), str(h), str(len(f)), b64(b), b64(f)]) + "\n"


def lxmert_line(image_id, f, b, w, h) -> str:
    n = len(f)
    ints = base64.b64encode(np.zeros(n, np.int64).tobytes()).decode()
    confs = b64(np.ones(n))
    return "\t".join([image_id, str(h), str(w), ints, confs, ints, confs, str(n), b64(b), b64(f)]) + "\n"


def assert_store_matches(path, images, boxes=True):
    store = FeatureStore(path)
    assert store.image_ids == [i[0] for i in images]
    for image_id, f, b, w, h in images:
        feats, got_boxes = store.read_raw(image_id)
        np.testing.assert_allclose(feats.astype(np.float32), f, rtol=1e-3, atol=1e-3)
        if boxes:
            np.testing.assert_array_equal(got_boxes, b)
            assert store.image_size(image_id) == (w, h)
        else:
            assert got_boxes is None and store.image_size(image_id) == (0, 0)
    store.close()


# ---- bottom-up TSV -------------------------------------------------------------------------------------


def test_butd_tsv_round_trip_across_files_and_layouts(tmp_path):
    images = synth(6)
    a, b = tmp_path / "part.tsv.0", tmp_path / "part.tsv.1"
    a.write_text("".join(butd_line(*im) for im in images[:3]))
    # LXMERT column order (img_h before img_w), a header, and Python-3 "b'...'" wrapped base64
    rows = [lxmert_line(*im) for im in images[3:5]]
    f, bx = images[5][1], images[5][2]
    rows.append("\t".join([images[5][0], str(images[5][3]), str(images[5][4]), str(len(f)),
                           repr(base64.b64encode(bx.tobytes())), repr(base64.b64encode(f.tobytes()))]) + "\n")
    b.write_text("img_id\timg_h\timg_w\tobjects_id\tobjects_conf\tattrs_id\tattrs_conf\tnum_boxes\tboxes\tfeatures\n"
                 + "".join(rows))
    out = tmp_path / "s.h5"
    stats = convert_butd_tsv([a, b], out, progress=False, commit_every=2)
    assert stats.written == 6 and stats.regions == sum(len(i[1]) for i in images)
    assert_store_matches(out, images)
    assert "bottom-up-attention TSV: part.tsv.0, part.tsv.1" in FeatureStore(out).source
    assert validate_store(out) == []


def test_butd_tsv_resume_skips_what_is_there(tmp_path):
    images = synth(5)
    full = tmp_path / "all.tsv"
    full.write_text("".join(butd_line(*im) for im in images))
    first = tmp_path / "first.tsv"
    first.write_text("".join(butd_line(*im) for im in images[:2]))
    out = tmp_path / "s.h5"
    convert_butd_tsv([first], out, progress=False)
    stats = convert_butd_tsv([full], out, progress=False)
    assert (stats.written, stats.skipped_existing) == (3, 2)
    assert_store_matches(out, images)


def test_butd_tsv_truncated_line_names_file_and_line(tmp_path, capsys):
    images = synth(3)
    tsv = tmp_path / "cut.tsv"
    lines = [butd_line(*im) for im in images]
    tsv.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2] + "\n")  # a download cut mid-line
    out = tmp_path / "s.h5"
    with pytest.raises(ConversionError, match=rf"cut\.tsv:3 \(image '{images[2][0]}'\): .*cut short.*--skip-bad"):
        convert_butd_tsv([tsv], out, progress=False)
    assert FeatureStore(out).image_ids == [images[0][0], images[1][0]]  # what came before is committed
    assert tsv_main([str(tsv), "--out", str(out), "--no-progress"]) == 2
    assert "cut.tsv:3" in capsys.readouterr().err
    assert tsv_main([str(tsv), "--out", str(out), "--no-progress", "--skip-bad"]) == 0
    assert "1 broken records skipped (first: " in capsys.readouterr().out


def test_butd_tsv_wrong_column_count_and_bad_numbers(tmp_path):
    tsv = tmp_path / "x.tsv"
    tsv.write_text("1\t2\t3\n")
    with pytest.raises(ConversionError, match=r"x\.tsv:1 .*3 tab-separated columns; expected 6"):
        convert_butd_tsv([tsv], tmp_path / "s.h5", progress=False)
    im = synth(1)[0]
    tsv.write_text(butd_line(*im).replace(f"\t{len(im[1])}\t", "\tmany\t", 1))
    with pytest.raises(ConversionError, match="num_boxes must be numbers"):
        convert_butd_tsv([tsv], tmp_path / "s2.h5", progress=False)


def _read_until(stream, needle: str, timeout: float) -> str:
    seen, deadline = "", time.time() + timeout
    while needle not in seen:
        left = deadline - time.time()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            raise AssertionError(f"timed out waiting for {needle!r}; got:\n{seen}")
        chunk = os.read(stream.fileno(), 65536).decode()
        if not chunk:
            raise AssertionError(f"process ended before {needle!r}; got:\n{seen}")
        seen += chunk
    return seen


def test_sigkill_between_commits_leaves_a_valid_store_that_resumes(tmp_path):
    """The converter reads a FIFO; after it logs its second commit it waits for input, and is SIGKILLed."""
    images = synth(10)
    lines = [butd_line(*im) for im in images]
    fifo = tmp_path / "stream.tsv"
    os.mkfifo(fifo)
    out = tmp_path / "s.h5"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "features.convert_butd_tsv", str(fifo), "--out", str(out),
                             "--commit-every", "3", "--no-progress", "-v"], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        with open(fifo, "w") as f:
            f.write("".join(lines[:7]))  # 2 commits of 3, one image pending
            f.flush()
            _read_until(proc.stderr, "(6 total)", timeout=60)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert FeatureStore(out).image_ids == [im[0] for im in images[:6]]
    assert validate_store(out) == []
    whole = tmp_path / "whole.tsv"
    whole.write_text("".join(lines))
    stats = convert_butd_tsv([whole], out, progress=False)
    assert (stats.written, stats.skipped_existing) == (4, 6)
    assert_store_matches(out, images)


# ---- SCAN precomputed .npy -------------------------------------------------------------------------------


def test_scan_npy_round_trip_with_its_caption_file(tmp_path, caplog):
    rng = np.random.default_rng(3)
    ims = rng.standard_normal((4, 3, D)).astype(np.float32)
    np.save(tmp_path / "test_ims.npy", ims)
    ids = ["11", "22", "33", "44"]
    (tmp_path / "test_ids.txt").write_text("".join(f"{i}\n" for i in ids))
    (tmp_path / "test_caps.txt").write_text("".join(f"caption {k} of image {k // 5}\n" for k in range(20)))
    out = tmp_path / "scan.h5"
    stats = convert_scan_npy(tmp_path / "test_ims.npy", out, progress=False)
    assert stats.written == 4
    assert "carry no boxes" in caplog.text
    assert_store_matches(out, [(i, ims[k], None, 0, 0) for k, i in enumerate(ids)], boxes=False)
    store = FeatureStore(out)
    assert not store.boxes_known and "no boxes" in store.source
    r = store.read("22", max_regions=3)
    assert not r.geometry[1:].any() and r.mask.all()
    corpus = read_corpus(tmp_path / "test_caps.txt")  # SCAN caps + ids: the pairing the corpus reader sees
    assert corpus.image_ids == ids and corpus.images[1].captions[0] == "caption 5 of image 1"
    assert validate_store(out, corpus) == []


def test_scan_npy_per_caption_rows_and_ids(tmp_path):
    rng = np.random.default_rng(4)
    per_image = rng.standard_normal((3, 2, D)).astype(np.float32)
    np.save(tmp_path / "dev_ims.npy", np.repeat(per_image, 5, axis=0))  # one row per caption (im_div = 5)
    (tmp_path / "dev_ids.txt").write_text("".join(f"{k // 5 + 100}\n" for k in range(15)))  # one id per caption
    out = tmp_path / "s.h5"
    convert_scan_npy(tmp_path / "dev_ims.npy", out, progress=False)
    assert_store_matches(out, [(str(100 + k), per_image[k], None, 0, 0) for k in range(3)], boxes=False)


def test_scan_npy_without_ids_explains_the_options(tmp_path, capsys):
    np.save(tmp_path / "train_ims.npy", np.zeros((2, 3, D), np.float32))
    out = tmp_path / "s.h5"
    assert scan_main([str(tmp_path / "train_ims.npy"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "train_ids.txt does not exist" in err and "--ids FILE" in err and "--row-ids" in err
    assert scan_main([str(tmp_path / "train_ims.npy"), "--out", str(out), "--no-progress", "--row-ids"]) == 0
    assert FeatureStore(out).image_ids == ["0", "1"]
    (tmp_path / "bad_ids.txt").write_text("1\n2\n3\n")
    with pytest.raises(ConversionError, match=r"3 image ids do not match the 2 rows"):
        convert_scan_npy(tmp_path / "train_ims.npy", tmp_path / "t.h5", ids_path=tmp_path / "bad_ids.txt",
                         progress=False)


# ---- LMDB -----------------------------------------------------------------------------------------------------


def _write_lmdb(path: Path, items: dict[bytes, bytes]) -> None:
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for k, v in items.items():
            txn.put(k, v)
    env.close()


def test_lmdb_npz_and_json_values_round_trip(tmp_path):
    images = synth(4)
    items = {}
    for k, (image_id, f, b, w, h) in enumerate(images):
        if k % 2:  # ViLBERT's dict, as JSON instead of pickle
            items[image_id.encode()] = json.dumps({"image_id": image_id, "image_w": w, "image_h": h,
                                                   "num_boxes": len(f), "boxes": b64(b), "features": b64(f)}).encode()
        else:
            items[image_id.encode()] = encode_npz_record(f, b, w, h)
    items[b"keys"] = pickle.dumps([i[0].encode() for i in images])  # ViLBERT's id list: skipped, never loaded
    src = tmp_path / "feats.lmdb"
    _write_lmdb(src, items)
    out = tmp_path / "s.h5"
    assert lmdb_main([str(src), "--out", str(out), "--no-progress"]) == 0
    assert_store_matches(out, sorted(images, key=lambda im: im[0].encode()))  # LMDB iterates in key order
    stats = convert_lmdb(src, out, progress=False)
    assert (stats.written, stats.skipped_existing) == (0, 4)


def test_lmdb_pickled_values_are_refused_not_loaded(tmp_path):
    image_id, f, b, w, h = synth(1)[0]
    src = tmp_path / "vilbert.lmdb"
    _write_lmdb(src, {image_id.encode(): pickle.dumps({"image_id": image_id, "image_w": w, "image_h": h,
                                                       "num_boxes": len(f), "boxes": b64(b), "features": b64(f)})})
    with pytest.raises(ConversionError, match=r"Python pickle .* never unpickles .* docs/features\.md"):
        convert_lmdb(src, tmp_path / "s.h5", progress=False)


# ---- caption corpora that pair with the stores -----------------------------------------------------------------


def test_karpathy_json_with_restval_against_a_converted_store(tmp_path):
    images = synth(4)
    splits = ["train", "restval", "val", "test"]
    data = {"dataset": "coco", "images": [
        {"filename": f"COCO_val2014_{int(im[0]):012d}.jpg", "cocoid": int(im[0]), "split": s,
         "sentences": [{"raw": f"caption {j}.", "tokens": ["caption"]} for j in range(5)]}
        for im, s in zip(images, splits, strict=True)]}
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps(data))
    corpus = read_corpus(karpathy)
    trainval = corpus.select(parse_splits("trainval"))
    assert trainval.image_ids == [images[0][0], images[1][0]] and corpus.num_captions == 20
    tsv = tmp_path / "f.tsv"
    tsv.write_text("".join(butd_line(*im) for im in images[:2]))
    out = tmp_path / "s.h5"
    convert_butd_tsv([tsv], out, progress=False)
    assert validate_store(out, trainval) == []
    problems = validate_store(out, corpus.select(parse_splits("val,test")))
    assert [p.code for p in problems] == ["id_mismatch"] and "another split" in problems[0].message
