"""A user's input is never destroyed, and bad input is refused in one line (issue 35).

Each test is a case of the issue: it checks the exit and its message, and that the user's files are unchanged."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import ROOT
from crg.outputs import OutputDirError, prepare_output_dir

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"


def _build(*args):
    from crg.cli.build_crg import main

    return main([*map(str, args), "--quiet", "--no-cache", "--split", "train"])


# ---------------------------------------------------------------------------- data loss: --overwrite
def test_build_crg_overwrite_keeps_the_input_corpus_lying_in_out(tmp_path):
    corpus = tmp_path / "d" / "captions.jsonl"
    corpus.parent.mkdir()
    shutil.copy(TOY, corpus)
    before = corpus.read_bytes()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    assert _build("--captions", corpus, "--out", tmp_path / "d", "--overwrite") == 0
    assert corpus.read_bytes() == before                        # was deleted: an owned name
    assert (tmp_path / "d" / "graph.npz").exists() and (tmp_path / "d" / "notes.txt").read_text() == "mine"
    manifest = json.loads((tmp_path / "d" / "run.json").read_text())
    assert manifest["written"] == ["graph.npz", "graph_strings.json.gz", "stats.json"]
    # a rerun over its own run: deletes what it wrote, still not the corpus
    assert _build("--captions", corpus, "--out", tmp_path / "d", "--overwrite") == 0
    assert corpus.read_bytes() == before


def test_build_crg_dump_over_its_own_input_is_refused_before_any_work(tmp_path):
    corpus = tmp_path / "d" / "captions.jsonl"
    corpus.parent.mkdir()
    shutil.copy(TOY, corpus)
    before = corpus.read_bytes()
    with pytest.raises(SystemExit, match=r"--captions .*captions.jsonl.* would replace or delete its own input"):
        _build("--captions", corpus, "--out", tmp_path / "d", "--overwrite", "--dump")
    assert corpus.read_bytes() == before
    assert sorted(p.name for p in corpus.parent.iterdir()) == ["captions.jsonl"]   # nothing written


def test_overwrite_never_replaces_an_owned_name_the_run_did_not_write(tmp_path):
    out = tmp_path / "d"
    assert _build("--captions", TOY, "--out", out) == 0          # no dump: captions.jsonl is not ours
    (out / "captions.jsonl").write_text("a user's file\n")
    with pytest.raises(SystemExit, match=r"captions.jsonl was not written by a run of this library"):
        _build("--captions", TOY, "--out", out, "--overwrite", "--dump")
    assert (out / "captions.jsonl").read_text() == "a user's file\n"
    (out / "captions.jsonl").unlink()
    assert _build("--captions", TOY, "--out", out, "--overwrite", "--dump") == 0   # now recorded ...
    assert _build("--captions", TOY, "--out", out, "--overwrite") == 0             # ... so replaced and removed
    assert not (out / "captions.jsonl").exists()


def test_overwrite_and_resume_remove_temporary_files_of_a_failed_write(tmp_path):
    out = tmp_path / "d"
    assert _build("--captions", TOY, "--out", out, "--dump") == 0
    leftovers = ["graph.npz.tmp.npz", "graph_strings.json.gz.tmp", "captions.jsonl.tmp", ".stats.json.123.tmp"]
    for name in leftovers:
        (out / name).write_bytes(b"x" * 100)
    (out / "mine.tmp").write_text("not the library's")
    assert _build("--captions", TOY, "--out", out, "--dump", "--overwrite") == 0
    assert not any((out / n).exists() for n in leftovers) and (out / "mine.tmp").exists()
    (out / "graph.npz.tmp.npz").write_bytes(b"x")
    assert _build("--captions", TOY, "--out", out, "--dump", "--resume") == 0
    assert not (out / "graph.npz.tmp.npz").exists()


def test_a_full_disk_during_the_graph_write_leaves_temporary_files_the_rerun_removes(tmp_path, monkeypatch):
    import errno

    import numpy as np

    out = tmp_path / "d"
    real = np.savez_compressed

    def disk_full(path, **arrays):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)                                  # part of the file, then no space left
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", disk_full)
    with pytest.raises(OSError, match="No space left"):
        _build("--captions", TOY, "--out", out, "--dump")
    assert (out / "graph.npz.tmp.npz").exists() and not (out / "graph.npz").exists()
    monkeypatch.setattr(np, "savez_compressed", real)                # space freed
    assert _build("--captions", TOY, "--out", out, "--dump", "--overwrite") == 0
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]
    assert (out / "graph.npz").exists()


def test_prepare_output_dir_with_an_old_manifest_still_spares_inputs(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"command": "demo", "settings": {}}))   # before "written" existed
    (out / "a.txt").write_text("old result")
    (out / "b.txt").write_text("the input")
    prepare_output_dir(out, command="demo", settings={}, mode="overwrite", owned=["a.txt", "b.txt"],
                       writes=["a.txt"], inputs={"--in": out / "b.txt"})
    assert not (out / "a.txt").exists() and (out / "b.txt").read_text() == "the input"
    with pytest.raises(OutputDirError, match="--in .*b.txt"):
        prepare_output_dir(out, command="demo", settings={}, mode="overwrite", owned=["a.txt", "b.txt"],
                           inputs={"--in": out / "b.txt"})


def test_make_mcd_split_refuses_an_out_holding_its_own_input(tmp_path):
    from crg.cli.make_mcd_split import main

    out = tmp_path / "m"
    out.mkdir()
    shutil.copy(TOY, out / "eval.jsonl")
    before = (out / "eval.jsonl").read_bytes()
    with pytest.raises(SystemExit, match=r"--train .*eval.jsonl.* its own input"):
        main(["--train", str(out / "eval.jsonl"), "--out", str(out), "--overwrite", "--quiet", "--num-images", "2"])
    assert (out / "eval.jsonl").read_bytes() == before
    with pytest.raises(SystemExit, match=r"--candidates .*eval.jsonl.* its own input"):
        main(["--train", str(TOY), "--candidates", str(out / "eval.jsonl"), "--out", str(out), "--overwrite",
              "--quiet", "--num-images", "2"])
    assert (out / "eval.jsonl").read_bytes() == before


# ---------------------------------------------------------------------------- silent wrong results
def test_a_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    from crg.corpus import read_corpus

    tsv = tmp_path / "c.tsv"
    tsv.write_text("\ufeffimage_id\tcaption\tsplit\nim1\ta red ball\ttrain\n", encoding="utf-8")
    assert read_corpus(tsv).image_ids == ["im1"]                # was: the header taken for an image
    bare = tmp_path / "d.tsv"
    bare.write_text("\ufeffim1\ta red ball\n", encoding="utf-8")
    assert read_corpus(bare).image_ids == ["im1"]               # was: '\ufeffim1'
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('\ufeff{"image_id": "im1", "split": "train", "captions": ["a cat"]}\n', encoding="utf-8")
    assert read_corpus(jsonl).image_ids == ["im1"]


@pytest.mark.parametrize("text, line", [
    ("im1\ta red ball\nim2\ta cube\tleft of a ball\n", 2),            # 2 columns, then a caption with a tab
    ("im1\ta red\tball on a cube\n", 1),                             # the first line: its split has spaces
])
def test_a_caption_holding_a_tab_is_an_error_naming_the_line(tmp_path, text, line):
    from crg.corpus import CorpusFormatError, read_corpus

    tsv = tmp_path / "c.tsv"
    tsv.write_text(text, encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=rf"c.tsv:{line}: .*a caption holding a tab"):
        read_corpus(tsv)


@pytest.mark.parametrize("flag, value, message", [
    ("--feature-dim", "0", r"--feature-dim\) must be at least 1, got 0"),
    ("--noise", "-1", r"--noise\) must be a finite number >= 0, got -1"),
    ("--noise", "nan", r"--noise\) must be a finite number >= 0"),
])
def test_world_generation_refuses_a_meaningless_knob(tmp_path, flag, value, message):
    from features.world.generate import main

    with pytest.raises(SystemExit, match=message):
        main(["--out", str(tmp_path / "w"), "--num-images", "4", "--render", "0", "--quiet", flag, value])
    assert not (tmp_path / "w").exists()


def _records(ids):
    import numpy as np

    from features.ingest import Decoded, SourceRecord

    return [SourceRecord(i, f"src.tsv:{k + 1}", lambda k=k: Decoded(np.full((2, 4), k, np.float32), None, 8, 8))
            for k, i in enumerate(ids)]


def test_a_converter_source_with_a_repeated_id_is_refused_or_a_counted_skip(tmp_path):
    from features.ingest import ConversionError, ingest
    from features.store import FeatureStoreWriter

    with FeatureStoreWriter(tmp_path / "a.h5", feature_dim=4, boxes_known=False) as w:
        with pytest.raises(ConversionError, match=r"src.tsv:3: image id 'x' repeated \(first at src.tsv:1\)"):
            ingest(_records(["x", "y", "x"]), w)
    with FeatureStoreWriter(tmp_path / "b.h5", feature_dim=4, boxes_known=False) as w:
        stats = ingest(_records(["x", "y", "x"]), w, skip_bad=True)
    assert stats.written == 2 and stats.skipped_existing == 0       # was: 1 "already in the store"
    assert stats.bad == [("src.tsv:3", "image id 'x' repeated (first at src.tsv:1)")]
    with FeatureStoreWriter(tmp_path / "b.h5", feature_dim=4, boxes_known=False) as w:   # a resumed run
        again = ingest(_records(["x", "y"]), w)
    assert again.written == 0 and again.skipped_existing == 2


def test_non_finite_first_stage_scores_are_refused_naming_file_and_row(tmp_path):
    import numpy as np
    import torch

    from composer.cli.evaluate import read_first_stage
    from composer.evaluation.rerank import shortlist_and_rerank

    scores = np.arange(12.0).reshape(3, 4)
    scores[2, 1] = np.nan
    np.save(tmp_path / "s.npy", scores)
    with pytest.raises(SystemExit,
                       match=r"s.npy: 1 NaN or infinite score\(s\) in 1 row\(s\), first row 2 \(column 1\)"):
        read_first_stage(str(tmp_path / "s.npy"), (3, 4))
    np.save(tmp_path / "all.npy", np.full((3, 4), np.nan))
    with pytest.raises(SystemExit, match=r"12 NaN or infinite score\(s\) in 3 row\(s\), first row 0"):
        read_first_stage(str(tmp_path / "all.npy"), (3, 4))
    (tmp_path / "junk.npy").write_text("not numpy")
    with pytest.raises(SystemExit, match=r"junk.npy: not a readable .npy array"):
        read_first_stage(str(tmp_path / "junk.npy"), (3, 4))
    np.save(tmp_path / "ok.npy", np.arange(12.0).reshape(3, 4))
    assert read_first_stage(str(tmp_path / "ok.npy"), (3, 4)).shape == (3, 4)
    with pytest.raises(ValueError, match=r"1 NaN or infinite value\(s\), first in row 2"):
        shortlist_and_rerank(None, torch.zeros(4, 1, 1), None, None, [None] * 3, None, np.arange(3),
                             first_stage=scores, k=2)


def _eval_args(*flags):
    from composer.cli.evaluate import build_argparser

    return build_argparser().parse_args(["--checkpoint", "run", *flags])


WORLD_RUN = {"data": "world", "world_images": 200, "world_split": "compositional", "world_held_out_seed": 0,
             "world_held_out_pairs": 8, "world_held_out_facts": 6}


def test_evaluating_on_a_world_of_another_size_is_refused_unless_allowed():
    from composer.cli.evaluate import _check_same_world, _world_of

    with pytest.raises(SystemExit, match=r"--world-images 300 \(trained on 200\): not the world the model was "
                                         r"trained on.*--allow-other-world"):
        _check_same_world(_eval_args("--world-images", "300"), WORLD_RUN)
    with pytest.raises(SystemExit, match=r"--world-held-out 1 8 6 \(trained on 0 8 6\)"):
        _check_same_world(_eval_args("--world-held-out", "1", "8", "6"), WORLD_RUN)
    _check_same_world(_eval_args("--world-images", "300", "--allow-other-world"), WORLD_RUN)
    _check_same_world(_eval_args("--world-images", "200"), WORLD_RUN)           # the same world: fine
    _check_same_world(_eval_args(), WORLD_RUN)                                   # the run's, by default
    _check_same_world(_eval_args("--world-images", "300"), {"data": "f30k"})     # not trained on the world
    assert _world_of(WORLD_RUN)["world_images"] == 200 and _world_of({"data": "f30k"}) is None


# ---------------------------------------------------------------------------- deep crashes -> one line
def test_a_jsonl_split_that_is_not_a_string_is_refused_naming_the_line(tmp_path):
    from crg.corpus import CorpusFormatError, read_corpus

    path = tmp_path / "c.jsonl"
    path.write_text('{"image_id": "a", "split": "train", "captions": ["x"]}\n'
                    '{"image_id": "b", "split": ["train"], "captions": ["y"]}\n')
    with pytest.raises(CorpusFormatError, match=r"c.jsonl:2: 'split' must be a string"):
        read_corpus(path)


def test_a_truncated_gzip_corpus_is_named(tmp_path):
    import gzip

    from crg.corpus import CorpusFormatError, read_corpus

    data = gzip.compress(("".join(f"im{i}\ta caption number {i}\ttrain\n" for i in range(2000))).encode())
    path = tmp_path / "c.tsv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusFormatError, match=r"c.tsv.gz: a truncated or damaged gzip file"):
        read_corpus(path)


@pytest.mark.parametrize("line, message", [
    ('{"text": "a dog"}', r"bad.jsonl:2: a JSON line needs a \"tree\" string"),
    ('{"tree": (S (NP a dog))}', r"bad.jsonl:2: not valid JSON"),
    ('{"tree": 3}', r"bad.jsonl:2: a JSON line needs a \"tree\" string"),
])
def test_a_bad_preparsed_line_names_file_and_line(tmp_path, line, message):
    from crg.preparsed import PreparsedTrees

    path = tmp_path / "bad.jsonl"
    path.write_text('{"tree": "(S (NP (DT a) (NN cat)))"}\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        PreparsedTrees(path)


@pytest.mark.parametrize("kind", ["garbage", "folder"])
def test_a_bad_parse_cache_is_refused_before_run_json(tmp_path, kind):
    from crg.cli.build_crg import main

    cache = tmp_path / "cache.sqlite"
    if kind == "folder":
        cache.mkdir()
    else:
        cache.write_bytes(b"this is not a database" * 100)
    with pytest.raises(SystemExit, match=rf"parse cache {cache}"):
        main(["--captions", str(TOY), "--out", str(tmp_path / "o"), "--cache", str(cache), "--quiet"])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag", ["--eval-images", "--max-regions", "--world-images"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_counts_below_one_are_refused_at_argument_time(flag, value, capsys):
    import argparse

    from composer.cli.arguments import add_training_arguments

    with pytest.raises(SystemExit):
        _eval_args(flag, value)
    assert f"argument {flag}: must be at least 1, got {value}" in capsys.readouterr().err
    ap = argparse.ArgumentParser()
    add_training_arguments(ap)
    with pytest.raises(SystemExit):
        ap.parse_args([flag, value])
    assert f"argument {flag}: must be at least 1" in capsys.readouterr().err


def test_library_calls_refuse_counts_below_one():
    from types import SimpleNamespace

    from composer.evaluation.eval_sets import select_eval_images

    with pytest.raises(ValueError, match="eval_images .* at least 1, got 0"):
        select_eval_images(SimpleNamespace(image_ids=["a"], caption_image=[0], num_captions=1), 0)


def test_a_negative_max_regions_is_refused_by_the_store(tiny_world):
    from features.store import FeatureStore

    store = FeatureStore(tiny_world / "features.h5")
    ids = store.image_ids[:2]
    with pytest.raises(ValueError, match=r"max_regions \(--max-regions\) must be at least 1, got -3"):
        store.read_batch(ids, -3)
    assert store.read_batch(ids, 0, add_global=True).features.shape[1] == 1     # the global region alone
    store.close()


def test_gc_evaluate_checks_its_outputs_before_any_scoring(tmp_path):
    from composer.cli.evaluate import main

    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit, match=r"--out .*folder is a folder"):
        main(["--checkpoint", str(tmp_path / "no_model"), "--out", str(tmp_path / "folder")])
    with pytest.raises(SystemExit, match=r"--save-scores .*file is a file"):
        main(["--checkpoint", str(tmp_path / "no_model"), "--save-scores", str(tmp_path / "file")])
    assert (tmp_path / "file").read_text() == "x"


def test_world_dir_of_another_world_is_refused_before_scoring(tiny_world, tmp_path):
    import gzip

    from composer.evaluation.eval_sets import load_eval_data

    other = tmp_path / "other"
    other.mkdir()
    with gzip.open(tiny_world / "scenes.jsonl.gz", "rt") as f:
        first = f.readline()
    with gzip.open(other / "scenes.jsonl.gz", "wt") as f:
        f.write(first)                                             # a world of one (other) scene
    with pytest.raises(ValueError, match=r"--world-dir .*other: \d+ of the \d+ evaluation images are not scenes"):
        load_eval_data(str(tiny_world / "captions.jsonl"), features=str(tiny_world / "features.h5"), split="test",
                       eval_images=6, max_regions=6, world_dir=other)


# ---------------------------------------------------------------------------- hang, aliases, missing options
def test_a_ray_address_where_nothing_listens_fails_fast_before_run_json(tmp_path):
    import subprocess
    import sys
    import time

    from crg.ray_engine import RayConnectError, check_address

    started = time.monotonic()
    with pytest.raises(RayConnectError, match=r"--address 127.0.0.1:1: no Ray cluster answers there"):
        check_address("127.0.0.1:1", timeout_s=5)
    assert time.monotonic() - started < 5
    with pytest.raises(RayConnectError, match=r"expected auto or HOST:PORT"):
        check_address("somewhere")
    res = subprocess.run([sys.executable, "-m", "crg.cli.build_crg", "--captions", str(TOY), "--out",
                          str(tmp_path / "o"), "--engine", "ray", "--address", "127.0.0.1:1", "--no-cache", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)   # was: retried for ever
    assert res.returncode != 0 and "--address 127.0.0.1:1: no Ray cluster answers there" in res.stderr
    assert not (tmp_path / "o").exists()


def test_split_aliases_work_in_build_crg_and_make_mcd_split(tmp_path):
    from crg.cli.make_mcd_split import _splits
    from crg.graph import ConceptGraph

    corpus = tmp_path / "c.jsonl"
    rows = [json.loads(line) for line in TOY.read_text().splitlines() if line.strip()]
    for k, row in enumerate(rows):
        row["split"] = {0: "train", 1: "restval"}.get(k % 3, "test")
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from crg.cli.build_crg import main

    assert main(["--captions", str(corpus), "--split", "trainval", "--out", str(tmp_path / "o"), "--no-cache",
                 "--quiet"]) == 0                                    # was: no images in split(s) ['trainval']
    graph = ConceptGraph.load(tmp_path / "o")
    wanted = {r["image_id"] for r in rows if r["split"] in ("train", "restval")}
    assert set(graph.image_ids) == wanted
    assert _splits("trainval") == ["train", "restval"] and _splits("all") is None


def test_gc_build_crg_data_world_takes_world_images():
    from features.cli.build_crg import main

    seen = {}

    def fake_resolve(name, **kwargs):
        seen.update(kwargs, name=name)
        raise SystemExit("stop")

    from crg.cli import build_crg

    with pytest.raises(SystemExit, match="stop"):
        build_crg.main(["--data", "world", "--world-images", "200", "--world-seed", "3", "--out", "x"],
                       resolve_dataset=fake_resolve)
    assert seen["world_images"] == 200 and seen["world_seed"] == 3 and seen["name"] == "world"
    with pytest.raises(SystemExit):
        main(["--data", "world", "--world-images", "0", "--out", "x"])
    with pytest.raises(SystemExit, match="options of --data world"):
        build_crg.main(["--data", "coco", "--world-images", "200", "--out", "x"], resolve_dataset=fake_resolve)


# ---------------------------------------------------------------------------- one writer per folder
HOLD = """
import sys, time
from crg.outputs import prepare_output_dir
prepare_output_dir(sys.argv[1], command="build_crg", settings={}, owned=["a"])
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_run_into_a_folder_in_use_is_refused_naming_the_holder(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputDirError, match=rf"is in use by another run \(pid {holder.pid}: build_crg\)"):
            prepare_output_dir(out, command="build_crg", settings={}, mode="overwrite", owned=["a"])
    finally:
        holder.send_signal(signal.SIGKILL)                           # a holder that dies, however: no stale lock
        holder.wait()
    prepare_output_dir(out, command="build_crg", settings={}, mode="overwrite", owned=["a"])
    prepare_output_dir(out, command="build_crg", settings={}, mode="resume", owned=["a"])   # this process again
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]    # the lock lies beside the folder
    from crg.outputs import release_output_dir

    release_output_dir(out)
    holder = subprocess.run([sys.executable, "-c", HOLD.replace("time.sleep(600)", ""), str(out)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert holder.returncode == 0, holder.stderr                    # released: another process may use it


def test_a_run_that_failed_before_writing_anything_needs_no_resume(tmp_path):
    out = tmp_path / "o"
    prepare_output_dir(out, command="demo", settings={"seed": 0}, owned=["a"])     # then it failed
    prepare_output_dir(out, command="demo", settings={"seed": 1}, owned=["a"])     # the corrected rerun
    (out / "a").write_text("result")
    with pytest.raises(OutputDirError, match="holds a previous run of demo"):
        prepare_output_dir(out, command="demo", settings={"seed": 2}, owned=["a"])


def test_gc_hard_negatives_refuses_an_out_holding_its_own_input(tmp_path):
    from crg.cli.hard_negatives import main

    out = tmp_path / "o"
    out.mkdir()
    shutil.copy(TOY, out / "negatives.jsonl")
    before = (out / "negatives.jsonl").read_bytes()
    with pytest.raises(SystemExit, match=r"--captions .*negatives.jsonl.* its own input"):
        main(["--captions", str(out / "negatives.jsonl"), "--out", str(out), "--overwrite", "--split", "test",
              "--no-refine"])
    assert (out / "negatives.jsonl").read_bytes() == before


@pytest.mark.parametrize("flag", ["--train", "--candidates", "--train-graph", "--candidate-graph"])
def test_make_mcd_split_names_a_missing_input_before_it_makes_the_output_folder(tmp_path, flag):
    from crg.cli.make_mcd_split import main

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"image_id": "a", "caption": "a dog"}\n')
    args = {"--train": str(corpus), flag: str(tmp_path / "missing")}
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as err:
        main([*(x for kv in args.items() for x in kv), "--out", str(out)])
    assert err.value.code == 2 and not out.exists()
