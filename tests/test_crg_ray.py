"""The distributed CRG engine (crg/ray_engine.py) and its shard files (crg/shards.py).

The shard logic is checked without Ray first (merging parts = adding captions one by one; MCD counts read
from shards = the counts of the merged graph; bad files reported with name and line); then the Ray Data
pipeline on a local Ray: 1 and 2 actors give the single-machine graph, an actor killed mid-shard loses and
duplicates nothing, and a rerun keeps the finished shards.
"""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import ROOT
from crg.build import build_crg, usable_captions, BuildReport
from crg.corpus import read_corpus
from crg.graph import GraphBuilder
from crg.graph_compare import graph_differences
from crg.mcd import image_count_matrices
from crg.shards import (
    ShardCaption, analyze_shard, check_shard_output, merge_shard, output_key, output_path, plan_shards,
    read_shard_output, shard_count_matrices, write_shard_input,
)

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"
SETTINGS = {"parser": "test", "dump": False, "prune_probability": 0.0, "prune_seed": 0}
TIMINGS = ("parse_seconds", "extract_seconds")
PROVENANCE = ("num_parsed", "num_from_cache")  # where parses came from depends on what was cached before


def comparable_report(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in TIMINGS + PROVENANCE}


def sharded(corpus, parser, directory, n_shards, *, dump=False):
    """Shard specs and keys of ``corpus``, each shard analysed in this process (no Ray)."""
    report = BuildReport()
    todo = usable_captions(corpus, report)
    specs, keys = [], []
    for k, (a, b) in enumerate(plan_shards(len(todo), shards=n_shards)):
        spec = write_shard_input(directory, k, [ShardCaption(i, j, corpus.images[i].image_id, t)
                                                for i, j, t in todo[a:b]])
        key = output_key(spec, {**SETTINGS, "dump": dump})
        analyze_shard(spec, parser, output_path(directory, k), key=key, dump=dump)
        specs.append(spec)
        keys.append(key)
    return specs, keys, report


def merged(corpus, specs, keys, report):
    builder = GraphBuilder(corpus.image_ids, [im.split for im in corpus.images])
    problems: list[str] = []
    for spec, key in zip(specs, keys):
        merge_shard(spec, key, builder, report, problems=problems)
    return builder.build(), problems


@pytest.fixture(scope="module")
def toy():
    return read_corpus(TOY)


@pytest.fixture(scope="module")
def toy_graph(toy, spacy_parser):
    return build_crg(toy, spacy_parser, progress=False)


# ------------------------------------------------------------------------------------- without Ray
@pytest.mark.parametrize("n_shards", [1, 3, 7])
def test_merged_shards_equal_the_single_process_graph(tmp_path, toy, toy_graph, spacy_parser, n_shards):
    specs, keys, report = sharded(toy, spacy_parser, tmp_path, n_shards)
    graph, problems = merged(toy, specs, keys, report)
    assert not problems
    assert graph_differences(graph, toy_graph[0]) == {}
    assert comparable_report(report.as_dict()) == comparable_report(toy_graph[1].as_dict())


def test_shard_count_matrices_equal_the_graphs_and_grow_the_same_vocabulary(tmp_path, toy, toy_graph, spacy_parser):
    specs, keys, _ = sharded(toy, spacy_parser, tmp_path, 4)
    paths = [output_path(tmp_path, s.index) for s in specs]
    for seed_vocab in ({}, {"[NP] sits": 0, "zebra": 0}):  # empty, or already holding another graph's entries
        ref_c, ref_a = dict(seed_vocab), dict(seed_vocab)
        want = image_count_matrices(toy_graph[0], ref_c, ref_a)
        got_c, got_a = dict(seed_vocab), dict(seed_vocab)
        got = shard_count_matrices(paths, len(toy.images), got_c, got_a)
        assert list(got_c.items()) == list(ref_c.items()) and list(got_a.items()) == list(ref_a.items())
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype and (g != w).nnz == 0


