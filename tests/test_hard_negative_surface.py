"""A negative keeps its caption's surface form: outside the edit, the characters are the caption's (issue 33).

The corpus tests generate every candidate (extended edits, 20 per type) of a few hundred COCO and
Flickr30K test captions and check each with code that shares nothing with the generator: difflib's
character alignment (every differing region lies inside a recorded edit span), the recorded spans'
complement (equal characters), and the punctuation spacing a string rule reads.
"""

import difflib
from collections import Counter
import re
from pathlib import Path

import pytest

from crg.hard_negatives import HN_TYPES, HardNegative, HardNegativeConfig, ParsedCaption, RefinementConfig
from crg.hard_negatives.generators import caption_candidates
from crg.hard_negatives.surface import EditSpan, realize_surface, token_offsets
from crg.hard_negatives.parsed_caption import EditToken
from crg.hard_negatives.vocabulary import AtomVocabulary

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CORPORA = {"coco": SHARED / "coco" / "captions.jsonl.gz", "flickr30k": SHARED / "flickr30k" / "captions.jsonl"}
NUM_CAPTIONS = 300
_PUNCT_SPACING = re.compile(r"(\s*)([.,;:!?])")


def outside_spans_equal(source: str, negative: str, spans) -> bool:
    """The characters outside the recorded spans, in order, are equal (spans sorted, not overlapping)."""
    s_pos = n_pos = 0
    for sp in spans:
        if sp.source_start < s_pos or sp.negative_start < n_pos:
            return False
        if source[s_pos:sp.source_start] != negative[n_pos:sp.negative_start]:
            return False
        s_pos, n_pos = sp.source_end, sp.negative_end
    return source[s_pos:] == negative[n_pos:]


def _inside(spans, i1, i2, j1, j2) -> bool:
    return any(sp.source_start <= i1 and i2 <= sp.source_end and sp.negative_start <= j1 and j2 <= sp.negative_end
               for sp in spans)


def differences_outside_spans(source: str, negative: str, spans) -> list[str]:
    """difflib's differing regions (character alignment) that no recorded span holds.

    An insertion or deletion may sit anywhere in a run of repeated characters ("littl|e retriever and
    a larg|e" is "little| retriever and a large|"); difflib picks one place, so each is slid along such
    runs before it is judged.
    """
    bad = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, source, negative, autojunk=False).get_opcodes():
        if op == "equal" or _inside(spans, i1, i2, j1, j2):
            continue
        ok = False
        if op in ("delete", "insert"):
            text, a, b = (source, i1, i2) if op == "delete" else (negative, j1, j2)
            for step in (1, -1):
                k = 0
                while not ok:
                    k += step
                    lo, hi = a + k, b + k
                    # one step right is the same edit when the window's first character equals the one
                    # after it; one step left, when its last equals the one before it
                    if lo < 0 or hi > len(text) or (text[lo - 1] != text[hi - 1] if step > 0 else text[lo] != text[hi]):
                        break
                    ok = _inside(spans, *((lo, hi, j1 + k, j1 + k) if op == "delete" else (i1 + k, i1 + k, lo, hi)))
                if ok:
                    break
        if not ok:
            bad.append(f"{op} {source[i1:i2]!r} -> {negative[j1:j2]!r} at {i1}/{j1}")
    return bad


#: Edits that reorder words: difflib may explain a swap A..B -> B..A as moving the middle instead, so
#: for these the check is that the words are a permutation of the caption's (articles re-agreeing aside).
#: So does a negated attribute (the adjective moves behind its noun: "a red hat" -> "a hat that is not red").
REORDERING = frozenset({"swap_arguments", "swap_nouns", "swap_phrases", "swap_relations", "swap_attributes",
                        "move_attribute", "negate_attribute"})


#: Words an edit adds around the ones its change names: the compound split's "X and Y" (which also
#: repeats the phrase's determiner and other modifiers: "the green grass" -> "the green X and the Y grass").
JOINERS = {"split_compound": {"and"}}


def word_bag(text: str) -> list[str]:
    return sorted("a" if w == "an" else w for w in re.findall(r"[\w-]+|'\w+", text.lower()))


