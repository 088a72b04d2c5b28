"""The build at scale: byte-range reading, columnar parts, the partitioned merge and the columnar graph.

Each piece against the existing reference: ranges read back = ``read_corpus``; the partitioned merge (in one
process, then on a local Ray with an actor killed) = the default engine's graph, array by array and string by
string, with the same report and ``captions.jsonl``; a columnar graph saved and memory-mapped = the graph.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import ROOT
from crg.build import build_crg
from crg.corpus import CorpusFormatError, read_corpus
from crg.corpus_ranges import check_range_corpus, plan_byte_ranges, read_byte_range
from crg.graph import ConceptGraph, load_graph
from crg.graph_compare import graph_differences
from crg.graph_store import CodedStrings, HashIndex, StringTable
from crg.ray_engine import ParserSpec, RayConfig
from crg.ray_scale import build_crg_partitioned

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"
NOT_COMPARED = ("parse_seconds", "extract_seconds", "num_parsed", "num_from_cache")


def comparable(report) -> dict:
    return {k: v for k, v in report.as_dict().items() if k not in NOT_COMPARED}


@pytest.fixture(scope="module")
def awkward_corpus(tmp_path_factory):
    """The toy corpus with splits, captions the checks skip (empty, too long, not text) and a blank line, so the
    report's counts and examples are compared too."""
    lines = TOY.read_text(encoding="utf-8").splitlines()
    out = []
    for k, line in enumerate(lines):
        rec = json.loads(line)
        rec["split"] = ["train", "val", "test"][k % 3]
        if k % 4 == 1:
            rec["captions"] = rec["captions"] + ["", " ".join(["word"] * 120), 7]
        out.append(json.dumps(rec))
        if k == 3:
            out.append("")
    path = tmp_path_factory.mktemp("awkward") / "toy_awkward.jsonl"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------- byte ranges
@pytest.mark.parametrize("n", [1, 2, 3, 7, 50])
def test_byte_ranges_read_back_the_corpus_in_order(awkward_corpus, n):
    ranges = plan_byte_ranges(awkward_corpus, n)
    assert ranges[0].start == 0 and ranges[-1].stop == awkward_corpus.stat().st_size
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:]))
    images = [im for r in ranges for im in read_byte_range(r).images]
    want = read_corpus(awkward_corpus).images
    assert [(im.image_id, im.split, im.captions) for im in images] == [(im.image_id, im.split, im.captions)
                                                                       for im in want]
    test_only = [im.image_id for r in ranges for im in read_byte_range(r, {"test"}).images]
    assert test_only == [im.image_id for im in want if im.split == "test"]


def test_a_bad_line_in_a_range_names_the_file_and_its_line(tmp_path, awkward_corpus):
    lines = awkward_corpus.read_text(encoding="utf-8").splitlines()
    lines[9] = '{"image_id": "x", "captions": ["a dog"'
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"bad\.jsonl:10: not valid JSON") as from_reader:
        read_corpus(bad)
    messages = []
    for r in plan_byte_ranges(bad, 4):
        try:
            read_byte_range(r)
        except CorpusFormatError as err:
            messages.append(str(err))
    assert messages == [str(from_reader.value)]


def test_only_uncompressed_jsonl_and_tsv_are_read_in_ranges(tmp_path):
    for name in ("c.jsonl.gz", "c.tsv.gz", "c.json", "c_caps.txt"):
        (tmp_path / name).write_bytes(b"x")
        with pytest.raises(CorpusFormatError, match="uncompressed JSONL"):
            check_range_corpus(tmp_path / name, None)
    with pytest.raises(FileNotFoundError):
        check_range_corpus(tmp_path / "missing.jsonl", None)
    (tmp_path / "ok.tsv").write_bytes(b"x")
    assert check_range_corpus(tmp_path / "ok.tsv", None) == "tsv"
    with pytest.raises(CorpusFormatError, match="uncompressed JSONL"):
        check_range_corpus(tmp_path / "ok.tsv", "jsonl")


