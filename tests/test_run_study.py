"""The study: table builders on hand-made results, the pair-scoring driver against full cross-scoring,
pruned CRGs, and experiments/run_study.py end to end (smoke profile) with its resume."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from composer.study.config import PROFILES, RUNS, il_overrides, study_runs
from composer.training.log_levels import QUIET_LOGGERS
from composer.report.plots import generation_starts, mean_band, probe_curves
from composer.report.tables import (
    FIGURE4_ROWS,
    TABLES,
    Column,
    Row,
    TableSpec,
    format_cell,
    render_all,
    render_table,
    render_window_table,
    seed_values,
    summarize,
    table_cells,
    window_series,
)

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- tables on hand-made results
def _results(per_run: dict) -> dict:
    """``{run: {seed: result}}`` -> the results.json layout."""
    return {"runs": {run: {"label": run, "model": run, "seeds": {str(s): r for s, r in seeds.items()}}
                     for run, seeds in per_run.items()}}


def test_cells_are_mean_and_sample_std_over_the_seeds_that_have_the_value():
    res = _results({"a": {0: {"test": {"R@1": 50.0}}, 1: {"test": {"R@1": 54.0}}, 2: {"test": {"R@1": 61.0}},
                          3: {"test": {}}}})
    cell = summarize(seed_values(res, "a", ("test", "R@1")))
    assert cell.n == 3  # seed 3 has no R@1
    assert cell.mean == pytest.approx(np.mean([50, 54, 61]))
    assert cell.std == pytest.approx(np.std([50, 54, 61], ddof=1))
    assert format_cell(cell) == f"{np.mean([50, 54, 61]):.1f} ± {np.std([50, 54, 61], ddof=1):.1f}"
    assert format_cell(summarize([])) == "–"
    assert format_cell(summarize([7.25]), digits=2) == "7.25"  # one seed: no spread shown
    assert summarize([float("nan"), 2.0]).n == 1  # a non-finite value is not averaged in


def test_every_paper_table_has_one_cell_per_row_and_column_and_missing_runs_show_as_dashes():
    one = {"test": {"R@1": 10.0, "R@5": 30.0, "R@10": 40.0}, "mcd": {"R@1": 5.0, "R@5": 20.0, "R@10": 25.0}}
    res = _results({"composer": {0: one, 1: {**one, "test": {"R@1": 12.0, "R@5": 30.0, "R@10": 40.0}}}})
    for spec in TABLES:
        cells = table_cells(spec, res)
        assert len(cells) == len(spec.rows) and all(len(r) == len(spec.columns) for r in cells), spec.key
        text = render_table(spec, res)
        lines = [line for line in text.splitlines() if line.startswith("|")]
        assert len(lines) == 2 + len(spec.rows), spec.key  # header, rule, one line per row
        widths = {line.count("|") for line in lines}
        assert len(widths) == 1, f"{spec.key}: ragged table"
        for row, line in zip(spec.rows, lines[2:]):
            seeds = line.rstrip(" |").rsplit("|", 1)[1].strip()
            assert seeds == ("2" if row.run == "composer" else "0")
            if row.run != "composer":
                assert "–" in line
    table2 = render_table(next(s for s in TABLES if s.key == "composer_table2"), res)
    assert "| COMPOSER | 11.0 ± 1.4 | 30.0 ± 0.0 |" in table2
    assert set(render_all(res)) >= {s.key for s in TABLES} | {"composer_figure4", "timings"}


def test_a_cell_over_fewer_seeds_than_its_row_says_how_many():
    """A figure only some seeds' evaluations hold (runs evaluated before it existed) must not read as the mean of
    the row's every seed."""
    spec = TableSpec("t", "T", (Row("x", "a"),), (Column("R@1", ("r",)), Column("new", ("new",))))
    res = _results({"a": {0: {"r": 1.0}, 1: {"r": 3.0}, 2: {"r": 2.0, "new": 7.0}}})
    text = render_table(spec, res)
    line = next(x for x in text.splitlines() if x.startswith("| x |"))
    assert [c.strip() for c in line.split("|")[2:-1]] == ["2.0 ± 1.0", "7.0 (n=1)", "3"]
    assert "(n=k)" in text
    full = _results({"a": {0: {"r": 1.0, "new": 1.0}}})
    assert "(n=" not in render_table(spec, full)


def test_value_and_millions_columns_and_grouped_rows():
    spec = TableSpec("t", "T", (Row("x", "a", "G1"), Row("y", "b", "G1"), Row("z", "a", "G2")),
                     (Column("CT", ("config", "ct"), "value"), Column("# params", ("n",), "millions"),
                      Column("R@1", ("r",))))
    res = _results({"a": {0: {"config": {"ct": 3}, "n": 2_500_000, "r": 1.0}, 1: {"config": {"ct": 3}, "n": 2_500_000}},
                    "b": {0: {"config": {"ct": 5}, "n": 1_000_000, "r": 2.0}}})
    lines = [line for line in render_table(spec, res).splitlines() if line.startswith("|")]
    assert lines[2].split("|")[1:6] == [" G1 ", " x ", " 3 ", " 2.5M ", " 1.0 (n=1) "]  # seed 1 has no r
    assert lines[3].split("|")[1:3] == ["  ", " y "]  # the group is named once
    assert lines[4].split("|")[1] == " G2 "
    assert format_cell(summarize([1, 3]), "value") == "1/3"  # seeds that disagree on a setting say so
    with pytest.raises(ValueError, match="kind"):
        Column("x", ("x",), "median")


