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


def random_heads(rng: random.Random, n: int) -> list[int]:
    """A random dependency tree over ``n`` words as a parser might emit it: non-projective arcs, and one time in
    ten several roots and cycles."""
    order = list(range(n))
    rng.shuffle(order)
    heads = [0] * n
    heads[order[0]] = order[0]
    for k in range(1, n):
        heads[order[k]] = order[rng.randrange(k)]
    if rng.random() < 0.1:
        heads = [i if rng.random() < 0.2 else h for i, h in enumerate(heads)]
    return heads


def test_random_dependency_trees_always_keep_every_word_in_order():
    """Whatever a parser emits (non-projective arcs, several roots, odd labels), no word is lost."""
    rng = random.Random(1234)
    for _ in range(1500):
        n = rng.randint(1, 12)
        heads = random_heads(rng, n)
        words = [f"w{i}" for i in range(n)]
        tree = dependency_to_constituency(words, [rng.choice(TAGS) for _ in words], heads,
                                          [rng.choice(DEPS) for _ in words])
        assert tree.leaves() == words
        assert tree.label() == "TOP" and len(tree) == 1


# ---------------------------------------------------------------- PTB conventions found on the WSJ dev half
# Each rule below was found as a systematic error class on the dev half of ../shared/data/ptb_dev
# (docs/parsing.md); the dependency parses are spaCy's for the sentences shown.


def test_amounts_are_a_flat_qp_of_two_or_more_words_besides_the_currency_sign():
    money = convert("""
        The DT 1 det
        deficit NN 2 nsubj
        rose VBD 2 ROOT
        to IN 2 prep
        $ $ 6 quantmod
        1.5 CD 6 compound
        billion CD 3 pobj""")
    assert "(PP (IN to) (NP (QP ($ $) (CD 1.5) (CD billion))))" in money
    counted = convert("""
        About RB 1 advmod
        160 CD 2 nummod
        workers NNS 3 nsubj
        paid VBD 3 ROOT
        $ $ 5 nmod
        100 CD 3 dobj""")
    assert "(NP (QP (RB About) (CD 160)) (NNS workers))" in counted
    assert "(NP ($ $) (CD 100))" in counted  # one word besides the sign: no QP


def test_a_prenominal_amount_is_an_adjective_phrase():
    tree = convert("""
        It PRP 1 nsubj
        holds VBZ 1 ROOT
        a DT 6 det
        $ $ 5 quantmod
        5 CD 5 compound
        million CD 6 nummod
        account NN 1 dobj
        and CC 6 cc
        a DT 11 det
        10 CD 10 nummod
        % NN 11 compound
        stake NN 6 conj""")
    assert "(NP (DT a) (ADJP (QP ($ $) (CD 5) (CD million))) (NN account))" in tree
    assert "(NP (DT a) (ADJP (CD 10) (NN %)) (NN stake))" in tree


def test_participles_and_complex_prepositions_head_flat_pps():
    according = convert("""
        Prices NNS 1 nsubj
        fell VBD 1 ROOT
        , , 1 punct
        according VBG 1 prep
        to IN 3 prep
        the DT 6 det
        report NN 4 pobj""")
    assert "(PP (VBG according) (PP (IN to) (NP (DT the) (NN report))))" in according
    because = convert("""
        She PRP 1 nsubj
        left VBD 1 ROOT
        because IN 1 prep
        of IN 2 pcomp
        the DT 5 det
        rain NN 2 pobj""")
    assert "(PP (IN because) (IN of) (NP (DT the) (NN rain)))" in because


