"""Primitive encoding (§3.1, Appendix C): a primitive word grounded in the image by one CrossAtt layer.

Queries are the word's sub-word embeddings; keys and values are the union of those sub-word
embeddings and the image's regions, linearly projected to the same width. The contextualised
sub-words are averaged into one vector per (primitive, image) pair.

Table 3's variant without CrossAtt (``cross_attention=False``) is the mean of the sub-word
embeddings: no image, no parameters of its own.

The sub-word embeddings are BERT's token embeddings (word + position + LayerNorm) computed by the
Predicate Transformer's embedding layer, which the two modules share.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from composer.models.composer.attention import TransformerLayer, VisualEmbedding, init_bert_weights
from composer.models.composer.config import ComposerConfig

__all__ = ["PrimitiveEncoder", "masked_mean"]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over dim 1 of (B, S, D) where ``mask`` (B, S) is True; -> (B, D). Each row needs one True."""
    w = mask.to(x.dtype)[..., None]                        # (B, S, 1)
    return (x * w).sum(1) / w.sum(1).clamp_min(1.0)        # (B, D)


class PrimitiveEncoder(nn.Module):
    """One-layer CrossAtt over ``[sub-words; regions]``, averaged over sub-words.

    Args:
        cfg: the model config; width = ``cfg.text.hidden_size``, heads and FFN from ``cfg.primitive``.
    """

    def __init__(self, cfg: ComposerConfig):
        super().__init__()
        self.cross_attention = cfg.primitive_cross_attention
        d = cfg.text.hidden_size
        if self.cross_attention:
            self.visual = VisualEmbedding(cfg.visual.region_dim, cfg.visual.geometry_dim, d,
                                          dropout=cfg.text.dropout, layer_norm_eps=cfg.text.layer_norm_eps)
            self.layer = TransformerLayer(d, cfg.primitive.num_heads, cfg.primitive.intermediate_size,
                                          dropout=cfg.text.dropout, layer_norm_eps=cfg.text.layer_norm_eps)
            self.apply(partial(init_bert_weights, std=cfg.text.initializer_range))

    def embed_visual(self, regions: torch.Tensor, geometry: torch.Tensor) -> torch.Tensor | None:
        """Project each image's regions once: (I, R, Dr), (I, R, Dg) -> (I, R, D); None without CrossAtt."""
        if not self.cross_attention:
            return None
        return self.visual(regions, geometry)

    def forward(self, words: torch.Tensor, word_mask: torch.Tensor, visual: torch.Tensor | None = None,
                visual_mask: torch.Tensor | None = None, item_image: torch.Tensor | None = None) -> torch.Tensor:
        """Ground B (primitive, image) pairs.

        Args:
            words: (B, S, D) sub-word embeddings of each pair's primitive.
            word_mask: (B, S) bool, True = real sub-word.
            visual: (B, R, D) the pair's image from :meth:`embed_visual` (ignored without CrossAtt), or
                with ``item_image`` the images themselves, (I, R, D).
            visual_mask: (B, R) bool, True = real region; (I, R) with ``item_image``.
            item_image: (B,) long, optional: each pair's image (rows of ``visual``), whose regions are
                then projected to keys and values once per image rather than once per pair.

        Returns:
            (B, D) one vector per pair.
        """
        if not self.cross_attention:
            return masked_mean(words, word_mask)
        if visual is None or visual_mask is None:
            raise ValueError("the primitive CrossAtt needs the image: pass visual and visual_mask "
                             "(or build the model with primitive_cross_attention=False)")
        # keys and values: [sub-words; regions], (B, S + R, D)
        out = self.layer(words, encoder_states=visual, encoder_mask=visual_mask, encoder_index=item_image,
                         own_states=words, own_mask=word_mask)    # (B, S, D)
        return masked_mean(out, word_mask)
