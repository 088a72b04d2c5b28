"""The Berkeley Neural Parser (benepar; Kitaev & Klein, ACL 2018) as a :class:`ConstituencyParser`.

benepar 0.2.0 was written for transformers 4. On transformers 5 it breaks in ways that
:func:`patch_benepar_for_transformers5` and the loader here mend from the outside, so benepar is
installed from PyPI as it is and never vendored:

* ``benepar.retokenization.Retokenizer`` asks the tokenizer for
  ``build_inputs_with_special_tokens([-100])`` to find where the start/stop features (``[CLS]`` /
  ``[SEP]``, ``<s>`` / ``</s>``, T5's ``</s>``) sit. The tokenizers-backed classes of transformers 5
  no longer have that method; the shim gives it back, read off the tokenizer's own post-processor,
  so it agrees with what ``tokenizer(text)`` produces.
* It loads tokenizers with ``AutoTokenizer.from_pretrained(path, fast=True)``; ``fast`` is no
  option of transformers 5 (it would be stored in the tokenizer's ``init_kwargs``). The shim drops
  it and adds ``local_files_only=True``: nothing is ever fetched from the Hugging Face Hub.
* ``ChartParser.from_trained`` loads weights with a strict ``load_state_dict``. Models exported
  under transformers 4 hold entries newer transformers no longer has (the ``position_ids`` buffer
  of BERT and XLM-R, which 4.2 still saved; in older T5 exports an unused cross-attention
  ``relative_attention_bias``), so :class:`BeneparParser` loads the weights itself and skips exactly
  the entries transformers itself skips for that architecture, with ``torch.load(weights_only=True)``.
* Training checkpoints (one ``.pt`` file) name their encoder by its Hub id (``bert-large-uncased``)
  and benepar would download its config and tokenizer. Here they come from a local copy instead:
  ``pretrained_model_path=``, the ``CRG_BENEPAR_PRETRAINED_PATH`` environment variable, or a
  directory named like the Hub id beside the checkpoint.

Install: ``pip install benepar==0.2.0 torch-struct==0.5`` (it leaves torch and transformers as they
are). ``torch_struct`` is needed at inference: benepar decodes with its ``TreeCRF``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Sequence

from nltk import Tree
from nltk.tokenize import TreebankWordTokenizer

from crg.parser_base import ConstituencyParser, normalize_ptb_tree

__all__ = ["BeneparParser", "patch_benepar_for_transformers5", "PRETRAINED_PATH_ENV", "MODEL_FILES"]

logger = logging.getLogger(__name__)

#: environment variable naming a local copy of the Hugging Face model (config + tokenizer) that a
#: benepar *training checkpoint* was built on; released model directories carry their own.
PRETRAINED_PATH_ENV = "CRG_BENEPAR_PRETRAINED_PATH"

#: what a released benepar model directory (``benepar_en3``, ``benepar_en3_wsj``, ...) holds
MODEL_FILES = ("config.json", "benepar_model.bin")
_CONFIG_FILE, _WEIGHTS_FILE = MODEL_FILES
# One of these is the tokenizer itself; tokenizer_config.json alone is not enough.
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "spiece.model", "vocab.json", "sentencepiece.bpe.model")

# Bump when the shim or the loader changes in a way that could change parses (part of cache_key).
_SHIM_VERSION = "1"
# cache_key hashes this much of each end of the weights file instead of the whole (up to 1.3 GB).
_HASH_SAMPLE_BYTES = 1 << 20

_treebank_tokenizer = TreebankWordTokenizer()


class BeneparParser(ConstituencyParser):
    """benepar behind the common parser interface.

    ``model_dir`` is a model directory as ``benepar.download("benepar_en3")`` leaves it (under
    ``nltk_data/models/``, holding ``config.json``, ``benepar_model.bin`` and tokenizer files), the
    path to its ``benepar_model.bin``, or a benepar training checkpoint (``*.pt``).
    ``pretrained_model_path`` (or ``$CRG_BENEPAR_PRETRAINED_PATH``) is only needed for a
    checkpoint: a local copy of the Hugging Face config and tokenizer it was trained on.

    Sentences are parsed ``batch_size`` at a time on ``device`` (default: CUDA when available).
    """

    name = "benepar"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        batch_size: int = 32,
        device: str | None = None,
        pretrained_model_path: str | Path | None = None,
    ):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.batch_size = batch_size
        self._files = _locate_model(model_dir)
        benepar = _import_benepar()
        import torch

        self.device = _resolve_device(device, torch)
        self._benepar = benepar
        self._model, self._encoder_dir = _load_chart_parser(self._files, pretrained_model_path, benepar, torch)
        self._model.to(self.device)
        self._model.eval()
        if self._model.f_tag is None:
            logger.warning("benepar model %s predicts no part-of-speech tags; preterminals will be "
                           "labelled UNK", self._files.path)
        self._cache_key: str | None = None
        logger.info("loaded benepar model %s on %s", self._files.path, self.device)

    def __repr__(self) -> str:
        return (f"BeneparParser({str(self._files.path)!r}, batch_size={self.batch_size}, "
                f"device={str(self.device)!r})")

    @property
    def label_vocab(self) -> dict[str, int]:
        """The model's span labels; unary chains are joined with ``::`` (``S::VP``), ``""`` is no span."""
        return dict(self._model.label_vocab)

    @property
    def tag_vocab(self) -> dict[str, int]:
        """The part-of-speech tags the model predicts (empty when it has no tagger)."""
        return dict(self._model.tag_vocab) if self._model.f_tag is not None else {}

    def parse_tokens(self, sentences: Sequence[Sequence[str]]) -> list[Tree]:
        """Parse PTB-tokenized sentences; leaves are the tokens as given (``-LRB-``, ``n't``, ...).

        The network sees the tokens PTB-unescaped (``-LRB-`` -> ``(``, `````` -> ``"``), with the
        whitespace between them guessed the way ``benepar.Parser`` guesses it.
        """
        inputs = []
        for i, sentence in enumerate(sentences):
            leaves = _check_tokens(i, sentence)
            inputs.append((leaves, self._benepar.ptb_unescape.guess_space_after(leaves)))
        return self._parse(inputs)

    def parse_texts(self, texts: Sequence[str]) -> list[Tree]:
        """Parse raw English sentences, one per string, tokenized by nltk's Treebank tokenizer.

        Leaves are PTB tokens (``-LRB-``, ``n't``, `````` ... ``''``; hyphenated words stay whole).
        The whitespace of the text itself tells the network which tokens were written together.
        The tokenizer splits off only a string's final period, so pass one sentence per string.
        """
        if isinstance(texts, str):
            raise ValueError(f"parse_texts takes a list of sentences, got one string {texts[:40]!r}; "
                             "wrap it in a list")
        inputs = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"text {i} is a {type(text).__name__}, not a str: {text!r}")
            leaves, space_after = _tokenize_ptb(text)
            if not leaves:
                raise ValueError(f"text {i} has no tokens: {text!r}; drop empty texts before parsing")
            inputs.append((leaves, space_after))
        return self._parse(inputs)

    def cache_key(self) -> str:
        """``benepar:<model name>:<digest>``; the digest covers the config and tokenizer files used,
        the size and both ends of the weights file, the benepar version and this shim's version.

        Content rather than mtime, so a copied model directory keeps its cached parses.
        """
        if self._cache_key is None:
            from importlib.metadata import version

            digest = hashlib.sha256(f"benepar={version('benepar')};shim={_SHIM_VERSION}".encode())
            for path in (_config_and_tokenizer_files(self._encoder_dir) if self._encoder_dir else []):
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
            weights = self._files.weights
            size = weights.stat().st_size
            digest.update(str(size).encode())
            with open(weights, "rb") as f:
                digest.update(f.read(_HASH_SAMPLE_BYTES))
                f.seek(max(0, size - _HASH_SAMPLE_BYTES))
                digest.update(f.read())
            self._cache_key = f"{self.name}:{self._files.name}:{digest.hexdigest()[:16]}"
        return self._cache_key

    def _parse(self, inputs: list[tuple[list[str], list[bool]]]) -> list[Tree]:
        unescape = self._benepar.ptb_unescape.ptb_unescape
        label_from_index = self._model.decoder.label_from_index
        trees = []
        for start in range(0, len(inputs), self.batch_size):
            examples = [
                self._benepar.InputSentence(words=unescape(leaves), space_after=space_after,
                                            escaped_words=leaves)
                for leaves, space_after in inputs[start:start + self.batch_size]
            ]
            with warnings.catch_warnings():
                # torch_struct 0.5's TreeCRF predates torch.distributions' argument validation
                warnings.filterwarnings("ignore", message=r".*does not define `arg_constraints`",
                                        category=UserWarning)
                try:
                    outputs = self._model.parse(examples, return_compressed=True)
                except ValueError as e:  # benepar's "Sentence of length N exceeds the maximum ..."
                    stop = start + len(examples) - 1
                    raise ValueError(f"{e} (in sentences {start}..{stop} of this call); split or drop "
                                     "over-long sentences") from e
            for example, output in zip(examples, outputs):
                # example.pos() pairs each leaf with tag UNK; to_tree puts the predicted tags instead
                tree = output.to_tree(example.pos(), label_from_index, self._model.tag_from_index)
                tree = normalize_ptb_tree(tree)
                assert tree.leaves() == example.escaped_words, (tree.leaves(), example.escaped_words)
                trees.append(tree)
        return trees


