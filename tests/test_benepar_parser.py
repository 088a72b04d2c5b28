"""BeneparParser on tiny, randomly initialised benepar models built offline.

No real benepar model can be downloaded here, so each fixture builds one the way benepar's own
export script does (``tokenizer.save_pretrained``, ``config.benepar = parser.config``,
``torch.save(state_dict, "benepar_model.bin")``), with the tokenizer files as transformers 4 wrote
them: a BERT encoder like ``benepar_en3_wsj``'s (hidden 32, 2 layers, 2 heads, intermediate 37,
with the ``position_ids`` buffer transformers 4.2 saved) and a T5 encoder with a ``spiece.model``
like ``benepar_en3``'s. Sizes all differ so a swapped axis cannot pass.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

benepar = pytest.importorskip(
    "benepar", reason="the benepar backend needs `pip install benepar==0.2.0 torch-struct==0.5`")
pytest.importorskip("torch_struct", reason="benepar decodes with torch-struct: pip install torch-struct==0.5")

import torch  # noqa: E402
import transformers  # noqa: E402
from benepar import nkutil, parse_chart  # noqa: E402
from nltk import Tree  # noqa: E402

from crg.benepar_parser import (  # noqa: E402
    PRETRAINED_PATH_ENV,
    BeneparParser,
    _build_inputs_with_special_tokens,
    patch_benepar_for_transformers5,
)

REPO = Path(__file__).resolve().parents[1]

WORDS = ["the", "a", "dog", "cat", "does", "do", "n", "'", "t", "bark", "(", ")", ".", ",", "-", "well",
         "known", "sat", "on", "mat", '"', "big", "he", "said", "no", "##s", "##ed", "##ly", "loud"]
BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS  # 34 entries
LABELS = ["", "S", "NP", "VP", "PP", "S::VP", "ADJP", "PRN", "SBAR"]  # "" = no constituent
TAGS = ["UNK", "DT", "NN", "NNS", "VBZ", "VBD", "RB", "JJ", "IN", ".", ",", "-LRB-", "-RRB-", "``", "''"]
BERT_HUB_ID = "tiny-bert-uncased"  # what hparams.pretrained_model names; never looked up on the Hub

SENTENCES = [
    ["The", "dog", "does", "n't", "bark", "-LRB-", "well", "-RRB-", "."],
    ["A", "well-known", "cat", "sat", "."],
    ["Dogs"],
    ["``", "Big", "''", "dogs", ",", "he", "said", ",", "barked", "loudly", "on", "the", "mat", "."],
    ["No", "."],
]


def _hparams(hub_id: str, *, use_encoder: bool, d_model: int) -> dict:
    """benepar's training hyperparameters (``main.py make_hparams``), shrunk."""
    return dict(
        use_chars_lstm=False, d_char_emb=8, char_lstm_input_dropout=0.2,
        use_pretrained=True, pretrained_model=hub_id,
        use_encoder=use_encoder, d_model=d_model, num_layers=1, num_heads=2, d_kv=6, d_ff=18,
        encoder_max_len=40,
        morpho_emb_dropout=0.2, attention_dropout=0.2, relu_dropout=0.1, residual_dropout=0.2,
        force_root_constituent=True, predict_tags=True, d_label_hidden=14, d_tag_hidden=12, tag_loss_scale=5.0,
    )


def _new_chart_parser(encoder_dir: Path, hparams: dict, seed: int):
    patch_benepar_for_transformers5()  # benepar's Retokenizer needs it on transformers 5
    torch.manual_seed(seed)
    return parse_chart.ChartParser(
        tag_vocab={t: i for i, t in enumerate(TAGS)},
        label_vocab={label: i for i, label in enumerate(LABELS)},
        char_vocab=None,
        hparams=nkutil.HParams(**hparams),
        pretrained_model_path=str(encoder_dir),
    )


def _export(chart_parser, encoder_dir: Path, out: Path, extra_state: dict | None = None) -> Path:
    """benepar's export: the encoder's tokenizer files, its config with a ``benepar`` section, the weights."""
    out.mkdir(parents=True)
    for f in encoder_dir.iterdir():
        if f.name != "config.json":
            shutil.copy(f, out / f.name)
    config = chart_parser.pretrained_model.config
    config.benepar = chart_parser.config
    config.save_pretrained(out)
    torch.save({**chart_parser.state_dict(), **(extra_state or {})}, out / "benepar_model.bin")
    return out


