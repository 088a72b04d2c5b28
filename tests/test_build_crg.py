"""End to end: corpus -> graph with the CLI, caching, bad captions, broken corpus files."""

import json
import subprocess
import sys


from conftest import ROOT
from crg.build import build_crg
from crg.corpus import read_corpus
from crg.parse_cache import ParseCache
from crg.preparsed import PreparsedTrees

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"


def run_cli(*args, cache):
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "build_crg.py"), *map(str, args),
                           "--cache", str(cache), "--quiet"], capture_output=True, text=True, cwd=ROOT)


def test_cli_writes_stats_and_dump_and_a_rerun_parses_nothing(tmp_path):
    cache = tmp_path / "cache.sqlite"
    res = run_cli("--captions", TOY, "--split", "train", "--out", tmp_path / "g", "--dump", "--show", "1", cache=cache)
    assert res.returncode == 0, res.stderr
    assert "two dogs are running on the grass" in res.stdout
    stats = json.loads((tmp_path / "g" / "stats.json").read_text())
    for key in ("num_concepts", "num_predicates", "num_primitives", "avg_height"):
        assert key in stats
    assert stats["num_captions"] == 30 and stats["report"]["num_parsed"] == 30
    rows = [json.loads(line) for line in (tmp_path / "g" / "captions.jsonl").read_text().splitlines()]
    assert len(rows) == 30
    assert set(rows[0]) == {"image_id", "caption", "tree", "concepts", "predicates", "primitives", "height"}
    assert rows[0]["predicates"][0] == "[NP] are running on [NP]"
    assert rows[0]["primitives"] == ["dogs", "grass"]

    again = run_cli("--captions", TOY, "--split", "train", "--out", tmp_path / "g2", cache=cache)
    assert again.returncode == 0, again.stderr
    stats2 = json.loads((tmp_path / "g2" / "stats.json").read_text())
    assert stats2["report"]["num_parsed"] == 0 and stats2["report"]["num_from_cache"] == 30
    assert stats2["num_concepts"] == stats["num_concepts"]


def test_bad_captions_are_counted_and_skipped_not_fatal(tmp_path, spacy_parser):
    corpus_file = tmp_path / "bad.jsonl"
    records = [
        {"image_id": 1, "split": "train", "captions": ["A dog runs on the beach.", "", "   ", 42]},
        {"image_id": 2, "split": "train", "captions": ["Ein Mann mit einem roten Hut steht auf der Straße.",
                                                       "一只狗在草地上奔跑", "word " * 150, "Dogs."]},
    ]
    corpus_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    graph, report = build_crg(read_corpus(corpus_file), spacy_parser, progress=False)
    assert report.num_captions == 8 and report.num_used == 2
    assert report.skipped == {"empty": 2, "not_text": 1, "not_english": 2, "too_long": 1}
    assert {e["reason"] for e in report.skipped_examples} == set(report.skipped)
    assert graph.num_captions == 2 and graph.image_ids == ["1", "2"]


def test_missing_preparsed_tree_is_a_counted_skip(tmp_path):
    trees = tmp_path / "trees.mrg"
    trees.write_text("(TOP (S (NP (DT A) (NN dog)) (VP (VBZ runs)) (. .)))\n")
    corpus_file = tmp_path / "c.tsv"
    corpus_file.write_text("image_id\tcaption\nim1\tA dog runs.\nim1\tA cat sleeps.\n")
    graph, report = build_crg(read_corpus(corpus_file), PreparsedTrees(trees), progress=False)
    assert report.num_used == 1 and report.skipped == {"parse_failed": 1}
    assert graph.caption_texts == ["A dog runs."]


def test_broken_corpus_file_fails_with_file_and_line(tmp_path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"image_id": 1, "captions": ["ok"]}\n{"image_id": 2, "captions": [\n')
    res = run_cli("--captions", bad, "--out", tmp_path / "g", cache=tmp_path / "c.sqlite")
    assert res.returncode != 0
    assert f"{bad}:2: not valid JSON" in res.stderr


def test_parse_cache_survives_reopening(tmp_path):
    with ParseCache(tmp_path / "c.sqlite") as cache:
        cache.put_many("p1", [("a dog", "(TOP (NP (DT a) (NN dog)))")])
    with ParseCache(tmp_path / "c.sqlite") as cache:
        assert cache.get_many("p1", ["a dog", "a cat"]) == ["(TOP (NP (DT a) (NN dog)))", None]
        assert cache.get_many("p2", ["a dog"]) == [None]  # another parser never sees these trees
        assert len(cache) == 1


def test_real_flickr30k_slice_builds_with_two_workers(tmp_path, shared_data, spacy_parser):
    lines = (shared_data / "flickr30k" / "captions.jsonl").read_text().splitlines()[:120]
    sample = tmp_path / "f30k_slice.jsonl"
    sample.write_text("\n".join(lines) + "\n")
    corpus = read_corpus(sample).select("train")
    with ParseCache(tmp_path / "c.sqlite") as cache:
        graph, report = build_crg(corpus, spacy_parser, cache=cache, n_process=2, progress=False)
        serial, _ = build_crg(corpus, spacy_parser, progress=False)
    assert report.num_used == 600 and not report.skipped
    assert graph.concept_texts == serial.concept_texts  # workers change nothing
    assert 2.0 < graph.stats()["avg_height"] < 4.5
    assert graph.num_primitives > 200


def _graph_arrays(graph) -> dict:
    import numpy as np

    out = {}
    for name, value in vars(graph).items():
        if name.startswith("_") or name == "meta":
            continue
        out[name] = value.tolist() if isinstance(value, np.ndarray) else value
    return out


def test_chunked_build_equals_adding_each_caption_in_order(tmp_path, spacy_parser):
    """The fast path (workers send chunk parts; new parses extracted from the parser's own trees) against
    the plain one: every caption's concept tree from its bracketed parse, added one by one. Same graph and
    dump with 1 and 2 processes, from an empty cache and from a full one."""
    from nltk import Tree

    from crg.build import caption_record, usable_captions, BuildReport
    from crg.extract import extract_concepts
    from crg.graph import GraphBuilder

    corpus = read_corpus(TOY).select("train")
    reference = GraphBuilder([im.image_id for im in corpus.images], [im.split for im in corpus.images])
    records = []
    todo = usable_captions(corpus, BuildReport())
    trees = spacy_parser.parse_texts([t for _, _, t in todo])
    for (i, j, text), tree in zip(todo, trees):
        bracketed = tree.pformat(margin=10**9)
        root = extract_concepts(Tree.fromstring(bracketed))
        reference.add_caption(i, j, text, root)
        records.append(caption_record(corpus.images[i].image_id, text, bracketed, root))
    expected = _graph_arrays(reference.build())

    with ParseCache(tmp_path / "c.sqlite") as cache:
        for n_process, run in ((2, "fresh"), (1, "cached"), (2, "cached")):
            dump = tmp_path / f"{n_process}_{run}.jsonl"
            graph, report = build_crg(corpus, spacy_parser, cache=cache, n_process=n_process, chunk_size=7,
                                      dump_path=dump, progress=False)
            assert _graph_arrays(graph) == expected, (n_process, run)
            assert [json.loads(line) for line in dump.read_text().splitlines()] == records
            assert report.num_used == len(todo) and report.num_from_cache == (0 if run == "fresh" else len(todo))