def test_window_series_matches_windows_across_seeds_and_the_figure4_table_has_a_line_per_window():
    w = lambda cd, r1: {"compound_divergence": cd, "R@1": r1, "chance_R@1": 2.5}
    res = _results({"composer": {0: {"windows": [w(0.2, 10.0), w(0.1, 30.0)]},
                                 1: {"windows": [w(0.1, 20.0), w(0.2, 14.0), w(0.3, 1.0)]}},
                    "flat": {0: {"windows": [w(0.1, 5.0)]}}})
    series = window_series(res, "composer")
    assert [p.compound_divergence for p in series] == [0.1, 0.2, 0.3]
    assert [p.cell.mean for p in series] == [25.0, 12.0, 1.0] and [p.cell.n for p in series] == [2, 2, 1]
    lines = [line for line in render_window_table(res, FIGURE4_ROWS).splitlines() if line.startswith("|")]
    assert len(lines) == 2 + 3 and lines[2].startswith("| 0.100 | 25.0 ± 7.1 | 5.0 |")
    assert "–" in lines[3]  # flat has no window at 0.2


def test_plot_data_extraction():
    assert generation_starts([0, 10, 20, 30], [0.0, 1.0, 1.0, 2.0]) == [10, 30]
    mean, std = mean_band([[1.0, 2.0, 3.0], [3.0, 4.0]])
    assert mean.tolist() == [2.0, 3.0] and std.tolist() == [1.0, 1.0]
    res = _results({"il_clip": {0: {"probe": {"accuracy": [0.1, 0.3]}}, 1: {"probe": {"accuracy": [0.2, 0.4]}}}})
    assert probe_curves(res, [Row("IL", "il_clip"), Row("CB", "codebook_clip")]) == {"IL": [[0.1, 0.3], [0.2, 0.4]]}