def _write_bert_encoder(d: Path) -> Path:
    """BERT tokenizer files as transformers 4 saved them (vocab.txt + configs) and a tiny BertConfig."""
    d.mkdir(parents=True)
    (d / "vocab.txt").write_text("\n".join(BERT_VOCAB) + "\n", encoding="utf-8")
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "tokenizer_class": "BertTokenizer", "model_max_length": 64}))
    (d / "special_tokens_map.json").write_text(json.dumps({
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
        "mask_token": "[MASK]"}))
    transformers.BertConfig(vocab_size=len(BERT_VOCAB), hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=37,
                            max_position_embeddings=64).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def bert_model(tmp_path_factory):
    """A released-format model dir, a training checkpoint of the same weights, and the encoder dir."""
    root = tmp_path_factory.mktemp("benepar")
    encoder_dir = _write_bert_encoder(root / "encoders" / BERT_HUB_ID)
    chart_parser = _new_chart_parser(encoder_dir, _hparams(BERT_HUB_ID, use_encoder=True, d_model=20), seed=0)
    # transformers 4.2 saved BERT's position_ids buffer; newer versions drop it, benepar loads strictly
    legacy = {"pretrained_model.embeddings.position_ids": torch.arange(64)[None]}
    model_dir = _export(chart_parser, encoder_dir, root / "models" / "benepar_tiny", extra_state=legacy)
    checkpoint = root / "checkpoints" / "tiny_dev=12.34.pt"
    checkpoint.parent.mkdir()
    torch.save({"config": chart_parser.config, "state_dict": chart_parser.state_dict()}, checkpoint)
    return {"root": root, "encoder_dir": encoder_dir, "model_dir": model_dir, "checkpoint": checkpoint}


@pytest.fixture(scope="module")
def parser(bert_model):
    return BeneparParser(bert_model["model_dir"], batch_size=2, device="cpu")


def _label_parts() -> set[str]:
    return {part for label in LABELS for part in label.split("::") if part}


def _check_ptb_tree(tree: Tree, tokens: list[str]) -> None:
    assert isinstance(tree, Tree)
    assert tree.label() == "TOP" and len(tree) == 1 and isinstance(tree[0], Tree)
    assert tree.leaves() == tokens
    for sub in tree[0].subtrees():
        if isinstance(sub[0], str):  # preterminal: one word under a POS tag
            assert len(sub) == 1 and sub.label() in TAGS, sub
        else:
            assert all(isinstance(child, Tree) for child in sub), sub
            assert sub.label() in _label_parts(), sub.label()


def test_parse_tokens_gives_ptb_trees_over_the_input_tokens(parser):
    trees = parser.parse_tokens(SENTENCES)
    assert len(trees) == len(SENTENCES)
    for tree, tokens in zip(trees, SENTENCES):
        _check_ptb_tree(tree, tokens)
    assert "-LRB-" in trees[0].leaves() and "n't" in trees[0].leaves() and "well-known" in trees[1].leaves()
    assert parser.name == "benepar"
    assert parser.label_vocab == {label: i for i, label in enumerate(LABELS)}
    assert set(parser.tag_vocab) == set(TAGS)


def test_batches_match_sentences_parsed_one_at_a_time(parser):
    batched = parser.parse_tokens(SENTENCES)  # batch_size=2: padded batches of different lengths
    alone = [parser.parse_tokens([tokens])[0] for tokens in SENTENCES]
    assert batched == alone


def test_parse_texts_tokenizes_ptb_style(parser):
    texts = ["The dog doesn't bark (well).", 'He said "no", loudly.', "A well-known cat sat on the mat."]
    trees = parser.parse_texts(texts)
    assert [t.leaves() for t in trees] == [
        ["The", "dog", "does", "n't", "bark", "-LRB-", "well", "-RRB-", "."],
        ["He", "said", "``", "no", "''", ",", "loudly", "."],
        ["A", "well-known", "cat", "sat", "on", "the", "mat", "."],
    ]
    for tree in trees:
        _check_ptb_tree(tree, tree.leaves())


