"""VSE: the two-tower visual-semantic embedding baseline (Kiros et al., 2014; VSE++, Faghri et al., 2017).

Appendix C's re-implementation: a BERT text encoder whose last-layer token embeddings are averaged
into the caption vector, and a visual encoder that maps every region feature into the joint space
with "an MLP with a residual connection" and averages the regions. Image and caption meet only in
the final cosine similarity, so each is encoded once, whatever the number of pairs scored:

    caption ─► [CLS] words [SEP] ─► BERT embeddings + text_layers layers ─► mean over real tokens
            ─► linear ─► L2-normalise ─► y (E,)
    image   ─► regions (R, Dr) ++ geometry (R, 5) ─► fc(v) + MLP(v) per region
            ─► mean (or max) over real regions ─► L2-normalise ─► x (E,)
    s(x, y) = <x, y>

The loss is the triplet hinge over in-batch negatives, summed over them (Kiros et al.) or on the
hardest one only (VSE++): :func:`vse_hinge_loss`.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from composer.models.common.config import apply_overrides, preset_values
from composer.models.composer.config import TextConfig, VisualConfig, composer_config
from composer.models.composer.model import check_visual_inputs
from composer.models.composer.predicate_transformer import PredicateTransformer, TemplateTokenizer
from composer.models.common.pretrained import PretrainedModel
from composer.models.composer.program import ProgramBatch

__all__ = [
    "HINGE_NEGATIVES",
    "IMAGE_POOLS",
    "VSE",
    "VSE_PRESETS",
    "HingeConfig",
    "RegionMLP",
    "VSEConfig",
    "vse_config",
    "vse_hinge_loss",
]

log = logging.getLogger(__name__)

IMAGE_POOLS = ("mean", "max")
HINGE_NEGATIVES = ("sum", "hardest")


@dataclass
class HingeConfig:
    """The triplet ranking loss (the paper cites Kiros et al. 2014 for VSE and states no margin)."""

    margin: float = 0.2                      # VSE++'s (and Kiros et al.'s) value; the paper gives none
    negatives: str = "sum"                   # "sum": Kiros et al.'s sum over negatives; "hardest": VSE++'s max

    def __post_init__(self) -> None:
        if self.margin < 0:
            raise ValueError(f"HingeConfig.margin must be >= 0, got {self.margin}")
        if self.negatives not in HINGE_NEGATIVES:
            raise ValueError(f"HingeConfig.negatives={self.negatives!r}; choose one of {HINGE_NEGATIVES}")


@dataclass
class VSEConfig:
    """VSE with Appendix C's defaults: 12 BERT layers from ``bert-base-uncased``, mean pooling both sides.

    ``text_model`` (a local directory or hub name of a BERT checkpoint) initialises the text encoder's
    embeddings and first ``text_layers`` layers; None = random init. ``tokenizer`` (default
    ``text_model``) names the WordPiece vocabulary.
    """

    text_model: str | None = "bert-base-uncased"
    tokenizer: str | None = None
    text_layers: int = 12                    # Appendix C: "the text encoder ... contains 12 layers"
    embed_dim: int = 1024                    # joint space; unstated in the paper, VSE++'s 1024
    image_hidden_size: int = 1024            # hidden width of the region MLP's residual branch; unstated
    image_pool: str = "mean"                 # Appendix C: "the mean of the transformed image patch features"
    text: TextConfig = field(default_factory=TextConfig)
    visual: VisualConfig = field(default_factory=VisualConfig)
    loss: HingeConfig = field(default_factory=HingeConfig)

    def __post_init__(self) -> None:
        if self.tokenizer is None:
            self.tokenizer = self.text_model
        if self.text_layers < 0:
            raise ValueError(f"VSEConfig.text_layers={self.text_layers} must be >= 0")
        if not self.text.train_word_embeddings and self.text_model is None:
            raise ValueError("VSEConfig: text.train_word_embeddings=False with text_model None would freeze random "
                             "word embeddings; load a checkpoint or train them")
        if self.embed_dim <= 0 or self.image_hidden_size <= 0:
            raise ValueError(f"VSEConfig: embed_dim and image_hidden_size must be positive, got "
                             f"{self.embed_dim}, {self.image_hidden_size}")
        if self.image_pool not in IMAGE_POOLS:
            raise ValueError(f"VSEConfig.image_pool={self.image_pool!r}; choose one of {IMAGE_POOLS}")


# Named presets: the text side (weights, vocabulary, sizes) is COMPOSER's preset of the same name, so the
# two models read captions alike; only the depth and the joint space differ.
VSE_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {"text_layers": 12},                                   # bert-base-uncased, all 12 layers
    "offline": {"text_layers": 6},                                  # the whole 6-layer MiniLM
    "small": {"text_layers": 2, "embed_dim": 128, "image_hidden_size": 256},   # random init, CPU-sized
    # MiniLM's embeddings and first 2 layers (384-d, pretrained) under small's joint space and image MLP
    "small-minilm": {"text_layers": 2, "embed_dim": 128, "image_hidden_size": 256},
    "tiny": {"text_layers": 2, "embed_dim": 20, "image_hidden_size": 17},      # tests: all sizes differ
}


def vse_config(preset: str = "offline", **overrides: Any) -> VSEConfig:
    """A named configuration with ``overrides`` applied (nested sub-configs take dicts).

    >>> cfg = vse_config("small", image_pool="max", loss={"negatives": "hardest"})
    >>> cfg.text.hidden_size, cfg.text_layers, cfg.image_pool, cfg.loss.negatives, cfg.text_model
    (128, 2, 'max', 'hardest', None)
    """
    sizes = preset_values(VSE_PRESETS, preset, "VSEConfig")
    text_side = composer_config(preset)
    # the text encoder at the checkpoint's width (COMPOSER's PT sizes); text_projection maps it to embed_dim
    cfg = VSEConfig(text_model=text_side.text_model, tokenizer=text_side.tokenizer,
                    text=text_side.pt_text or text_side.text,
                    visual=text_side.visual, **sizes)
    overrides = copy.deepcopy(overrides)
    if "text_model" in overrides and "tokenizer" not in overrides:
        overrides["tokenizer"] = overrides["text_model"]  # the vocabulary follows the weights
    return apply_overrides(cfg, overrides, "VSEConfig")


def vse_hinge_loss(scores: torch.Tensor, target: torch.Tensor, *, margin: float = 0.2,
                   negatives: str = "sum", own_negatives: torch.Tensor | None = None,
                   own_valid: torch.Tensor | None = None) -> torch.Tensor:
    """Bidirectional triplet hinge over in-batch negatives, averaged over the C positive pairs.

    For caption c and its image t = target[c]:
    ``sum_{i: i != t} [margin - s(c, t) + s(c, i)]_+ + sum_{c': target[c'] != t} [margin - s(c, t) + s(c', t)]_+``,
    the sums replaced by maxima for ``negatives="hardest"`` (VSE++). Captions of the same image are
    never each other's negatives (a batch may hold two captions of one image).

    Args:
        scores: (C, I) similarity of every caption with every candidate image.
        target: (C,) long, the column of each caption's own image.
        own_negatives: (C, S) scores of extra captions on caption c's own image (structural negatives: false of
            that image), costed like the other captions; own_valid: (C, S) bool, False = no such caption (ignored).

    >>> s = torch.tensor([[0.5, 0.4, 0.45], [0.1, 0.9, 0.8]])  # 2 captions x 3 images
    >>> round(vse_hinge_loss(s, torch.tensor([0, 1])).item(), 4)  # ((0.1 + 0.15) + (0.1)) / 2
    0.175
    >>> round(vse_hinge_loss(s, torch.tensor([0, 1]), negatives="hardest").item(), 4)  # (0.15 + 0.1) / 2
    0.125
    """
    if negatives not in HINGE_NEGATIVES:
        raise ValueError(f"negatives={negatives!r}; choose one of {HINGE_NEGATIVES}")
    if scores.dim() != 2 or target.shape != scores.shape[:1]:
        raise ValueError(f"scores must be (C, I) and target (C,), got {tuple(scores.shape)}, {tuple(target.shape)}")
    target = target.to(device=scores.device, dtype=torch.long)
    n_cap, n_img = scores.shape
    positive = scores.gather(1, target[:, None])                                    # (C, 1)
    not_own_image = torch.arange(n_img, device=scores.device)[None] != target[:, None]  # (C, I)
    # caption c' is a negative for caption c's image when it describes another image
    not_same_image = target[:, None] != target[None, :]                              # (C, C')
    img_cost = F.relu(margin - positive + scores) * not_own_image                    # (C, I): other images
    on_own = scores[:, target].T                                                      # (C, C') s(c', t_c)
    cap_cost = F.relu(margin - positive + on_own) * not_same_image                   # (C, C'): other captions
    if own_negatives is not None and own_negatives.shape[1]:
        valid = torch.ones_like(own_negatives, dtype=torch.bool) if own_valid is None else own_valid
        own_cost = F.relu(margin - positive + own_negatives) * valid                  # (C, S)
        cap_cost = torch.cat([cap_cost, own_cost], dim=1)                             # (C, C' + S)
    if negatives == "sum":
        per_pair = img_cost.sum(1) + cap_cost.sum(1)                                  # (C,)
    else:  # costs are >= 0, so a row with no negative gives 0
        per_pair = img_cost.max(1).values + cap_cost.max(1).values                    # (C,)
    return per_pair.sum() / max(n_cap, 1)


class RegionMLP(nn.Module):
    """Region feature (+ geometry) to the joint space: ``fc(v) + MLP(v)`` (a linear map with a residual MLP
    branch, as VSE-infinity's image encoder), then pooled over the real regions."""

    def __init__(self, cfg: VSEConfig):
        super().__init__()
        d_in = cfg.visual.region_dim + cfg.visual.geometry_dim
        self.pool = cfg.image_pool
        self.fc = nn.Linear(d_in, cfg.embed_dim)
        self.mlp = nn.Sequential(nn.Linear(d_in, cfg.image_hidden_size), nn.LayerNorm(cfg.image_hidden_size),
                                 nn.ReLU(), nn.Linear(cfg.image_hidden_size, cfg.embed_dim))

    def forward(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor) -> torch.Tensor:
        """(I, R, Dr), (I, R, Dg), (I, R) bool (True = real region) -> (I, E) pooled, not normalised."""
        v = torch.cat([regions, geometry.to(regions.dtype)], dim=-1)                 # (I, R, Dr + Dg)
        h = self.fc(v) + self.mlp(v)                                                  # (I, R, E)
        keep = region_mask[..., None]                                                 # (I, R, 1)
        if self.pool == "mean":
            return (h * keep.to(h.dtype)).sum(1) / keep.sum(1).clamp_min(1).to(h.dtype)  # (I, E)
        return h.masked_fill(~keep, float("-inf")).amax(1).nan_to_num(neginf=0.0)         # (I, E)


class VSE(PretrainedModel, nn.Module):
    """Two towers meeting in a cosine similarity; see the module docstring.

    ``save_pretrained(directory)`` / ``VSE.from_pretrained(directory)``: :mod:`composer.models.common.pretrained`.
    """

    model_type = "vse"
    config_class = VSEConfig

    def __init__(self, cfg: VSEConfig, *, load_pretrained: bool = True):
        super().__init__()
        self.config = cfg
        self.text_encoder = PredicateTransformer(cfg.text, cfg.text_layers)  # BERT embeddings + layers
        if load_pretrained and cfg.text_model is not None:
            self.text_encoder.load_pretrained(cfg.text_model)
        self.text_projection = nn.Linear(cfg.text.hidden_size, cfg.embed_dim)
        self.image_encoder = RegionMLP(cfg)
        self._tokenizer: TemplateTokenizer | None = None

    @classmethod
    def from_config(cls, cfg: VSEConfig, *, load_pretrained: bool = True) -> VSE:
        return cls(cfg, load_pretrained=load_pretrained)

    def make_tokenizer(self) -> TemplateTokenizer:
        """``make_tokenizer().encode_sentences(captions)`` gives this model's token ids and mask (the configured
        vocabulary, or the one saved beside the weights when the model was loaded with :meth:`from_pretrained`)."""
        path = self.tokenizer_path(self.config.tokenizer)
        if path is None:
            raise ValueError("VSEConfig.tokenizer is None: name a BERT WordPiece vocabulary (a local directory "
                             "or hub name), e.g. vse_config('small') uses the MiniLM's")
        return TemplateTokenizer.from_pretrained(path,
                                                 max_length=self.config.text.max_position_embeddings,
                                                 vocab_size=self.config.text.vocab_size)

    @property
    def tokenizer(self) -> TemplateTokenizer:
        if self._tokenizer is None:
            self._tokenizer = self.make_tokenizer()
        return self._tokenizer

    def encode_texts(self, token_ids: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
        """(C, T) ``[CLS] caption [SEP]`` ids and (C, T) bool mask (True = real token) -> (C, E) unit vectors."""
        token_ids = token_ids.to(self.text_projection.weight.device)
        token_mask = token_mask.to(token_ids.device)
        h = self.text_encoder(token_ids, token_mask)                                  # (C, T, D)
        keep = token_mask[..., None].to(h.dtype)                                      # (C, T, 1)
        mean = (h * keep).sum(1) / keep.sum(1).clamp_min(1)                           # (C, D)
        return F.normalize(self.text_projection(mean), dim=-1)                        # (C, E)

    def encode_sentences(self, sentences: list[str]) -> torch.Tensor:
        """Caption strings -> (C, E) unit vectors."""
        enc = self.tokenizer.encode_sentences(sentences)
        return self.encode_texts(enc.ids, enc.mask)

    def encode_programs(self, programs: ProgramBatch) -> torch.Tensor:
        """(C, E) unit vectors of the programs' sentences (each root's text; VSE sees no structure)."""
        return self.encode_sentences([p.texts[p.root] for p in programs.programs])

    def encode_images(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor) -> torch.Tensor:
        """(I, R, Dr), (I, R, Dg), (I, R) bool (True = real region) -> (I, E) unit vectors."""
        check_visual_inputs(regions, geometry, region_mask)
        if regions.shape[-1] != self.config.visual.region_dim:
            raise ValueError(f"regions have {regions.shape[-1]} features, the model expects "
                             f"{self.config.visual.region_dim} (VSEConfig.visual.region_dim)")
        return F.normalize(self.image_encoder(regions, geometry, region_mask), dim=-1)

    def cross_scores(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                     sentences: list[str], *, chunk: int = 1024) -> torch.Tensor:
        """(C, I) cosine of every sentence against every image: each encoded once, ``chunk`` at a time
        (:func:`composer.models.common.retrieval.score_matrix`'s dual-encoder path)."""
        img = torch.cat([self.encode_images(regions[i:i + chunk], geometry[i:i + chunk], region_mask[i:i + chunk])
                         for i in range(0, regions.shape[0], chunk)])                    # (I, E)
        txt = torch.cat([self.encode_sentences(sentences[c:c + chunk])
                         for c in range(0, len(sentences), chunk)])                      # (C, E)
        return txt @ img.T.to(txt.device)                                                # (C, I)

    def score_pairs(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                    programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor) -> torch.Tensor:
        """(Q,) cosine of each (image, caption) pair, with ``Composer.score_pairs``'s signature.

        Each distinct image and caption named by the pairs is encoded once.

        Args:
            regions: (I, R, Dr); geometry: (I, R, Dg); region_mask: (I, R) bool, True = real region.
            programs: the C captions (only their sentences are read).
            pair_image, pair_caption: (Q,) long, the image and caption of each pair.
        """
        device = regions.device
        pair_image = pair_image.to(device=device, dtype=torch.long)
        pair_caption = pair_caption.to(device=device, dtype=torch.long)
        images, img_of_pair = torch.unique(pair_image, return_inverse=True)          # (I',), (Q,)
        captions, cap_of_pair = torch.unique(pair_caption, return_inverse=True)      # (C',), (Q,)
        x = self.encode_images(regions[images], geometry[images], region_mask[images])  # (I', E)
        y = self.encode_sentences([programs.programs[int(c)].texts[programs.programs[int(c)].root]
                                   for c in captions.tolist()])                       # (C', E)
        return (x[img_of_pair] * y[cap_of_pair]).sum(-1)                              # (Q,)