def test_a_bad_shard_output_is_reported_with_file_and_line_and_the_rest_completes(tmp_path, toy, spacy_parser):
    specs, keys, report = sharded(toy, spacy_parser, tmp_path, 3)
    bad = output_path(tmp_path, 1)
    lines = gzip.open(bad, "rt", encoding="utf-8").read().splitlines()
    lines[4] = lines[4][:-3]                                   # line 5: cut JSON
    with gzip.open(bad, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    assert check_shard_output(bad, shard=1, key=keys[1]) == f"{bad}:5: not valid JSON"
    assert check_shard_output(output_path(tmp_path, 0), shard=1, key=keys[1]).endswith(":1: holds shard 0, not shard 1")
    assert check_shard_output(output_path(tmp_path, 0), shard=0, key="other").endswith(":1: made from other captions "
                                                                                       "or settings (its key differs)")
    output_path(tmp_path, 2).write_bytes(output_path(tmp_path, 2).read_bytes()[:200])  # truncated stream
    assert ": unreadable (EOFError" in check_shard_output(output_path(tmp_path, 2), shard=2, key=keys[2])
    graph, problems = merged(toy, specs, keys, report)
    assert len(problems) == 2 and problems[0] == f"{bad}:5: not valid JSON"
    assert report.skipped == {"bad_shard": specs[1].num_captions + specs[2].num_captions}
    assert graph.num_captions == report.num_used == specs[0].num_captions


def test_a_bad_shard_input_line_is_reported_counted_and_skipped(tmp_path, toy, toy_graph, spacy_parser):
    report = BuildReport()
    todo = usable_captions(toy, report)
    spec = write_shard_input(tmp_path, 0, [ShardCaption(i, j, toy.images[i].image_id, t) for i, j, t in todo])
    lines = spec.path.read_text(encoding="utf-8").splitlines()
    lines[3] = "{not json"
    lines[5] = json.dumps({"i": 0, "j": 1, "id": "x"})         # no text
    spec.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    key = output_key(spec, SETTINGS)
    summary = analyze_shard(spec, spacy_parser, output_path(tmp_path, 0), key=key)
    assert summary.num_used == len(todo) - 2
    graph, problems = merged(toy, [spec], [key], report)
    assert problems == [f"{spec.path}:4: not valid JSON", f"{spec.path}:6: not a caption row (KeyError: 'text')"]
    assert report.skipped == {"bad_shard_line": 2} and graph.num_captions == len(todo) - 2


def test_plan_shards_covers_every_caption_once():
    for n, k in [(1, 1), (10, 3), (10, 10), (5, 9), (10_001, None)]:
        ranges = plan_shards(n, shards=k, shard_size=5000)
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(a < b for a, b in ranges) and all(b == c for (_, b), (c, _) in zip(ranges, ranges[1:]))
    with pytest.raises(ValueError, match="shards must be at least 1"):
        plan_shards(5, shards=0)


# ------------------------------------------------------------------------------------- through Ray
@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the [distributed] extra (ray[data]) is not installed")
    from crg.ray_engine import start_local_ray

    start_local_ray(2, object_store_mb=128)  # retries when a busy machine starts Ray too slowly
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def f30k_slice(tmp_path_factory, shared_data):
    """50 Flickr30K images (250 captions): real captions, small enough for CI."""
    lines = (shared_data / "flickr30k" / "captions.jsonl").read_text(encoding="utf-8").splitlines()[:50]
    path = tmp_path_factory.mktemp("f30k") / "f30k_250.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return read_corpus(path)


@pytest.mark.parametrize("workers", [1, 2])
def test_ray_engine_gives_the_single_machine_graph_even_when_an_actor_dies(tmp_path, local_ray, f30k_slice,
                                                                           spacy_parser, workers):
    from crg.ray_engine import ParserSpec, RayConfig, build_crg_ray

    want, want_report = build_crg(f30k_slice, spacy_parser, progress=False)
    config = RayConfig(workers=workers, shards=4, crash_once_in_shard=2)  # the actor on shard 2 dies halfway
    build = build_crg_ray(f30k_slice, ParserSpec("spacy"), tmp_path / "shards", config=config, progress=False)
    assert (tmp_path / "shards" / "00002.crashed-once").exists()  # the fault was injected, and survived
    assert graph_differences(build.graph, want) == {}
    assert comparable_report(build.report.as_dict()) == comparable_report(want_report.as_dict())
    assert build.engine.workers == workers and build.engine.shards_run == 4 and not build.engine.bad_shard_files
    assert build.graph.meta["parser"] == want.meta["parser"]


def test_cli_ray_engine_same_stats_and_a_resumed_run_keeps_finished_shards(tmp_path, local_ray, monkeypatch):
    from crg.cli.build_crg import main

    monkeypatch.setenv("GC_CACHE_DIR", str(tmp_path / "cache"))
    base = ["--captions", str(TOY), "--quiet", "--dump"]
    assert main([*base, "--out", str(tmp_path / "single")]) == 0
    assert main([*base, "--out", str(tmp_path / "ray"), "--engine", "ray", "--shards", "3", "--workers", "2"]) == 0
    single = json.loads((tmp_path / "single" / "stats.json").read_text())
    ray_stats = json.loads((tmp_path / "ray" / "stats.json").read_text())
    engine = ray_stats.pop("engine")
    assert engine["num_shards"] == 3 and engine["shards_run"] == 3
    for stats in (single, ray_stats):
        stats.pop("wall_seconds")
        stats["report"] = comparable_report(stats["report"])
    assert ray_stats == single
    assert (tmp_path / "ray" / "captions.jsonl").read_text() == (tmp_path / "single" / "captions.jsonl").read_text()

    bad = output_path(tmp_path / "ray" / "shards", 1)
    bad.write_bytes(b"garbage")
    assert main([*base, "--out", str(tmp_path / "ray"), "--engine", "ray", "--shards", "3", "--resume"]) == 0
    again = json.loads((tmp_path / "ray" / "stats.json").read_text())
    assert again["engine"]["shards_reused"] == 2 and again["engine"]["shards_run"] == 1
    assert again["engine"]["bad_shard_files"][0].startswith(f"{bad}:1: unreadable")
    assert again["num_concepts"] == single["num_concepts"] and again["num_captions"] == single["num_captions"]
    assert read_shard_output(bad, shard=1).summary.num_captions > 0  # rebuilt
