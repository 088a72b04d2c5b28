"""composer/study/record.py: the study record export, on study folders written by hand here (the files' names
are the record's contract; their contents are opaque bytes to it)."""
import json

import pytest

from composer.study.record import export_record, record_files


def _study(root):
    """A study folder as a study leaves it: record files, and the heavy rest that must not travel."""
    files = {
        "study.json": '{"profile": "smoke"}',
        "config.yaml": "profile: smoke\n",
        "search/chosen.json": '{"vse": "vse_lr1.0e-03"}',
        "wall_seconds.json": '{"2026-12-01T19:51:49": 4893.3}',
        "runs/vse/seed0/study_result.json": json.dumps({"test": {"R@1": 32.4}}),
        "runs/clip/seed1/study_result.json": json.dumps({"test": {"R@1": 36.4}}),
        # not the record: weights, checkpoints, logs, curves, the report, the data, a run still in flight
        "runs/vse/seed0/checkpoints/best.ckpt": "weights",
        "runs/vse/seed0/curve.json": "[]",
        "runs/flat/seed0/checkpoints/last.ckpt": "weights",
        "results.json": "{}",
        "tables.md": "# tables",
        "data/mcd.json": "{}",
        "search/composer_lr5e-4/curve.json": "[]",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return files


def test_the_record_is_the_settings_and_the_finished_runs_results_and_nothing_heavier(tmp_path):
    files = _study(tmp_path / "study")
    done = export_record(tmp_path / "study", tmp_path / "kept")
    expected = ["study.json", "config.yaml", "search/chosen.json", "wall_seconds.json",
                "runs/clip/seed1/study_result.json", "runs/vse/seed0/study_result.json"]
    assert done.written == expected and done.unchanged == [] and done.finished_runs == 2
    copied = sorted(p.relative_to(tmp_path / "kept").as_posix() for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert copied == sorted(expected)
    for rel in expected:
        assert (tmp_path / "kept" / rel).read_text() == files[rel]
    assert record_files(tmp_path / "kept") == expected  # the copy is a record too: exporting it again is the same


def test_a_second_export_writes_only_what_changed_and_deletes_nothing(tmp_path):
    study, kept = tmp_path / "study", tmp_path / "kept"
    _study(study)
    export_record(study, kept)
    (kept / "notes.md").write_text("mine")  # the destination's own files stay
    (kept / "runs" / "il_clip" / "seed0").mkdir(parents=True)
    (kept / "runs" / "il_clip" / "seed0" / "study_result.json").write_text("{}")  # a result this study no longer has
    before = {p: p.stat().st_mtime_ns for p in kept.rglob("*.json")}
    (study / "runs" / "flat" / "seed0" / "study_result.json").write_text('{"test": {"R@1": 70.0}}')  # a run finished
    (study / "wall_seconds.json").write_text('{"2026-12-01T19:51:49": 4893.3, "2026-12-01T22:26:30": 60.0}')
    done = export_record(study, kept)
    assert done.written == ["wall_seconds.json", "runs/flat/seed0/study_result.json"]
    assert len(done.unchanged) == 5 and done.finished_runs == 3
    assert (kept / "notes.md").read_text() == "mine"
    assert (kept / "runs" / "il_clip" / "seed0" / "study_result.json").read_text() == "{}"
    for path, mtime in before.items():
        if path.name != "wall_seconds.json":
            assert path.stat().st_mtime_ns == mtime, path  # unchanged bytes are not rewritten
    assert not list(kept.rglob("*.tmp"))


def test_export_refuses_a_folder_that_is_no_study_and_a_destination_inside_the_study(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no study.json"):
        export_record(tmp_path / "empty", tmp_path / "kept")
    _study(tmp_path / "study")
    for inside in (tmp_path / "study", tmp_path / "study" / "record"):
        with pytest.raises(ValueError, match="inside the study folder"):
            export_record(tmp_path / "study", inside)
    assert not (tmp_path / "study" / "record").exists()
