"""A run's configuration is a file: every training run saves ``OUT/config.yaml``, and passed back with
``--config`` it trains the same run again, bit for bit; flags beside it override it; ``--print-config``
prints it; the file is checked against the recipe dataclasses before anything runs."""

from __future__ import annotations

import csv
import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from composer.cli import train_baseline, train_composer
from composer.cli.run_config import RunConfig

TINY = ["--preset", "tiny", "--batch-size", "8", "--max-regions", "6", "--eval-images", "6", "--epochs", "1",
        "--lr", "1e-3", "--accelerator", "cpu", "--quiet"]


def _data(world) -> list[str]:
    return ["--data", str(world / "captions.jsonl"), "--features", str(world / "features.h5")]


def _losses(run) -> list[dict]:
    """Every logged row of the run's CSV log, less the wall-clock columns."""
    (path,) = run.glob("logs/version_*/metrics.csv")
    with path.open() as f:
        return [{k: v for k, v in row.items() if "time" not in k} for row in csv.DictReader(f)]


def _timeless(value):
    """``value`` less its wall-clock entries (seconds, pairs per second)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if "second" not in k and "time" not in k}
    return value


def _metrics(run) -> dict:
    results = json.loads((run / "results.json").read_text())
    return _timeless({k: results[k] for k in ("config", "test", "val", "global_step") if k in results})


def _same_run(a, b) -> None:
    losses = _losses(a)
    assert any(row.get("train/loss") for row in losses), "no training loss was logged"
    assert _losses(b) == losses
    assert _metrics(b) == _metrics(a)
    wa, wb = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


def test_a_saved_configuration_trains_the_same_run_again_bit_for_bit(tiny_world, tmp_path):
    # a field no flag sets comes from a file: a training loss logged every step
    base = tmp_path / "base.yaml"
    base.write_text("trainer:\n  log_every_n_steps: 1\nrecipe:\n  model:\n    ct_layers: 1\n")
    x, y = tmp_path / "runs" / "x", tmp_path / "runs" / "y"
    assert train_composer.main(["--config", str(base), *_data(tiny_world), *TINY, "--max-steps", "4",
                                "--out", str(x)]) == 0
    saved = yaml.safe_load((x / "config.yaml").read_text())
    assert saved["model"] == "composer" and saved["recipe"]["preset"] == "tiny"
    assert saved["recipe"]["model"] == {"ct_layers": 1} and saved["trainer"]["log_every_n_steps"] == 1
    assert saved["trainer"]["max_steps"] == 4 and saved["recipe"]["lr"] == 1e-3
    assert train_composer.main(["--config", str(x / "config.yaml"), "--out", str(y)]) == 0
    _same_run(x, y)
    assert (y / "config.yaml").read_text() == (x / "config.yaml").read_text()


def test_a_baseline_configuration_keeps_its_model_options(tiny_world, tmp_path):
    x, y = tmp_path / "x", tmp_path / "y"
    assert train_baseline.main(["--model", "vse", *_data(tiny_world), *TINY, "--max-steps", "3", "--margin", "0.1",
                                "--hardest-negative", "--out", str(x)]) == 0
    saved = yaml.safe_load((x / "config.yaml").read_text())
    assert saved["model"] == "vse" and saved["recipe"]["model"] == {"loss": {"margin": 0.1, "negatives": "hardest"}}
    assert train_baseline.main(["--config", str(x / "config.yaml"), "--out", str(y)]) == 0  # no --model: the file's
    assert _metrics(y) == _metrics(x)
    wx, wy = load_file(x / "model" / "model.safetensors"), load_file(y / "model" / "model.safetensors")
    assert all(torch.equal(wx[k], wy[k]) for k in wx)


def _printed(capsys, main, argv) -> dict:
    assert main([*argv, "--print-config"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_flags_given_beside_a_file_override_it_even_at_their_default(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("recipe:\n  seed: 3\n  lr: 0.5\n  model: {pt_layers: 1}\ntrainer:\n  max_steps: 7\n")
    printed = _printed(capsys, train_composer.main, ["--config", str(cfg)])
    assert (printed["recipe"]["seed"], printed["recipe"]["lr"], printed["trainer"]["max_steps"]) == (3, 0.5, 7)
    # --seed 0 is the flag's default, given explicitly: it wins; --ct-layers joins the file's model fields
    printed = _printed(capsys, train_composer.main, ["--config", str(cfg), "--seed", "0", "--ct-layers", "3",
                                                     "--no-order"])
    assert printed["recipe"]["seed"] == 0 and printed["recipe"]["lr"] == 0.5
    assert printed["recipe"]["model"] == {"pt_layers": 1, "ct_layers": 3} and printed["recipe"]["use_order"] is False
    # what --print-config prints is a configuration: read back, it prints the same
    out = tmp_path / "printed.yaml"
    assert train_composer.main(["--config", str(cfg), "--seed", "0", "--print-config"]) == 0
    out.write_text(capsys.readouterr().out)
    assert _printed(capsys, train_composer.main, ["--config", str(out)]) == yaml.safe_load(out.read_text())


def test_print_config_shows_the_resolved_recipe_and_folder_policy_is_not_saved(capsys):
    assert train_baseline.main(["--model", "flat", "--mvsa", "--preset", "tiny", "--overwrite", "--print-config"]) == 0
    text = capsys.readouterr().out
    config = yaml.safe_load(text)
    assert config["model"] == "flat" and config["recipe"]["use_mvsa"] is True
    assert config["trainer"]["mode"] == "new"  # --overwrite is about the folder, not the run
    assert "#   optim:" in text and "#     use_mvsa: true" in text  # the resolved recipe, as comments


@pytest.mark.parametrize("body, message", [
    ("recipe:\n  learning_rate: 0.1\n", "learning_rate"),
    ("recipe:\n  lr: fast\n", "lr"),
    ("trainer:\n  max_step: 3\n", "max_step"),
    ("- a list\n", "mapping"),
])
def test_a_bad_file_is_an_error_naming_it_before_anything_runs(tmp_path, capsys, body, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(body)
    with pytest.raises(SystemExit) as err:
        train_composer.main(["--config", str(cfg), "--out", str(tmp_path / "run")])
    assert str(cfg) in str(err.value) and message in str(err.value)
    assert not (tmp_path / "run").exists()


def test_a_file_of_another_model_is_refused_by_the_composer_command(tmp_path, capsys):
    cfg = tmp_path / "vse.yaml"
    cfg.write_text("model: vse\n")
    with pytest.raises(SystemExit):
        train_composer.main(["--config", str(cfg), "--print-config"])
    assert "gc-train-baseline" in capsys.readouterr().err
    printed = _printed(capsys, train_baseline.main, ["--config", str(cfg)])
    assert printed["model"] == "vse"


def test_the_file_maps_onto_the_recipe_dataclasses():
    from dataclasses import fields

    from composer.training.fit import TrainerOptions
    from composer.training.recipes import RecipeOverrides

    types = {f.name: f.type for f in fields(RunConfig)}
    assert types["recipe"] in (RecipeOverrides, "RecipeOverrides") and types["trainer"] in (TrainerOptions,
                                                                                            "TrainerOptions")


NOT_CONFIGURATION = {"help", "config", "print_config", "out", "resume", "overwrite", "model"}  # the folder, the file


@pytest.mark.parametrize("command", [train_composer, train_baseline], ids=["composer", "baseline"])
def test_every_flag_overrides_a_field_of_the_configuration(command):
    """A flag without a path would be silently ignored beside --config; a path must name a real field."""
    from dataclasses import fields

    from composer.training.fit import TrainerOptions
    from composer.training.recipes import RecipeOverrides

    dests = {a.dest for a in command.build_argparser()._actions} - NOT_CONFIGURATION
    assert dests <= set(command.PATHS), sorted(dests - set(command.PATHS))
    known = {"recipe": {f.name for f in fields(RecipeOverrides)}, "trainer": {f.name for f in fields(TrainerOptions)}}
    for dest, paths in command.PATHS.items():
        for path in paths:
            head, *rest = path.split(".")
            assert head in {f.name for f in fields(RunConfig)}, (dest, path)
            if head in known:
                assert rest and rest[0] in known[head], (dest, path)  # recipe.model.* is the model's config


def test_every_study_flag_overrides_a_field_of_its_configuration():
    from dataclasses import fields

    from composer.cli import study
    from composer.cli.study_config import PATHS, StudyConfig
    from composer.study.execute import StudyOptions

    dests = {a.dest for a in study.build_argparser()._actions} - {"help", "config", "print_config", "out",
                                                                   "report_only", "export", "verbose"}
    assert dests <= set(PATHS), sorted(dests - set(PATHS))
    top, options = {f.name for f in fields(StudyConfig)}, {f.name for f in fields(StudyOptions)}
    for path in (p for ps in PATHS.values() for p in ps):
        head, *rest = path.split(".")
        assert head in top and (head != "options" or rest[0] in options), path
