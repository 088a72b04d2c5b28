"""benchmarks/world_size_table.py on tiny worlds: every (model, size) is a real training run with its own
curve, the table's cells are the curves' end / best / last-quarter figures, the schedule is in steps
whatever the epoch length, and a finished run is read back rather than trained again."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from composer.training.curve import last_quarter_gain, read_curve

ROOT = Path(__file__).resolve().parents[1]
SIZES = (30, 60)
STEPS, BATCH = 6, 4


def _script():
    spec = importlib.util.spec_from_file_location("_script_world_size_table",
                                                  ROOT / "benchmarks" / "world_size_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ARGS = ["--preset", "tiny", "--batch-size", str(BATCH), "--steps", str(STEPS), "--val-every-positives", "8",
        "--eval-images", "5", "--train-images", ",".join(map(str, SIZES)), "--accelerator", "cpu"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    data = tmp_path_factory.mktemp("worlds")
    out = tmp_path_factory.mktemp("table")
    mp = pytest.MonkeyPatch()
    mp.setenv("GC_DATA_DIR", str(data))
    try:
        script = _script()
        assert script.main(["--out", str(out), *ARGS]) == 0
        yield script, out, mp
    finally:
        mp.undo()


def test_the_world_size_comes_from_the_worlds_train_share():
    script = _script()
    share = script.train_share()
    assert 0 < share < 1
    assert script.world_images_for(1800) == round(1800 / share)
    assert script.world_images_for(36000) * share >= 36000


def test_the_cells_are_the_runs_curves(table):
    script, out, _ = table
    text = (out / "table.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ") and "training images" not in line}
    assert set(rows) == {"VSE", "COMPOSER"}
    for label, model in (("VSE", "vse"), ("COMPOSER", "composer")):
        for n, cell in zip(SIZES, rows[label]):
            curve, _ = read_curve(out / "runs" / f"{model}-{n}")
            r1 = curve.values("R@1")
            # every STEPS-step run validated every 2 steps: 3 points, the last one at the end of training
            assert [p.step for p in curve.points] == [2, 4, 6]
            end, best, gain = re.fullmatch(r"([\d.]+) / ([\d.]+) \(([-+][\d.]+)\)", cell).groups()
            assert float(end) == pytest.approx(round(r1[-1], 1))
            assert float(best) == pytest.approx(round(max(r1), 1))
            assert float(gain) == pytest.approx(round(last_quarter_gain(curve), 1))
    assert f"after {STEPS:,} steps" in text
    assert "30 -> 30, 60 -> 60" in text  # the worlds' training splits hold the sizes asked for
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_schedule_is_in_steps_at_every_size(table):
    script, out, _ = table
    import json

    for n in SIZES:
        cfg = json.loads((out / "runs" / f"composer-{n}" / "results.json").read_text())["config"]
        spe = (n * 5) // BATCH  # five captions per world image, one process
        optim = cfg["optim"]
        # the cpu profile's COMPOSER shape: warm-up over 20% of the run, /10 after 75%, in steps
        assert optim["warmup_epochs"] * spe == pytest.approx(0.2 * STEPS)
        assert [d * spe for d in optim["decay_epochs"]] == pytest.approx([0.75 * STEPS])
        results = json.loads((out / "runs" / f"composer-{n}" / "results.json").read_text())
        assert results["plateau"]["steps"] == STEPS and results["plateau"]["patience"] is None


def test_a_finished_run_is_read_back_not_retrained(table, monkeypatch):
    script, out, mp = table
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/results.json")}

    def refuse(*a, **k):
        raise AssertionError("a finished run was trained again")

    import composer.training.fit as fit

    monkeypatch.setattr(fit, "train", refuse)
    table_before = (out / "table.md").read_text()
    assert script.main(["--out", str(out), *ARGS]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/results.json")} == before
    assert (out / "table.md").read_text() == table_before


def test_bad_settings_fail_before_any_work(tmp_path):
    script = _script()
    with pytest.raises(SystemExit, match="--steps"):
        script.main(["--out", str(tmp_path / "t"), "--steps", "0"])
    assert not (tmp_path / "t").exists()