def words_in_spans(source: str, spans) -> int:
    return sum(len(source[sp.source_start:sp.source_end].split()) for sp in spans)


def punctuation_spacing(text: str) -> list[tuple[str, str]]:
    """Each punctuation mark with the whitespace before it: what a "space before the period" rule reads."""
    return [(m.group(1), m.group(2)) for m in _PUNCT_SPACING.finditer(text)]


# ------------------------------------------------------------------ hand-made cases (no corpus needed)
def _toks(words, edits=None):
    edits = edits or {}
    return [EditToken(edits.get(i, w), "X", i in edits, False, None if i in edits else i) for i, w in enumerate(words)]


def test_token_offsets_follow_the_text_and_refuse_rewritten_tokens():
    assert token_offsets("A  man 's hat .", ["A", "man", "'s", "hat", "."]) == ((0, 1), (3, 6), (7, 9), (10, 13),
                                                                                (14, 15))
    assert token_offsets("He said \"hi\"", ["He", "said", "``", "hi", "''"]) is None


def test_replacement_keeps_spacing_before_punctuation():
    src = "A man rides a vehicle ."
    words = src.split()
    text, spans = realize_surface(_toks(words, {4: "boat"}), src, token_offsets(src, words))
    assert text == "A man rides a boat ."
    assert outside_spans_equal(src, text, spans) and len(spans) == 1


def test_inserted_words_join_as_the_caption_joins_its_own():
    src = "Two dogs , one cat ."
    words = src.split()
    toks = _toks(words)
    toks = toks[:2] + [EditToken("not", "RB"), EditToken(",", ",")] + toks[3:]  # "," re-made: new token
    text, spans = realize_surface(toks, src, token_offsets(src, words))
    assert text == "Two dogs not , one cat ."
    src2 = "Two dogs, one cat."
    words2 = ["Two", "dogs", ",", "one", "cat", "."]
    toks2 = _toks(words2)
    toks2 = toks2[:2] + [EditToken("not", "RB"), EditToken(",", ",")] + toks2[3:]
    text2, _ = realize_surface(toks2, src2, token_offsets(src2, words2))
    assert text2 == "Two dogs not, one cat."


def test_deletion_and_first_word_and_irregular_whitespace():
    src = "  A red  car parked ."
    words = ["A", "red", "car", "parked", "."]
    offs = token_offsets(src, words)
    toks = _toks(words)
    del toks[1]  # drop "red"
    text, spans = realize_surface(toks, src, offs)
    assert text == "  A  car parked ."  # the whitespace "red" had after it stays
    assert outside_spans_equal(src, text, spans)
    toks = [EditToken("There", "EX"), EditToken("is", "VBZ"), EditToken("no", "DT")] + _toks(words)[1:]
    text, spans = realize_surface(toks, src, offs)
    assert text == "  There is no red  car parked ."
    assert outside_spans_equal(src, text, spans) and not differences_outside_spans(src, text, spans)


def test_moved_tokens_are_edits_not_kept_characters():
    src = "A dog chasing a cat ."
    words = src.split()
    toks = _toks(words)
    toks = [EditToken("A", "DT"), EditToken("cat", "NN")] + toks[2:3] + [EditToken("a", "DT"), EditToken("dog", "NN")] \
        + toks[5:]
    text, spans = realize_surface(toks, src, token_offsets(src, words))
    assert text == "A cat chasing a dog ."
    assert len(spans) == 2 and outside_spans_equal(src, text, spans)


def test_spans_round_trip_through_json():
    n = HardNegative("HN-ATOM", "A cat .", "A dog .", __import__("crg.hard_negatives", fromlist=["Change"]).Change(
        "replace_noun", ("dog",), ("cat",), "noun:NN"), "1", (EditSpan(1, 6, 1, 6),))
    assert HardNegative.from_dict(n.to_dict()) == n


def test_the_checks_catch_a_rejoined_negative():
    """The checks are not vacuous: the old re-joining (no space before the period) fails them."""
    src, old = "A man on a bike .", "A man on a boat."
    spans = (EditSpan(11, 15, 11, 15),)
    assert not outside_spans_equal(src, old, spans)
    assert differences_outside_spans(src, old, spans)
    assert punctuation_spacing(src) != punctuation_spacing(old)


