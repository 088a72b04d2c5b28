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
from functools import partial

import torch
from torch import nn

from composer.models.composer.attention import CoAttentionLayer, TransformerLayer, VisualEmbedding, init_bert_weights
from composer.models.composer.config import ComposerConfig

__all__ = ["AlignmentScorer", "CompositionTransformer"]

log = logging.getLogger(__name__)


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

    def encode_visual(self, regions: torch.Tensor, geometry: torch.Tensor,
                      region_mask: torch.Tensor) -> torch.Tensor | None:
        """The text-independent prefix of the visual stream, once per image.

        Args:
            regions: (I, R, Dr) region features; geometry: (I, R, Dg) box geometry.
            region_mask: (I, R) bool, True = real region.

        Returns:
            (I, R, Dv) states entering the first co-attention; None when ``ct_layers = 1``.
        """
        if not self.uses_image:
            return None
        v = self.visual_embedding(regions, geometry)   # (I, R, Dv)
        return self.visual_layers[0](v, region_mask)   # (I, R, Dv)

    def forward(self, text: torch.Tensor, text_mask: torch.Tensor, visual: torch.Tensor | None = None,
                visual_mask: torch.Tensor | None = None, item_image: torch.Tensor | None = None) -> torch.Tensor:
        """Compose B concepts, each on its own image.

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
