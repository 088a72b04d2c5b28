"""Hard negatives (CREPE's four types) from CRG parses and from the world, and the compositional metrics."""

import doctest
import importlib
import json
import pkgutil
import random
import re
from dataclasses import replace

import numpy as np
import pytest
from nltk import Tree

from composer.evaluation import hard_negatives as compositional_eval
from composer.evaluation.hard_negatives import (
    accuracy_by_type, average_tree, build_eval_set, eval_pairs, evaluate_pair_scores, group_accuracy, i2t_accuracy,
    recursive_average, t2i_accuracy, wins)
from crg import hard_negatives as crg_hn
from crg.hard_negatives import (
    HN_ATOM, HN_COMP, HN_NEG, HN_SWAP, HN_TYPES, AtomVocabulary, HardNegative, HardNegativeConfig, ParsedCaption,
    caption_hard_negatives, corpus_hard_negatives)

TREES = {
    "chase": "(TOP (NP (NP (DT A) (NN dog)) (VP (VBG chasing) (NP (DT a) (NN cat))) (. .)))",
    "cubes": "(TOP (NP (NP (NP (DT A) (JJ red) (NN cube)) (CC and) (NP (DT a) (JJ blue) (NN sphere))) (. .)))",
    "men": "(TOP (S (NP (NP (CD Two) (NNS men)) (PP (IN in) (NP (JJ green) (NNS shirts)))) (VP (VBP are) "
           "(VP (VBG standing) (PP (IN in) (NP (DT a) (NN yard))))) (. .)))",
    "guitar": "(TOP (S (NP (DT The) (NN man)) (VP (VBZ plays) (NP (NN guitar))) (. .)))",
    "not": "(TOP (S (NP (DT A) (NN woman)) (VP (VBZ is) (RB not) (VP (VBG smiling))) (. .)))",
    "dogdog": "(TOP (NP (NP (DT A) (NN dog)) (VP (VBG chasing) (NP (DT a) (NN dog))) (. .)))",
    "next": "(TOP (NP (NP (DT A) (NN dog)) (ADVP (RB next) (PP (IN to) (NP (DT a) (NN cat)))) (. .)))",
    "past": "(TOP (S (NP (DT A) (NN boy)) (VP (VBD jumped) (PP (IN over) (NP (DT a) (NN fence)))) (. .)))",
    "hat": "(TOP (S (NP (DT A) (NN man)) (VP (VBZ has) (NP (DT a) (JJ red) (NN hat))) (. .)))",
    "apple": "(TOP (NP (NP (DT An) (NN apple)) (PP (IN on) (NP (DT a) (NN table))) (. .)))",
}


def parsed(name: str) -> ParsedCaption:
    return ParsedCaption.from_tree(Tree.fromstring(TREES[name]))


@pytest.fixture(scope="module")
def vocab():
    return AtomVocabulary.from_parsed(parsed(n) for n in TREES)


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower()).split())


def of_type(result, hn_type):
    return [n for n in result.negatives if n.type == hn_type]


# ---------------------------------------------------------------------------- CRG-based generation
def test_swap_exchanges_the_two_arguments_of_a_predicate():
    res = caption_hard_negatives(parsed("chase"), config=HardNegativeConfig(types=(HN_SWAP,)))
    (neg,) = res.negatives
    assert neg.text == "A cat chasing a dog." and neg.source == "A dog chasing a cat."
    assert neg.change.op == "swap_arguments" and neg.change.where == "[NP] chasing [NP]"
    assert neg.change.before == ("a dog", "a cat") and neg.change.after == ("a cat", "a dog")
    # order-free arguments and identical arguments give no swap, with a reason each
    for name, reason in (("cubes", "coordination"), ("next", "symmetric"), ("dogdog", "identical")):
        res = caption_hard_negatives(parsed(name), config=HardNegativeConfig(types=(HN_SWAP,)))
        assert res.negatives == [] and reason in res.skipped[HN_SWAP], (name, res.skipped)


