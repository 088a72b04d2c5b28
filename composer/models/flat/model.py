"""The flat cross-modal baseline: ViLBERT without multimodal pre-training, at COMPOSER's width and depth.

The whole caption, ``[CLS] words [SEP]``, goes through BERT's embeddings and ``pt_layers`` text
SelfAtt layers (initialised from ``text_model`` like the Predicate Transformer), then through a
Composition Transformer with the image (the same interleaved SelfAtt / CrossAtt layers); a linear
head scores the final ``[CLS]``. No structure, no recursion: one CT call per pair. It isolates
what the recursive composition adds over a same-sized flat model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from composer.models.composer.composition_transformer import AlignmentScorer, CompositionTransformer, pack_tokens
from composer.models.composer.config import ComposerConfig
from composer.models.composer.model import check_visual_inputs
from composer.models.composer.predicate_transformer import PredicateTransformer, TemplateTokenizer
from composer.models.common.pretrained import PretrainedModel
from composer.models.composer.program import ConceptProgram, ProgramBatch

__all__ = ["FlatCrossTransformer", "FlatOutput"]


@dataclass
class FlatOutput:
    """Sentence scores and embeddings of each (image, caption) pair."""

    scores: torch.Tensor      # (Q,)
    embeddings: torch.Tensor  # (Q, D) final [CLS] state


class FlatCrossTransformer(PretrainedModel, nn.Module):
    """Text SelfAtt layers (as many as the PT), then the CT's interleaved layers with the image.

    ``save_pretrained(directory)`` / ``FlatCrossTransformer.from_pretrained(directory)``: :mod:`composer.models.common.pretrained`.
    """

    model_type = "flat"
    config_class = ComposerConfig

    def __init__(self, cfg: ComposerConfig, *, load_pretrained: bool = True):
        super().__init__()
        self.config = cfg
        self.text_encoder = PredicateTransformer.from_config(cfg, load_pretrained=load_pretrained)
        self.composition_transformer = CompositionTransformer(cfg)
        self.scorer = AlignmentScorer(cfg.text.hidden_size, cfg.text.initializer_range)
        self._tokenizer: TemplateTokenizer | None = None
        # False: the padded reference path (every token of every layer), kept to test the fast one against
        self.fast_path = True

    @classmethod
    def from_config(cls, cfg: ComposerConfig, *, load_pretrained: bool = True) -> FlatCrossTransformer:
        return cls(cfg, load_pretrained=load_pretrained)

    def make_tokenizer(self) -> TemplateTokenizer:
        """``make_tokenizer().encode_sentences(captions)`` gives this model's token ids and mask (the configured
        vocabulary, or the one saved beside the weights when the model was loaded with :meth:`from_pretrained`)."""
        if self.pretrained_dir is None:
            return TemplateTokenizer.from_config(self.config)
        return TemplateTokenizer.from_pretrained(str(self.pretrained_dir),
                                                 max_length=self.config.text.max_position_embeddings,
                                                 vocab_size=self.config.text.vocab_size)

    def score_pairs(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                    programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor) -> torch.Tensor:
        """(Q,) scores with :meth:`composer.models.composer.model.Composer.score_pairs`'s signature (the evaluation's interface).

        Only each program's sentence (its root text) is read: the flat model sees no structure.
        """
        if self._tokenizer is None:
            self._tokenizer = self.make_tokenizer()
        enc = self._tokenizer.encode_sentences([p.texts[p.root] for p in programs.programs])
        return self.forward(regions, geometry, region_mask, enc.ids, enc.mask, pair_image, pair_caption).scores

    def forward(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                token_ids: torch.Tensor, token_mask: torch.Tensor, pair_image: torch.Tensor,
                pair_caption: torch.Tensor) -> FlatOutput:
        """Score Q (image, caption) pairs.

        Args:
            regions: (I, R, Dr); geometry: (I, R, Dg); region_mask: (I, R) bool, True = real region.
            token_ids: (C, T) ``[CLS] caption [SEP]`` ids; token_mask: (C, T) bool, True = real token.
            pair_image: (Q,) long image of each pair; pair_caption: (Q,) long caption of each pair.
        """
        check_visual_inputs(regions, geometry, region_mask)
        device = regions.device
        pair_image = pair_image.to(device=device, dtype=torch.long)
        pair_caption = pair_caption.to(device=device, dtype=torch.long)
        token_ids, token_mask = token_ids.to(device), token_mask.to(device)
        text = self.text_encoder(token_ids, token_mask)                               # (C, T, D), once per caption
        visual = self.composition_transformer.encode_visual(regions, geometry, region_mask,
                                                             packed=self.fast_path)  # (I, R, Dv) | None
        cls = self._compose(text, token_mask, visual, region_mask, pair_image, pair_caption)  # (Q, D)
        return FlatOutput(scores=self.scorer(cls), embeddings=cls)

    @torch.no_grad()
    def score_all(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                  programs: Sequence[ConceptProgram], tokenizer=None, *, max_pairs: int = 4096,
                  on_chunk: Callable[[], None] | None = None) -> torch.Tensor:
        """(C, I) score of every caption on every image (:func:`composer.models.common.retrieval.score_matrix`'s fast path).

        Why faster than pair-by-pair chunks: each caption goes through the text layers once and each
        image's regions through the visual prefix once, for all chunks; only the cross-modal layers run
        per pair, at most ``max_pairs`` pairs per call. The sentences are tokenized with the model's own
        tokenizer (as :meth:`score_pairs` does); ``tokenizer`` is accepted for the common signature.
        """
        check_visual_inputs(regions, geometry, region_mask)
        if self._tokenizer is None:
            self._tokenizer = self.make_tokenizer()
        device = regions.device
        n_img, n_cap = regions.shape[0], len(programs)
        enc = self._tokenizer.encode_sentences([p.texts[p.root] for p in programs])
        token_mask = enc.mask.to(device)
        text = self.text_encoder(enc.ids.to(device), token_mask)                     # (C, T, D)
        ct = self.composition_transformer
        visual = ct.encode_visual(regions, geometry, region_mask, packed=self.fast_path)  # (I, R, Dv) | None
        visual_kv = ct.visual_keys(visual) if self.fast_path else None
        out = torch.empty(n_cap, n_img, device=device)
        caps_per_chunk = max(1, min(n_cap, max_pairs))
        images_per_chunk = max(1, max_pairs // caps_per_chunk)
        for c0 in range(0, n_cap, caps_per_chunk):
            caps = torch.arange(c0, min(n_cap, c0 + caps_per_chunk), device=device)
            for i0 in range(0, n_img, images_per_chunk):
                imgs = torch.arange(i0, min(n_img, i0 + images_per_chunk), device=device)
                pair_caption = caps.repeat_interleave(len(imgs))                     # (c * i,)
                pair_image = imgs.repeat(len(caps))                                  # (c * i,)
                cls = self._compose(text, token_mask, visual, region_mask, pair_image, pair_caption, visual_kv)
                out[caps[0]:caps[-1] + 1, imgs[0]:imgs[-1] + 1] = self.scorer(cls).view(len(caps), len(imgs))
                if on_chunk is not None:
                    on_chunk()
        return out

    def _compose(self, text: torch.Tensor, token_mask: torch.Tensor, visual: torch.Tensor | None,
                 region_mask: torch.Tensor, pair_image: torch.Tensor, pair_caption: torch.Tensor,
                 visual_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """(Q, D) final ``[CLS]`` of each pair from the (C, T, D) encoded captions and (I, R, Dv) images."""
        if self.fast_path:  # real tokens only, [CLS] only in the last layer
            return self.composition_transformer(
                pack_tokens(text[pair_caption], token_mask[pair_caption]), None, visual, region_mask,
                item_image=pair_image, visual_kv=visual_kv)                          # (Q, D)
        return self.composition_transformer(text[pair_caption], token_mask[pair_caption], visual, region_mask,
                                            item_image=pair_image)                   # (Q, D)
