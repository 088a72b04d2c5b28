"""Fault injection, bad flags (issue 35): every numeric flag of every command, given a value that is no number
or one out of its range, is argparse's one-line error naming the flag (exit 2) before any work, and the user's
files are as they were: the input corpus byte-identical, no ``--out`` folder created.

The cases are generated from the commands' own parsers (so a flag added later is covered too): a non-number for
every flag whose type is numeric; the edge just outside the range for every flag with a ranged type
(:mod:`crg.cli.arguments`: 0 for a count, -1 for a non-negative value, ``nan`` / ``inf`` for a float)."""

from __future__ import annotations

import argparse
import hashlib
import importlib
import shutil

import pytest
from conftest import ROOT

from crg.cli import arguments as types

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"

# command -> (module with build_argparser and main, the arguments around the bad flag: {corpus}, {out})
COMMANDS = {
    "gc-build-crg": ("crg.cli.build_crg", ["--captions", "{corpus}", "--out", "{out}", "--no-cache", "--quiet"]),
    "gc-make-mcd-split": ("crg.cli.make_mcd_split", ["--train", "{corpus}", "--out", "{out}", "--quiet"]),
    "gc-hard-negatives": ("crg.cli.hard_negatives", ["--captions", "{corpus}", "--out", "{out}"]),
    "gc-train-composer": ("composer.cli.train_composer", ["--data", "{corpus}", "--out", "{out}", "--quiet"]),
    "gc-train-baseline": ("composer.cli.train_baseline", ["--model", "vse", "--data", "{corpus}", "--out", "{out}",
                                                          "--quiet"]),
    "gc-evaluate": ("composer.cli.evaluate", ["--captions", "{corpus}", "--out", "{out}"]),
    "gc-study": ("composer.cli.study", ["--out", "{out}", "--profile", "smoke"]),
    "world generation": ("features.world.generate", ["--out", "{out}", "--quiet"]),
}

NUMERIC = {int: "x", float: "x"}
# ranged types -> values just outside their range
OUT_OF_RANGE = {types.positive_int: ["0", "-3"], types.non_negative_int: ["-1"],
                types.positive_float: ["0", "-1", "nan", "inf"], types.non_negative_float: ["-1", "nan"],
                types.int_list: ["-1", "1,,a"]}
TYPED = {types.positive_int, types.non_negative_int, types.positive_float, types.non_negative_float, types.int_list}


def _flags(module: str):
    """``(flag, value)`` cases of a command's parser: a non-number for each numeric flag, out-of-range edges for
    each ranged one."""
    ap: argparse.ArgumentParser = importlib.import_module(module).build_argparser()
    cases = []
    for action in ap._actions:  # argparse keeps them here; there is no public list
        flag = next((s for s in action.option_strings if s.startswith("--")), None)
        if flag is None or action.type is None:
            continue
        if action.type in NUMERIC or action.type in TYPED:
            cases.append((flag, "x", action.nargs))
        for value in OUT_OF_RANGE.get(action.type, ()):
            cases.append((flag, value, action.nargs))
    return cases


CASES = [pytest.param(command, flag, value, nargs, id=f"{command}{flag}={value}")
         for command, (module, _) in COMMANDS.items() for flag, value, nargs in _flags(module)]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command, flag, value, nargs", CASES)
def test_a_bad_numeric_flag_is_one_argparse_error_naming_it_and_touches_nothing(tmp_path, capsys, command, flag,
                                                                                value, nargs):
    module, around = COMMANDS[command]
    corpus = tmp_path / "mine" / "captions.jsonl"
    corpus.parent.mkdir()
    shutil.copy(TOY, corpus)
    before = _digest(corpus)
    out = tmp_path / "out"
    argv = [a.format(corpus=corpus, out=out) for a in around]
    values = [value] * nargs if isinstance(nargs, int) else [value]  # e.g. gc-evaluate --world-held-out S P F
    with pytest.raises(SystemExit) as exited:
        importlib.import_module(module).main([*argv, f"{flag}={values[0]}" if len(values) == 1 else flag,
                                              *([] if len(values) == 1 else values)])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {flag}" in err and "error:" in err, err
    assert "Traceback" not in err
    assert _digest(corpus) == before and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_every_command_has_cases_and_the_ranged_types_are_used():
    by_command = {c: sum(1 for p in CASES if p.values[0] == c) for c in COMMANDS}
    assert all(n > 0 for n in by_command.values()), by_command
    assert len(CASES) >= 100
    seeds = [p.values for p in CASES if p.values[0] == "gc-study" and p.values[1] == "--seeds"]
    assert {v for _, _, v, _ in seeds} >= {"x", "-1"}


@pytest.mark.parametrize("text, message", [
    ("a", "expected comma-separated whole numbers >= 0, got 'a'"), ("0,b", "got 'b' in '0,b'"),
    (",", "expected comma-separated whole numbers"), ("1.5", "got '1.5'")])
def test_seed_lists_name_the_bad_item(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        types.int_list(text)
    assert types.int_list(" 3, 1 ,2") == [3, 1, 2]


@pytest.mark.parametrize("fn, good", [(types.positive_int, [("1", 1), ("40", 40)]),
                                      (types.non_negative_int, [("0", 0), ("7", 7)]),
                                      (types.positive_float, [("1e-3", 1e-3), ("2", 2.0)]),
                                      (types.non_negative_float, [("0", 0.0), ("0.5", 0.5)])])
def test_ranged_types_keep_every_good_value(fn, good):
    for text, value in good:
        assert fn(text) == value


def test_the_study_refuses_bad_seeds_before_any_work(tmp_path, capsys):
    """Was: a bare ``invalid literal for int()`` traceback after the profile was read."""
    from composer.cli.study import main

    with pytest.raises(SystemExit) as exited:
        main(["--out", str(tmp_path / "s"), "--profile", "smoke", "--seeds", "a"])
    assert exited.value.code == 2
    assert "argument --seeds: expected comma-separated whole numbers >= 0, got 'a'" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_the_study_names_a_ray_address_where_nothing_listens_before_any_work(tmp_path):
    from composer.cli.study import main

    with pytest.raises(SystemExit, match=r"error: --address 127.0.0.1:1: no Ray cluster answers there"):
        main(["--out", str(tmp_path / "s"), "--profile", "smoke", "--address", "127.0.0.1:1", "--jobs", "2"])
    assert not (tmp_path / "s").exists()


def test_ray_resources_names_the_address_it_cannot_join(monkeypatch):
    import ray

    from composer.study.execute import StudyOptions, ray_resources
    from crg.ray_engine import RayConnectError

    if ray.is_initialized():
        pytest.skip("a Ray of another test is running in this process")
    with pytest.raises(RayConnectError, match=r"--address 127.0.0.1:1: no Ray cluster answers there"):
        ray_resources(StudyOptions(jobs=2, address="127.0.0.1:1"))

    def failing_init(**kwargs):
        raise Exception("The current node timed out during startup.")  # noqa: TRY002 - what Ray raises

    monkeypatch.setattr(ray, "init", failing_init)
    with pytest.raises(RayConnectError, match=r"cannot start or join a local Ray: The current node timed out"):
        ray_resources(StudyOptions(jobs=2))