@pytest.fixture(scope="module")
def tsv_corpus(awkward_corpus, tmp_path_factory):
    """The awkward corpus as a TSV with a header and a split column (a line per caption)."""
    lines = ["image_id\tcaption\tsplit"]
    for im in read_corpus(awkward_corpus).images:
        lines += [f"{im.image_id}\t{c}\t{im.split}" for c in im.captions if isinstance(c, str)]
    path = tmp_path_factory.mktemp("tsv") / "toy.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("n", [1, 2, 5, 13, 60])
def test_tsv_ranges_keep_each_images_lines_together_and_read_back_the_corpus(tsv_corpus, n):
    ranges = plan_byte_ranges(tsv_corpus, n, "tsv")
    images = [im for r in ranges for im in read_byte_range(r).images]
    want = read_corpus(tsv_corpus).images
    assert [(im.image_id, im.split, im.captions, im.raw) for im in images] == \
        [(im.image_id, im.split, im.captions, im.raw) for im in want]


def test_a_tsv_images_lines_apart_are_refused_in_ranges(tmp_path):
    path = tmp_path / "apart.tsv"
    path.write_text("a\ta dog\nb\ta cat\na\ta red dog\n", encoding="utf-8")
    assert [im.captions for im in read_corpus(path).images] == [["a dog", "a red dog"], ["a cat"]]
    (r,) = plan_byte_ranges(path, 1, "tsv")
    with pytest.raises(CorpusFormatError, match=r"apart.tsv:3: image 'a' has lines apart \(line 1 too\)"):
        read_byte_range(r)


# ------------------------------------------------------------------------------------- columnar graph
def test_columnar_graph_round_trip_memory_mapped(tmp_path, spacy_parser, awkward_corpus):
    graph, _ = build_crg(read_corpus(awkward_corpus), spacy_parser, progress=False)
    graph.meta = {"note": "x"}
    graph.save(tmp_path / "g", columnar=True)
    assert (tmp_path / "g" / "graph.json").exists() and not (tmp_path / "g" / "graph.npz").exists()
    loaded = load_graph(tmp_path / "g")
    assert graph_differences(loaded, graph) == {}
    assert isinstance(loaded.concept_texts, StringTable) and isinstance(loaded.image_splits, CodedStrings)
    assert isinstance(loaded.caption_concepts, np.memmap) and not loaded.caption_concepts.flags.writeable
    assert loaded.meta == {"note": "x"} and loaded.stats() == graph.stats()
    text = graph.concept_texts[5]
    assert loaded.concept_id(text) == 5 and loaded.denotation(text) == graph.denotation(text)
    in_memory = load_graph(tmp_path / "g", mmap=False)
    assert not isinstance(in_memory.caption_concepts, np.memmap)
    assert graph_differences(in_memory, graph) == {}
    loaded.save(tmp_path / "g")  # back to the first layout, which replaces the columnar one
    assert not (tmp_path / "g" / "graph.json").exists()
    assert graph_differences(ConceptGraph.load(tmp_path / "g"), graph) == {}