def test_atom_replaces_one_noun_by_a_corpus_noun_of_the_same_tag_never_itself_or_a_synonym(vocab):
    cfg = HardNegativeConfig(types=(HN_ATOM,), per_type=5, min_atom_count=1)
    src = parsed("men")
    nouns_by_tag = {t: set(c) for t, c in vocab.nouns.items()}
    res = caption_hard_negatives(src, vocabulary=vocab, config=cfg, image_words={"yard", "guys", "cat"})
    assert len(res.negatives) >= 3
    src_words = norm(src.text).split()
    for neg in res.negatives:
        words = norm(neg.text).split()
        diff = [(a, b) for a, b in zip(src_words, words) if a != b and {a, b} != {"a", "an"}]
        assert len(words) == len(src_words) and len(diff) == 1, neg.text  # one word replaced (and its article)
        old, new = diff[0]
        assert (old,) == neg.change.before and (new,) == neg.change.after
        if neg.change.op == "replace_noun":
            tag = neg.change.where.split(":")[1]
            assert new in nouns_by_tag[tag] and old in nouns_by_tag[tag]
            assert new not in {"cat", "yard", "guys", "guy", "man", "men", "shirt", "shirts"}  # banned/same/synonym
        else:
            assert neg.change.op == "replace_color" and new in crg_hn.COLOR_WORDS and new != "green"
    # spatial words go to their opposite, and an article agrees with a new noun
    res = caption_hard_negatives(parsed("apple"), vocabulary=vocab, config=HardNegativeConfig(
        types=(HN_ATOM,), per_type=20, min_atom_count=1))
    texts = {n.text for n in res.negatives}
    assert "An apple under a table." in texts
    assert all(not re.search(r"\ban [^aeiou]", t.lower()) and not re.search(r"\ba [aeiou]", t.lower()) for t in texts)


def test_negation_forms():
    cfg = HardNegativeConfig(types=(HN_NEG,))

    def texts(name):
        return {n.text for n in caption_hard_negatives(parsed(name), config=cfg).negatives}

    assert texts("chase") == {"There is no dog chasing a cat."}
    assert texts("guitar") == {"The man does not play guitar."}
    assert texts("not") == {"A woman is smiling."}
    assert texts("hat") == {"A man does not have a red hat.", "A man has a hat that is not red."}
    men = texts("men")
    assert "Two men in green shirts are not standing in a yard." in men
    assert "Two men in shirts that are not green are standing in a yard." in men
    res = caption_hard_negatives(parsed("past"), config=cfg)
    assert res.negatives == [] and "past-tense" in res.skipped[HN_NEG]


def test_comp_rebinds_attributes_across_objects(vocab):
    cfg = HardNegativeConfig(types=(HN_COMP,), per_type=10, min_atom_count=1)
    res = caption_hard_negatives(parsed("cubes"), vocabulary=vocab, config=cfg)
    by_op = {}
    for n in res.negatives:
        by_op.setdefault(n.change.op, set()).add(n.text)
    assert by_op["swap_attributes"] == {"A blue cube and a red sphere."}
    assert "move_attribute" not in by_op  # each object already has a colour: "a red blue sphere" is not made
    for text in by_op["split_compound"]:  # "a red cube" -> "a red X and a C cube"
        assert re.fullmatch(r"a (red [a-z]+ and an? [a-z]+ cube and a blue sphere|red cube and a blue [a-z]+ and "
                            r"an? [a-z]+ sphere)", norm(text)), text
    res = caption_hard_negatives(parsed("men"), vocabulary=vocab, config=cfg)
    assert "Two green men in shirts are standing in a yard." not in {n.text for n in res.negatives}  # no moves
    res = caption_hard_negatives(parsed("men"), vocabulary=vocab, config=replace(cfg, move_attributes=True))
    assert "Two green men in shirts are standing in a yard." in {n.text for n in res.negatives}
    res = caption_hard_negatives(parsed("chase"), vocabulary=vocab, config=cfg)
    assert res.negatives == [] and "no object with an attribute" in res.skipped[HN_COMP]