def test_the_report_is_remade_from_results_json_alone(tmp_path):
    """composer.report reads nothing but the study folder's results.json: its tables, head and plots."""
    from composer.report.render import PLOT_FILES, render_report

    one = {"test": {"R@1": 10.0, "R@5": 30.0}, "windows": [{"compound_divergence": 0.2, "R@1": 5.0}]}
    results = {"study": {"profile_name": "hand", "seeds": [0, 1], "runs": ["composer", "vse"], "git": "abc",
                         "run_gits": ["abc"], "hardware": "here", "missing": ["vse seed 0"],
                         "failed": {"vse seed 0": "boom"},
                         "data": {"mcd": {"num_images": 4, "compound_divergence": 0.5,
                                          "random_compound_divergence": 0.1, "compounds": "semantic"}}},
               "runs": _results({"composer": {0: one, 1: {**one, "test": {"R@1": 12.0}}}})["runs"]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    render_report(tmp_path)
    text = (tmp_path / "tables.md").read_text()
    assert text.startswith("# Study results (hand profile)") and "semantic compound divergence 0.5" in text
    assert "Missing: vse seed 0." in text and "Failed: vse seed 0: boom" in text
    tables = render_all(results)
    assert "| COMPOSER | 11.0 ± 1.4 |" in tables["composer_table2"]
    for key, table in tables.items():
        assert (tmp_path / "tables" / f"{key}.md").read_text() == table and table in text, key
    assert all((tmp_path / "plots" / name).stat().st_size > 0 for name in PLOT_FILES)


def test_profiles_and_runs_are_consistent():
    names = [r.name for r in RUNS]
    assert len(names) == len(set(names))
    table_runs = {row.run for spec in TABLES for row in spec.rows}
    assert table_runs <= set(names), table_runs - set(names)
    assert set(PROFILES["smoke"].runs) == set(names) == set(PROFILES["gpu"].runs)
    for profile in PROFILES.values():
        base = il_overrides(profile, next(r for r in RUNS if r.name == "il_clip"))
        total = lambda o: o["t_warm"] + o["generations"] * (o["t_distill"] + o["t_interact"]) + o["t_extend"]
        for run in study_runs(profile):
            if run.model == "il_clip":  # Table 4's cycles keep the total number of steps
                assert total(il_overrides(profile, run)) == total(base), (profile.name, run.name)
    with pytest.raises(ValueError, match="unknown runs"):
        study_runs(PROFILES["cpu"], ["composer", "bert"])


def test_a_run_names_a_known_parser():
    from composer.study.config import StudyRun

    assert StudyRun("x", "composer", "x", parser="spacy").parser == "spacy"
    with pytest.raises(ValueError, match="parser 'benepar'"):
        StudyRun("x", "composer", "x", parser="benepar")


def test_ablations_may_train_on_fewer_seeds_than_the_main_models():
    by_name = {r.name: r for r in RUNS}
    few = replace(PROFILES["cpu"], seeds=(3, 4, 5), ablation_seeds=1)
    assert few.seeds_for(by_name["composer"], few.seeds) == [3, 4, 5]
    assert few.seeds_for(by_name["vse"], [7, 8]) == [7, 8]
    assert few.seeds_for(by_name["composer_ct1"], few.seeds) == [3]
    assert few.seeds_for(by_name["composer_prune30"], [7, 8]) == [7]
    every = replace(few, ablation_seeds=None)
    assert every.seeds_for(by_name["composer_ct1"], few.seeds) == [3, 4, 5]


# ---------------------------------------------------------------------------- a tiny world for the rest
@pytest.fixture(scope="module")
def world_env(tmp_path_factory):
    """A generated 80-image world (the smoke profile's) under its own data and cache directories."""
    root = tmp_path_factory.mktemp("study")
    env = {"GC_DATA_DIR": str(root / "data"), "GC_CACHE_DIR": str(root / "cache")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from features.catalog import resolve_dataset

    spec = resolve_dataset("world", world_images=PROFILES["smoke"].world_images,
                           world_split=PROFILES["smoke"].world_split, progress=False)
    yield root, env, spec
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_pair_scoring_agrees_with_full_cross_scoring(world_env):
    from composer.models.composer.config import composer_config
    from composer.evaluation.eval_sets import load_eval_data
    from composer.models.composer.model import Composer
    from composer.models.composer.program import ConceptProgram
    from composer.models.common.retrieval import score_matrix
    from composer.evaluation.text_pairs import programs_for_texts, score_text_image_pairs

    data = load_eval_data("world", split="test", eval_images=5, max_regions=6, world_images=80)
    torch.manual_seed(0)
    model = Composer(composer_config("tiny", visual={"region_dim": data.regions.shape[-1]}), load_pretrained=False).eval()
    tok = model.make_tokenizer()
    captions = data.captions[:7]
    texts = [data.graph.caption_texts[c] for c in captions]
    full = score_matrix(model, data.regions, data.geometry, data.region_mask,
                        [ConceptProgram.from_graph(data.graph, c) for c in captions], tok).scores   # (7, 5)
    pairs = [(im, t) for t in texts for im in reversed(data.image_ids)]
    programs = programs_for_texts(texts, parser_name=data.parser[0], parser_model=data.parser[1])  # as the CRG's
    assert all(programs[t] is not None for t in texts)
    got = score_text_image_pairs(model, tok, pairs, programs, data.store, max_regions=6, max_pairs=6)
    want = [full[texts.index(t), data.image_ids.index(im)] for im, t in pairs]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="no program"):
        score_text_image_pairs(model, tok, [(data.image_ids[0], "unparsed text")], programs, data.store, max_regions=6)


def test_pruned_crg_is_cached_under_its_own_key_and_deterministic(world_env):
    from crg.graph_cache import get_or_build_graph

    _, _, spec = world_env
    plain, _ = get_or_build_graph(spec.captions, list(spec.test_splits), progress=False)
    test = list(spec.test_splits)
    pruned, hit = get_or_build_graph(spec.captions, test, progress=False, prune_probability=0.5, prune_seed=3)
    again, hit_again = get_or_build_graph(spec.captions, test, progress=False, prune_probability=0.5, prune_seed=3)
    assert not hit and hit_again and pruned.meta["prune"] == {"probability": 0.5, "seed": 3}
    assert list(pruned.concept_texts) == list(again.concept_texts)
    assert pruned.num_captions == plain.num_captions  # the same captions, with less structure
    assert list(pruned.predicate_templates) != list(plain.predicate_templates)
    assert "prune" not in plain.meta and get_or_build_graph(spec.captions, list(spec.test_splits), progress=False)[1]


# ---------------------------------------------------------------------------- end to end
EXPECTED = (["results.json", "tables.md", "study.json", "data/study_data.json", "data/hard_negatives.json",
             "data/mcd/eval.jsonl", "data/mcd/report.json", "data/mcd/divergence_along_ranking.png"]
            + [f"tables/{key}.md" for key in [s.key for s in TABLES] + ["composer_figure4", "timings"]]
            + ["plots/composer_figure4_r1_vs_cd.png", "plots/il_clip_loss_generations.png",
               "plots/il_clip_easy_to_learn.png"])


@pytest.fixture()
def run_study(caplog):
    """The study command's ``main`` (composer/cli/study.py), in this process (its imports are paid once);
    returns the study's log lines. The library log levels it lowers are restored afterwards."""
    import logging

    from composer.cli import study as cli
    from composer.study import execute

    levels = {n: logging.getLogger(n).level for n in (*QUIET_LOGGERS, "composer.study")}

    def call(*argv: str, code: int = 0) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="composer.study"), caplog.at_level(logging.INFO, logger=cli.__name__):
            assert cli.main(list(argv)) == code
        return [r.getMessage() for r in caplog.records if r.name.startswith("composer.study") or r.name == cli.__name__]

    yield execute, call
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)