def test_model_file_path_and_cache_key(bert_model, parser, tmp_path):
    same = BeneparParser(bert_model["model_dir"] / "benepar_model.bin", device="cpu")
    key = parser.cache_key()
    assert key.startswith("benepar:benepar_tiny:") and same.cache_key() == key
    assert same.parse_tokens(SENTENCES[:2]) == parser.parse_tokens(SENTENCES[:2])

    changed = shutil.copytree(bert_model["model_dir"], tmp_path / "benepar_tiny")
    state = torch.load(changed / "benepar_model.bin", weights_only=True)
    state["f_label.3.bias"] = state["f_label.3.bias"] + 1.0
    torch.save(state, changed / "benepar_model.bin")
    assert BeneparParser(changed, device="cpu").cache_key() != key


def test_weights_that_do_not_fit_the_config_are_refused(bert_model, tmp_path):
    broken = shutil.copytree(bert_model["model_dir"], tmp_path / "broken")
    state = torch.load(broken / "benepar_model.bin", weights_only=True)
    state["f_label.9.weight"] = torch.zeros(3)
    del state["f_tag.0.bias"]
    torch.save(state, broken / "benepar_model.bin")
    with pytest.raises(ValueError, match=r"missing \['f_tag.0.bias'\].*unexpected \['f_label.9.weight'\]"):
        BeneparParser(broken, device="cpu")


def test_checkpoint_finds_its_encoder_locally_or_says_where(bert_model, parser, monkeypatch, tmp_path):
    checkpoint = bert_model["checkpoint"]
    monkeypatch.delenv(PRETRAINED_PATH_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=rf"'{BERT_HUB_ID}'.*{PRETRAINED_PATH_ENV}") as err:
        BeneparParser(checkpoint, device="cpu")
    assert str(checkpoint.parent / BERT_HUB_ID) in str(err.value)

    expected = parser.parse_tokens(SENTENCES)
    explicit = BeneparParser(checkpoint, device="cpu", pretrained_model_path=bert_model["encoder_dir"])
    assert explicit.parse_tokens(SENTENCES) == expected
    assert explicit.cache_key().startswith("benepar:tiny_dev=12.34:")

    monkeypatch.setenv(PRETRAINED_PATH_ENV, str(bert_model["encoder_dir"]))
    assert BeneparParser(checkpoint, device="cpu").parse_tokens(SENTENCES[:1]) == expected[:1]
    monkeypatch.delenv(PRETRAINED_PATH_ENV)

    beside = tmp_path / "run"
    beside.mkdir()
    shutil.copy(checkpoint, beside / checkpoint.name)
    shutil.copytree(bert_model["encoder_dir"], beside / BERT_HUB_ID)
    assert BeneparParser(beside / checkpoint.name, device="cpu").parse_tokens(SENTENCES[:1]) == expected[:1]

    with pytest.raises(FileNotFoundError, match="pretrained_model_path"):
        BeneparParser(checkpoint, device="cpu", pretrained_model_path=tmp_path / "nowhere")