def test_corpus_generation_is_deterministic_counts_skips_and_never_returns_the_source(vocab):
    items = [(f"im{k % 4}", parsed(name)) for k, name in enumerate(TREES)]
    cfg = HardNegativeConfig(min_atom_count=1, per_type=3)
    negs, report = corpus_hard_negatives(items, vocabulary=vocab, config=cfg)
    again, _ = corpus_hard_negatives(list(reversed(items)), vocabulary=vocab, config=cfg)

    def key(n):
        return json.dumps(n.to_dict(), sort_keys=True)

    assert sorted(map(key, negs)) == sorted(map(key, again))  # caption order changes nothing
    others = [sorted(map(key, corpus_hard_negatives(items, vocabulary=vocab, config=HardNegativeConfig(
        min_atom_count=1, per_type=3, seed=s))[0])) for s in (1, 2, 3)]
    assert any(o != sorted(map(key, negs)) for o in others)
    assert report.num_captions == len(items) and sum(report.produced.values()) == len(negs)
    for t in HN_TYPES:
        assert report.produced[t] > 0
        assert report.captions_with.get(t, 0) + sum(report.skipped.get(t, {}).values()) == len(items)
    for n in negs:
        assert norm(n.text) != norm(n.source) and n.image_id is not None
        assert HardNegative.from_dict(json.loads(json.dumps(n.to_dict()))) == n
    per_caption = {}
    for n in negs:
        per_caption.setdefault((n.image_id, n.source, n.type), []).append(norm(n.text))
    assert all(len(v) == len(set(v)) <= 3 for v in per_caption.values())
    # a word used by any caption of the same image is never a foil
    image_words = {}
    for image, p in items:
        image_words.setdefault(image, set()).update(p.words())
    for n in negs:
        if n.change.op in ("replace_noun", "replace_color"):
            assert n.change.after[0] not in image_words[n.image_id]
    with pytest.raises(ValueError, match="unknown hard negative types"):
        HardNegativeConfig(types=("HN-FOO",))


def test_vocabulary_from_a_saved_graph_matches_the_parsed_captions():
    from crg.extract import extract_concepts
    from crg.graph import GraphBuilder

    names = list(TREES)
    builder = GraphBuilder([f"im{k}" for k in range(len(names))], [None] * len(names))
    for k, name in enumerate(names):
        builder.add_caption(k, 0, parsed(name).text, extract_concepts(Tree.fromstring(TREES[name])))
    from_graph = AtomVocabulary.from_graph(builder.build())
    from_parsed = AtomVocabulary.from_parsed(parsed(n) for n in names)
    # one caption per image: images denoted == captions containing the noun (a repeat counts once)
    assert {t: set(c) for t, c in from_graph.nouns.items()} == {t: set(c) for t, c in from_parsed.nouns.items()}
    assert from_graph.nouns["NN"]["dog"] == 3 and from_parsed.nouns["NN"]["dog"] == 4  # "a dog chasing a dog"
    assert from_graph.colors == from_parsed.colors


# ---------------------------------------------------------------------------- the world
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from features.world.generate import GenerateConfig, generate_world, load_scenes
    from features.world.hard_negatives import WorldHardNegatives

    out = tmp_path_factory.mktemp("hn_world")
    generate_world(out, GenerateConfig(num_images=50, seed=11, render=0, workers=1), progress=False)
    scenes = load_scenes(out / "scenes.jsonl.gz")
    rows = [json.loads(line) for line in (out / "captions.jsonl").read_text().splitlines()]
    captions = [(r["image_id"], c) for r in rows for c in r["captions"]]
    gen = WorldHardNegatives(scenes)
    negs, report, distractors = gen.generate(captions)
    return scenes, captions, negs, report, distractors, gen


def test_every_world_hard_negative_is_false_of_its_image(world):
    from features.world.grammar import parse_caption
    from features.world.semantics import holds
    from features.world.truth import WorldTruth

    scenes, captions, negs, report, _, _ = world
    truth = WorldTruth(scenes)
    assert report.num_captions == len(captions) == 250
    assert len(negs) > 1000 and {n.type for n in negs} == set(HN_TYPES)
    for n in negs:
        lf = parse_caption(n.text)
        assert lf is not None, f"negative not of the world's language: {n.text!r}"
        assert not holds(scenes[n.image_id], lf), f"{n.type} true of {n.image_id}: {n.source!r} -> {n.text!r}"
        assert truth.is_true(n.text, n.image_id) is False
        assert norm(n.text) != norm(n.source)
    for t in HN_TYPES:
        assert report.captions_with.get(t, 0) + sum(report.skipped.get(t, {}).values()) == len(captions)
    assert sum(report.dropped[HN_ATOM].values()) > 0  # the checker did drop true candidates
    assert any(n.change.op == "negate_attribute" and " not " in n.text for n in negs)


