"""The Composition Transformer (§3.2, Appendix C, Figure 6) and the alignment scorer theta (§3.3).

The CT takes a predicate's token sequence -- ``[CLS]``, the PT's outputs for the template's words,
and the modulated child concepts at the placeholder positions -- as its text stream, and the
image's regions as its visual stream. Layers interleave as in ViLBERT; with ``ct_layers = 2k + 1``:

    layer 1          SelfAtt on both streams
    layer 2          CrossAtt (co-attention: each stream attends to the other)
    layer 3          SelfAtt on text (and on regions if visual_selfatt="every")  \\  one pair per
    layer 4          CrossAtt                                                   /  two extra layers
    ...
    layer 2k + 1     SelfAtt on text only

so ``ct_layers = 1`` is a single text SelfAtt layer (the image reaches it only through the
primitives). The text stream's output at ``[CLS]`` is the grounded concept embedding ``v(x, c)``.
Nothing reads the visual stream after the last CrossAtt, so that block has no visual half: ViLBERT
keeps one for its image read-out, which the CT does not have (the half would hold parameters that
never get a gradient, 7.9M at the paper's sizes; Table 6's counts may include it, see docs/composer.md).
Appendix C describes the 3-layer CT only; ``CompositionConfig.visual_selfatt`` says how deeper
ones are read (default ``"first"``: visual SelfAtt in layer 1 only, which matches Table 6's
parameter increments best).

The image-only prefix (region embedding and the first visual SelfAtt) does not depend on the text,
so :meth:`CompositionTransformer.encode_visual` runs it once per image and the recursion reuses it
for every concept composed on that image; the first CrossAtt's keys and values over the regions are
projected once per image too (``item_image``), not once per concept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from composer.models.composer.attention import CoAttentionLayer, TransformerLayer, VisualEmbedding, init_bert_weights
from composer.models.composer.config import ComposerConfig

__all__ = ["AlignmentScorer", "CompositionTransformer", "PackedTokens", "pack_tokens"]

log = logging.getLogger(__name__)


@dataclass
class PackedTokens:
    """The real tokens of B padded rows, in one (N, D) tensor: what the token-wise layers run on."""

    tokens: torch.Tensor  # (N, D) in row-major order of ``mask``
    where: torch.Tensor   # (N,) long, their flat positions in (B * T)
    mask: torch.Tensor    # (B, T) bool, True = real token
    first: torch.Tensor   # (B,) long, index in ``tokens`` of each row's first token


def pack_tokens(padded: torch.Tensor, mask: torch.Tensor) -> PackedTokens:
    """(B, T, D) rows and their (B, T) bool mask -> :class:`PackedTokens`; every row's position 0 must be real.

    >>> p = pack_tokens(torch.arange(6.0).view(2, 3, 1), torch.tensor([[True, True, False], [True, False, False]]))
    >>> p.tokens.flatten().tolist(), p.where.tolist(), p.first.tolist()
    ([0.0, 1.0, 3.0], [0, 1, 3], [0, 2])
    """
    if mask.dim() != 2 or padded.shape[:2] != mask.shape:
        raise ValueError(f"padded {tuple(padded.shape)} and mask {tuple(mask.shape)} must be (B, T, D) and (B, T)")
    if mask.shape[1] == 0 or not bool(mask[:, 0].all()):
        raise ValueError("every row needs a real first token ([CLS]) to be read out")
    where = mask.flatten().nonzero()[:, 0]                                  # (N,)
    counts = mask.sum(1)                                                    # (B,)
    first = torch.cumsum(counts, 0) - counts                                # (B,)
    return PackedTokens(padded.flatten(0, 1).index_select(0, where), where, mask, first)


class CompositionTransformer(nn.Module):
    """Interleaved text SelfAtt, visual SelfAtt and co-attention layers; returns the ``[CLS]`` output.

    Text width D = ``cfg.text.hidden_size`` (the PT's), visual width Dv = ``cfg.composition.visual_hidden_size``.
    """

    def __init__(self, cfg: ComposerConfig):
        super().__init__()
        c, d, eps = cfg.composition, cfg.text.hidden_size, cfg.text.layer_norm_eps
        self.num_pairs = cfg.num_coattention_layers  # k
        num_visual = 0 if not self.num_pairs else (self.num_pairs if c.visual_selfatt == "every" else 1)
        self.text_layers = nn.ModuleList(
            TransformerLayer(d, c.num_heads, c.intermediate_size, dropout=c.dropout, layer_norm_eps=eps)
            for _ in range(self.num_pairs + 1))
        self.visual_layers = nn.ModuleList(
            TransformerLayer(c.visual_hidden_size, c.visual_heads, c.visual_intermediate_size, dropout=c.dropout,
                             layer_norm_eps=eps)
            for _ in range(num_visual))
        self.coattention = nn.ModuleList(
            CoAttentionLayer(d, c.visual_hidden_size, c.cross_hidden_size, c.cross_heads,
                             text_intermediate_size=c.intermediate_size,
                             visual_intermediate_size=c.visual_intermediate_size, dropout=c.dropout,
                             layer_norm_eps=eps, visual_output=j < self.num_pairs - 1)
            for j in range(self.num_pairs))
        self.visual_embedding = (
            VisualEmbedding(cfg.visual.region_dim, cfg.visual.geometry_dim, c.visual_hidden_size,
                            dropout=c.dropout, layer_norm_eps=eps)
            if self.num_pairs else None)  # a 1-layer CT never reads the image
        self.apply(partial(init_bert_weights, std=cfg.text.initializer_range))
        self.register_load_state_dict_pre_hook(_drop_last_visual_half)

    @property
    def uses_image(self) -> bool:
        return self.num_pairs > 0

    def encode_visual(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor, *,
                      packed: bool = False) -> torch.Tensor | None:
        """The text-independent prefix of the visual stream, once per image.

        Args:
            regions: (I, R, Dr) region features; geometry: (I, R, Dg) box geometry.
            region_mask: (I, R) bool, True = real region.
            packed: run the embedding and the visual SelfAtt on the real regions only (world images: ~70%
                of the slots) and leave zeros at the padded ones, which every later layer masks as keys.
                The real regions' states are the same.

        Returns:
            (I, R, Dv) states entering the first co-attention; None when ``ct_layers = 1``.
        """
        if not self.uses_image:
            return None
        if not packed:
            v = self.visual_embedding(regions, geometry)   # (I, R, Dv)
            return self.visual_layers[0](v, region_mask)   # (I, R, Dv)
        I, R = region_mask.shape
        where = region_mask.flatten().nonzero()[:, 0]                                  # (N,) real regions
        v = self.visual_embedding(regions.flatten(0, 1).index_select(0, where),
                                  geometry.flatten(0, 1).index_select(0, where))       # (N, Dv)
        v = self.visual_layers[0].forward_packed(v, where, region_mask)                # (N, Dv)
        return v.new_zeros(I * R, v.shape[-1]).index_copy(0, where, v).view(I, R, -1)  # (I, R, Dv)

    def forward(self, text: torch.Tensor | PackedTokens, text_mask: torch.Tensor | None = None,
                visual: torch.Tensor | None = None, visual_mask: torch.Tensor | None = None,
                item_image: torch.Tensor | None = None,
                visual_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Compose B concepts, each on its own image.

        Given :class:`PackedTokens` (``text_mask`` None), runs :meth:`forward_packed`: the same (B, D), faster.

        Args:
            text: (B, T, D) ``[CLS]``, predicate tokens and modulated children.
            text_mask: (B, T) bool, True = real token.
            visual: (B, R, Dv) each item's image from :meth:`encode_visual`, or with ``item_image`` the
                images themselves, (I, R, Dv).
            visual_mask: (B, R) bool, True = real region; (I, R) with ``item_image``.
            item_image: (B,) long, optional: the image of each item (rows of ``visual``). Give the images
                rather than a per-item copy when many items share few images: the work that depends on
                the image only is then done once per image.

        Returns:
            (B, D) the text stream's final ``[CLS]`` state: the grounded concept embedding.
        """
        if isinstance(text, PackedTokens):
            if text_mask is not None:
                raise ValueError("packed tokens carry their own mask: pass text_mask=None")
            return self.forward_packed(text, visual, visual_mask, item_image, visual_kv)
        if text_mask is None:
            raise ValueError("pass text_mask (B, T) with padded text")
        if self.uses_image and (visual is None or visual_mask is None):
            raise ValueError("this CT has CrossAtt layers: pass visual (from encode_visual) and visual_mask")
        x = self.text_layers[0](text, text_mask)                      # (B, T, D)
        v, v_mask, v_index = visual, visual_mask, item_image          # after visual SelfAtt 1; per image if indexed
        for j in range(self.num_pairs):
            if 0 < j < len(self.visual_layers):  # visual_selfatt="every" (v is per item from layer j - 1 on)
                v = self.visual_layers[j](v, v_mask)
            co = self.coattention[j](x, text_mask, v, v_mask, visual_index=v_index)
            x = self.text_layers[j + 1](co.text, text_mask)           # (B, T, D)
            if co.visual is not None:                                 # (B, R, Dv): per item from here on
                v, v_mask, v_index = co.visual, (v_mask if v_index is None else v_mask[v_index]), None
        return x[:, 0]                                                # (B, D)

    def visual_keys(self, visual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The first CrossAtt's keys and values over :meth:`encode_visual`'s (I, R, Dv) states: two
        (I, H, R, hs) tensors, None without CrossAtt. They depend on the image only, so the recursion
        projects them once per forward rather than once per level (:meth:`forward_packed`'s ``visual_kv``)."""
        if not self.uses_image or visual is None:
            return None
        return self.coattention[0].text.encoder_keys(visual)

    def forward_packed(self, text: PackedTokens, visual: torch.Tensor | None = None,
                       visual_mask: torch.Tensor | None = None, item_image: torch.Tensor | None = None,
                       visual_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """:meth:`forward` on the real tokens only, the last layer at ``[CLS]`` only; the same (B, D).

        Why: within one level of the recursion the concepts' templates differ in length, and every row is
        padded to the longest (world batches: ~40% padding at level 1); and only ``[CLS]`` of the last
        layer is read. Every projection, FFN and LayerNorm here works token by token, so skipping padded
        tokens and the last layer's other rows changes no real token's value; attention still sees the
        padded (B, T) layout with the same mask. :meth:`forward` stays as the reference (tested equal).

        Args:
            text: the (B, T) rows' real tokens (:func:`pack_tokens`); every row's first token is real.
            visual, visual_mask, item_image: as in :meth:`forward`.
            visual_kv: :meth:`visual_keys` of ``visual``, when the caller reuses them across calls.

        Returns:
            (B, D) the text stream's final ``[CLS]`` state.
        """
        if self.uses_image and (visual is None or visual_mask is None):
            raise ValueError("this CT has CrossAtt layers: pass visual (from encode_visual) and visual_mask")
        tokens, where, mask, first = text.tokens, text.where, text.mask, text.first
        if not self.num_pairs:
            return self.text_layers[0].forward_packed_first(tokens, where, mask, first)   # (B, D)
        x = self.text_layers[0].forward_packed(tokens, where, mask)                         # (N, D)
        v, v_mask, v_index = visual, visual_mask, item_image
        B, T = mask.shape
        for j in range(self.num_pairs):
            if 0 < j < len(self.visual_layers):  # visual_selfatt="every"
                v = self.visual_layers[j](v, v_mask)
            block = self.coattention[j]
            new_x = block.text.forward_packed_cross(x, where, mask, v, v_mask, v_index,
                                                    encoder_kv=visual_kv if j == 0 else None)  # (N, D)
            if block.visual is not None:  # region queries over the block's input text, padded (masked keys)
                padded = x.new_zeros(B * T, x.shape[-1]).index_copy(0, where, x).view(B, T, -1)  # (B, T, D)
                per_item = v if v_index is None else v[v_index]                            # (B, R, Dv)
                v_mask = v_mask if v_index is None else v_mask[v_index]                    # (B, R)
                v, v_index = block.visual(per_item, encoder_states=padded, encoder_mask=mask), None
            layer = self.text_layers[j + 1]
            if j == self.num_pairs - 1:
                return layer.forward_packed_first(new_x, where, mask, first)               # (B, D)
            x = layer.forward_packed(new_x, where, mask)                                   # (N, D)
        raise AssertionError("unreachable")


def _drop_last_visual_half(module: CompositionTransformer, state_dict: dict, prefix: str, *args) -> None:
    """Checkpoints saved before 2026-11-21 hold the last CrossAtt block's visual half, which never got a
    gradient and is no longer built: drop its weights so that those checkpoints still load."""
    if not module.num_pairs:
        return
    stale = [k for k in state_dict if k.startswith(f"{prefix}coattention.{module.num_pairs - 1}.visual.")]
    for k in stale:
        del state_dict[k]
    if stale:
        log.info("dropped %d weights of the last CrossAtt block's visual half (unused, no longer built)", len(stale))


class AlignmentScorer(nn.Module):
    """theta: ``s(x, c) = theta^T v(x, c)`` (§3.3). No bias: every loss compares scores, a bias cancels."""

    def __init__(self, hidden_size: int, init_std: float = 0.02):
        super().__init__()
        self.theta = nn.Linear(hidden_size, 1, bias=False)
        init_bert_weights(self.theta, std=init_std)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        """(..., D) concept embeddings -> (...) scores."""
        return self.theta(embeddings).squeeze(-1)
