"""Appendix A's concept and predicate extraction: Table 8 and the edge cases."""

import random

import pytest
from nltk import Tree

from crg.extract import PHRASE, PRIMITIVE, SENTENCE, Predicate, extract_concepts, prune_tree


def decompose(bracketed: str):
    return extract_concepts(Tree.fromstring(bracketed))


def test_table8_example_1_two_dogs_running_on_the_grass(spacy_parser):
    root = extract_concepts(spacy_parser.parse_texts(["two dogs are running on the grass"])[0])
    assert root.kind == SENTENCE and root.text == "two dogs are running on the grass"
    assert root.predicate.template == "[NP] are running on [NP]"
    assert [c.text for c in root.children] == ["two dogs", "the grass"]
    assert root.predicate.arity == 2 and root.predicate.arg_types == ("NP", "NP")
    # recursion down to the primitives
    assert [(c.predicate.template, [g.text for g in c.children]) for c in root.children] == [
        ("two [NNS]", ["dogs"]), ("the [NN]", ["grass"])]
    assert all(g.kind == PRIMITIVE and g.predicate is None for c in root.children for g in c.children)


def test_table8_example_2_pizza_cut_in_half():
    """Table 8 reads "[NP] cut in half on [NP]": the paper's parser did not tag "half" as a noun
    (else rule (1) makes it a primitive). Given such a parse, the extraction reproduces the table."""
    root = decompose("(TOP (NP (NP (DT a) (JJ small) (NN pizza)) (VP (VBN cut) (ADVP (IN in) (RB half)) "
                     "(PP (IN on) (NP (DT a) (JJ white) (NN plate))))))")
    assert root.predicate.template == "[NP] cut in half on [NP]"
    assert [c.text for c in root.children] == ["a small pizza", "a white plate"]


def test_table8_example_2_with_half_tagged_as_a_noun_follows_rule_1(spacy_parser):
    root = extract_concepts(spacy_parser.parse_texts(["a small pizza cut in half on a white plate"])[0])
    assert root.predicate.template == "[NP] cut in [NN] on [NP]"
    assert [c.text for c in root.children] == ["a small pizza", "half", "a white plate"]


def test_sentence_without_a_noun_is_a_concept_with_a_0_ary_predicate():
    root = decompose("(TOP (S (NP (PRP It)) (VP (VBZ is) (VP (VBG raining))) (. .)))")
    assert root.text == "it is raining" and root.children == []
    assert root.predicate == Predicate("it is raining") and root.predicate.arity == 0
    assert root.height == 0


def test_pronouns_stay_in_the_predicate():
    root = decompose("(TOP (S (NP (PRP He)) (VP (VBZ is) (VP (VBG jumping) (PP (IN over) "
                     "(NP (DT a) (NN fence))))) (. .)))")
    assert root.predicate.template == "he is jumping over [NP]"
    assert [c.text for c in root.children] == ["a fence"]


def test_single_word_caption_is_its_primitive():
    root = decompose("(TOP (NP (NNS Dogs) (. .)))")
    assert root.text == "dogs" and root.label == "NNS"
    assert root.predicate is None and root.children == [] and root.height == 0
    single = decompose("(TOP (NP (NN dog)))")
    assert single.text == "dog" and single.children == []


def test_relative_clause_decomposes_through_sbar_and_s():
    root = decompose("(TOP (NP (NP (DT A) (NN woman)) (SBAR (WHNP (WP who)) (S (VP (VBZ is) "
                     "(VP (VBG holding) (NP (DT an) (NN umbrella))))))))")
    assert root.predicate.template == "[NP] [SBAR]"
    sbar = root.children[1]
    assert (sbar.kind, sbar.label, sbar.predicate.template) == (PHRASE, "SBAR", "who [S]")
    s = sbar.children[0]
    assert (s.text, s.predicate.template) == ("is holding an umbrella", "is holding [NP]")
    assert root.height == 4  # NP -> SBAR -> S -> NP -> NN


def test_coordination_gives_one_predicate_over_all_conjuncts():
    root = decompose("(TOP (S (NP (NP (DT A) (NN man)) (CC and) (NP (DT a) (NN woman))) (VP (VBP are) "
                     "(VP (VBG sitting))) (. .)))")
    assert root.predicate.template == "[NP] are sitting"
    coord = root.children[0]
    assert coord.predicate.template == "[NP] and [NP]"
    assert [c.text for c in coord.children] == ["a man", "a woman"]
    flat = decompose("(TOP (NP (NP (NNS dogs) (CC and) (NNS cats))))")
    assert flat.predicate.template == "[NNS] and [NNS]"  # the unary NP above is looked through


def test_phrase_without_a_noun_is_not_a_concept_and_single_word_np_is_not_a_phrase():
    root = decompose("(TOP (S (NP (NP (DT the) (NN man)) (SBAR (WHNP (WP who)) (S (VP (VBD left))))) "
                     "(VP (VBD smiled))))")
    # "who left" has no noun, so it is no concept: it stays in the predicate of "the man who left"
    assert root.predicate.template == "[NP] smiled"
    assert root.children[0].predicate.template == "[NP] who left"
    root2 = decompose("(TOP (S (NP (NNS dogs)) (VP (VBP bark))))")
    assert root2.predicate.template == "[NNS] bark" and root2.children[0].kind == PRIMITIVE