def test_a_damaged_columnar_graph_says_what_is_wrong(tmp_path, spacy_parser):
    graph, _ = build_crg(read_corpus(TOY), spacy_parser, progress=False)
    graph.save(tmp_path / "g", columnar=True)
    (tmp_path / "g" / "graph" / "caption_root.npy").unlink()
    with pytest.raises(FileNotFoundError, match="caption_root.npy is missing"):
        load_graph(tmp_path / "g")
    graph.save(tmp_path / "h", columnar=True)
    manifest = json.loads((tmp_path / "h" / "graph.json").read_text())
    manifest["format_version"] = 9
    (tmp_path / "h" / "graph.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="graph format 9 .* expected 2"):
        load_graph(tmp_path / "h")


def test_text_lookups_of_a_memory_mapped_graph_use_its_hash_index(tmp_path, spacy_parser, awkward_corpus):
    graph, _ = build_crg(read_corpus(awkward_corpus), spacy_parser, progress=False)
    graph.save(tmp_path / "g", columnar=True)
    loaded = load_graph(tmp_path / "g")
    assert isinstance(loaded._concept_index, HashIndex) and isinstance(loaded._image_index, HashIndex)
    assert all(loaded.concept_id(t) == graph.concept_id(t) for t in graph.concept_texts)
    assert all(loaded.predicate_id(t) == k for k, t in enumerate(graph.predicate_templates))
    assert all(loaded.captions_of_image(i) == graph.captions_of_image(i) for i in graph.image_ids)
    with pytest.raises(KeyError, match="no concept 'a purple zebra' in the graph"):
        loaded.concept_id("A purple  zebra")


    class Clashing(HashIndex):  # every string the same hash: the strings themselves must decide
        @staticmethod
        def hash(text: str) -> int:
            return 7

    table = loaded.concept_texts
    clash = Clashing.build(table)
    assert [clash[t] for t in table] == list(range(len(table))) and "a purple zebra" not in clash


def test_string_table_behaves_as_a_list():
    words = ["a", "", "ünïcode", "two words"] * 40_000  # more than one iteration block
    table = StringTable.from_strings(words)
    assert list(table) == words and table == words and words == table and table != words[:-1]
    assert table[-1] == "two words" and table[1:3] == ["", "ünïcode"]
    with pytest.raises(IndexError):
        table[len(words)]


# ------------------------------------------------------------------------------------- partitioned merge
@pytest.mark.parametrize("shards,partitions,splits", [(1, 1, None), (3, 2, ("train", "test")), (7, 3, None),
                                                      (40, 4, ("val",))])
def test_partitioned_build_gives_the_default_engines_graph(tmp_path, spacy_parser, awkward_corpus, shards,
                                                           partitions, splits):
    corpus = read_corpus(awkward_corpus)
    if splits:
        corpus = corpus.select(splits)
    want, want_report = build_crg(corpus, spacy_parser, progress=False, dump_path=tmp_path / "want.jsonl")
    build = build_crg_partitioned(awkward_corpus, ParserSpec("spacy"), tmp_path / "out", splits=splits,
                                  config=RayConfig(shards=shards), num_partitions=partitions,
                                  dump_path=tmp_path / "got.jsonl", progress=False, use_ray=False)
    assert graph_differences(build.graph, want) == {}
    for name in ("concept_texts", "predicate_templates", "image_ids"):  # the merge's index = one built whole
        index, whole = getattr(build.graph, name).lookup, HashIndex.build(getattr(build.graph, name))
        assert np.array_equal(index.hashes, whole.hashes) and np.array_equal(index.order, whole.order), name
    assert comparable(build.report) == comparable(want_report)
    assert want_report.skipped  # the comparison covered skipped captions
    assert (tmp_path / "got.jsonl").read_text() == (tmp_path / "want.jsonl").read_text()
    assert build.graph.meta["parser"] == want.meta["parser"]
    assert build.engine.num_shards == len(plan_byte_ranges(awkward_corpus, shards)) > min(shards, 3) - 1


def test_partitioned_build_of_a_tsv_gives_the_default_engines_graph(tmp_path, spacy_parser, tsv_corpus):
    want, want_report = build_crg(read_corpus(tsv_corpus), spacy_parser, progress=False)
    build = build_crg_partitioned(tsv_corpus, ParserSpec("spacy"), tmp_path / "out", config=RayConfig(shards=6),
                                  num_partitions=2, progress=False, use_ray=False)
    assert graph_differences(build.graph, want) == {}
    assert comparable(build.report) == comparable(want_report)
    assert build.graph.meta["corpus_format"] == want.meta["corpus_format"] == "tsv"


def test_partitioned_build_refuses_a_split_no_image_has_and_a_repeated_image_id(tmp_path, awkward_corpus):
    with pytest.raises(ValueError, match=r"no images in split\(s\) \['dev'\]"):
        build_crg_partitioned(awkward_corpus, ParserSpec("spacy"), tmp_path / "a", splits=("dev",),
                              config=RayConfig(shards=2), progress=False, use_ray=False)
    lines = awkward_corpus.read_text(encoding="utf-8").splitlines()
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join(lines + [lines[0]]) + "\n", encoding="utf-8")
    image = json.loads(lines[0])["image_id"]
    with pytest.raises(ValueError, match=f"image id '{image}' appears twice"):
        build_crg_partitioned(twice, ParserSpec("spacy"), tmp_path / "b", config=RayConfig(shards=3),
                              progress=False, use_ray=False)


