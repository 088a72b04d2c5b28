"""Transformer building blocks shared by every COMPOSER part and the flat baseline.

* :class:`TransformerLayer` -- one post-LayerNorm BERT layer. Given ``encoder_states`` it becomes
  cross-attention (queries from ``hidden``, keys and values from the encoder states), as in HF's
  ``BertLayer``. Its sub-module names are HF's (``attention.self.query``, ``attention.output.dense``,
  ``intermediate.dense``, ``output.LayerNorm``, ...) so BERT checkpoints load without renaming.
* :class:`CoAttentionLayer` -- ViLBERT's co-attention block: two streams attend to each other at
  the same time (each one's queries against the other's *input* states), each followed by its FFN.
* :class:`VisualEmbedding` -- region features and box geometry linearly projected and summed, then
  LayerNorm (ViLBERT's ``BertImageEmbeddings``).

Masks everywhere are boolean with **True = attend** (a real token or region), False = padding.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["CoAttentionLayer", "CoAttentionOutput", "TransformerLayer", "VisualEmbedding", "init_bert_weights"]


def init_bert_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation: normal(0, 0.02) weights, zero biases, unit LayerNorms. Use with ``Module.apply``."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class _Projections(nn.Module):
    """Query, key and value projections (HF: ``attention.self``)."""

    def __init__(self, hidden_size: int, kv_size: int, attention_size: int):
        super().__init__()
        self.query = nn.Linear(hidden_size, attention_size)
        self.key = nn.Linear(kv_size, attention_size)
        self.value = nn.Linear(kv_size, attention_size)


class _Residual(nn.Module):
    """Dense, dropout, residual add, LayerNorm (HF: ``attention.output`` and ``output``)."""

    def __init__(self, in_size: int, hidden_size: int, dropout: float, eps: float):
        super().__init__()
        self.dense = nn.Linear(in_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)  # HF's spelling, so checkpoints load
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _Attention(nn.Module):
    """Multi-head attention with its output block (HF: ``attention``)."""

    def __init__(self, hidden_size: int, kv_size: int, attention_size: int, num_heads: int,
                 dropout: float, eps: float):
        super().__init__()
        if attention_size % num_heads:
            raise ValueError(f"attention size {attention_size} is not a multiple of {num_heads} heads")
        self.num_heads = num_heads
        self.head_size = attention_size // num_heads
        self.attention_dropout = dropout
        self.self = _Projections(hidden_size, kv_size, attention_size)  # HF's name, so checkpoints load
        self.output = _Residual(attention_size, hidden_size, dropout, eps)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_size).transpose(1, 2)  # (B, H, T, hs)

    def forward(self, hidden: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor | None,
                key_index: torch.Tensor | None = None, own_keys: torch.Tensor | None = None,
                own_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``key_index`` (B,): ``keys`` (I, K, De) and ``key_mask`` (I, K) are shared, row b attending to
        ``keys[key_index[b]]``; they are projected once per row of ``keys`` and then gathered.
        ``own_keys`` (B, S, De) with ``own_mask`` (B, S): each row's own keys, placed before those."""
        q = self._heads(self.self.query(hidden))                 # (B, H, T, hs)
        k = self._heads(self.self.key(keys))                     # (B, H, K, hs), or (I, H, K, hs)
        v = self._heads(self.self.value(keys))                   # (B, H, K, hs), or (I, H, K, hs)
        if key_index is not None:
            k, v = k[key_index], v[key_index]                    # (B, H, K, hs)
            key_mask = None if key_mask is None else key_mask[key_index]  # (B, K)
        if own_keys is not None:
            k = torch.cat([self._heads(self.self.key(own_keys)), k], dim=2)      # (B, H, S + K, hs)
            v = torch.cat([self._heads(self.self.value(own_keys)), v], dim=2)    # (B, H, S + K, hs)
            key_mask = torch.cat([own_mask, key_mask], dim=1)                    # (B, S + K)
        return self.output(self.attend(q, k, v, key_mask), hidden)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               key_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, H, T, hs) queries over (B, H, K, hs) keys and values; ``key_mask`` (B, K), True = attend.
        Returns the (B, T, H * hs) context; the one attention call of :meth:`forward` and the packed path."""
        B, _, T, _ = q.shape
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, K), True = attend
        with _short_sequence_kernel(q.device, T, k.shape[2]):
            ctx = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.attention_dropout if self.training else 0.0,
                scale=1.0 / math.sqrt(self.head_size))           # (B, H, T, hs)
        return ctx.transpose(1, 2).reshape(B, T, self.num_heads * self.head_size)  # (B, T, H * hs)

    def attend_explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        key_mask: torch.Tensor) -> torch.Tensor:
        """:meth:`attend` written out (scores, masked softmax, weighted sum): the packed layers' attention.

        Why: for the short sequences that :meth:`attend` gives PyTorch's math kernel on CPU, that kernel
        spends more on its own bookkeeping (a float copy of the mask, both operands scaled, a softmax guarding
        against all-masked rows; every row here has a real key) than on the products, and its softmax runs on
        fewer than 16 key slots, torch's slow case (:func:`softmax_key_length`). Elsewhere (GPUs, sequences
        over ``CPU_MATH_ATTENTION_MAX_LENGTH``) this is :meth:`attend`. Same arguments and (B, T, H * hs)
        result as :meth:`attend`, up to float rounding.
        """
        B, H, T, hs = q.shape
        K = k.shape[2]
        if q.device.type != "cpu" or max(T, K) > CPU_MATH_ATTENTION_MAX_LENGTH:
            return self.attend(q, k, v, key_mask)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(hs))     # (B, H, T, K)
        slots = softmax_key_length(q.device, K)
        if slots != K:  # masked slots up to the softmax's fast length (softmax_key_length), dropped after it
            scores, key_mask = F.pad(scores, (0, slots - K)), F.pad(key_mask, (0, slots - K))  # (B, H, T, slots)
        weights = scores.masked_fill(~key_mask[:, None, None, :], float("-inf")).softmax(-1)[..., :K]  # (B, H, T, K)
        if self.training and self.attention_dropout:
            weights = F.dropout(weights, self.attention_dropout)
        ctx = torch.matmul(weights, v)                                             # (B, H, T, hs)
        return ctx.transpose(1, 2).reshape(B, T, H * hs)                           # (B, T, H * hs)

    def fused_qkv(self, tokens: torch.Tensor, parts: str = "qkv") -> torch.Tensor:
        """The query / key / value projections named by ``parts`` ("qkv" or "kv") in one matrix product:
        (N, D) -> (N, len(parts) * A), concatenated in that order (one product and one backward instead of
        two or three, each on the same rows)."""
        layers = [getattr(self.self, {"q": "query", "k": "key", "v": "value"}[c]) for c in parts]
        weight = torch.cat([lin.weight for lin in layers])                         # (len * A, D)
        bias = torch.cat([lin.bias for lin in layers])                             # (len * A,)
        return F.linear(tokens, weight, bias)


CPU_SOFTMAX_MIN_KEYS = 16


def softmax_key_length(device: torch.device, keys: int) -> int:
    """How many key slots the packed layers' attention gives ``keys`` keys: at least 16 on CPU.

    Why: torch's CPU softmax over a last axis shorter than one AVX-512 vector (16 floats) runs a scalar
    loop; measured on the 2-core EPYC (torch 2.13, one thread, 9,680 rows): 1.76 ms forward for 15 keys,
    0.13 ms for 16, 2.6 against 0.23 ms forward + backward. A concept's template has ~10 tokens and a
    world image 15 region slots, so the recursion's every softmax was on the slow side. The scores are
    padded, not the keys (the scores are the smaller tensor); the extra slots are masked: weight exactly 0,
    the same attention up to the order of float sums.
    """
    if device.type == "cpu" and keys < CPU_SOFTMAX_MIN_KEYS:
        return CPU_SOFTMAX_MIN_KEYS
    return keys


CPU_MATH_ATTENTION_MAX_LENGTH = 128


def _short_sequence_kernel(device: torch.device, queries: int, keys: int):
    """On CPU, PyTorch's math attention for short sequences, its flash kernel otherwise.

    The CPU flash kernel works in blocks with a fixed cost each; for the short sequences of a concept
    (a predicate's few tokens, a few dozen regions) the plain batched matrix products of the math kernel
    are 2-2.5x faster forward + backward (measured on 2 cores: B=263, 4 heads, 9 x 15: 6.5 against 16.2
    ms; 512 x 512 tokens: 952 against 492 ms, so long sequences keep flash). GPUs keep PyTorch's choice.
    """
    if device.type == "cpu" and max(queries, keys) <= CPU_MATH_ATTENTION_MAX_LENGTH:
        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()


class _Intermediate(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # BERT's exact (erf) GELU


class TransformerLayer(nn.Module):
    """One BERT layer: (self- or cross-) attention, then a feed-forward block, each post-LayerNorm.

    Args:
        hidden_size: width D of the stream being updated (queries, residuals, FFN).
        num_heads: attention heads; ``attention_size`` must be a multiple of it.
        intermediate_size: FFN width.
        encoder_size: width of the key/value states for cross-attention; default ``hidden_size``.
        attention_size: width of the query/key/value projections; default ``hidden_size``
            (ViLBERT's co-attention projects to a wider space, 1024 in the paper).
    """

    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, *,
                 encoder_size: int | None = None, attention_size: int | None = None,
                 dropout: float = 0.1, layer_norm_eps: float = 1e-12):
        super().__init__()
        self.hidden_size = hidden_size
        self.attention = _Attention(hidden_size, encoder_size or hidden_size, attention_size or hidden_size,
                                    num_heads, dropout, layer_norm_eps)
        self.intermediate = _Intermediate(hidden_size, intermediate_size)
        self.output = _Residual(intermediate_size, hidden_size, dropout, layer_norm_eps)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None = None, *,
                encoder_states: torch.Tensor | None = None, encoder_mask: torch.Tensor | None = None,
                encoder_index: torch.Tensor | None = None, own_states: torch.Tensor | None = None,
                own_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Update ``hidden``.

        Args:
            hidden: (B, T, D) the stream's states; queries.
            mask: (B, T) bool, True = real token. Keys of self-attention; ignored for cross-attention
                (padded query rows are computed and left for the caller to ignore).
            encoder_states: (B, K, De) keys and values for cross-attention; None = self-attention.
            encoder_mask: (B, K) bool, True = attend to that key (cross-attention only).
            encoder_index: (B,) long, optional: ``encoder_states`` (I, K, De) and ``encoder_mask`` (I, K) are
                shared, row b reading entry ``encoder_index[b]`` (many queries on few images: the keys and
                values are projected once per image).
            own_states: (B, S, De) optional cross-attention keys and values of each row itself, attended
                together with (before) its encoder states; own_mask: (B, S) bool, True = attend.

        Returns:
            (B, T, D) updated states.
        """
        if encoder_states is None:
            attended = self.attention(hidden, hidden, mask)
        else:
            attended = self.attention(hidden, encoder_states, encoder_mask, encoder_index, own_states, own_mask)
        return self.output(self.intermediate(attended), attended)

    def forward_packed(self, tokens: torch.Tensor, where: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Self-attention on the real tokens only: what :meth:`forward` gives at ``mask``'s True positions.

        Every projection, the FFN and the LayerNorms work token by token, so they run on the N real
        tokens instead of all B * T slots; only the attention itself needs the padded (B, T) layout.
        Text batches are padded to their longest row (world captions: ~45% real tokens), which makes this
        1.5-2x cheaper than :meth:`forward` for BERT-width text layers (docs/composer.md, "Pretrained text
        on CPU"); tested against :meth:`forward`.

        Args:
            tokens: (N, D) the real tokens' states, in row-major order of ``mask``.
            where: (N,) long, their flat positions in (B * T): ``mask.flatten().nonzero()[:, 0]``.
            mask: (B, T) bool, True = real token.

        Returns:
            (N, D) updated states of the same tokens.
        """
        att = self.attention
        B, T = mask.shape
        qkv = att.fused_qkv(tokens)                                                                     # (N, 3A)
        padded = qkv.new_zeros(B * T, qkv.shape[-1]).index_copy(0, where, qkv).view(B, T, -1)       # (B, T, 3A)
        q, k, v = (att._heads(x) for x in padded.chunk(3, dim=-1))                                      # (B, H, T, hs)
        ctx = att.attend_explicit(q, k, v, mask).reshape(B * T, -1).index_select(0, where)              # (N, A)
        attended = att.output(ctx, tokens)                                                              # (N, D)
        return self.output(self.intermediate(attended), attended)

    def forward_packed_first(self, tokens: torch.Tensor, where: torch.Tensor, mask: torch.Tensor,
                             first: torch.Tensor) -> torch.Tensor:
        """Self-attention on the real tokens, output at each row's first token only: :meth:`forward`'s
        ``[:, 0]``.

        Why: a stack read out at ``[CLS]`` (the Composition Transformer, the flat model) needs only that
        row of its last layer. Keys and values still come from every real token; the query, the output
        block and the FFN run on B rows instead of N tokens (a world concept has ~6 real tokens).

        Args:
            tokens: (N, D), where: (N,), mask: (B, T) as in :meth:`forward_packed`.
            first: (B,) long, the index in ``tokens`` of each row's first token (``mask[:, 0]`` must be True).

        Returns:
            (B, D) the first token's updated state.
        """
        att = self.attention
        B, T = mask.shape
        kv = att.fused_qkv(tokens, "kv")                                                               # (N, 2A)
        padded = kv.new_zeros(B * T, kv.shape[-1]).index_copy(0, where, kv).view(B, T, -1)          # (B, T, 2A)
        k, v = (att._heads(x) for x in padded.chunk(2, dim=-1))                                         # (B, H, T, hs)
        cls = tokens.index_select(0, first)                                                             # (B, D)
        q = att._heads(att.self.query(cls)[:, None])                                                   # (B, H, 1, hs)
        attended = att.output(att.attend_explicit(q, k, v, mask)[:, 0], cls)                           # (B, D)
        return self.output(self.intermediate(attended), attended)

    def encoder_keys(self, encoder_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of (B, K, De) encoder states: two (B, H, K, hs) tensors."""
        att = self.attention
        return att._heads(att.self.key(encoder_states)), att._heads(att.self.value(encoder_states))

    def forward_packed_cross(self, tokens: torch.Tensor, where: torch.Tensor, mask: torch.Tensor,
                             encoder_states: torch.Tensor | None, encoder_mask: torch.Tensor,
                             encoder_index: torch.Tensor | None = None,
                             encoder_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Cross-attention of the real tokens only: what :meth:`forward` with ``encoder_states`` gives at
        ``mask``'s True positions (its padded query rows are computed there and never read).

        Args:
            tokens: (N, D) the real tokens' states, in row-major order of ``mask``; where: (N,) their
                flat positions in (B * T); mask: (B, T) bool, True = real token.
            encoder_states, encoder_mask, encoder_index: as in :meth:`forward`.
            encoder_kv: :meth:`encoder_keys` of ``encoder_states``, computed once by a caller that attends to
                the same states several times (then ``encoder_states`` is not read).

        Returns:
            (N, D) updated states of the same tokens.
        """
        att = self.attention
        B, T = mask.shape
        q = att.self.query(tokens)                                                                      # (N, A)
        q = att._heads(q.new_zeros(B * T, q.shape[-1]).index_copy(0, where, q).view(B, T, -1))          # (B, H, T, hs)
        k, v = encoder_kv if encoder_kv is not None else self.encoder_keys(encoder_states)  # (B | I, H, K, hs)
        key_mask = encoder_mask
        if encoder_index is not None:
            k, v, key_mask = k[encoder_index], v[encoder_index], encoder_mask[encoder_index]  # (B, H, K, hs), (B, K)
        ctx = att.attend_explicit(q, k, v, key_mask).reshape(B * T, -1).index_select(0, where)          # (N, A)
        attended = att.output(ctx, tokens)                                                              # (N, D)
        return self.output(self.intermediate(attended), attended)


@dataclass
class CoAttentionOutput:
    """The two streams after a co-attention block (``visual`` None when the block has no visual half)."""

    text: torch.Tensor           # (B, T, Dt)
    visual: torch.Tensor | None  # (B, R, Dv)


class CoAttentionLayer(nn.Module):
    """ViLBERT's co-attention block: text queries attend to regions and region queries to text, at once.

    Both attentions read the streams as they enter the block, and each stream then passes its own
    FFN. The attention works at ``cross_size`` width with ``cross_heads`` heads (1024 and 8 in the
    paper) and projects back to each stream's width.

    ``visual_output=False`` builds the text half only, for a last block whose visual output nothing
    reads (COMPOSER's CT ends in a text-only SelfAtt layer and reads out ``[CLS]``): that half would
    cost compute and hold parameters that never receive a gradient (which DDP rejects).
    """

    def __init__(self, text_size: int, visual_size: int, cross_size: int, cross_heads: int, *,
                 text_intermediate_size: int, visual_intermediate_size: int,
                 dropout: float = 0.1, layer_norm_eps: float = 1e-12, visual_output: bool = True):
        super().__init__()
        self.text = TransformerLayer(text_size, cross_heads, text_intermediate_size, encoder_size=visual_size,
                                     attention_size=cross_size, dropout=dropout, layer_norm_eps=layer_norm_eps)
        self.visual = (TransformerLayer(visual_size, cross_heads, visual_intermediate_size, encoder_size=text_size,
                                        attention_size=cross_size, dropout=dropout, layer_norm_eps=layer_norm_eps)
                       if visual_output else None)

    def forward(self, text: torch.Tensor, text_mask: torch.Tensor, visual: torch.Tensor,
                visual_mask: torch.Tensor, visual_index: torch.Tensor | None = None) -> CoAttentionOutput:
        """Exchange information between the streams.

        Args:
            text: (B, T, Dt); text_mask: (B, T) bool, True = real token.
            visual: (B, R, Dv); visual_mask: (B, R) bool, True = real region.
            visual_index: (B,) long, optional: ``visual`` (I, R, Dv) and ``visual_mask`` (I, R) are per
                image and item b reads image ``visual_index[b]`` (the text half projects each image once).

        Returns:
            the text stream (B, T, Dt) and, with a visual half, the visual stream (B, R, Dv).
        """
        new_text = self.text(text, encoder_states=visual, encoder_mask=visual_mask, encoder_index=visual_index)
        if self.visual is None:
            return CoAttentionOutput(new_text, None)
        if visual_index is not None:
            visual = visual[visual_index]                                          # (B, R, Dv)
        new_visual = self.visual(visual, encoder_states=text, encoder_mask=text_mask)
        return CoAttentionOutput(new_text, new_visual)


class VisualEmbedding(nn.Module):
    """Regions to the model's width: ``LayerNorm(W_f f + W_g g)``, then dropout (ViLBERT's image embedding).

    A linear map of the concatenation ``[f; g]`` is the same family; two maps keep ViLBERT's names.
    """

    def __init__(self, region_dim: int, geometry_dim: int, hidden_size: int, *, dropout: float = 0.1,
                 layer_norm_eps: float = 1e-12):
        super().__init__()
        self.region_dim = region_dim
        self.geometry_dim = geometry_dim
        self.image_embeddings = nn.Linear(region_dim, hidden_size)
        self.image_location_embeddings = nn.Linear(geometry_dim, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, regions: torch.Tensor, geometry: torch.Tensor) -> torch.Tensor:
        """(I, R, Dr) features and (I, R, Dg) geometry -> (I, R, D). Padding regions are embedded too."""
        if regions.shape[-1] != self.region_dim or geometry.shape[-1] != self.geometry_dim:
            raise ValueError(f"regions (..., {regions.shape[-1]}) and geometry (..., {geometry.shape[-1]}) do not "
                             f"match the config's region_dim={self.region_dim}, geometry_dim={self.geometry_dim}")
        x = self.image_embeddings(regions) + self.image_location_embeddings(geometry)  # (I, R, D)
        return self.dropout(self.LayerNorm(x))