def test_world_checker_drops_true_candidates_and_t2i_candidates_are_false_with_the_same_shapes(world):
    from features.world.grammar import parse_caption
    from features.world.hard_negatives import WorldHardNegatives, WorldNegativeConfig
    from features.world.scene import Scene, SceneObject
    from features.world.semantics import Caption, ObjectRef, holds

    s = Scene("s", [SceneObject("ball", "red", "small", "metal", 0.1, 0.5),
                    SceneObject("ball", "blue", "small", "metal", 0.5, 0.5),
                    SceneObject("cube", "green", "large", "wooden", 0.9, 0.5)])
    gen = WorldHardNegatives({"s": s}, config=WorldNegativeConfig(types=(HN_ATOM,), per_type=50))
    res = gen.caption_negatives("s", "A red ball.")
    texts = {norm(n.text) for n in res.negatives}
    assert "a blue ball" not in texts and texts & {"a red cube", "a red box", "a red block"}
    assert res.dropped[HN_ATOM]["true of the image"] >= 1  # "a blue ball" is true here
    # the grammar reads negated attributes back ("that is not"), so negatives parse like captions
    negated = ObjectRef("ball", (), None, None, ("color", "red"))
    assert parse_caption("a ball that is not red") == Caption("np", (negated,))
    assert holds(s, parse_caption("A ball that is not red is left of a cube."))
    assert not holds(s, parse_caption("There is no ball that is not blue."))
    with pytest.raises(ValueError, match="not true of image"):
        gen.caption_negatives("s", "A green ball.")

    scenes, _, _, _, distractors, _ = world
    assert sum(len(v) for v in distractors.values()) > 0

    def shapes(node) -> set:
        if isinstance(node, ObjectRef):
            return ({node.shape} - {None}) | (shapes(node.relation[1]) if node.relation else set())
        return set().union(*(shapes(p) for p in node.parts))

    for (image_id, text), images in distractors.items():
        lf = parse_caption(text)
        assert len(images) <= 5
        for other in images:
            assert other != image_id and not holds(scenes[other], lf)
            assert shapes(lf) <= {o.shape for o in scenes[other].objects}


# ---------------------------------------------------------------------------- metrics
def test_wins_ties_lose_padding_is_ignored_and_bad_input_is_rejected():
    pos = np.array([1.0, 1.0, 1.0])
    neg = np.array([[0.0, 1.0], [0.0, 0.5], [0.2, 7.0]])
    mask = np.array([[True, True], [True, True], [True, False]])
    assert wins(pos, neg, mask).tolist() == [False, True, True]
    assert i2t_accuracy(pos, neg, mask) == pytest.approx(200 / 3)
    assert t2i_accuracy(pos, neg) == pytest.approx(100 / 3)
    assert group_accuracy(pos, neg, np.array([[0.0], [2.0], [0.0]]), mask) == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="no negative"):
        wins(pos, neg, np.array([[True, True], [False, False], [True, True]]))
    with pytest.raises(ValueError, match="finite"):
        wins(np.array([np.nan, 1.0, 1.0]), neg)
    with pytest.raises(ValueError, match="expected positive"):
        wins(pos, neg[:2])
    types = np.array([["ATOM", "SWAP"], ["ATOM", "NEG"], ["SWAP", "SWAP"]])
    assert accuracy_by_type(pos, neg, types, mask) == {"ATOM": 100.0, "NEG": 100.0, "SWAP": 50.0}


def test_recursive_average_weighs_siblings_equally_like_vl_compo():
    tree = {"I2T": {"atom": 80.0, "swap": 40.0, "neg": 60.0}, "T2I": 50.0}
    assert recursive_average(tree) == pytest.approx(55.0)  # (mean(80, 40, 60) + 50) / 2
    assert recursive_average(tree) != pytest.approx(np.mean([80, 40, 60, 50]))
    deep = {"A": {"a1": {"x": 10.0, "y": 30.0}, "a2": 40.0}, "B": {"b": None, "c": 70.0}, "C": None}
    assert recursive_average(deep) == pytest.approx(((20 + 40) / 2 + 70) / 2)
    assert average_tree(deep)["A/a1"] == pytest.approx(20.0) and average_tree(deep)["C"] is None
    assert recursive_average(7) == 7.0 and recursive_average({"a": None}) is None
    with pytest.raises(ValueError, match="empty group"):
        recursive_average({"a": {}})
    with pytest.raises(ValueError, match="finite"):
        recursive_average({"a": float("nan")})