def test_fronted_wh_phrases_of_relatives_with_a_preposition_and_of_free_relatives():
    pied_piped = convert("""
        He PRP 1 nsubj
        signed VBD 1 ROOT
        an DT 3 det
        agreement NN 1 dobj
        under IN 10 prep
        which WDT 4 pobj
        the DT 7 det
        shares NNS 10 nsubjpass
        will MD 10 aux
        be VB 10 auxpass
        sold VBN 3 relcl""")
    assert "(SBAR (WHPP (IN under) (WHNP (WDT which))) (S (NP (DT the) (NNS shares)) (VP (MD will)" in pied_piped
    free = convert("""
        What WP 2 dobj
        she PRP 2 nsubj
        did VBD 3 csubj
        was VBD 3 ROOT
        wrong JJ 3 acomp""")
    assert free.startswith("(TOP (S (SBAR (WHNP (WP What)) (S (NP (PRP she)) (VP (VBD did))))")
    that = convert("""
        the DT 1 det
        plan NN 1 ROOT
        that IN 4 dobj
        he PRP 4 nsubj
        proposed VBD 1 relcl""")
    assert "(SBAR (WHNP (IN that)) (S (NP (PRP he)) (VP (VBD proposed))))" in that


def test_names_joined_by_ampersand_are_one_flat_np():
    tree = convert("""
        He PRP 1 nsubj
        works VBZ 1 ROOT
        for IN 1 prep
        W.R. NNP 4 compound
        Grace NNP 2 pobj
        & CC 4 cc
        Co. NNP 4 conj""")
    assert "(PP (IN for) (NP (NNP W.R.) (NNP Grace) (CC &) (NNP Co.)))" in tree


def test_an_adjective_after_its_noun_keeps_its_inner_phrases():
    tree = convert("""
        He PRP 1 nsubj
        committed VBD 1 ROOT
        a DT 3 det
        felony NN 1 dobj
        punishable JJ 3 amod
        by IN 4 prep
        law NN 5 pobj""")
    assert "(NP (NP (DT a) (NN felony)) (ADJP (JJ punishable) (PP (IN by) (NP (NN law)))))" in tree


def test_an_adjective_in_a_noun_phrase_role_heads_an_np():
    tree = convert("""
        Many JJ 5 nsubjpass
        of IN 0 prep
        the DT 3 det
        risks NNS 1 pobj
        were VBD 5 auxpass
        known VBN 5 ROOT""")
    assert tree.startswith("(TOP (S (NP (NP (JJ Many)) (PP (IN of) (NP (DT the) (NNS risks))))")


def test_object_predicate_is_a_small_clause_and_an_infinitival_complement_sits_in_the_base_np():
    small_clause = convert("""
        They PRP 1 nsubj
        named VBD 1 ROOT
        him PRP 1 dobj
        a DT 4 det
        director NN 1 oprd""")
    assert "(VP (VBD named) (NP (PRP him)) (S (NP (DT a) (NN director))))" in small_clause
    complement = convert("""
        He PRP 1 nsubj
        has VBZ 1 ROOT
        the DT 3 det
        right NN 1 dobj
        to TO 5 aux
        choose VB 3 acl""")
    assert "(NP (DT the) (NN right) (S (VP (TO to) (VP (VB choose)))))" in complement


def test_clauses_each_with_a_complementizer_coordinate_as_sbars_and_unlike_conjuncts_take_the_first_label():
    sbars = convert("""
        She PRP 1 nsubj
        said VBD 1 ROOT
        that IN 4 mark
        he PRP 4 nsubj
        left VBD 1 ccomp
        and CC 4 cc
        that IN 8 mark
        she PRP 8 nsubj
        stayed VBD 4 conj""")
    assert ("(SBAR (SBAR (IN that) (S (NP (PRP he)) (VP (VBD left)))) (CC and) "
            "(SBAR (IN that) (S (NP (PRP she)) (VP (VBD stayed)))))") in sbars
    unlike = convert("""
        he PRP 1 nsubj
        is VBZ 1 ROOT
        tired JJ 1 acomp
        and CC 2 cc
        a DT 5 det
        fool NN 2 conj""")
    assert "(ADJP (ADJP (JJ tired)) (CC and) (NP (DT a) (NN fool)))" in unlike
    assert "UCP" not in unlike


def test_a_phrase_between_dashes_or_brackets_is_a_parenthetical():
    tree = convert("""
        The DT 1 det
        stake NN 10 nsubjpass
        -- : 1 punct
        10 CD 4 nummod
        % NN 1 appos
        of IN 4 prep
        the DT 7 det
        company NN 5 pobj
        -- : 1 punct
        was VBD 10 auxpass
        sold VBN 10 ROOT""")
    assert ("(NP (NP (DT The) (NN stake)) (PRN (: --) (NP (NP (CD 10) (NN %)) (PP (IN of) "
            "(NP (DT the) (NN company)))) (: --)))") in tree