def test_missing_or_wrong_model_paths_say_what_was_expected(bert_model, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist.*config\.json, benepar_model\.bin"):
        BeneparParser(tmp_path / "benepar_en3")

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"lacks config\.json, benepar_model\.bin, tokenizer \(one of"):
        BeneparParser(empty)

    # the parent of a model directory: the error names the directory meant
    with pytest.raises(FileNotFoundError, match=r"did you mean .*benepar_tiny"):
        BeneparParser(bert_model["model_dir"].parent)

    # a plain Hugging Face model directory is not a benepar model
    plain = shutil.copytree(bert_model["encoder_dir"], tmp_path / "plain")
    (plain / "benepar_model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="no 'benepar' section"):
        BeneparParser(plain)

    archive = tmp_path / "benepar_en3.zip"
    archive.write_bytes(b"PK")
    with pytest.raises(ValueError, match="unzip"):
        BeneparParser(archive)

    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot load"):
        BeneparParser(junk)


def test_bad_arguments_and_inputs_are_refused(bert_model, parser):
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        BeneparParser(bert_model["model_dir"], batch_size=0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no GPU"):
            BeneparParser(bert_model["model_dir"], device="cuda")
    with pytest.raises(ValueError, match="sentence 1 has no tokens"):
        parser.parse_tokens([["Dogs"], []])
    with pytest.raises(ValueError, match="use parse_texts"):
        parser.parse_tokens(["The dog barks ."])
    with pytest.raises(ValueError, match="token 'big dog'"):
        parser.parse_tokens([["A", "big dog"]])
    with pytest.raises(ValueError, match="wrap it in a list"):
        parser.parse_texts("The dog barks.")
    with pytest.raises(ValueError, match="text 0 has no tokens"):
        parser.parse_texts(["  "])
    with pytest.raises(ValueError, match=r"maximum supported length .*sentences 2\.\.3 of this call"):
        parser.parse_tokens([["Dogs"], ["Dogs"], ["Dogs"], ["dog"] * 50])  # encoder_max_len is 40


def test_missing_benepar_names_the_install_command(bert_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "benepar", None)
    with pytest.raises(ImportError, match=r"pip install benepar==0\.2\.0 torch-struct==0\.5"):
        BeneparParser(bert_model["model_dir"])


def test_importing_the_module_does_not_import_torch():
    code = ("import sys, crg.benepar_parser; "
            "sys.exit(any(m in sys.modules for m in ('torch', 'transformers', 'benepar')))")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_special_tokens_sit_where_the_tokenizer_puts_them(bert_model, tmp_path):
    """The shim's build_inputs_with_special_tokens gives what transformers 4 gave, for BERT and RoBERTa."""
    bert = transformers.AutoTokenizer.from_pretrained(bert_model["encoder_dir"])
    cls, sep = bert.cls_token_id, bert.sep_token_id
    assert _build_inputs_with_special_tokens(bert, [-100]) == [cls, -100, sep]
    assert _build_inputs_with_special_tokens(bert, [-1, -2], [-3]) == [cls, -1, -2, sep, -3, sep]

    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([" ".join(WORDS)] * 3, vocab_size=300, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(tmp_path))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
    roberta = transformers.AutoTokenizer.from_pretrained(tmp_path)
    bos, eos = roberta.bos_token_id, roberta.eos_token_id
    assert _build_inputs_with_special_tokens(roberta, [-100]) == [bos, -100, eos]
    assert _build_inputs_with_special_tokens(roberta, [-1], [-2]) == [bos, -1, eos, eos, -2, eos]

    # benepar's own use: where the start/stop features sit for BERT (first and last position)
    retokenizer = benepar.retokenization.Retokenizer(str(bert_model["encoder_dir"]), retain_start_stop=True)
    assert (retokenizer.start_token_idx, retokenizer.stop_token_idx) == (0, -1)


def test_t5_model_like_benepar_en3(tmp_path):
    """T5 encoder (decoder features, shifted inputs) with only a sentencepiece model, as benepar_en3 ships."""
    spm = pytest.importorskip("sentencepiece", reason="T5 tokenizers need sentencepiece (a benepar dependency)")
    encoder_dir = tmp_path / "t5-tiny"
    encoder_dir.mkdir()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(s for sent in SENTENCES for s in sent) + "\n" + " ".join(WORDS) + "\n")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(encoder_dir / "spiece"),
                                   vocab_size=45, model_type="unigram", pad_id=0, eos_id=1, unk_id=2,
                                   bos_id=-1, hard_vocab_limit=False, minloglevel=2)
    (encoder_dir / "spiece.vocab").unlink()
    (encoder_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T5Tokenizer", "model_max_length": 64, "extra_ids": 0}))
    (encoder_dir / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}))
    vocab_size = spm.SentencePieceProcessor(model_file=str(encoder_dir / "spiece.model")).get_piece_size()
    transformers.T5Config(vocab_size=vocab_size, d_model=16, d_kv=4, d_ff=20, num_layers=1, num_heads=2,
                          decoder_start_token_id=0).save_pretrained(encoder_dir)
    chart_parser = _new_chart_parser(encoder_dir, _hparams("t5-tiny", use_encoder=False, d_model=22), seed=1)
    assert chart_parser.retokenizer.is_t5
    model_dir = _export(chart_parser, encoder_dir, tmp_path / "benepar_t5_tiny")

    t5 = BeneparParser(model_dir, device="cpu")
    tokenizer = t5._model.retokenizer.tokenizer
    assert _build_inputs_with_special_tokens(tokenizer, [-100]) == [-100, tokenizer.eos_token_id]
    trees = t5.parse_tokens(SENTENCES)
    for tree, tokens in zip(trees, SENTENCES):
        _check_ptb_tree(tree, tokens)