def test_smoke_study_writes_every_file_and_a_rerun_only_trains_what_is_missing(world_env, run_study, monkeypatch):
    root, _, _ = world_env
    module, call = run_study
    out = root / "smoke_study"
    args = ("--data", "world", "--out", str(out), "--profile", "smoke")
    log = call(*args)
    for rel in EXPECTED:
        assert (out / rel).is_file() and (out / rel).stat().st_size > 0, rel
    results = json.loads((out / "results.json").read_text())
    study = results["study"]
    assert study["complete"] and study["seeds"] == [0] and study["git"] and study["hardware"]
    trained_at = {r["git"] for e in results["runs"].values() for r in e["seeds"].values()}
    assert study["run_gits"] == sorted(trained_at) and "unknown" not in trained_at  # each run records its commit
    assert set(results["runs"]) == set(PROFILES["smoke"].runs)
    for name, entry in results["runs"].items():
        r = entry["seeds"]["0"]
        assert r["steps"] >= 1 and r["train_seconds"] > 0 and "R@1" in r["test"], name
    composer = results["runs"]["composer"]["seeds"]["0"]
    assert {"mcd", "windows", "phrase", "hard_negatives"} <= set(composer)
    assert len(composer["windows"]) >= 1 and composer["hard_negatives"]["counts"]["items"] > 0
    assert results["runs"]["il_clip"]["seeds"]["0"]["probe"]["accuracy"]
    assert "generation" in results["runs"]["il_clip"]["seeds"]["0"]["train_curve"]
    assert results["runs"]["composer_prune50"]["seeds"]["0"]["config"]["data"]["prune_probability"] == 0.5
    # the productivity set (the costliest cross-encoder evaluation) is scored for the main models only
    assert {"systematic", "productivity"} <= set(composer) and "productivity" in results["runs"]["vse"]["seeds"]["0"]
    assert "systematic" in results["runs"]["composer_prune50"]["seeds"]["0"]
    assert "productivity" not in results["runs"]["composer_prune50"]["seeds"]["0"]
    assert "### COMPOSER Table 7" in (out / "tables.md").read_text()
    runs = results["runs"]
    spacy = runs["composer_spacy"]["seeds"]["0"]  # every CRG of the run from spaCy's parses, gold for the others
    assert spacy["parser"] == "spacy" and spacy["config"]["data"]["parser"] == "spacy"
    assert composer["parser"] == "world" and composer["config"]["data"]["parser"] == "world"
    for name in ("composer_hardneg", "flat_hardneg"):  # ViLBERT's sampler, compared with the default on val
        r = runs[name]["seeds"]["0"]
        assert r["config"]["data"]["hard_negative_captions"] == 1 and "R@1" in r["val"], name
    assert runs["composer"]["seeds"]["0"]["config"]["data"]["hard_negative_captions"] == 0
    # issue 36: IL-NegCLIP runs as a study run; structural negatives say what training could draw from
    assert runs["il_negclip"]["seeds"]["0"]["config"]["il"]["negclip"]
    structural = runs["composer_structneg"]["seeds"]["0"]["structural_negatives"]
    assert structural["kept"] == sum(structural["kept_by_kind"].values()) > 0
    assert "structural_negatives" not in composer
    assert "R@1" in composer["val"]
    assert results["study"]["data"]["mcd"]["compounds"] == "semantic"  # the world's logical-form compounds
    assert set(results["study"]["data"]["mcd"]["compound_divergences"]) >= {"semantic", "template"}
    assert "### Parses (gold vs spaCy)" in (out / "tables.md").read_text()
    assert sum(": training" in line for line in log) == len(PROFILES["smoke"].runs)

    # a run that fails is recorded and the study goes on (exit code 1)
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/seed0/study_result.json")}
    (out / "runs" / "vse" / "seed0" / "study_result.json").unlink()
    real = module.train_and_evaluate

    def broken(run, *a, **k):
        if run.name == "vse":
            raise FloatingPointError("non-finite loss (injected)")
        return real(run, *a, **k)

    monkeypatch.setattr(module, "train_and_evaluate", broken)
    call(*args, code=1)
    study = json.loads((out / "results.json").read_text())["study"]
    assert not study["complete"] and "injected" in study["failed"]["vse seed 0"]
    assert "FloatingPointError" in (out / "runs" / "vse" / "seed0" / "error.txt").read_text()
    assert "vse" not in json.loads((out / "results.json").read_text())["runs"]
    monkeypatch.setattr(module, "train_and_evaluate", real)

    # resume: finished runs are skipped; a run without its result.json (killed or failed) trains again
    log = call(*args)
    assert [line for line in log if ": training" in line] == [next(l for l in log if "vse seed 0: training" in l)]
    assert sum("done before, skipped" in line for line in log) == len(PROFILES["smoke"].runs) - 1
    assert all(p.stat().st_mtime_ns == t for p, t in before.items() if p.parent.parent.name != "vse")
    study = json.loads((out / "results.json").read_text())["study"]
    assert study["complete"] and not (out / "runs" / "vse" / "seed0" / "error.txt").exists()
    # the wall time of every invocation so far (the failed one too), each written while it ran
    clock = json.loads((out / "wall_seconds.json").read_text())  # the last invocation's: up to its exit
    assert len(study["wall_seconds"]) == 3 and set(study["wall_seconds"]) == set(clock)
    assert all(0 < study["wall_seconds"][k] <= clock[k] for k in clock)
    with pytest.raises(SystemExit, match="other settings"):  # another profile in the same directory is refused
        from composer.study.data import check_study_dir

        check_study_dir(out, PROFILES["cpu"], "world")

    # the report is made from the runs' results alone: --report-only rebuilds every table and trains nothing
    tables = {p.relative_to(out): p.read_text() for p in [out / "tables.md", *(out / "tables").glob("*.md")]}
    for path in tables:
        (out / path).unlink()
    (out / "results.json").unlink()
    log = call(*args, "--report-only")
    assert not any(": training" in line for line in log)
    assert {p: (out / p).read_text() for p in tables} == tables
    assert json.loads((out / "results.json").read_text())["study"]["complete"]