def test_a_prenominal_participle_with_a_modifier_is_an_adjective_phrase():
    tree = convert("""
        It PRP 1 nsubj
        is VBZ 1 ROOT
        a DT 5 det
        publicly RB 4 advmod
        traded VBN 5 amod
        company NN 1 attr""")
    assert "(NP (DT a) (ADJP (RB publicly) (VBN traded)) (NN company))" in tree


def test_clauses_across_a_semicolon_are_coordinated():
    tree = convert("""
        Prices NNS 1 nsubj
        rose VBD 4 ccomp
        ; : 4 punct
        profits NNS 4 nsubj
        fell VBD 4 ROOT
        . . 4 punct""")
    assert tree == "(TOP (S (S (NP (NNS Prices)) (VP (VBD rose))) (: ;) (S (NP (NNS profits)) (VP (VBD fell))) (. .)))"


def test_an_adverb_before_a_complementizer_belongs_to_the_sbar():
    tree = convert("""
        He PRP 1 nsubj
        left VBD 1 ROOT
        even RB 5 advmod
        though IN 5 mark
        she PRP 5 nsubj
        stayed VBD 1 advcl""")
    assert "(SBAR (ADVP (RB even)) (IN though) (S (NP (PRP she)) (VP (VBD stayed))))" in tree


def test_a_coordinated_title_in_apposition_to_a_name_stays_an_appositive():
    tree = convert("""
        We PRP 1 nsubj
        met VBD 1 ROOT
        Rowe NNP 1 dobj
        , , 2 punct
        president NN 2 appos
        and CC 4 cc
        chief JJ 7 amod
        executive NN 4 conj""")
    assert "(NP (NP (NNP Rowe)) (, ,) (NP (NP (NN president)) (CC and) (NP (JJ chief) (NN executive))))" in tree
    listing = convert("""
        a DT 1 det
        dog NN 1 ROOT
        , , 1 punct
        a DT 4 det
        cat NN 1 appos
        and CC 4 cc
        a DT 7 det
        bird NN 4 conj""")
    assert listing == ("(TOP (NP (NP (DT a) (NN dog)) (, ,) (NP (DT a) (NN cat)) (CC and) "
                       "(NP (DT a) (NN bird))))")


def test_never_is_an_adverb_phrase_and_multiword_coordinators_are_conjp():
    never = convert("""
        He PRP 2 nsubj
        never RB 2 neg
        complained VBD 2 ROOT""")
    assert never == "(TOP (S (NP (PRP He)) (ADVP (RB never)) (VP (VBD complained))))"
    as_well_as = convert("""
        They PRP 1 nsubj
        sell VBP 1 ROOT
        books NNS 1 dobj
        as RB 5 advmod
        well RB 5 advmod
        as IN 2 cc
        toys NNS 2 conj""")
    assert "(NP (NNS books) (CONJP (RB as) (RB well) (IN as)) (NNS toys))" in as_well_as


def test_direct_speech_is_an_s_and_indirect_speech_an_sbar():
    direct = convert("""
        He PRP 1 nsubj
        said VBD 1 ROOT
        , , 1 punct
        `` `` 1 punct
        We PRP 5 nsubj
        left VBD 1 ccomp
        . . 1 punct
        '' '' 1 punct""")
    assert "(VP (VBD said) (, ,) (`` ``) (S (NP (PRP We)) (VP (VBD left))))" in direct
    indirect = convert("""
        He PRP 1 nsubj
        said VBD 1 ROOT
        we PRP 3 nsubj
        left VBD 1 ccomp""")
    assert "(VP (VBD said) (SBAR (S (NP (PRP we)) (VP (VBD left)))))" in indirect


