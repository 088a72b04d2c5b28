"""benchmarks/relation_diagnostics.py's pieces, without models: the permuted geometry keeps each image's boxes and
moves them between its detector regions only; the training captions (composer.evaluation.hard_negatives'
first_captions, which it and world_blind_negatives.py read) are the first of each training image."""

from __future__ import annotations

import importlib.util
import json

import torch

from composer.evaluation.hard_negatives import first_captions
from conftest import ROOT
from crg.corpus import read_corpus

_spec = importlib.util.spec_from_file_location("_script_relation_diagnostics",
                                               ROOT / "benchmarks" / "relation_diagnostics.py")
diag = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(diag)


def test_permuted_geometry_moves_boxes_between_detector_regions_only():
    torch.manual_seed(0)
    geometry = torch.rand(5, 8, 5)                                            # (I, R, G)
    mask = torch.zeros(5, 8, dtype=torch.bool)
    for i, n in enumerate((8, 6, 3, 1, 7)):
        mask[i, :n] = True                                                    # region 0: the whole image
    out = diag.permuted_geometry(geometry, mask, seed=3)
    assert torch.equal(out, diag.permuted_geometry(geometry, mask, seed=3))  # seeded
    assert torch.equal(out[:, 0], geometry[:, 0]) and torch.equal(out[~mask], geometry[~mask])
    moved = 0
    for i in range(5):
        real = mask[i].nonzero().flatten()[1:]
        same_set = sorted(map(tuple, out[i, real].tolist())) == sorted(map(tuple, geometry[i, real].tolist()))
        assert same_set, i                                                    # the same boxes, on other regions
        moved += int(not torch.equal(out[i, real], geometry[i, real]))
    assert moved >= 3                                                         # images with 2+ detector regions


def test_training_captions_are_the_first_caption_of_each_training_image(tmp_path):
    rows = [{"image_id": "a", "split": "train", "captions": ["a1", "a2"]}, {"image_id": "b", "split": "test",
            "captions": ["b1"]}, {"image_id": "c", "split": "train", "captions": []},
            {"image_id": "d", "split": "train", "captions": ["d1"]}, {"image_id": "e", "split": "train",
                                                                       "captions": ["e1"]}]
    path = tmp_path / "captions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + "\n".join(json.dumps(r) for r in rows[2:]))
    corpus = read_corpus(path)
    assert first_captions(corpus.select(("train",)).images, 2) == [("a", "a1"), ("d", "d1")]
    assert first_captions(corpus.select(("train", "test")).images, 10) == [("a", "a1"), ("b", "b1"), ("d", "d1"),
                                                                            ("e", "e1")]


def test_markdown_has_a_row_per_model_and_dashes_for_missing_edits():
    edits = {"HN-SWAP/swap_arguments": 50.0}
    one = {"i2t_by_edit": edits, "counts": {"HN-SWAP/swap_arguments": 191}}
    text = diag.markdown({"m1": {"test": one, "train": one, "geometry": {"true": 57.0, "permuted": 56.0, "none": 55.5}}})
    assert "HN-SWAP swap_arguments (n=191)" in text and "| m1 | 57.0 | 56.0 | 55.5 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| m1 |") and "50.0" in line)
    assert row.count("–") == len(diag.EDITS) - 1