# ---------------------------------------------------------------------------- the recipe search
def test_every_model_gets_the_same_search_budget_and_the_choice_is_the_best_val_point():
    from composer.study.config import MODELS
    from composer.training.recipe_grid import GRID_SIZE, SearchPoint, choose_recipes, named_lr, search_grid

    for model in MODELS:
        grid = search_grid(model)
        assert len(grid) == GRID_SIZE and len({p.name for p in grid}) == GRID_SIZE, model
        assert any(abs(p.lr - named_lr(model)) / named_lr(model) < 0.05 for p in grid), model  # the named lr is in
    pts = search_grid("flat")
    val = {p.name: float(k) for k, p in enumerate(pts)}
    val[pts[-1].name] = float("nan")  # a diverged run is never chosen
    val[pts[2].name] = val[pts[3].name] = 99.0  # a tie: the first in grid order
    assert choose_recipes(val, pts)["flat"]["run"] == pts[2].name
    assert choose_recipes({}, pts) == {}
    assert SearchPoint("clip", 1e-3).overrides() == {"lr": 1e-3}
    # VSE with a pretrained text side: the init std reaches no random weight, so all six runs vary the lr
    pretrained = search_grid("vse", "small-minilm")
    assert len({p.lr for p in pretrained}) == GRID_SIZE and all(p.init is None for p in pretrained)
    assert len({p.init for p in search_grid("flat", "small-minilm")}) == 2


def test_smoke_search_then_study_trains_from_the_chosen_recipes(world_env, run_study):
    root, _, _ = world_env
    module, call = run_study
    out = root / "search_study"
    call("--data", "world", "--out", str(out), "--profile", "smoke", "--runs", "composer,clip", "--search")
    chosen = json.loads((out / "search" / "chosen.json").read_text())["chosen"]
    assert set(chosen) == {"composer", "clip"}
    searched = sorted((out / "search" / "runs").glob("*/seed0/study_result.json"))
    assert len(searched) == 12
    for path in searched:  # search runs are scored on val only
        r = json.loads(path.read_text())
        assert "R@1" in r["val"] and "test" not in r and "systematic" not in r
    results = json.loads((out / "results.json").read_text())
    composer = results["runs"]["composer"]["seeds"]["0"]["config"]
    assert composer["optim"]["lr"] == chosen["composer"]["lr"]
    assert composer["model"]["text"]["initializer_range"] == chosen["composer"]["init"]
    assert results["runs"]["clip"]["seeds"]["0"]["config"]["il"]["lr"] == chosen["clip"]["lr"]
    assert results["study"]["recipes"] == chosen
    assert "Recipe search" in (out / "tables.md").read_text()
    systematic = results["runs"]["composer"]["seeds"]["0"]["systematic"]
    assert "R@1" in systematic and "ceilings" in systematic and "gap" in results["runs"]["composer"]["seeds"]["0"]
    # the same search again (nothing changes) is fine; a study run on other recipes is refused
    call("--data", "world", "--out", str(out), "--profile", "smoke", "--runs", "composer,clip", "--search-only")
    (out / "search" / "chosen.json").write_text(json.dumps({"chosen": {}}))
    with pytest.raises(SystemExit, match="trained before this recipe search"):
        call("--data", "world", "--out", str(out), "--profile", "smoke", "--runs", "composer,clip", "--search-only")