def patch_benepar_for_transformers5() -> None:
    """Make benepar's tokenizer loading work on transformers 5 (idempotent; harmless on 4).

    Only ``benepar.retokenization`` sees the change: its module-level ``transformers`` is replaced
    by a stand-in whose ``AutoTokenizer`` loads local files only and returns tokenizers that have
    ``build_inputs_with_special_tokens`` again. transformers itself is not modified.
    :class:`BeneparParser` calls it for you; call it yourself before benepar's own API
    (``benepar.Parser``, the spaCy component). Those still load weights strictly, so models
    exported under transformers 4 with a BERT or XLM-R encoder (saved ``position_ids``) load only
    through :class:`BeneparParser`.
    """
    from benepar import retokenization

    if not isinstance(retokenization.transformers, _TransformersForBenepar):
        retokenization.transformers = _TransformersForBenepar(retokenization.transformers)


class _AutoTokenizerForBenepar:
    """``AutoTokenizer`` as benepar 0.2.0 expects it to behave (transformers 4 semantics)."""

    def __init__(self, auto_tokenizer):
        self._auto = auto_tokenizer

    def from_pretrained(self, path, *args, **kwargs):
        kwargs.pop("fast", None)  # benepar's spelling of use_fast; fast is the default anyway
        kwargs.setdefault("local_files_only", True)
        tokenizer = self._auto.from_pretrained(path, *args, **kwargs)
        if not hasattr(tokenizer, "build_inputs_with_special_tokens"):
            tokenizer.build_inputs_with_special_tokens = functools.partial(
                _build_inputs_with_special_tokens, tokenizer)
        return tokenizer