def test_a_rerun_keeps_finished_shards_and_redoes_a_part_without_summary(tmp_path, awkward_corpus):
    first = build_crg_partitioned(awkward_corpus, ParserSpec("spacy"), tmp_path / "o", config=RayConfig(shards=3),
                                  progress=False, use_ray=False)
    (tmp_path / "o" / "shards" / "00001.summary.json").unlink()   # as if killed before its summary
    again = build_crg_partitioned(awkward_corpus, ParserSpec("spacy"), tmp_path / "o", config=RayConfig(shards=3),
                                  progress=False, use_ray=False)
    assert again.engine.shards_reused == 2 and again.engine.shards_run == 1
    assert graph_differences(again.graph, first.graph) == {}


# ------------------------------------------------------------------------------------- through Ray
@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the [distributed] extra (ray[data]) is not installed")
    from crg.ray_engine import start_local_ray

    start_local_ray(2, object_store_mb=128)
    yield ray
    ray.shutdown()


def test_partitioned_ray_build_gives_the_default_graph_even_when_an_actor_dies(tmp_path, local_ray, shared_data,
                                                                               spacy_parser):
    lines = (shared_data / "flickr30k" / "captions.jsonl").read_text(encoding="utf-8").splitlines()[:50]
    path = tmp_path / "f30k_250.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    want, want_report = build_crg(read_corpus(path), spacy_parser, progress=False)
    config = RayConfig(workers=2, shards=4, crash_once_in_shard=2)  # dies after shard 2's part, before its summary
    build = build_crg_partitioned(path, ParserSpec("spacy"), tmp_path / "out", config=config, num_partitions=2,
                                  progress=False)
    assert (tmp_path / "out" / "shards" / "00002.crashed-once").exists()
    assert graph_differences(build.graph, want) == {}
    assert comparable(build.report) == comparable(want_report)
    assert build.engine.workers == 2 and build.engine.shards_run == 4


def test_cli_partitioned_merge_same_stats_and_captions_as_the_default_engine(tmp_path, local_ray, monkeypatch,
                                                                             awkward_corpus):
    from crg.cli.build_crg import main

    monkeypatch.setenv("GC_CACHE_DIR", str(tmp_path / "cache"))
    base = ["--captions", str(awkward_corpus), "--quiet", "--dump", "--split", "train,val"]
    assert main([*base, "--out", str(tmp_path / "single")]) == 0
    assert main([*base, "--out", str(tmp_path / "part"), "--engine", "ray", "--merge", "partitioned",
                 "--shards", "3", "--workers", "2"]) == 0
    single = json.loads((tmp_path / "single" / "stats.json").read_text())
    part = json.loads((tmp_path / "part" / "stats.json").read_text())
    engine = part.pop("engine")
    assert engine["engine"] == "ray-partitioned" and engine["num_shards"] == 3
    for stats in (single, part):
        stats.pop("wall_seconds")
        stats["report"] = {k: v for k, v in stats["report"].items() if k not in NOT_COMPARED}
    assert part == single
    assert (tmp_path / "part" / "captions.jsonl").read_text() == (tmp_path / "single" / "captions.jsonl").read_text()
    assert graph_differences(load_graph(tmp_path / "part"), load_graph(tmp_path / "single")) == {}
    with pytest.raises(SystemExit, match="uncompressed JSONL"):
        main(["--captions", str(tmp_path / "single" / "stats.json"), "--out", str(tmp_path / "x"), "--engine", "ray",
              "--merge", "partitioned"])
    with pytest.raises(SystemExit, match="--merge are options of --engine ray"):
        main([*base, "--out", str(tmp_path / "y"), "--merge", "partitioned"])


def test_a_process_started_by_a_large_one_reports_its_own_peak_memory():
    """The engines report each process's peak; ``ru_maxrss`` survives exec, so a build started by a benchmark that
    held a corpus in memory reported the benchmark's size as the driver's."""
    import subprocess
    import sys

    from crg.shards import peak_rss_mb

    ballast = b"\x01" * (400 << 20)  # 400 MiB, written: resident in this process
    assert peak_rss_mb() >= 400
    child = subprocess.run([sys.executable, "-c", "from crg.shards import peak_rss_mb; print(peak_rss_mb())"],
                           capture_output=True, text=True, check=True, cwd=ROOT)
    assert float(child.stdout) < 200, child.stdout  # the interpreter and numpy, not the parent's 400 MiB
    del ballast