# ---------------------------------------------------------------------------- on Ray, killed and resumed
def test_two_ray_workers_train_the_study_and_kept_weights_load_as_gc_evaluate_loads_them(world_env, run_study):
    """--jobs 2 on a local Ray of two CPUs: two runs at a time in Ray's worker processes, each through train()
    into its folder; --keep-weights keeps each run's model/ (save_pretrained), which gc-evaluate's loader
    reads and which scores as the study reported."""
    import ray

    from composer.cli.evaluate import load_model
    from composer.evaluation.eval_sets import load_eval_data
    from composer.evaluation.sentence_retrieval import sentence_retrieval

    root, _, _ = world_env
    _, call = run_study
    out = root / "ray_study"
    ray.init(num_cpus=2, include_dashboard=False)  # after world_env: the workers inherit its data directories
    try:
        log = call("--data", "world", "--out", str(out), "--profile", "smoke", "--runs", "composer,vse,clip",
                   "--jobs", "2", "--keep-weights")
    finally:
        ray.shutdown()
    assert sum("training (Ray task)" in line for line in log) == 3
    results = json.loads((out / "results.json").read_text())
    assert results["study"]["complete"] and set(results["runs"]) == {"composer", "vse", "clip"}
    pids = set()
    for name in ("composer", "vse", "clip"):
        folder = out / "runs" / name / "seed0"
        trained = json.loads((folder / "results.json").read_text())  # train()'s own, beside the study's
        assert trained["model"] == name and (folder / "run.json").is_file() and not (folder / "checkpoints").exists()
        loaded = load_model(folder / "model")  # gc-evaluate --checkpoint OUT/runs/RUN/seedS/model
        assert loaded.kind == name
        pids.add(json.loads((folder / "study_result.json").read_text())["pid"])
    assert len(pids) >= 2 and os.getpid() not in pids  # the runs ran in Ray's workers, not in this process
    composer = results["runs"]["composer"]["seeds"]["0"]
    loaded = load_model(out / "runs" / "composer" / "seed0" / "model")
    mcd = results["study"]["data"]["mcd"]
    split = load_eval_data(mcd["path"], split="all", features=results["study"]["data"]["world"]["features"],
                           eval_images=mcd["num_images"], max_regions=composer["config"]["data"]["max_regions"],
                           parser="world")
    again = sentence_retrieval(loaded.model, loaded.tokenizer, split, max_pairs=PROFILES["smoke"].max_pairs)
    assert again["R@1"] == composer["mcd"]["R@1"] and again["R@5"] == composer["mcd"]["R@5"]


def test_the_ray_the_study_starts_gives_its_workers_a_malloc_that_keeps_freed_memory(monkeypatch):
    """The study's workers get composer.study.execute.WORKER_MALLOC in their environment (glibc reads it at start;
    without it a VM whose free memory went back to the host spent most of a worker's CPU faulting pages in), and
    a value the user set wins."""
    import ray

    from composer.study.execute import WORKER_MALLOC, StudyOptions, ray_resources

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1234")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert not ray.is_initialized()
    try:
        ray_resources(StudyOptions(jobs=2))

        @ray.remote(num_cpus=1)
        def worker_env():
            return {k: os.environ.get(k) for k in WORKER_MALLOC}

        seen = ray.get(worker_env.remote())
    finally:
        ray.shutdown()
    assert seen == {"MALLOC_MMAP_THRESHOLD_": WORKER_MALLOC["MALLOC_MMAP_THRESHOLD_"], "MALLOC_TRIM_THRESHOLD_": "1234"}