class _TransformersForBenepar:
    """Stands in for the ``transformers`` module inside ``benepar.retokenization`` only."""

    def __init__(self, transformers_module):
        self._module = transformers_module
        self.AutoTokenizer = _AutoTokenizerForBenepar(transformers_module.AutoTokenizer)

    def __getattr__(self, name):
        return getattr(self._module, name)


def _build_inputs_with_special_tokens(tokenizer, token_ids_0: list[int],
                                      token_ids_1: list[int] | None = None) -> list[int]:
    """transformers 4's ``build_inputs_with_special_tokens`` for a tokenizers-backed tokenizer.

    Encodes a probe (``"a"``, or ``"a"``/``"a"`` for a pair) with special tokens and keeps the
    post-processor's template: special tokens stay, each run of probe tokens becomes the given ids.
    So BERT gives ``[CLS] x [SEP]``, RoBERTa/XLM-R ``<s> x </s>``, T5 ``x </s>``, GPT-2 ``x``, exactly
    as ``tokenizer(text)`` lays them out (benepar indexes its start/stop features by this).
    """
    for text in ("a", "the", "0", "x"):  # the first probe any real vocabulary encodes as >= 1 token
        probe = tokenizer(text, text if token_ids_1 is not None else None, add_special_tokens=True)
        sequence_ids = probe.sequence_ids()
        if sequence_ids.count(0) and (token_ids_1 is None or sequence_ids.count(1)):
            break
    else:
        raise NotImplementedError(f"{type(tokenizer).__name__} encodes none of the probes 'a', 'the', '0', "
                                  "'x' as a token, so where it puts special tokens cannot be read off")
    out: list[int] = []
    previous = None
    for token_id, sequence in zip(probe["input_ids"], sequence_ids):
        if sequence is None:
            out.append(token_id)
        elif sequence != previous:
            out.extend(token_ids_0 if sequence == 0 else token_ids_1)
        previous = sequence
    return out


