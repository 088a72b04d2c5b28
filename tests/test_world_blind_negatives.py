"""benchmarks/world_blind_negatives.py's pieces without a world: pairs grouped by type and edit, and a pair
classifier that learns a text cue from training pairs and applies it to other pairs."""

from __future__ import annotations

import importlib.util

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("_script_world_blind", ROOT / "benchmarks" / "world_blind_negatives.py")
blind = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blind)


def test_pairs_are_grouped_by_type_and_by_edit():
    eval_set = {"items": [
        {"positive": "a red ball", "negatives": [
            {"text": "a blue ball", "type": "HN-ATOM", "change": {"op": "replace_attribute"}},
            {"text": "there is no red ball", "type": "HN-NEG", "change": {"op": "negate_caption"}}]},
        {"positive": "a cube left of a ball", "negatives": [
            {"text": "a cube right of a ball", "type": "HN-ATOM", "change": {"op": "replace_relation"}},
            {"text": "a ball left of a cube", "type": "HN-SWAP", "change": None}]}]}
    got = blind.eval_pairs_by_edit(eval_set)
    assert got["HN-ATOM"] == [("a red ball", "a blue ball"), ("a cube left of a ball", "a cube right of a ball")]
    assert got["HN-ATOM/replace_relation"] == [("a cube left of a ball", "a cube right of a ball")]
    assert got["HN-SWAP/?"] == [("a cube left of a ball", "a ball left of a cube")]   # no recorded edit
    assert set(got) == {"HN-ATOM", "HN-ATOM/replace_attribute", "HN-ATOM/replace_relation", "HN-NEG",
                        "HN-NEG/negate_caption", "HN-SWAP", "HN-SWAP/?"}


def test_the_pair_classifier_carries_a_negation_cue_to_new_pairs_and_not_a_symmetric_swap():
    train = [(f"a {c} {s}", f"there is no {c} {s}") for c in ("red", "blue", "green") for s in ("ball", "cube")]
    train += [(f"a {a} left of a {b}", f"a {b} left of a {a}") for a, b in (("ball", "cube"), ("cube", "ball"))]
    test = [("a pink cone", "there is no pink cone"), ("a cone left of a ring", "a ring left of a cone")]
    margins = blind.pair_margins(train, test)
    assert margins[0] > 0.5                                  # "no" learnt as the negative's word
    assert abs(margins[1]) < 1e-6                            # an exchange of unseen words: nothing to go on
