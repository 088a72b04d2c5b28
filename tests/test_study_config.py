"""gc-study's configuration is a file: ``--print-config`` prints it with the profile's seeds, runs and jobs
filled in, a study saves it to ``OUT/config.yaml``, and ``--config`` passes the same study (profile, seeds,
runs, options) to the study runner again; flags beside it win. The runner is replaced by a recorder here:
what it receives is what this tests (the runs themselves are tests/test_run_study.py's)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from composer.cli import study as cli
from composer.study.config import PROFILES


@pytest.fixture()
def recorded(monkeypatch):
    """The study runner's arguments, one dict per call (nothing is trained)."""
    from composer.study import runner

    calls = []

    def fake_run_study(out, profile, *, seeds, runs, options, report_only=False, data="world", search=False,
                       search_only=False, recipes_from=None):
        calls.append({"profile": profile.name, "seeds": seeds, "runs": [r.name for r in runs], "options": options,
                      "search": search, "search_only": search_only, "recipes_from": recipes_from})
        return {"runs": {}, "study": {"complete": True, "missing": [], "failed": {}, "train_seconds_total": 0,
                                      "eval_seconds_total": 0}}

    monkeypatch.setattr(runner, "run_study", fake_run_study)
    return calls


def test_a_saved_study_configuration_runs_the_same_study_again(tmp_path, recorded, capsys):
    first = tmp_path / "a"
    assert cli.main(["--out", str(first), "--profile", "smoke", "--seeds", "0,2", "--runs", "composer,vse",
                     "--jobs", "2", "--keep-weights"]) == 0
    saved = yaml.safe_load((first / "config.yaml").read_text())
    assert saved["profile"] == "smoke" and saved["seeds"] == [0, 2] and saved["runs"] == ["composer", "vse"]
    assert saved["options"]["jobs"] == 2 and saved["options"]["keep_weights"] is True
    assert cli.main(["--config", str(first / "config.yaml"), "--out", str(tmp_path / "b")]) == 0
    assert recorded[1] == recorded[0]
    assert (tmp_path / "b" / "config.yaml").read_text() == (first / "config.yaml").read_text()
    # a flag beside the file wins
    assert cli.main(["--config", str(first / "config.yaml"), "--seeds", "5", "--out", str(tmp_path / "c")]) == 0
    assert recorded[2]["seeds"] == [5] and recorded[2]["runs"] == ["composer", "vse"]
    assert recorded[0]["recipes_from"] is None
    # --recipes-from reaches the study and its saved configuration
    assert cli.main(["--out", str(tmp_path / "d"), "--profile", "smoke", "--recipes-from", str(first)]) == 0
    assert recorded[3]["recipes_from"] == str(first) and not recorded[3]["search"]
    assert yaml.safe_load((tmp_path / "d" / "config.yaml").read_text())["recipes_from"] == str(first)


def test_print_config_fills_in_the_profiles_choices(capsys):
    assert cli.main(["--profile", "smoke", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    smoke = PROFILES["smoke"]
    assert printed["seeds"] == list(smoke.seeds) and printed["runs"] == list(smoke.runs)
    assert printed["options"]["jobs"] == smoke.jobs


def test_an_unknown_profile_or_key_is_refused_before_anything_runs(tmp_path, recorded, capsys):
    with pytest.raises(SystemExit):
        cli.main(["--profile", "huge", "--out", str(tmp_path / "x")])
    assert "smoke" in capsys.readouterr().err  # the message lists the profiles
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: smoke\noptions:\n  workers: 3\n")
    with pytest.raises(SystemExit, match="workers"):
        cli.main(["--config", str(bad), "--out", str(tmp_path / "y")])
    assert not recorded and not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_study_folder_survives_a_profile_setting_added_later_with_none(tmp_path):
    """study.json written before a None-defaulted profile setting existed still matches; a changed setting
    is refused, named."""
    import json

    from composer.study.data import check_study_dir

    profile = PROFILES["smoke"]
    check_study_dir(tmp_path, profile, "world")  # writes study.json
    stored = json.loads((tmp_path / "study.json").read_text())
    none_keys = [k for k, v in stored["profile"].items() if v is None]
    assert none_keys
    del stored["profile"][none_keys[0]]  # as if written before that setting existed
    (tmp_path / "study.json").write_text(json.dumps(stored))
    check_study_dir(tmp_path, profile, "world")
    with pytest.raises(SystemExit, match=r"world_images: 80 there, 81 now"):
        check_study_dir(tmp_path, replace(profile, world_images=81), "world")