@dataclasses.dataclass(frozen=True)
class _ModelFiles:
    """Where a benepar model lives: a released directory or a single training checkpoint."""

    path: Path  # the directory, or the checkpoint file
    is_checkpoint: bool

    @property
    def name(self) -> str:
        return self.path.stem if self.is_checkpoint else self.path.name

    @property
    def weights(self) -> Path:
        return self.path if self.is_checkpoint else self.path / _WEIGHTS_FILE


def _config_and_tokenizer_files(directory: Path) -> list[Path]:
    names = (_CONFIG_FILE, "tokenizer_config.json", "special_tokens_map.json", "merges.txt") + _TOKENIZER_FILES
    return [directory / n for n in names if (directory / n).is_file()]


def _locate_model(model_dir: str | Path) -> _ModelFiles:
    path = Path(model_dir).expanduser()
    expected = (f"a benepar model directory holding {', '.join(MODEL_FILES)} and tokenizer files (one of "
                f"{', '.join(_TOKENIZER_FILES)}), e.g. benepar_en3 as benepar.download() leaves it "
                "under nltk_data/models/; the path to its benepar_model.bin; or a benepar training "
                "checkpoint (.pt)")
    if not path.exists():
        raise FileNotFoundError(f"benepar model {str(path)!r} does not exist; expected {expected}")
    if path.is_file():
        if path.name == _WEIGHTS_FILE:
            path = path.parent
        elif path.suffix == ".zip":
            raise ValueError(f"benepar model {str(path)!r} is a zip archive; unzip it and pass the directory "
                             f"it contains (e.g. {str(path.with_suffix(''))!r})")
        else:
            return _ModelFiles(path=path, is_checkpoint=True)
    missing = [n for n in MODEL_FILES if not (path / n).is_file()]
    if not any((path / n).is_file() for n in _TOKENIZER_FILES):
        missing.append(f"tokenizer (one of {', '.join(_TOKENIZER_FILES)})")
    if missing:
        present = sorted(p.name for p in path.iterdir())[:20]
        nested = sorted(str(p.parent) for p in path.glob(f"*/{_WEIGHTS_FILE}"))
        hint = f"; did you mean {' or '.join(repr(n) for n in nested)}?" if nested else ""
        raise FileNotFoundError(f"{str(path)!r} is not a benepar model directory: it lacks "
                                f"{', '.join(missing)} (it holds {present or 'nothing'}); expected "
                                f"{expected}{hint}")
    config_file = path / _CONFIG_FILE
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {str(config_file)!r} as JSON ({e}); copy the model directory "
                         "again") from e
    if not isinstance(config, dict) or not isinstance(config.get("benepar"), dict):
        raise ValueError(f"{str(config_file)!r} has no 'benepar' section: {str(path)!r} looks like a plain "
                         f"Hugging Face model, not a benepar model; expected {expected}")
    return _ModelFiles(path=path, is_checkpoint=False)


def _import_benepar():
    """benepar and what it needs, imported only when a BeneparParser is built (crg stays torch-free)."""
    try:
        import benepar
        import benepar.parse_chart  # imports torch_struct and transformers
        import benepar.ptb_unescape
    except ImportError as e:
        missing = getattr(e, "name", None) or str(e)
        raise ImportError(
            f"the benepar parser backend needs benepar 0.2.0 and torch-struct (missing: {missing}); "
            "install them with `pip install benepar==0.2.0 torch-struct==0.5`. crg patches benepar at "
            "load time so that it runs on transformers 5; no other change is needed") from e
    patch_benepar_for_transformers5()
    return benepar