def test_a_killed_study_resumes_and_trains_no_finished_run_again(world_env, run_study):
    """The study's process killed (SIGKILL) after its first run finished: the rerun keeps that run's result,
    trains the rest (the run the kill interrupted starts over in its folder) and completes."""
    import signal
    import subprocess
    import sys
    import time

    root, env, _ = world_env
    _, call = run_study
    out = root / "killed_study"
    args = ("--data", "world", "--out", str(out), "--profile", "smoke", "--runs", "composer,vse,flat")
    proc = subprocess.Popen([sys.executable, "-m", "composer.cli.study", *args], cwd=ROOT,
                            env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / "runs" / "composer" / "seed0" / "study_result.json"
    deadline = time.monotonic() + 900
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists(), "the study ended or timed out before its first run finished"
    done_before = {p.parent.parent.name: (p.stat().st_mtime_ns, json.loads(p.read_text())["pid"])
                   for p in (out / "runs").glob("*/seed0/study_result.json")}
    assert len(done_before) < 3, "the kill came after the last run"
    log = call(*args)
    trained = [line for line in log if ": training" in line]
    assert len(trained) == 3 - len(done_before) and not any(name in line for name in done_before for line in trained)
    assert sum("done before, skipped" in line for line in log) == len(done_before)
    for name, (mtime, pid) in done_before.items():
        path = out / "runs" / name / "seed0" / "study_result.json"
        assert path.stat().st_mtime_ns == mtime and json.loads(path.read_text())["pid"] == pid == proc.pid
    assert json.loads((out / "results.json").read_text())["study"]["complete"]
    for name in ("vse", "flat"):  # overwritten, not resumed: one training log per run folder
        assert [p.name for p in (out / "runs" / name / "seed0" / "logs").iterdir()] == ["version_0"]


def test_a_study_started_with_a_relative_out_resumes_from_another_directory(world_env, run_study, monkeypatch,
                                                                            tmp_path):
    """The study's data paths (hard negatives, MCD split) are handed to every run and saved; started as
    ``--out study`` in one directory and grown from another, the new run must find them (it did not: its
    paths were relative to the first directory)."""
    _, call = run_study
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    monkeypatch.chdir(first)
    call("--data", "world", "--out", "study", "--profile", "smoke", "--runs", "vse")
    monkeypatch.chdir(second)
    from composer.evaluation.eval_sets import EvalSets

    monkeypatch.setattr(EvalSets, "_shared", {})  # as a new process (a Ray worker) would: nothing read yet
    call("--data", "world", "--out", str(first / "study"), "--profile", "smoke", "--runs", "vse,composer")
    results = json.loads((first / "study" / "results.json").read_text())
    assert results["study"]["complete"] and results["study"]["failed"] == {}
    assert "counts" in results["runs"]["composer"]["seeds"]["0"]["hard_negatives"]


def test_a_moved_study_folder_still_finds_its_data(world_env, run_study, monkeypatch, tmp_path):
    """study_data.json keeps the folder's own paths relative to it: a study moved (or reached under another
    mount point) and grown there trains its new run on the moved data."""
    import shutil

    from composer.evaluation.eval_sets import EvalSets

    _, call = run_study
    call("--data", "world", "--out", str(tmp_path / "here"), "--profile", "smoke", "--runs", "vse")
    stored = json.loads((tmp_path / "here" / "data" / "study_data.json").read_text())
    assert not Path(stored["hard_negatives"]["path"]).is_absolute() and not Path(stored["mcd"]["path"]).is_absolute()
    shutil.move(tmp_path / "here", tmp_path / "there")
    monkeypatch.setattr(EvalSets, "_shared", {})  # a new process: nothing read yet
    call("--data", "world", "--out", str(tmp_path / "there"), "--profile", "smoke", "--runs", "vse,composer")
    results = json.loads((tmp_path / "there" / "results.json").read_text())
    assert results["study"]["complete"] and results["study"]["failed"] == {}
    assert results["runs"]["composer"]["seeds"]["0"]["mcd"]["num_images"] >= 1
    assert str(tmp_path / "there") in results["study"]["data"]["hard_negatives"]["path"]


def test_a_study_restored_from_its_exported_record_trains_only_what_the_record_lacks(world_env, run_study, tmp_path):
    """``--export``: the record of a study whose machine went away (results, no weights), copied into an empty
    folder, lets the same command go on: the exported run is skipped, its figures are in the report as they
    were, the missing run is trained; the next export adds just the new result and the wall time."""
    import shutil

    _, call = run_study
    first, kept, second = tmp_path / "first", tmp_path / "kept", tmp_path / "second"
    call("--data", "world", "--out", str(first), "--profile", "smoke", "--runs", "vse")
    log = call("--out", str(first), "--export", str(kept))
    assert any("1 finished runs" in line for line in log)
    assert not list(kept.rglob("*.ckpt")) and not (kept / "data").exists()
    vse_before = json.loads((kept / "runs" / "vse" / "seed0" / "study_result.json").read_text())
    shutil.copytree(kept, second)  # docs/studies/README.md's restore: cp -r RECORD/. OUT/
    log = call("--data", "world", "--out", str(second), "--profile", "smoke", "--runs", "vse,composer")
    assert any("vse seed 0: done before, skipped" in line for line in log)
    trained = [line for line in log if ": training" in line]
    assert len(trained) == 1 and "composer seed 0: training" in trained[0]
    results = json.loads((second / "results.json").read_text())
    assert results["study"]["complete"] and set(results["runs"]) == {"vse", "composer"}
    assert results["runs"]["vse"]["seeds"]["0"]["test"] == vse_before["test"]
    log = call("--out", str(second), "--export", str(kept))
    assert any("2 finished runs" in line for line in log)
    assert (kept / "runs" / "composer" / "seed0" / "study_result.json").is_file()
    assert len(json.loads((kept / "wall_seconds.json").read_text())) == 2  # both invocations' wall time
    with pytest.raises(SystemExit, match="inside the study folder"):
        call("--out", str(second), "--export", str(second / "kept"))


def test_a_study_grown_by_a_new_model_searches_it_alone_and_keeps_the_other_choices(tmp_path):
    """``--runs negclip,...`` in a finished study: the new model's search adds its choice; the choices of the
    models already trained stay, and only a changed choice of a model with finished runs is refused."""
    from composer.study.config import get_profile
    from composer.study.search import SEARCH_DIR, finish_search
    from composer.training.recipe_grid import choose_recipes, search_grid

    profile = get_profile("smoke")
    out = tmp_path / "study"

    def searched(model: str, best: int) -> list:
        points = search_grid(model, profile.presets.get(model))
        for k, p in enumerate(points):
            folder = out / SEARCH_DIR / "runs" / p.name / "seed0"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "study_result.json").write_text(json.dumps({"model": model, "val": {
                "R@1": 50.0 if k == best else float(k), "chance_R@1": 2.0}}))
        return points

    vse = searched("vse", best=1)
    first = finish_search(out, vse, profile)
    trained = out / "runs" / "vse" / "seed0"  # a finished study run of VSE, on the first choice
    trained.mkdir(parents=True)
    (trained / "study_result.json").write_text(json.dumps({"model": "vse"}))
    negclip = searched("negclip", best=4)
    grown = finish_search(out, negclip, profile)
    assert grown == {**first, **choose_recipes({p.name: 50.0 if k == 4 else float(k) for k, p in enumerate(negclip)},
                                               negclip)}
    assert set(grown) == {"vse", "negclip"} and grown["vse"] == first["vse"]
    assert json.loads((out / SEARCH_DIR / "chosen.json").read_text())["chosen"] == grown
    table = (out / "tables" / "search.md").read_text()
    assert all(p.setting in table for p in [*vse, *negclip])  # both models' searches in the table
    finish_search(out, searched("negclip", best=2), profile)  # no negclip run trained yet: allowed
    with pytest.raises(SystemExit, match=r"runs of \['vse'\] trained before this recipe search"):
        finish_search(out, searched("vse", best=3), profile)