def test_eval_set_is_plain_data_and_pair_scores_give_the_naive_accuracies():
    rng = random.Random(0)
    negs = [HardNegative(t, f"neg {k} {t}", f"cap {k}", crg_hn.Change(rng.choice(["op", "op2"]), ("a",), ("b",)),
                         f"im{k}")
            for k in range(12) for t in rng.sample(HN_TYPES, rng.randint(1, 4))]
    distractors = {(f"im{k}", f"cap {k}"): [f"im{(k + j) % 12}" for j in (1, 2, 3)] for k in range(0, 12, 2)}
    es = build_eval_set(negs, distractors=distractors, name="toy")
    assert json.loads(json.dumps(es)) == es and len(es["items"]) == 12
    pairs = eval_pairs(es)
    assert len(pairs) == len(set(pairs)) == 12 + len(negs) + 3 * 6
    scores = {p: rng.random() for p in pairs}
    got = evaluate_pair_scores(es, scores)
    assert evaluate_pair_scores(es, [scores[p] for p in pairs]) == got
    # naive reference: loop over items
    i2t, t2i, grp, by_type, by_edit = [], [], [], {}, {}
    for item in es["items"]:
        pos = scores[(item["image_id"], item["positive"])]
        ok_c = all(pos > scores[(item["image_id"], n["text"])] for n in item["negatives"])
        i2t.append(ok_c)
        for t in {n["type"] for n in item["negatives"]}:
            by_type.setdefault(t, []).append(all(pos > scores[(item["image_id"], n["text"])]
                                                 for n in item["negatives"] if n["type"] == t))
        for e in {(n["type"], n["change"]["op"]) for n in item["negatives"]}:
            by_edit.setdefault("/".join(e), []).append(all(pos > scores[(item["image_id"], n["text"])]
                                                           for n in item["negatives"]
                                                           if (n["type"], n["change"]["op"]) == e))
        if item["distractor_images"]:
            ok_i = all(pos > scores[(d, item["positive"])] for d in item["distractor_images"])
            t2i.append(ok_i)
            grp.append(ok_c and ok_i)
    assert got["i2t"] == pytest.approx(100 * np.mean(i2t))
    assert got["t2i"] == pytest.approx(100 * np.mean(t2i)) and got["group"] == pytest.approx(100 * np.mean(grp))
    assert got["i2t_by_type"] == pytest.approx({t: 100 * np.mean(v) for t, v in by_type.items()})
    assert got["i2t_by_edit"] == pytest.approx({e: 100 * np.mean(v) for e, v in by_edit.items()})
    assert len(got["i2t_by_edit"]) > len(got["i2t_by_type"])  # both edits occur under some type
    assert sum(got["counts"]["negatives_by_edit"].values()) == len(negs)
    assert got["average"] == pytest.approx(recursive_average(got["tree"]))
    assert got["counts"]["with_distractors"] == 6 and got["counts"]["with_both"] == 6
    with pytest.raises(ValueError, match="scores for the"):
        evaluate_pair_scores(es, [0.0])
    with pytest.raises(ValueError, match="names no image"):
        build_eval_set([HardNegative(HN_NEG, "x", "y", crg_hn.Change("op", (), ()))])


def test_doctests():
    import features.world.hard_negatives as world_hn

    # the package re-exports its names: their doctests live in (and run from) the modules that define them
    crg_modules = [importlib.import_module(m.name)
                   for m in pkgutil.iter_modules(crg_hn.__path__, crg_hn.__name__ + ".")]
    assert {m.__name__.rsplit(".", 1)[1] for m in crg_modules} >= {"records", "parsed_caption", "generators", "corpus"}
    attempted = 0
    for module in (*crg_modules, compositional_eval, world_hn):
        result = doctest.testmod(module)
        assert result.failed == 0, module.__name__
        attempted += result.attempted if module in crg_modules else 0
    assert attempted >= 8, f"only {attempted} doctest examples found in crg.hard_negatives"


def test_package_keeps_the_public_names():
    # every name of the package's __all__ is importable from it, and defined in exactly one submodule
    for name in crg_hn.__all__:
        assert hasattr(crg_hn, name), name
    assert crg_hn.HardNegative.__module__ == "crg.hard_negatives.records"
    assert crg_hn.caption_hard_negatives.__module__ == "crg.hard_negatives.generators"