def _resolve_device(device: str | None, torch):
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {device!r} is not a torch device; use 'cpu', 'cuda' or 'cuda:N'") from e
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for CUDA, but torch sees no GPU; "
                         "use device='cpu' or None")
    return resolved


def _torch_load(path: Path, torch):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
        raise ValueError(f"cannot load {str(path)!r} as a benepar model ({type(e).__name__}: "
                         f"{str(e)[:300]}); it is truncated, not a benepar file, or pickles objects other "
                         "than tensors and plain Python values, which are not loaded for safety") from e


def _find_pretrained_dir(hub_id: str, explicit: str | Path | None, checkpoint: Path) -> Path:
    """The local copy of the Hugging Face model a checkpoint names, searched where the docs say."""
    candidates: list[tuple[str, Path]] = []
    if explicit is not None:
        candidates.append(("pretrained_model_path", Path(explicit).expanduser()))
    elif os.environ.get(PRETRAINED_PATH_ENV):
        candidates.append((PRETRAINED_PATH_ENV, Path(os.environ[PRETRAINED_PATH_ENV]).expanduser()))
    else:
        for name in dict.fromkeys((hub_id, hub_id.replace("/", "--"), hub_id.rsplit("/", 1)[-1])):
            candidates.append(("beside the checkpoint", checkpoint.parent / name))
    for _, candidate in candidates:
        if (candidate / _CONFIG_FILE).is_file() and any((candidate / n).is_file()
                                                         for n in _TOKENIZER_FILES):
            return candidate
    looked = "; ".join(f"{str(c)!r} ({how})" for how, c in candidates)
    raise FileNotFoundError(
        f"benepar checkpoint {str(checkpoint)!r} was trained on the Hugging Face model {hub_id!r}, whose "
        f"config and tokenizer it does not contain, and nothing is downloaded. Looked in: {looked}; each "
        f"needs {_CONFIG_FILE} and one of {', '.join(_TOKENIZER_FILES)}. On a machine with internet save "
        f"them with AutoConfig.from_pretrained({hub_id!r}).save_pretrained(DIR) and "
        f"AutoTokenizer.from_pretrained({hub_id!r}).save_pretrained(DIR), then pass "
        f"pretrained_model_path=DIR, set {PRETRAINED_PATH_ENV}=DIR, or put DIR beside the checkpoint "
        f"as {hub_id.rsplit('/', 1)[-1]!r}")


def _load_chart_parser(files: _ModelFiles, pretrained_model_path, benepar, torch):
    """benepar's ``ChartParser.from_trained``, without Hub access and tolerant of transformers-4 exports.

    Returns the model and the directory its tokenizer and encoder config came from (None for a
    CharLSTM model, which has neither).
    """
    if files.is_checkpoint:
        data = _torch_load(files.path, torch)
        if not isinstance(data, dict) or not {"config", "state_dict"} <= data.keys():
            found = sorted(map(str, data))[:10] if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{str(files.path)!r} is not a benepar model: a training checkpoint is a dict "
                             f"with 'config' and 'state_dict', this has {found}")
        config, state_dict = dict(data["config"]), data["state_dict"]
        hparams = dict(config["hparams"])
        if hparams.get("use_pretrained"):
            config["pretrained_model_path"] = str(_find_pretrained_dir(
                hparams["pretrained_model"], pretrained_model_path, files.path))
    else:
        config = dict(json.loads((files.path / _CONFIG_FILE).read_text(encoding="utf-8"))["benepar"])
        state_dict = _torch_load(files.weights, torch)
        hparams = dict(config["hparams"])
        config["pretrained_model_path"] = str(files.path)
        if pretrained_model_path is not None:
            logger.info("ignoring pretrained_model_path=%s: %s carries its own config and tokenizer",
                        pretrained_model_path, files.path)
    hparams.setdefault("force_root_constituent", True)  # what from_trained assumes for older models
    config["hparams"] = benepar.nkutil.HParams(**hparams)
    try:
        model = benepar.parse_chart.ChartParser(**config)
    except (OSError, ValueError, KeyError, AttributeError, TypeError, NotImplementedError) as e:
        raise ValueError(f"cannot build the benepar model {str(files.path)!r} with the encoder config and "
                         f"tokenizer in {config.get('pretrained_model_path')!r} ({type(e).__name__}: "
                         f"{str(e)[:300]})") from e
    _load_state_dict(model, state_dict, files.weights)
    encoder_dir = config.get("pretrained_model_path")
    return model, Path(encoder_dir) if encoder_dir else None


