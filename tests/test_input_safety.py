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