def test_hard_negatives_by_edit_reads_each_edit_and_names_every_edit_the_world_makes(tiny_world):
    """The by-edit table shows ``i2t_by_edit``; its columns are the edits the world's generator makes (a renamed
    edit would leave a column of dashes)."""
    import json as json_

    from composer.report.tables import _EDITS
    from features.world.generate import load_scenes
    from features.world.hard_negatives import WorldHardNegatives, WorldNegativeConfig
    from features.world.scene import WorldConfig

    spec = next(s for s in TABLES if s.key == "hard_negatives_by_edit")
    res = _results({"composer": {0: {"hard_negatives": {"i2t_by_edit": {"HN-ATOM/replace_relation": 50.0,
                                                                         "HN-SWAP/swap_arguments": 54.0}}}}})
    line = next(x for x in render_table(spec, res).splitlines() if x.startswith("| COMPOSER |"))
    cells = [c.strip() for c in line.split("|")[2:-2]]
    assert cells[_EDITS.index("HN-ATOM/replace_relation")] == "50.0"
    assert cells[_EDITS.index("HN-SWAP/swap_arguments")] == "54.0" and cells.count("–") == len(_EDITS) - 2

    scenes = load_scenes(tiny_world / "scenes.jsonl.gz")
    gen = WorldHardNegatives(scenes, WorldConfig(), WorldNegativeConfig(per_type=3, seed=0, distractor_images=0))
    made = set()
    for line in (tiny_world / "captions.jsonl").read_text().splitlines():
        rec = json_.loads(line)
        for caption in rec["captions"]:
            made |= {f"{n.type}/{n.change.op}" for n in gen.caption_negatives(rec["image_id"], caption).negatives}
    assert made <= set(_EDITS) and len(made) >= 6, sorted(made)


def test_a_study_trains_from_another_studys_chosen_recipes(tmp_path):
    """--recipes-from: the other study's chosen.json is adopted with where it came from, a rerun keeps it (also when
    the source has moved since), and a study holding another choice is refused."""
    from composer.cli.study import build_argparser, study_config
    from composer.study.search import adopt_recipes, read_chosen
    from crg.outputs import write_json_atomic

    source, out = tmp_path / "converge", tmp_path / "longer"
    choice = {"composer": {"run": "composer_lr5e-4_init0.02", "lr": 5e-4, "init": 0.02}}
    write_json_atomic(source / "search" / "chosen.json", {"chosen": choice, "val_R@1": {"x": 1.0}, "profile": "cpu"})
    assert adopt_recipes(out, source) == choice == read_chosen(out)
    saved = json.loads((out / "search" / "chosen.json").read_text())
    assert saved["from"] == str(source.resolve()) and saved["val_R@1"] == {"x": 1.0}
    assert adopt_recipes(out, source) == choice                                  # a rerun: the same choice
    (source / "search" / "chosen.json").rename(source / "moved.json")
    assert adopt_recipes(out, source) == choice                                  # the source gone: kept
    with pytest.raises(SystemExit, match="does not exist"):
        adopt_recipes(tmp_path / "fresh", source)
    write_json_atomic(source / "search" / "chosen.json", {"chosen": {"composer": {**choice["composer"], "lr": 1e-3}}})
    with pytest.raises(SystemExit, match="another recipe choice"):
        adopt_recipes(out, source)

    # the search's chosen.json kept apart from its folder (docs/studies/): the file itself is the source
    kept = tmp_path / "kept_chosen.json"
    write_json_atomic(kept, {"chosen": choice, "profile": "converge"})
    assert adopt_recipes(tmp_path / "from_file", kept) == choice == read_chosen(tmp_path / "from_file")
    assert json.loads((tmp_path / "from_file" / "search" / "chosen.json").read_text())["from"] == str(kept.resolve())
    write_json_atomic(kept, {"composer": {"lr": 1e-3}})                          # not a chosen.json: refused, named
    with pytest.raises(SystemExit, match="kept_chosen.json is not a recipe search's chosen.json"):
        adopt_recipes(tmp_path / "bad", kept)

    ap = build_argparser()
    argv = ["--profile", "smoke", "--out", str(out), "--recipes-from", str(source)]
    assert study_config(ap, argv, ap.parse_args(argv)).recipes_from == str(source)
    with pytest.raises(SystemExit):
        argv = [*argv, "--search"]
        study_config(ap, argv, ap.parse_args(argv))