def test_conjuncts_with_their_own_auxiliaries_coordinate_as_whole_vps():
    tree = convert("""
        He PRP 3 nsubj
        is VBZ 3 aux
        already RB 3 advmod
        appealing VBG 3 ROOT
        the DT 5 det
        order NN 3 dobj
        and CC 3 cc
        is VBZ 8 aux
        considering VBG 3 conj
        an DT 10 det
        appeal NN 8 dobj""")
    assert tree == ("(TOP (S (NP (PRP He)) (VP (VP (VBZ is) (ADVP (RB already)) (VP (VBG appealing) "
                    "(NP (DT the) (NN order)))) (CC and) "
                    "(VP (VBZ is) (VP (VBG considering) (NP (DT an) (NN appeal)))))))")


def test_a_noun_with_a_subject_or_object_is_a_mistagged_verb():
    tree = convert("""
        Teachers NNS 1 nsubj
        telegraph NN 1 ROOT
        the DT 3 det
        areas NNS 1 dobj""")
    assert tree == "(TOP (S (NP (NNS Teachers)) (VP (NN telegraph) (NP (DT the) (NNS areas)))))"


def test_a_complement_clause_right_after_its_noun_sits_in_the_base_np():
    tree = convert("""
        I PRP 1 nsubj
        see VB 1 ROOT
        any DT 3 det
        signs NNS 1 dobj
        that IN 6 mark
        prices NNS 6 nsubj
        fell VBD 3 relcl""")
    assert "(NP (DT any) (NNS signs) (SBAR (IN that) (S (NP (NNS prices)) (VP (VBD fell)))))" in tree
    relative = convert("""
        the DT 1 det
        prices NNS 1 ROOT
        that WDT 3 nsubj
        fell VBD 1 relcl""")
    assert relative == "(TOP (NP (NP (DT the) (NNS prices)) (SBAR (WHNP (WDT that)) (S (VP (VBD fell))))))"


def test_an_adjective_modified_only_by_an_adjective_stays_flat_in_the_np():
    tree = convert("""
        Latin JJ 1 amod
        American JJ 2 amod
        nations NNS 3 nsubj
        grew VBD 3 ROOT""")
    assert tree == "(TOP (S (NP (JJ Latin) (JJ American) (NNS nations)) (VP (VBD grew))))"


def test_a_parenthetical_clause_between_commas_is_a_prn():
    tree = convert("""
        Prices NNS 6 nsubj
        , , 6 punct
        analysts NNS 3 nsubj
        say VBP 6 parataxis
        , , 6 punct
        will MD 6 aux
        fall VB 6 ROOT""")
    assert tree == ("(TOP (S (NP (NNS Prices)) (PRN (, ,) (S (NP (NNS analysts)) (VP (VBP say))) (, ,)) "
                    "(VP (MD will) (VP (VB fall)))))")


def test_an_adjective_with_a_subject_is_a_small_clause():
    tree = convert("""
        They PRP 1 nsubj
        found VBD 1 ROOT
        the DT 3 det
        rates NNS 4 nsubj
        illegal JJ 1 ccomp""")
    assert "(VP (VBD found) (S (NP (DT the) (NNS rates)) (ADJP (JJ illegal))))" in tree


def test_bare_nouns_after_a_premodified_noun_share_its_premodifiers():
    shared = convert("""
        those DT 1 det
        workers NNS 4 nsubj
        and CC 1 cc
        managers NNS 1 conj
        left VBD 4 ROOT""")
    assert "(NP (DT those) (NNS workers) (CC and) (NNS managers))" in shared
    listed = convert("""
        the DT 1 det
        home NN 6 nsubj
        , , 1 punct
        office NN 1 conj
        and CC 3 cc
        garden NN 3 conj
        sold VBD 6 ROOT""")
    assert "(NP (DT the) (NN home) (, ,) (NN office) (CC and) (NN garden))" in listed
    # a determiner that cannot take every noun, a first conjunct that is a compound noun, and
    # proper names keep their own NPs
    plural = convert("""
        a DT 1 det
        beard NN 4 pobj
        and CC 1 cc
        glasses NNS 1 conj
        with IN 4 ROOT""")
    assert "(NP (NP (DT a) (NN beard)) (CC and) (NP (NNS glasses)))" in plural
    compound = convert("""
        school NN 1 compound
        officials NNS 4 nsubj
        and CC 1 cc
        prosecutors NNS 1 conj
        say VBP 4 ROOT""")
    assert "(NP (NP (NN school) (NNS officials)) (CC and) (NP (NNS prosecutors)))" in compound
    names = convert("""
        the DT 1 det
        Philippines NNPS 4 nsubj
        and CC 1 cc
        Thailand NNP 1 conj
        gain VBP 4 ROOT""")
    assert "(NP (NP (DT the) (NNPS Philippines)) (CC and) (NP (NNP Thailand)))" in names