# ------------------------------------------------------------------ a corpus slice
def _slice(name: str):
    path = CORPORA[name]
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not beside this checkout)")
    from crg.benchmarks.parsing import parse_trees
    from crg.corpus import read_corpus

    images = read_corpus(path).select("test").images
    pairs = [(str(im.image_id), c) for im in images for c in im.captions][:NUM_CAPTIONS]
    trees = parse_trees([c for _, c in pairs])
    return [(i, ParsedCaption.from_tree(t, c)) for (i, c), t in zip(pairs, trees) if t is not None]


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_every_negative_of_a_corpus_slice_keeps_the_captions_characters(name):
    parsed = _slice(name)
    vocab = AtomVocabulary.from_parsed(p for _, p in parsed)
    config = HardNegativeConfig(seed=0, refinement=RefinementConfig(candidates_per_type=20))
    aligned = sum(p.offsets is not None for _, p in parsed)
    assert aligned >= 0.99 * len(parsed), f"{len(parsed) - aligned} captions' tokens not found in their text"
    checked, per_type, failures = 0, dict.fromkeys(HN_TYPES, 0), []
    for image_id, p in parsed:
        if p.offsets is None:
            continue
        result = caption_candidates(p, vocabulary=vocab, config=config, image_id=image_id, limit=20)
        for t, cands in result.candidates.items():
            for c in cands:
                n = c.negative
                checked += 1
                per_type[t] += 1
                assert n.spans, n
                if not outside_spans_equal(n.source, n.text, n.spans):
                    failures.append(f"outside spans differ: {n.source!r} -> {n.text!r} {n.spans}")
                # words: what the negative lost are the change's "before" words, what it gained its "after"
                # words (articles re-agreeing and case aside)
                lost = Counter(word_bag(n.source)) - Counter(word_bag(n.text))
                gained = Counter(word_bag(n.text)) - Counter(word_bag(n.source))
                if not set(lost) <= set(word_bag(" ".join(n.change.before))) | {"a"} or \
                        not set(gained) <= set(word_bag(" ".join(n.change.after))) | {"a"} | JOINERS.get(n.change.op, set()) \
                        | (set(word_bag(n.source)) if n.change.op == "split_compound" else set()):
                    failures.append(f"words beyond the change {n.change}: {n.source!r} -> {n.text!r}")
                if n.change.op not in REORDERING:
                    bad = differences_outside_spans(n.source, n.text, n.spans)
                    if bad:
                        failures.append(f"difflib: {n.source!r} -> {n.text!r}: {bad}")
                # the spans hold the edited words, not the caption: at most the words the change names,
                # and an article that agrees again or a first word that changed case
                edited = len(" ".join(n.change.before).split())
                if words_in_spans(n.source, n.spans) > edited + 2:
                    failures.append(f"spans wider than the edit {n.change}: {n.source!r} -> {n.text!r} {n.spans}")
                # a string rule reading punctuation spacing sees the caption's own, unless the edit
                # itself removed or added punctuation (none of the edits does)
                if punctuation_spacing(n.source) != punctuation_spacing(n.text):
                    failures.append(f"punctuation spacing: {n.source!r} -> {n.text!r}")
    assert not failures, f"{len(failures)} of {checked}:\n" + "\n".join(failures[:20])
    assert all(per_type[t] > 20 for t in HN_TYPES), per_type  # every type was exercised


def test_quotes_and_runs_of_periods_keep_their_form():
    src = "A cake that reads `` hi kate '' near a tree.."
    words = ["A", "cake", "that", "reads", "`", "`", "hi", "kate", '"', "near", "a", "tree", ".."]
    offs = token_offsets(src, words)
    assert offs is not None and src[offs[8][0]:offs[8][1]] == "''"
    toks = [EditToken(w, "X", src=i) for i, w in enumerate(words)]
    toks[1] = EditToken("pie", "NN", True)
    toks[11] = EditToken("stove", "NN", True)
    text, spans = realize_surface(toks, src, offs, words)
    assert text == "A pie that reads `` hi kate '' near a stove.."
    assert outside_spans_equal(src, text, spans) and not differences_outside_spans(src, text, spans)
