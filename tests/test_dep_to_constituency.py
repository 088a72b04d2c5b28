"""The dependency -> PTB converter on hand-made parses (no model), plus a random-tree fuzz."""

import random

import pytest
from nltk import Tree

from crg.dep_to_constituency import dependency_to_constituency, projectivize


def convert(spec: str) -> str:
    """``spec``: one token per line as ``word TAG head dep`` (head is a 0-based index)."""
    rows = [line.split() for line in spec.strip().splitlines()]
    words, tags = [r[0] for r in rows], [r[1] for r in rows]
    heads, deps = [int(r[2]) for r in rows], [r[3] for r in rows]
    return dependency_to_constituency(words, tags, heads, deps).pformat(margin=10**6)


def test_aux_chain_and_pp_give_ptb_vp_stack():
    tree = convert("""
        two CD 1 nummod
        dogs NNS 3 nsubj
        are VBP 3 aux
        running VBG 3 ROOT
        on IN 3 prep
        the DT 6 det
        grass NN 4 pobj
        . . 3 punct""")
    assert tree == ("(TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) "
                    "(PP (IN on) (NP (DT the) (NN grass))))) (. .)))")


def test_noun_caption_with_postmodifiers_is_a_flat_np_over_a_base_np():
    tree = convert("""
        A DT 1 det
        man NN 1 ROOT
        in IN 1 prep
        a DT 5 det
        blue JJ 5 amod
        shirt NN 2 pobj
        standing VBG 1 acl
        in IN 6 prep
        a DT 9 det
        garden NN 7 pobj
        . . 1 punct""")
    assert tree == ("(TOP (NP (NP (DT A) (NN man)) (PP (IN in) (NP (DT a) (JJ blue) (NN shirt))) "
                    "(VP (VBG standing) (PP (IN in) (NP (DT a) (NN garden)))) (. .)))")


def test_relative_clause_gets_sbar_with_whnp_and_an_s_without_subject():
    tree = convert("""
        a DT 1 det
        woman NN 1 ROOT
        who WP 4 nsubj
        is VBZ 4 aux
        smiling VBG 1 relcl""")
    assert tree == "(TOP (NP (NP (DT a) (NN woman)) (SBAR (WHNP (WP who)) (S (VP (VBZ is) (VP (VBG smiling)))))))"


def test_coordination_of_determined_nps_nests_and_bare_nouns_stay_flat():
    nested = convert("""
        a DT 1 det
        man NN 5 nsubj
        and CC 1 cc
        a DT 4 det
        woman NN 1 conj
        sit VBP 5 ROOT""")
    assert "(NP (NP (DT a) (NN man)) (CC and) (NP (DT a) (NN woman)))" in nested
    flat = convert("""
        dogs NNS 3 nsubj
        and CC 0 cc
        cats NNS 0 conj
        play VBP 3 ROOT""")
    assert "(NP (NNS dogs) (CC and) (NNS cats))" in flat


def test_vp_coordination_sits_below_the_auxiliary():
    tree = convert("""
        he PRP 2 nsubj
        is VBZ 2 aux
        sitting VBG 2 ROOT
        and CC 2 cc
        reading VBG 2 conj""")
    assert tree == "(TOP (S (NP (PRP he)) (VP (VBZ is) (VP (VP (VBG sitting)) (CC and) (VP (VBG reading))))))"


def test_possessor_is_an_np_inside_the_base_np():
    tree = convert("""
        the DT 1 det
        man NN 3 poss
        's POS 1 case
        dog NN 4 nsubj
        barks VBZ 4 ROOT""")
    assert "(NP (NP (DT the) (NN man) (POS 's)) (NN dog))" in tree


def test_complementizer_and_wh_question():
    clause = convert("""
        he PRP 1 nsubj
        said VBD 1 ROOT
        that IN 4 mark
        she PRP 4 nsubj
        left VBD 1 ccomp""")
    assert "(SBAR (IN that) (S (NP (PRP she)) (VP (VBD left))))" in clause
    question = convert("""
        what WP 3 dobj
        is VBZ 3 aux
        he PRP 3 nsubj
        holding VBG 3 ROOT
        ? . 3 punct""")
    assert question.startswith("(TOP (SBARQ (WHNP (WP what)) (SQ (VBZ is) (NP (PRP he))")


def test_several_roots_become_one_tree_over_all_tokens():
    tree = convert("""
        dogs NNS 1 nsubj
        run VBP 1 ROOT
        cats NNS 3 nsubj
        sleep VBP 3 ROOT""")
    assert tree == "(TOP (S (S (NP (NNS dogs)) (VP (VBP run))) (S (NP (NNS cats)) (VP (VBP sleep)))))"


def test_brackets_in_words_are_escaped():
    tree = Tree.fromstring(convert("""
        ( -LRB- 1 punct
        hi UH 1 ROOT
        ) -RRB- 1 punct"""))
    assert tree.leaves() == ["-LRB-", "hi", "-RRB-"]


@pytest.mark.parametrize("words,tags,heads,deps,message", [
    (["a"], ["DT", "NN"], [0], ["ROOT"], "differ in length"),
    ([], [], [], [], "empty"),
    (["a", "b"], ["DT", "NN"], [1, 5], ["det", "ROOT"], "outside the sentence"),
])
def test_bad_input_is_a_clear_value_error(words, tags, heads, deps, message):
    with pytest.raises(ValueError, match=message):
        dependency_to_constituency(words, tags, heads, deps)


def test_projectivize_lifts_crossing_arcs_and_handles_several_roots():
    assert projectivize([1, 1, 3, 1]) == [1, 1, 3, 1]
    assert projectivize([2, 2, 2, 0]) == [2, 2, 2, 2]
    assert projectivize([0, 1, 0]) == [0, 1, 2]  # a dependent of a root across another root


TAGS = "NN NNS NNP PRP DT JJ RB IN TO VB VBZ VBG VBN VBD MD CC , . WDT WP WRB CD POS RP PRP$ EX UH HYPH".split()
DEPS = ("nsubj nsubjpass dobj pobj prep det amod compound nummod poss case aux auxpass neg cc conj punct "
        "mark relcl acl advcl advmod xcomp ccomp attr acomp appos prt npadvmod dep expl pcomp quantmod "
        "predet preconj intj parataxis").split()


def test_random_dependency_trees_always_keep_every_word_in_order():
    """Whatever a parser emits (non-projective arcs, several roots, odd labels), no word is lost."""
    rng = random.Random(1234)
    for _ in range(1500):
        n = rng.randint(1, 12)
        order = list(range(n))
        rng.shuffle(order)
        heads = [0] * n
        heads[order[0]] = order[0]
        for k in range(1, n):
            heads[order[k]] = order[rng.randrange(k)]
        if rng.random() < 0.1:
            heads = [i if rng.random() < 0.2 else h for i, h in enumerate(heads)]
        words = [f"w{i}" for i in range(n)]
        tree = dependency_to_constituency(words, [rng.choice(TAGS) for _ in words], heads,
                                          [rng.choice(DEPS) for _ in words])
        assert tree.leaves() == words
        assert tree.label() == "TOP" and len(tree) == 1