def test_a_sentence_initial_coordinator_is_not_part_of_a_vp_coordination():
    tree = convert("""
        But CC 3 cc
        the DT 2 det
        PCs NNS 3 nsubj
        had VBD 3 ROOT
        keyboards NNS 3 dobj
        and CC 3 cc
        could MD 7 aux
        store VB 3 conj
        data NNS 7 dobj""")
    assert tree == ("(TOP (S (CC But) (NP (DT the) (NNS PCs)) (VP (VP (VBD had) (NP (NNS keyboards))) (CC and) "
                    "(VP (MD could) (VP (VB store) (NP (NNS data)))))))")


def test_relative_clauses_each_with_a_wh_word_coordinate_as_sbars():
    tree = convert("""
        a DT 1 det
        woman NN 1 ROOT
        who WP 3 nsubj
        owns VBZ 1 relcl
        a DT 5 det
        shop NN 3 dobj
        and CC 3 cc
        who WP 8 nsubj
        lives VBZ 3 conj
        here RB 8 advmod""")
    assert tree == ("(TOP (NP (NP (DT a) (NN woman)) (SBAR (SBAR (WHNP (WP who)) (S (VP (VBZ owns) "
                    "(NP (DT a) (NN shop))))) (CC and) (SBAR (WHNP (WP who)) (S (VP (VBZ lives) (ADVP (RB here))))))))")


def test_a_reporting_clause_between_commas_inside_its_complement_is_a_parenthetical():
    tree = convert("""
        Now RB 3 advmod
        , , 3 punct
        he PRP 3 nsubj
        said VBD 3 ROOT
        , , 3 punct
        prices NNS 6 nsubj
        fell VBD 3 ccomp
        . . 3 punct""")
    assert tree == ("(TOP (S (ADVP (RB Now)) (PRN (, ,) (NP (PRP he)) (VP (VBD said)) (, ,)) (NP (NNS prices)) "
                    "(VP (VBD fell)) (. .)))")
    # with nothing before the subject it stays the main clause
    plain = convert("""
        he PRP 1 nsubj
        said VBD 1 ROOT
        , , 1 punct
        prices NNS 4 nsubj
        fell VBD 1 ccomp""")
    assert plain.startswith("(TOP (S (NP (PRP he)) (VP (VBD said) (, ,) ")


def test_words_before_an_inverted_reporting_verb_belong_to_the_interrupted_clause():
    tree = convert("""
        And CC 2 cc
        , , 2 punct
        says VBZ 7 parataxis
        Mr. NNP 4 compound
        Dinkins NNP 2 nsubj
        , , 7 punct
        he PRP 7 nsubj
        left VBD 7 ROOT
        . . 7 punct""")
    assert tree == ("(TOP (S (CC And) (PRN (, ,) (SINV (VP (VBZ says)) (NP (NNP Mr.) (NNP Dinkins))) (, ,)) "
                    "(NP (PRP he)) (VP (VBD left)) (. .)))")
    quoted = convert("""
        `` `` 4 punct
        Now RB 4 advmod
        , , 4 punct
        '' '' 4 punct
        says VBZ 9 parataxis
        Mr. NNP 6 compound
        Dinkins NNP 4 nsubj
        , , 4 punct
        prices NNS 9 nsubj
        fell VBD 9 ROOT""")
    assert "('' '') (PRN (SINV (VP (VBZ says)) (NP (NNP Mr.) (NNP Dinkins))) (, ,)) (NP (NNS prices))" in quoted
