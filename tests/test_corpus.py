"""Corpus readers: every format, split selection, and clear errors naming file and line."""

import gzip
import json

import pytest

from crg.corpus import CorpusFormatError, read_corpus, write_jsonl


def test_jsonl_and_gzip_and_split_selection(tmp_path):
    recs = [{"image_id": 7, "split": "train", "captions": ["a", "b"], "extra": 1},
            {"image_id": "x", "split": "test", "captions": ["c"]}]
    plain = tmp_path / "c.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in recs))
    packed = tmp_path / "c.jsonl.gz"
    with gzip.open(packed, "wt") as f:
        f.write(plain.read_text())
    for path in (plain, packed):
        c = read_corpus(path)
        assert c.format == "jsonl" and [im.image_id for im in c.images] == ["7", "x"]
        assert c.num_captions == 3 and c.splits == {"train": 1, "test": 1}
        assert [im.image_id for im in c.select("test").images] == ["x"]
    with pytest.raises(ValueError, match=r"no images in split\(s\) \['val'\]"):
        read_corpus(plain).select("val")
    out = tmp_path / "out.jsonl"
    write_jsonl(read_corpus(plain).images, out)
    assert [json.loads(line) for line in out.read_text().splitlines()] == recs  # the input schema survives


def test_karpathy_json(tmp_path):
    data = {"dataset": "coco", "images": [
        {"filename": "COCO_val2014_000000391895.jpg", "cocoid": 391895, "split": "test",
         "sentences": [{"raw": "A man rides a moped.", "tokens": ["a", "man"]}, {"tokens": ["a", "moped"]}]},
        {"filename": "1000092795.jpg", "split": "restval", "sentences": [{"raw": "Two guys."}]}]}
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps(data))
    c = read_corpus(path)
    assert c.format == "karpathy"
    assert [(im.image_id, im.split, im.captions) for im in c.images] == [
        ("391895", "test", ["A man rides a moped.", "a moped"]), ("1000092795", "restval", ["Two guys."])]


def test_tsv_with_header_and_split_column(tmp_path):
    path = tmp_path / "caps.tsv"
    path.write_text("image_id\tcaption\tsplit\nim1\tA dog.\ttrain\nim1\tA cat.\ttrain\nim2\tA bird.\ttest\n")
    c = read_corpus(path)
    assert [(im.image_id, im.split, im.captions) for im in c.images] == [
        ("im1", "train", ["A dog.", "A cat."]), ("im2", "test", ["A bird."])]


def test_scan_caps_with_one_id_per_image_or_per_caption(tmp_path):
    caps = tmp_path / "dev_caps.txt"
    caps.write_text("".join(f"caption {i}\n" for i in range(10)))
    (tmp_path / "dev_ids.txt").write_text("11\n22\n")
    c = read_corpus(caps)
    assert c.format == "scan" and [im.image_id for im in c.images] == ["11", "22"]
    assert c.images[0].split == "val" and c.images[1].captions[0] == "caption 5"
    (tmp_path / "dev_ids.txt").write_text("".join(f"{i // 5}\n" for i in range(10)))
    assert [im.image_id for im in read_corpus(caps).images] == ["0", "1"]
    (tmp_path / "dev_ids.txt").write_text("1\n2\n3\n")
    with pytest.raises(CorpusFormatError, match="10 captions do not match 3 ids"):
        read_corpus(caps)


@pytest.mark.parametrize("name,content,message", [
    ("a.jsonl", '{"image_id": 1, "captions": ["x"]}\nnot json\n', r"a.jsonl:2: not valid JSON"),
    ("b.jsonl", '{"image_id": 1, "captions": "x"}\n', r"b.jsonl:1: 'captions' must be a list"),
    ("c.jsonl", '{"id": 1}\n', r"c.jsonl:1: expected an object with 'image_id' and 'captions'"),
    ("d.jsonl", '{"image_id": 1, "captions": []}\n{"image_id": 1, "captions": []}\n', "appears twice"),
    ("e.tsv", "im1\tok\nim2 no tab here\n", r"e.tsv:2: expected 'image_id<TAB>caption"),
    ("f.json", '{"no": "images"}', "expected Karpathy's dataset json"),
])
def test_malformed_files_name_the_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CorpusFormatError, match=message):
        read_corpus(path)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="caption corpus not found"):
        read_corpus(tmp_path / "nope.jsonl")
    path = tmp_path / "x.jsonl"
    path.write_text("")
    with pytest.raises(ValueError, match="unknown corpus format"):
        read_corpus(path, format="xml")


def test_the_shared_corpora_read_with_their_documented_counts(shared_data):
    f30k = read_corpus(shared_data / "flickr30k" / "captions.jsonl")
    assert len(f30k) == 31014 and f30k.num_captions == 155070
    assert f30k.splits == {"train": 29000, "val": 1014, "test": 1000}
    coco = read_corpus(shared_data / "coco" / "captions.jsonl.gz")
    assert len(coco) == 9810 and coco.num_captions == 49059
    assert coco.splits["test"] == 5000
