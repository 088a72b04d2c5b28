"""Gold parses of the generated world: trees from its own grammar over the CRG's tokens, relations as one
unit, shape nouns as the only primitives, deterministic files, and the world's CRG built from them by default."""

from __future__ import annotations

import filecmp
import json

import pytest
from nltk import Tree

from crg.build import build_crg
from crg.corpus import read_corpus
from crg.extract import PRIMITIVE, extract_concepts
from crg.graph import KIND_BITS
from crg.preparsed import PreparsedTrees
from features.world.compositional import CompositionalConfig, caption_compounds
from features.world.generate import GenerateConfig, generate_world
from features.world.gold_trees import caption_tokens, gold_tree
from features.world.grammar import NOUNS, PLURALS, parse_caption
from features.world.semantic_compounds import caption_atoms, semantic_compounds

SHAPE_WORDS = {w for words in NOUNS.values() for w in words} | \
    {PLURALS.get(w, w + "s") for words in NOUNS.values() for w in words}


def _records(world):
    with open(world / "captions.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _trees(world):
    with open(world / "gold_trees.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def compositional_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("compositional_world")
    generate_world(out, GenerateConfig(num_images=60, seed=2, render=0, workers=1,
                                       compositional=CompositionalConfig()), progress=False)
    return out


@pytest.mark.parametrize("which", ["tiny_world", "compositional_world"])
def test_every_caption_has_a_gold_tree_over_its_crg_tokens(which, request, spacy_parser):
    world = request.getfixturevalue(which)
    captions = [c for r in _records(world) for c in r["captions"]]
    trees = _trees(world)
    assert [t["caption"] for t in trees] == captions  # one line per caption, in captions.jsonl's order
    for caption, record in zip(captions, trees):
        tree = gold_tree(caption)
        assert tree.pformat(margin=10 ** 9) == record["tree"]
        assert tree.label() == "TOP" and len(tree) == 1
        assert tree.leaves() == caption_tokens(caption) == [t.text for t in spacy_parser.nlp.tokenizer(caption)]
    looked_up = PreparsedTrees(world / "gold_trees.jsonl").parse_texts(captions)
    assert [t.leaves() for t in looked_up] == [caption_tokens(c) for c in captions]


def _templates(text: str) -> tuple[list[str], list[str]]:
    root = extract_concepts(gold_tree(text))
    nodes = list(root.walk())
    return [n.predicate.template for n in nodes if n.predicate], [n.text for n in nodes]


@pytest.mark.parametrize("caption, expected", [
    ("A red cube in front of a glass ball.", ["[NP] in front of [NP]", "a red [NN]", "a glass [NN]"]),
    ("A cube is on top of a sphere.", ["[NP] is on top of [NP]", "a [NN]", "a [NN]"]),
    ("a ball that is to the left of a rubber cone", ["[NP] that is to the left of [NP]", "a [NN]", "a rubber [NN]"]),
    ("A ball sitting next to a cube.", ["[NP] sitting next to [NP]", "a [NN]", "a [NN]"]),
    ("There is a cube on top of two balls.", ["there is [NP]", "[NP] on top of [NP]", "a [NN]", "two [NNS]"]),
    ("A cube can be seen in front of a ball while a cone is left of a ring.",
     ["[S] while [S]", "[NP] can be seen in front of [NP]", "a [NN]", "a [NN]", "[NP] is left of [NP]", "a [NN]",
      "a [NN]"]),
    ("A small ball is right of a cone, and a cube is placed behind a ring.",
     ["[S] and [S]", "[NP] is right of [NP]", "a small [NN]", "a [NN]", "[NP] is placed behind [NP]", "a [NN]",
      "a [NN]"]),
    ("A tiny metal ball, a cube and a medium-sized cone.",
     ["[NP] [NP] and [NP]", "a tiny metal [NN]", "a [NN]", "a medium-sized [NN]"]),
])
def test_multiword_relations_are_one_unit_of_the_template(caption, expected):
    templates, texts = _templates(caption)
    assert templates == expected
    assert not {"front", "top", "left", "right", "next", "glass", "rubber", "metal"} & set(texts)


def test_the_world_crg_from_gold_trees_has_the_shape_nouns_as_primitives(tiny_world):
    corpus = read_corpus(tiny_world / "captions.jsonl")
    graph, report = build_crg(corpus, PreparsedTrees(tiny_world / "gold_trees.jsonl"), progress=False)
    assert report.num_used == report.num_captions == graph.num_captions
    primitives = {t for t, k in zip(graph.concept_texts, graph.concept_kinds) if k & KIND_BITS[PRIMITIVE]}
    assert primitives <= SHAPE_WORDS and {"ball", "cube", "cone"} <= primitives
    binary = [t for t in graph.predicate_templates if t.startswith("[NP] ") and t.endswith(" [NP]")]
    assert binary and not any("[NN] of" in t for t in graph.predicate_templates)


def test_generation_is_byte_identical_per_seed_with_gold_trees(tmp_path):
    """Several chunks, one worker or two: the same gold trees, the same captions with their compounds."""
    for workers in (1, 2):
        generate_world(tmp_path / f"w{workers}", GenerateConfig(num_images=600, seed=7, render=0, workers=workers),
                       progress=False)
    for name in ("gold_trees.jsonl", "captions.jsonl"):
        assert filecmp.cmp(tmp_path / "w1" / name, tmp_path / "w2" / name, shallow=False), name
    generate_world(tmp_path / "other", GenerateConfig(num_images=600, seed=8, render=0, workers=1), progress=False)
    assert (tmp_path / "other" / "gold_trees.jsonl").read_bytes() != (tmp_path / "w1" / "gold_trees.jsonl").read_bytes()


def test_caption_compounds_and_atoms_come_from_the_logical_form(compositional_world):
    held = json.loads((compositional_world / "world.json").read_text())["held_out"]
    held_strings = {f"attr:{v}|{s}" for v, s in held["attributes"]} | {"rel:" + "|".join(r) for r in held["relations"]}
    for record in _records(compositional_world):
        assert len(record["compounds"]) == len(record["atoms"]) == len(record["captions"])
        for caption, compounds, atoms in zip(record["captions"], record["compounds"], record["atoms"]):
            lf = parse_caption(caption)
            assert compounds == semantic_compounds(lf) and atoms == caption_atoms(lf)
            for kind in ("color", "size", "material"):  # every attribute kind; relations in the held-out direction
                assert {f"attr:{c[0]}|{c[1]}" if len(c) == 2 else "rel:" + "|".join(c)
                        for c in caption_compounds(lf, kind)} <= set(compounds)
            assert all(set(c.split(":")[1].split("|")) <= set(atoms) for c in compounds if c.startswith("attr:"))
            if record["split"] in ("train", "val", "test_iid"):
                assert not held_strings & set(compounds), caption


def test_compounds_put_each_fact_in_one_direction():
    a = parse_caption("A red cube is under a ball.")
    b = parse_caption("A ball is on top of a red cube.")
    c = parse_caption("A ball next to a cube.")
    d = parse_caption("A cube beside a ball.")
    assert semantic_compounds(a, pairs_only=True) == semantic_compounds(b, pairs_only=True) == [
        "attr:red|cube", "rel:ball|on_top_of|cube"]
    assert semantic_compounds(a) == semantic_compounds(b) == [
        "attr:red|cube", "fact:ball|on_top_of|red+cube", "rel:ball|on_top_of|cube"]
    assert semantic_compounds(c) == semantic_compounds(d) == ["rel:ball|next_to|cube"]
    # the symmetric relation keeps its shapes' order when an object carries an attribute
    assert semantic_compounds(parse_caption("A red cube next to a ball.")) == semantic_compounds(
        parse_caption("A ball beside a red cube.")) == ["attr:red|cube", "fact:ball|next_to|red+cube",
                                                         "rel:ball|next_to|cube"]
    assert caption_atoms(a) == ["ball", "cube", "red", "under"]


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GC_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_world_is_built_from_gold_trees_by_default_and_spacy_one_flag_away(data_dir):
    from composer.training.data import CompositionDataModule, DataConfig
    from composer.training.recipes import RecipeOverrides, named_recipe
    from features.catalog import resolve_dataset

    spec = resolve_dataset("world", world_images=40, world_split="random", progress=False)
    assert spec.parser_for() == ("world", None)
    assert spec.parser_for("spacy") == ("spacy", None)
    with pytest.raises(ValueError, match="without a parser"):
        spec.parser_for(None, "en_core_web_sm")
    assert DataConfig().parser is None and named_recipe("composer").data.parser is None
    assert named_recipe("composer", "world", RecipeOverrides(parser="spacy")).data.parser == "spacy"

    def train_graph(parser):
        return CompositionDataModule(DataConfig(world_images=40, world_split="random", parser=parser))._graph("train")

    gold, spacy = train_graph(None), train_graph("spacy")
    gold_key, spacy_key = gold.meta["graph_key"]["parser"], spacy.meta["graph_key"]["parser"]
    assert gold_key.startswith("world:gold-trees") and spacy_key.startswith("spacy:")
    assert gold.caption_texts == spacy.caption_texts
    gold_primitives, spacy_primitives = ({t for t, k in zip(g.concept_texts, g.concept_kinds) if k & KIND_BITS[PRIMITIVE]}
                                         for g in (gold, spacy))
    assert gold_primitives <= SHAPE_WORDS and spacy_primitives - SHAPE_WORDS  # spaCy makes "front", "glass", ...


def test_build_crg_takes_the_datasets_parser_and_refuses_a_model_without_a_parser(tiny_world, tmp_path):
    from crg.cli.build_crg import build_argparser, main

    assert build_argparser().parse_args(["--captions", "c", "--out", "o"]).parser is None
    with pytest.raises(SystemExit, match="--parser-model needs --parser"):
        main(["--captions", str(tiny_world / "captions.jsonl"), "--out", str(tmp_path / "o"),
              "--parser-model", "x"])
    main(["--captions", str(tiny_world / "captions.jsonl"), "--out", str(tmp_path / "gold"), "--parser", "preparsed",
          "--parser-model", str(tiny_world / "gold_trees.jsonl"), "--quiet", "--no-cache"])
    stats = json.loads((tmp_path / "gold" / "stats.json").read_text())
    assert stats["parser"].startswith("preparsed:") and stats["report"]["num_used"] == stats["report"]["num_captions"]


def test_the_world_parser_gives_the_gold_file_trees_and_parses_texts_outside_it(tiny_world):
    """--parser world (the world's default) reads any text of its language as generation's gold_trees.jsonl has
    it, also texts that are in no caption file (twin captions, hard negatives); others are refused."""
    from crg.parse import make_parser

    with open(tiny_world / "gold_trees.jsonl", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f][:50]
    parser = make_parser("world")
    parsed = parser.parse_texts([d["caption"] for d in lines])
    assert [t.pformat(margin=10**9) for t in parsed] == [Tree.fromstring(d["tree"]).pformat(margin=10**9) for d in lines]
    assert parser.parse_texts(["a blue ball is to the left of a red cube"])[0].leaves()[-2:] == ["red", "cube"]
    with pytest.raises(ValueError, match="not a caption of the world"):
        parser.parse_texts(["a dog runs on the beach"])