def test_every_word_is_in_exactly_one_place():
    """Template words plus the concepts' words rebuild the sentence at every level."""
    root = decompose("(TOP (S (NP (NP (CD Two) (JJ young) (NNS guys)) (PP (IN with) (NP (JJ shaggy) (NN hair)))) "
                     "(VP (VBP look) (PP (IN at) (NP (PRP$ their) (NNS hands))) (SBAR (IN while) (S (VP (VBG hanging) "
                     "(PRT (RP out)) (PP (IN in) (NP (DT the) (NN yard))))))) (. .)))")
    for node in root.walk():
        if node.predicate is None:
            continue
        filled = node.predicate.template.split()
        it = iter(node.children)
        rebuilt = " ".join(next(it).text if tok.startswith("[") else tok for tok in filled)
        assert rebuilt == node.text


def test_prune_tree_keeps_words_and_is_seeded():
    t = Tree.fromstring("(TOP (S (NP (NP (DT a) (NN man)) (PP (IN in) (NP (DT a) (NN hat)))) (VP (VBZ runs))))")
    a = prune_tree(t, 0.5, random.Random(3))
    assert a == prune_tree(t, 0.5, random.Random(3))
    assert a.leaves() == t.leaves()
    full = prune_tree(t, 1.0, random.Random(0))
    assert full == Tree.fromstring("(TOP (S (DT a) (NN man) (IN in) (DT a) (NN hat) (VBZ runs)))")
    assert extract_concepts(full).predicate.template == "a [NN] in a [NN] runs"
    with pytest.raises(ValueError, match="probability"):
        prune_tree(t, 1.5, random.Random(0))


# ------------------------------------------------------------------ the fast extraction against a naive one
def naive_extract(tree: Tree) -> dict:
    """Appendix A written the plain way: every node's content words found by scanning its leaves."""
    from crg.dep_to_constituency import PUNCT_TAGS, unescape_ptb_word
    from crg.extract import CONCEPT_LABELS, PRIMITIVE_TAGS

    if tree.label() == "TOP" and len(tree) == 1 and isinstance(tree[0], Tree):
        tree = tree[0]
    pos = tree.pos()
    spans, tags = {}, [t for _, t in pos]

    def walk(node, start):
        if isinstance(node[0], str):
            spans[id(node)] = (start, start + 1)
            return start + 1
        end = start
        for child in node:
            end = walk(child, end)
        spans[id(node)] = (start, end)
        return end

    walk(tree, 0)

    def content(start, end):
        return [i for i in range(start, end) if tags[i] not in PUNCT_TAGS]

    def text(start, end):
        return " ".join(unescape_ptb_word(pos[i][0]).lower() for i in content(start, end))

    def decompose(node, label, kind, start, end):
        out = {"text": text(start, end), "label": label, "kind": kind, "span": [start, end],
               "predicate": None, "children": []}
        own = content(start, end)
        found, queue = [], list(node) if not isinstance(node[0], str) else []
        while queue:
            sub = queue.pop(0)
            if not isinstance(sub, Tree):
                continue
            if isinstance(sub[0], str) and sub.label() in PRIMITIVE_TAGS:
                found.append((sub, PRIMITIVE))
                continue
            if not isinstance(sub[0], str) and sub.label() in CONCEPT_LABELS:
                words = content(*spans[id(sub)])
                if len(words) >= 2 and any(tags[i] in PRIMITIVE_TAGS for i in words) and words != own:
                    found.append((sub, PHRASE))
                    continue
            if not isinstance(sub[0], str):
                queue.extend(sub)
        if not found and kind == PRIMITIVE:
            return out
        if len(found) == 1 and found[0][1] == PRIMITIVE and content(*spans[id(found[0][0])]) == own:
            out["label"] = found[0][0].label()
            return out
        found.sort(key=lambda f: spans[id(f[0])][0])
        template, cursor = [], start
        for sub, sub_kind in found:
            s, e = spans[id(sub)]
            template += [unescape_ptb_word(pos[i][0].lower()) for i in content(cursor, s)] + [f"[{sub.label()}]"]
            out["children"].append(decompose(sub, sub.label(), sub_kind, s, e))
            cursor = e
        template += [unescape_ptb_word(pos[i][0].lower()) for i in content(cursor, end)]
        out["predicate"] = " ".join(template)
        return out

    return decompose(tree, tree.label(), SENTENCE, 0, len(pos))


def test_extraction_equals_the_naive_reference_on_every_gold_tree():
    """The counting shortcuts (content words per span in O(1)) change no concept, template or label."""
    from conftest import DATA

    from crg.bracket_score import read_trees

    trees = [t for name in ("gold_ptb.mrg", "gold_ptb_heldout.mrg") for t in read_trees(DATA / name)]
    rng = random.Random(0)
    trees += [prune_tree(t, 0.5, rng) for t in trees]  # flatter trees: other unary chains and spans
    assert len(trees) > 400
    for tree in trees:
        assert extract_concepts(tree).to_dict() == naive_extract(tree), tree.pformat(margin=10**9)
