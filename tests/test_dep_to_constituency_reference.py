"""The converter's output, pinned: every tree it makes from spaCy's parses of the WSJ dev set, the
project's gold trees and 2,000 Flickr30K captions must keep the digest that converter version 7 gave
before its hot loops were restructured (issue 34, item 5). Only digests are stored (the corpora are not
the project's to copy): one per sentence for the converter's input (words, tags, heads, labels) and one
for its bracketed output.

A sentence whose *input* digest differs (another spaCy build parsed it differently) is not compared; the
test fails if more than 2 % of a set differ that way, since then it no longer checks the converter.

Regenerate (only when the converter's output is meant to change, with ``CONVERTER_VERSION`` bumped):

    python tests/test_dep_to_constituency_reference.py --write
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SHARED = ROOT.parent / "shared" / "data"
REFERENCE = DATA / "converter_reference.json"
NUM_CAPTIONS = 2000


def _digest(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def converter_inputs(parser, shared: Path) -> dict[str, list[tuple]]:
    """``{set name: [(words, tags, heads, deps), ...]}``: what ``doc_to_tree`` hands the converter.

    The sets: the WSJ dev trees' words (``../shared/data/ptb_dev``, pre-tokenised as the parser's accuracy
    benchmark parses them), the gold trees in tests/data, and the first 2,000 Flickr30K captions (raw text,
    as a graph build parses them).
    """
    import crg.spacy_parser as spacy_parser
    from crg.bracket_score import read_trees
    from crg.caption_filter import normalize_caption

    spec = importlib.util.spec_from_file_location("_bench_parser", ROOT / "benchmarks" / "bench_parser.py")
    bench_parser = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_parser)  # its split of the treebank file into documents and trees

    captured: list[tuple] = []
    convert = spacy_parser.dependency_to_constituency

    def spy(words, tags, heads, deps):
        captured.append((list(words), list(tags), list(heads), list(deps)))
        return convert(words, tags, heads, deps)

    ptb = bench_parser.split_ptb(shared / "ptb_dev" / "wsj_dev.mrg")
    gold = [t for name in ("gold_ptb.mrg", "gold_ptb_heldout.mrg") for t in read_trees(DATA / name)]
    texts = []
    with open(shared / "flickr30k" / "captions.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record["split"] == "train":
                texts += [normalize_caption(c) for c in record["captions"]]
            if len(texts) >= NUM_CAPTIONS:
                break
    out = {}
    spacy_parser.dependency_to_constituency = spy
    try:
        for name, trees in (("wsj_dev", ptb["dev"] + ptb["heldout"]), ("gold", gold)):
            parser.parse_tokens([t.leaves() for t in trees])
            out[name], captured[:] = captured[:], []
        parser.parse_texts(texts[:NUM_CAPTIONS])
        out["flickr30k"], captured[:] = captured[:], []
    finally:
        spacy_parser.dependency_to_constituency = convert
    return out


def write_reference(parser, shared: Path) -> None:
    from crg.dep_to_constituency import CONVERTER_VERSION, dependency_to_constituency

    sets = {}
    for name, inputs in converter_inputs(parser, shared).items():
        sets[name] = [[_digest(list(args)), _digest(dependency_to_constituency(*args).pformat(margin=10**9))]
                      for args in inputs]
    meta = {"converter_version": CONVERTER_VERSION, "spacy_model": parser.cache_key(),
            "digests": "sha1[:12] of json.dumps([words, tags, heads, deps]) and of the bracketed tree"}
    REFERENCE.write_text(json.dumps({"meta": meta, "sets": sets}, separators=(",", ":")) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


def test_the_converter_gives_version_7s_trees_on_every_reference_sentence(spacy_parser, shared_data, reference):
    """The pure-Python module and, where one is built and current, its compiled copy (crg.speedups)."""
    from crg.dep_to_constituency import CONVERTER_VERSION, dependency_to_constituency, python_dependency_to_constituency

    assert reference["meta"]["converter_version"] == CONVERTER_VERSION, (
        "the converter's version changed: regenerate tests/data/converter_reference.json (see its test's docstring)")
    inputs = converter_inputs(spacy_parser, shared_data)
    for name, pinned in reference["sets"].items():
        assert len(inputs[name]) == len(pinned), name
        compared, changed = 0, []
        for k, (args, (input_digest, tree_digest)) in enumerate(zip(inputs[name], pinned)):
            if _digest(list(args)) != input_digest:
                continue  # spaCy parsed this sentence differently: not the converter's doing
            compared += 1
            for convert in {python_dependency_to_constituency, dependency_to_constituency}:
                tree = convert(*args).pformat(margin=10**9)
                if _digest(tree) != tree_digest:
                    changed.append((k, convert, " ".join(args[0]), tree))
        assert compared >= 0.98 * len(pinned), f"{name}: only {compared} of {len(pinned)} parses as pinned"
        assert not changed, f"{name}: {len(changed)} trees changed, first: {changed[0]}"


def test_extraction_equals_the_naive_reference_on_parsed_captions(spacy_parser, shared_data):
    """Appendix A's fast extraction against the plain one on the converter's own trees (test_extract.py checks
    the gold trees): 2,000 Flickr30K captions."""
    from test_extract import naive_extract

    from crg.dep_to_constituency import dependency_to_constituency
    from crg.extract import extract_concepts

    captions = converter_inputs(spacy_parser, shared_data)["flickr30k"]
    assert len(captions) == NUM_CAPTIONS
    for args in captions:
        tree = dependency_to_constituency(*args)
        assert extract_concepts(tree).to_dict() == naive_extract(tree), tree.pformat(margin=10**9)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/test_dep_to_constituency_reference.py --write")
    from crg.spacy_parser import SpacyParser

    write_reference(SpacyParser(), SHARED)
    print(f"wrote {REFERENCE}")