def _load_state_dict(model, state_dict, source: Path) -> None:
    """Load weights, skipping what transformers itself skips when loading the encoder.

    Those are the encoder's non-persistent buffers (``position_ids``, which transformers 4.2 still
    saved) and its ``_keys_to_ignore_on_load_unexpected`` / ``_keys_to_ignore_on_load_missing``;
    any other mismatch is an error.
    """
    result = model.load_state_dict(state_dict, strict=False)
    encoder = model.pretrained_model
    prefix = "pretrained_model."
    ignore_unexpected, ignore_missing = [], []
    if encoder is not None:
        persistent = set(encoder.state_dict())
        buffers = {name for name, _ in encoder.named_buffers()} - persistent
        ignore_unexpected = [re.escape(prefix + b) + "$" for b in buffers]
        skip_unexpected = getattr(encoder, "_keys_to_ignore_on_load_unexpected", None) or []
        skip_missing = getattr(encoder, "_keys_to_ignore_on_load_missing", None) or []
        ignore_unexpected += [prefix + p for p in skip_unexpected]
        ignore_missing = [prefix + p for p in skip_missing]
        tied = getattr(encoder, "_tied_weights_keys", None) or []
        ignore_missing += [re.escape(prefix + t) + "$" for t in tied]  # filled through the weight it is tied to

    def unexplained(keys, patterns):
        return sorted(k for k in keys if not any(re.match(p, k) for p in patterns))

    unexpected = unexplained(result.unexpected_keys, ignore_unexpected)
    missing = unexplained(result.missing_keys, ignore_missing)
    skipped = sorted(set(result.unexpected_keys) - set(unexpected))
    if skipped:
        logger.debug("benepar model %s: skipped entries newer transformers does not use: %s", source, skipped)
    if unexpected or missing:
        raise ValueError(f"benepar weights {str(source)!r} do not match the model its config describes: "
                         f"missing {missing[:8]}{' ...' if len(missing) > 8 else ''}, unexpected "
                         f"{unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}; the files come from "
                         "different models, or from a transformers version that renamed these weights")


def _check_tokens(index: int, sentence: Sequence[str]) -> list[str]:
    if isinstance(sentence, str):
        raise ValueError(f"sentence {index} is a string ({sentence[:40]!r}); parse_tokens takes lists of "
                         "tokens, use parse_texts for raw text")
    tokens = list(sentence)
    if not tokens:
        raise ValueError(f"sentence {index} has no tokens; drop empty sentences before parsing")
    for token in tokens:
        if not isinstance(token, str) or not token or any(c.isspace() for c in token):
            raise ValueError(f"sentence {index} has token {token!r}; tokens must be non-empty strings "
                             f"without whitespace (PTB tokens): {tokens}")
    return tokens


def _tokenize_ptb(text: str) -> tuple[list[str], list[bool]]:
    """PTB tokens of one sentence (Treebank rules, brackets escaped) and whether whitespace follows each.

    >>> leaves, space_after = _tokenize_ptb('She said "don\\'t (ever)."')
    >>> leaves
    ['She', 'said', '``', 'do', "n't", '-LRB-', 'ever', '-RRB-', '.', "''"]
    >>> [leaf for leaf, space in zip(leaves, space_after) if space]
    ['She', 'said', "n't"]
    """
    leaves = _treebank_tokenizer.tokenize(text, convert_parentheses=True)
    spans = list(_treebank_tokenizer.span_tokenize(text))
    assert len(spans) == len(leaves), (text, leaves, spans)
    space_after = [end < next_start for (_, end), (next_start, _) in zip(spans, spans[1:])]
    return leaves, space_after + [False] * bool(leaves)
