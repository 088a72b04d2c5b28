"""One evaluation command for every model: a trained COMPOSER and a trained baseline are evaluated from
their saved directories (and from their checkpoints, with the same numbers)."""

from __future__ import annotations

import json

import pytest

from composer.cli import evaluate, train_baseline, train_composer

TINY = ["--preset", "tiny", "--batch-size", "8", "--max-regions", "6", "--eval-images", "6", "--epochs", "1",
        "--lr", "1e-3", "--accelerator", "cpu", "--quiet"]


def _data(world) -> list[str]:
    return ["--data", str(world / "captions.jsonl"), "--features", str(world / "features.h5")]


@pytest.fixture(scope="module")
def trained(tiny_world, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    assert train_composer.main([*_data(tiny_world), *TINY, "--max-steps", "3", "--out", str(root / "composer")]) == 0
    assert train_baseline.main(["--model", "vse", *_data(tiny_world), *TINY, "--out", str(root / "vse")]) == 0
    return root


@pytest.mark.parametrize("name", ["composer", "vse"])
def test_a_saved_model_is_evaluated_from_its_directory_like_from_its_checkpoint(trained, tiny_world, tmp_path, name):
    run = trained / name
    assert (run / "model" / "config.json").is_file() and (run / "model" / "model.safetensors").is_file()
    outs = {}
    for source in ("model", "checkpoints/last.ckpt"):
        out = tmp_path / f"{source.replace('/', '_')}.json"
        assert evaluate.main(["--model", str(run / source), *_data(tiny_world), "--split", "test",
                              "--eval-images", "6", "--no-phrases", "--quiet", "--out", str(out)]) == 0
        outs[source] = json.loads(out.read_text())
    by_dir, by_ckpt = outs["model"], outs["checkpoints/last.ckpt"]
    trained_results = json.loads((run / "results.json").read_text())
    assert by_dir["model"] == by_ckpt["model"] == name
    assert by_dir["sentence"]["R@1"] == by_ckpt["sentence"]["R@1"]
    # the run's own test figures: the saved model is the one its results describe
    assert by_dir["sentence"] == {**trained_results["test"]["sentence"], **{k: by_dir["sentence"][k] for k in
                                  ("chance_R@1", "seconds", "pairs_per_second")}}
    assert by_ckpt["global_step"] == trained_results["global_step"]


def test_interpretation_refuses_a_model_without_concept_scores(trained, tiny_world):
    from composer.cli import interpret

    with pytest.raises(SystemExit, match="holds a vse model"):
        interpret.main(["--model", str(trained / "vse" / "model"), *_data(tiny_world), "--eval-images", "6",
                        "--index", "0", "--quiet"])


def test_evaluation_reads_the_runs_own_data_settings(trained, monkeypatch):
    """A run trained on a 36-image world at 6 regions is evaluated on the same world size and regions by
    default (a tool taking a run once generated the script default's 4,000-image world instead)."""
    import argparse

    seen = {}

    def fake_load_eval_data(data, **kwargs):
        seen.update(kwargs)
        raise FileNotFoundError("stop here")

    from composer.evaluation import eval_sets  # gc-evaluate imports it after parsing its flags

    monkeypatch.setattr(eval_sets, "load_eval_data", fake_load_eval_data)
    path = trained / "composer" / "results.json"
    original = path.read_text()
    results = json.loads(original)
    results["config"]["data"]["world_images"] = 777  # as if it had trained on a 777-image world
    path.write_text(json.dumps(results))
    args = evaluate.build_argparser().parse_args(["--model", str(trained / "composer" / "model"), "--data", "world"])
    try:
        with pytest.raises(SystemExit, match="stop here"):
            evaluate.load(args)
    finally:
        path.write_text(original)
    assert seen["world_images"] == 777 and seen["max_regions"] == 6
    assert isinstance(args, argparse.Namespace)
