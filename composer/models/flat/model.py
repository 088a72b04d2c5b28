"""The flat cross-modal baseline: ViLBERT without multimodal pre-training, at COMPOSER's width and depth.

The whole caption, ``[CLS] words [SEP]``, goes through BERT's embeddings and ``pt_layers`` text
SelfAtt layers (initialised from ``text_model`` like the Predicate Transformer), then through a
Composition Transformer with the image (the same interleaved SelfAtt / CrossAtt layers); a linear
head scores the final ``[CLS]``. No structure, no recursion: one CT call per pair. It isolates
what the recursive composition adds over a same-sized flat model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from composer.models.composer.composition_transformer import AlignmentScorer, CompositionTransformer
from composer.models.composer.config import ComposerConfig
from composer.models.composer.model import check_visual_inputs
from composer.models.composer.predicate_transformer import PredicateTransformer, TemplateTokenizer
from composer.models.common.pretrained import PretrainedModel
from composer.models.composer.program import ProgramBatch

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
        visual = self.composition_transformer.encode_visual(regions, geometry, region_mask)  # (I, R, Dv) | None
        cls = self.composition_transformer(text[pair_caption], token_mask[pair_caption], visual, region_mask,
                                           item_image=pair_image)                    # (Q, D)
        return FlatOutput(scores=self.scorer(cls), embeddings=cls)
