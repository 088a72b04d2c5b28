"""gc-hard-negatives on a small corpus written here: the files it writes and their keys, the output-folder
policy (a used --out refused, --overwrite, --resume only with the same settings), bad input refused before
any parsing, held-out checks that never share captions with the refinement, and the report's counts
matching the negatives written."""

import json
from collections import Counter

import pytest

from crg.cli.hard_negatives import DEFAULT_TYPES, blind_checks, main, negative_record
from crg.hard_negatives import HN_NEG, Change, HardNegative
from crg.hard_negatives.surface import EditSpan

TRAIN = ["A man rides a red bike on a road .", "A dog runs on the green grass .", "A woman holds a blue umbrella .",
         "Two dogs play with a ball in a park .", "A cat sleeps on a small sofa .", "A man with a hat walks a dog .",
         "A red car is parked on a street .", "A girl eats a big sandwich at a table ."]
TEST = ["A man in a red shirt rides a bike .", "A brown dog chases a white cat on the grass .",
        "A woman with a blue umbrella walks on a street .", "Two small dogs play with a red ball .",
        "A little girl is eating a sandwich at a wooden table ."]


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "captions.jsonl"
    lines = []
    for k, (split, caps) in enumerate([("train", TRAIN), ("val", TRAIN[::-1]), ("test", TEST)]):
        for j in range(0, len(caps), 2):
            lines.append({"image_id": f"{split}{j}", "split": split, "captions": caps[j:j + 2]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_writes_negatives_and_report_and_refuses_a_used_out(corpus, tmp_path, capsys):
    out = tmp_path / "hn"
    args = ["--captions", str(corpus), "--split", "test", "--out", str(out), "--candidates-per-type", "10",
            "--max-blind-accuracy", "1.0"]
    assert main(args + ["--types", *DEFAULT_TYPES, HN_NEG]) == 0
    lines = [json.loads(x) for x in (out / "negatives.jsonl").read_text().splitlines()]
    report = json.loads((out / "report.json").read_text())
    assert lines and all(set(x) == {"caption", "negative", "type", "image_id", "edit", "false_because"} for x in lines)
    assert all(set(x["false_because"]) == {"concept", "reason"} and x["false_because"]["reason"] for x in lines)
    assert all(set(x["edit"]) == {"op", "before", "after", "where", "spans"} and x["edit"]["spans"] for x in lines)
    assert {x["caption"] for x in lines} <= set(TEST) and all(x["negative"] != x["caption"] for x in lines)
    # every negative keeps the caption's " ." (the corpus is written COCO-style)
    assert all(x["negative"].endswith(" .") for x in lines)
    kept = Counter(x["type"] for x in lines)
    for hn_type, entry in report["types"].items():
        assert entry["counts"]["kept"] == kept.get(hn_type, 0)
        assert entry["counts"]["candidates"] >= entry["counts"]["picked_per_caption"] >= entry["counts"]["kept"]
        checks = entry["blind_checks"]
        if kept.get(hn_type):
            assert checks["LM (held out)"]["held_out"] and not checks["LM (refined against)"]["held_out"]
            assert checks["space before punctuation is the caption"]["accuracy"] == 50.0
            assert not checks["more 'and' is the negative"]["held_out"]  # refined against (CountingScorer)
            assert not checks["LM order 1 (refined against)"]["held_out"]
        assert entry["counts"]["dropped_ungrammatical"] >= 0
    assert report["types"][HN_NEG]["blind_checks"]["more negation words is the negative"]["accuracy"] > 65
    assert "val" in report["scorers"]["held_out"][0] and "train" in report["scorers"]["refined_against"][0]
    assert any("grouped" in s for s in report["scorers"]["held_out"])
    assert set(report["timings_s"]) >= {"parse", "fit LMs", "total"}
    with pytest.raises(SystemExit, match="--resume .* or --overwrite"):
        main(args)
    with pytest.raises(SystemExit, match="other settings"):
        main(args + ["--resume", "--seed", "3"])
    assert main(args + ["--overwrite", "--types", "HN-ATOM"]) == 0
    assert {json.loads(x)["type"] for x in (out / "negatives.jsonl").read_text().splitlines()} == {"HN-ATOM"}


def test_bad_input_is_refused_before_parsing(corpus, tmp_path):
    out = tmp_path / "hn"
    with pytest.raises(SystemExit, match="no such file"):
        main(["--captions", str(tmp_path / "missing.jsonl"), "--out", str(out)])
    with pytest.raises(SystemExit, match="no images in split"):
        main(["--captions", str(corpus), "--split", "restval", "--out", str(out)])
    with pytest.raises(SystemExit, match="overlap --split"):
        main(["--captions", str(corpus), "--lm-splits", "train,test", "--out", str(out)])
    with pytest.raises(SystemExit, match="overlap --lm-splits"):
        main(["--captions", str(corpus), "--heldout-splits", "train", "--out", str(out)])
    with pytest.raises(SystemExit, match="must be in"):
        main(["--captions", str(corpus), "--max-blind-accuracy", "60", "--out", str(out)])
    with pytest.raises(SystemExit, match="lm-orders"):
        main(["--captions", str(corpus), "--lm-orders", "1,5", "--out", str(out)])
    with pytest.raises(SystemExit, match="overlaps --split"):
        main(["--captions", str(corpus), "--refine-lm", f"{corpus}:test", "--out", str(out)])
    with pytest.raises(SystemExit, match="shares captions with a refinement LM"):
        main(["--captions", str(corpus), "--refine-lm", f"{corpus}:val", "--out", str(out)])
    with pytest.raises(SystemExit, match="no such file"):
        main(["--captions", str(corpus), "--extra-heldout-lm", f"{tmp_path}/nope.jsonl:train", "--out", str(out)])
    with pytest.raises(SystemExit, match="margin must be >= 0"):
        main(["--captions", str(corpus), "--margin", "-0.1", "--out", str(out)])
    with pytest.raises(SystemExit, match="--lm-parts must be >= 1"):
        main(["--captions", str(corpus), "--lm-parts", "0", "--out", str(out)])
    with pytest.raises(SystemExit, match="fewer images than parts"):
        main(["--captions", str(corpus), "--lm-parts", "100000", "--out", str(out)])
    assert not out.exists()


def test_blind_checks_per_type_and_record_format():
    change = Change("replace_noun", ("dog",), ("cat",), "noun:NN")
    negs = [HardNegative("HN-ATOM", "a cat .", "a dog .", change, "1", (EditSpan(2, 5, 2, 5),)),
            HardNegative("HN-ATOM", "a cat.", "a dog .", change, "1"),
            HardNegative("HN-NEG", "no dog .", "a dog .", change, "2")]
    out = blind_checks(negs, {"len": lambda t: -len(t), "const": lambda t: 0.0}, held_out=["len"])
    assert out["HN-ATOM"]["len"] == {"pairs": 2, "accuracy": 25.0, "decided": 50.0, "right_when_decided": 0.0,
                                     "held_out": True}
    assert out["HN-NEG"]["const"]["accuracy"] == 50.0 and not out["HN-NEG"]["const"]["held_out"]
    rec = negative_record(negs[0])
    assert rec["edit"]["spans"] == [[2, 5, 2, 5]] and rec["negative"] == "a cat ." and rec["image_id"] == "1"


def test_no_refine_keeps_the_plain_generators_negatives_and_still_reports_held_out_checks(corpus, tmp_path):
    out = tmp_path / "plain"
    assert main(["--captions", str(corpus), "--out", str(out), "--no-refine", "--types", "HN-ATOM"]) == 0
    report = json.loads((out / "report.json").read_text())
    atom = report["types"]["HN-ATOM"]
    lines = (out / "negatives.jsonl").read_text().splitlines()
    assert atom["counts"]["kept"] == atom["counts"]["candidates"] == len(lines) > 0
    assert "refinement" not in atom and report["scorers"]["refined_against"] == []
    assert "LM (refined against)" not in atom["blind_checks"] and atom["blind_checks"]["LM (held out)"]["held_out"]


def test_classifier_and_extra_lms_are_reported_held_out_or_refined(corpus, tmp_path):
    out = tmp_path / "ens"
    assert main(["--captions", str(corpus), "--out", str(out), "--types", "HN-ATOM", "--candidates-per-type", "10",
                 "--max-blind-accuracy", "1.0", "--heldout-splits", "val", "--classifier-folds", "2",
                 "--refine-lm", f"{corpus}:train", "--lm-orders", "2,3"]) == 0
    report = json.loads((out / "report.json").read_text())
    checks = report["types"]["HN-ATOM"]["blind_checks"]
    assert checks["word-pair logistic regression (grouped folds)"]["held_out"]
    assert not checks["LM order 2 (refined against)"]["held_out"] and "LM order 1 (refined against)" not in checks
    assert any(k.startswith("LM (refined against: ") and not v["held_out"] for k, v in checks.items())


def test_lm_parts_are_refined_against_and_the_margin_is_recorded(corpus, tmp_path):
    out = tmp_path / "parts"
    assert main(["--captions", str(corpus), "--out", str(out), "--types", "HN-ATOM", "HN-SWAP",
                 "--classifier-folds", "0", "--lm-parts", "3", "--margin", "0.1"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["lm_parts"] == 3 and report["settings"]["margin"] == 0.1
    assert report["settings"]["margin_types"] == ["HN-SWAP"]
    checks = report["types"]["HN-ATOM"]["blind_checks"]
    parts = [k for k in checks if k.startswith("LM part ")]
    assert parts == [f"LM part {k}/3 (refined against)" for k in (1, 2, 3)]
    assert not any(checks[k]["held_out"] for k in parts)
    assert sum(s.startswith("LM part ") for s in report["scorers"]["refined_against"]) == 3
    out1 = tmp_path / "noparts"
    assert main(["--captions", str(corpus), "--out", str(out1), "--types", "HN-ATOM", "--classifier-folds", "0",
                 "--lm-parts", "1"]) == 0
    assert not any(k.startswith("LM part ") for k in
                   json.loads((out1 / "report.json").read_text())["types"]["HN-ATOM"]["blind_checks"])
