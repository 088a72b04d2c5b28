"""Iterated learning for CLIP (Zheng et al., 2024, §3.3, Table 5): the schedule, spawning, and the losses.

Training is a warm-up stage, then K generations; each generation

1. **spawns** a new agent: the language agent is re-initialised (ablation, Table 4: the vision agent,
   or the two alternately);
2. **distils** the old agent into the new one for ``t_distill`` steps, with the codebook frozen so
   that the new agent's untrained gradients cannot disturb it (Table 4: "w/o weight fixed");
3. lets the agents **interact** (CLIP's contrastive game) for ``t_interact`` steps.

The last generation's interaction is extended by ``t_extend`` steps. The learning rate follows one
cosine annealing over the whole run, with a linear warm-up restarted at the start of every
generation (Supplementary §6, Table 5).

**What is distilled.** The paper says the old language agent "is distilled into the new language
agent" in a phase titled "distilling from the codebook", without naming the target. Here the default
target is the agent's *message*, its codebook combination of codes ``g(v) = sum_i w_i c_i``
(``distill_target="embedding"``, loss ``1 - cos``): what the agent says in the game, and over a frozen
codebook the message fixes the code weights up to codes' collinearity. ``"codes"`` matches the
sparsemax weights themselves (squared error: the weights have exact zeros, so no KL). During
distillation only the distillation loss trains (``distill_contrastive_weight`` adds the contrastive
loss for an ablation); the other agent and the temperature then receive no gradient at all.

**Hard negatives** (NegCLIP, Yuksekgonul et al., 2023, trained from scratch as IL-CLIP's §4.1 describes;
the paper's Table 8 "IL-NegCLIP" with ``il_clip``), switched on together by ``negclip``:

* text: each positive caption gets one negative made by swapping two of its words
  (:func:`swap_two_words`), preferring the caption's CRG primitives (nouns and the like: "a red cube
  left of a blue ball" -> "a red ball left of a blue cube"), offered to every image of the batch; so
  NegCLIP encodes twice the text of the other models per step;
* images: "a running pool of image representations, from which we extract the nearest neighbors for
  each batch" (:class:`composer.models.clip.negatives.ImagePool`): each caption's image's nearest
  recent images, as extra negatives of that caption (text-to-image direction).

``text_hard_negatives`` alone gives the text negatives only (an ablation). The batch's sampled caption
negatives (``TrainBatch`` columns 1..Kc) are captions of random other images, i.e. ordinary in-batch
negatives, so they are not used as hard negatives; the structural negatives among them (a recipe option,
:class:`composer.training.data.StructuralNegativeConfig`) are, for their own image only.

Generation numbering: generation 0 is the warm-up stage; generation g >= 1 starts with the g-th spawn.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from composer.models.common.config import named_config

__all__ = ["DISTILL_TARGETS", "PHASES", "SPAWN_TARGETS", "ContrastiveOutput", "ILConfig", "ILPhase",
           "clip_contrastive_loss", "distillation_loss", "il_config", "negclip_config", "scale_cycle", "spawn",
           "swap_two_words"]

PHASES = ("warmup", "distill", "interact")
SPAWN_TARGETS = ("language", "vision", "alternate")
DISTILL_TARGETS = ("embedding", "codes")


class ILPhase(NamedTuple):
    """Where a training step lies in the IL schedule."""

    generation: int        # 0 = the warm-up stage; g >= 1 after the g-th spawn
    phase: str             # one of PHASES
    step_in_phase: int     # 0 at the phase's first step


@dataclass
class ILConfig:
    """The CLIP family's training recipe: Table 5's optimiser and schedule, IL's phases, the ablations.

    Defaults are the paper's (§4.1, Table 5; batch 1024). ``generations`` (K) is not stated in the
    paper; 10 gives 6,000 + 10 x 6,000 + 6,000 = 72,000 steps, ~25 CC3M epochs at batch 1024.
    :func:`il_config` ``("small")`` scales the steps by 1/20 for the generated world.
    The plain ``clip`` / ``codebook_clip`` runs use the same optimiser and the same cosine over
    :attr:`total_steps`, with one warm-up at the start instead of one per generation.
    """

    t_warm: int = 6000                  # warm-up stage: plain (codebook-)CLIP training
    t_distill: int = 1000               # distillation steps after each spawn
    t_interact: int = 5000              # interaction steps per generation (Table 4: 6k-step cycles best)
    generations: int = 10               # K spawns (not stated in the paper)
    t_extend: int = 6000                # the last generation's interaction is extended by this much
    lr: float = 5e-4                    # AdamW base learning rate
    weight_decay: float = 0.1           # on weight matrices, embeddings and codes; not on gains, biases, t
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6                   # CLIP's
    lr_warmup_steps: int = 500          # linear warm-up at the start of every generation
    min_lr_ratio: float = 0.0           # cosine floor, as a fraction of lr
    spawn: str = "language"             # Table 4: "language" | "vision" | "alternate" (odd g: language)
    freeze_codebook: bool = True        # Table 4: codebook frozen during distillation
    distill_target: str = "embedding"   # "embedding" (the message, 1 - cos) | "codes" (sparsemax weights, L2)
    distill_contrastive_weight: float = 0.0  # > 0: the contrastive loss also trains during distillation
    use_codebook: bool = True           # il_clip only; False = Table 4's "IL w/o codebook"
    text_hard_negatives: bool = False   # NegCLIP's word-swap text negatives alone (any kind; an ablation)
    # NegCLIP as IL-CLIP's paper ran it (§4.1; Table 8's IL-NegCLIP with il_clip): word-swap text negatives AND
    # each caption's nearest images from a running pool of recent image representations (see image_negatives)
    negclip: bool = False
    image_negatives: int = 1            # pool neighbours per caption (NegCLIP adds one neighbour image per image)
    image_pool_size: int = 2048         # FIFO of the most recent distinct images' embeddings (32 batches of 64)

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        counts = {k: getattr(self, k) for k in ("t_warm", "t_distill", "t_interact", "generations", "t_extend",
                                                "lr_warmup_steps")}
        if any(v < 0 for v in counts.values()):
            raise ValueError(f"ILConfig: step counts must be >= 0, got {counts}")
        if self.generations > 0 and self.t_distill + self.t_interact == 0:
            raise ValueError("ILConfig: a generation needs t_distill + t_interact > 0")
        if self.total_steps < 1:
            raise ValueError(f"ILConfig: the schedule has no steps ({counts})")
        if self.lr <= 0 or self.weight_decay < 0 or not all(0 <= b < 1 for b in self.betas) or len(self.betas) != 2:
            raise ValueError(f"ILConfig: need lr > 0, weight_decay >= 0, two betas in [0, 1); got {self.lr}, "
                             f"{self.weight_decay}, {self.betas}")
        if not 0 <= self.min_lr_ratio <= 1 or self.distill_contrastive_weight < 0:
            raise ValueError(f"ILConfig: min_lr_ratio in [0, 1] and distill_contrastive_weight >= 0; got "
                             f"{self.min_lr_ratio}, {self.distill_contrastive_weight}")
        if self.spawn not in SPAWN_TARGETS:
            raise ValueError(f"ILConfig.spawn={self.spawn!r}; choose one of {SPAWN_TARGETS}")
        if self.distill_target not in DISTILL_TARGETS:
            raise ValueError(f"ILConfig.distill_target={self.distill_target!r}; choose one of {DISTILL_TARGETS}")
        if self.image_negatives < 0 or self.image_pool_size < 1:
            raise ValueError(f"ILConfig: image_negatives must be >= 0 and image_pool_size >= 1, got "
                             f"{self.image_negatives}, {self.image_pool_size}")

    @property
    def text_swaps(self) -> bool:
        """Whether each positive caption gets a word-swap negative (NegCLIP, or the text-only ablation)."""
        return self.text_hard_negatives or self.negclip

    @property
    def pool_negatives(self) -> int:
        """Nearest pool images per caption offered as extra negatives (0 unless NegCLIP)."""
        return self.image_negatives if self.negclip else 0

    # ------------------------------------------------------------------ the schedule (pure functions)
    @property
    def cycle(self) -> int:
        """Steps of one generation before the extension: t_distill + t_interact."""
        return self.t_distill + self.t_interact

    @property
    def total_steps(self) -> int:
        """t_warm + K (t_distill + t_interact) + t_extend: set the trainer's ``max_steps`` to this."""
        return self.t_warm + self.generations * self.cycle + self.t_extend

    def generation_start(self, generation: int) -> int:
        """The first step of a generation (0 for the warm-up stage)."""
        if not 0 <= generation <= self.generations:
            raise ValueError(f"generation {generation} outside 0..{self.generations}")
        return 0 if generation == 0 else self.t_warm + (generation - 1) * self.cycle

    def phase_at(self, step: int) -> ILPhase:
        """The generation, phase and step within the phase of global step ``step`` (0-based).

        Steps past :attr:`total_steps` stay in the last phase (its step count keeps growing).

        >>> cfg = ILConfig(t_warm=3, t_distill=2, t_interact=3, generations=2, t_extend=4)
        >>> [tuple(cfg.phase_at(s)) for s in (0, 2, 3, 4, 5, 8, 10, 16)]  # doctest: +NORMALIZE_WHITESPACE
        [(0, 'warmup', 0), (0, 'warmup', 2), (1, 'distill', 0), (1, 'distill', 1), (1, 'interact', 0),
         (2, 'distill', 0), (2, 'interact', 0), (2, 'interact', 6)]
        """
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if step < self.t_warm or self.generations == 0:
            return ILPhase(0, "warmup", step)
        g = min((step - self.t_warm) // self.cycle, self.generations - 1) + 1
        r = step - self.generation_start(g)
        if r < self.t_distill:
            return ILPhase(g, "distill", r)
        return ILPhase(g, "interact", r - self.t_distill)

    def is_spawn_step(self, step: int) -> bool:
        """True at the first step of every generation g >= 1 (when the new agent must be made)."""
        g = self.phase_at(step).generation
        return g >= 1 and step == self.generation_start(g)

    def spawn_target(self, generation: int) -> str:
        """The agent re-initialised at the start of ``generation`` (>= 1)."""
        if generation < 1:
            raise ValueError(f"generation {generation}: agents are spawned from generation 1 on")
        if self.spawn == "alternate":
            return "language" if generation % 2 == 1 else "vision"
        return self.spawn

    def lr_at(self, step: int, *, restarts: bool = True) -> float:
        """Learning rate at ``step``: global cosine x linear warm-up from the generation's start.

        ``restarts=False`` (plain CLIP): one warm-up at step 0.

        >>> cfg = ILConfig(t_warm=3, t_distill=2, t_interact=3, generations=2, t_extend=4, lr=1.0,
        ...                lr_warmup_steps=2)
        >>> [round(cfg.lr_at(s), 3) for s in (0, 1, 2, 3, 4)]
        [0.5, 0.991, 0.966, 0.463, 0.87]
        """
        start = self.generation_start(self.phase_at(step).generation) if restarts else 0
        warm = min(1.0, (step - start + 1) / self.lr_warmup_steps) if self.lr_warmup_steps > 0 else 1.0
        progress = min(step, self.total_steps) / self.total_steps
        cosine = self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        return self.lr * warm * cosine


def _paper() -> dict[str, Any]:
    return {}


def _small() -> dict[str, Any]:
    """The paper's steps / 20 (same 6:1:5:6 proportions): 1,800 steps, ~10 epochs of the 3,000-image
    world at batch 64 (~190 steps per epoch; ~2.6 epochs of the 15,000-image default world); warm-up 500 / 20 = 25 steps."""
    return {"t_warm": 300, "t_distill": 50, "t_interact": 250, "generations": 4, "t_extend": 300,
            "lr_warmup_steps": 25}


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {"paper": _paper, "small": _small}


def il_config(preset: str = "small", **overrides: Any) -> ILConfig:
    """A named recipe with overrides.

    >>> il_config("small").total_steps, il_config("paper").total_steps
    (1800, 72000)
    """
    return named_config(ILConfig, PRESETS, preset, overrides)


def negclip_config(preset: str = "small", **overrides: Any) -> ILConfig:
    """NegCLIP's recipe: :func:`il_config` with ``negclip`` on (the ``negclip`` model's step schedule).

    >>> negclip_config("small").negclip, negclip_config("small").total_steps
    (True, 1800)
    """
    return il_config(preset, **{"negclip": True, **overrides})



def scale_cycle(steps: dict[str, Any], scale: float) -> dict[str, Any]:
    """IL-CLIP Table 4's generation cycle x ``scale``: :class:`ILConfig` fields ``steps`` with the distillation and
    interaction steps scaled by ``scale`` and the number of generations by its inverse. The generations' steps are
    kept; what rounding leaves goes to ``t_extend`` (the same total steps).

    >>> scale_cycle({"t_warm": 40, "t_distill": 10, "t_interact": 40, "generations": 2, "t_extend": 30}, 0.5)
    {'t_warm': 40, 't_distill': 5, 't_interact': 20, 'generations': 4, 't_extend': 30}
    """
    budget = steps["generations"] * (steps["t_distill"] + steps["t_interact"])
    distill, interact = max(1, round(steps["t_distill"] * scale)), max(1, round(steps["t_interact"] * scale))
    generations = max(1, budget // (distill + interact))
    return {**steps, "t_distill": distill, "t_interact": interact, "generations": generations,
            "t_extend": steps["t_extend"] + budget - generations * (distill + interact)}

# ---------------------------------------------------------------------- spawn
def spawn(model: nn.Module, which: str, generator: torch.Generator) -> nn.Module:
    """Re-initialise one agent of a :class:`composer.models.clip.model.ClipModel` in place; return the old
    agent as a frozen, eval-mode teacher for the distillation phase.

    The codebook, the temperature and the other agent are left as they are.
    """
    teacher = model.frozen_copy(which)
    model.agent(which).reset_parameters(generator)
    return teacher


# ---------------------------------------------------------------------- losses (tensors in, tensors out)
@dataclass
class ContrastiveOutput:
    """CLIP's symmetric InfoNCE over B positive pairs and in-batch accuracies."""

    loss: torch.Tensor            # () mean of the image->text and text->image cross-entropies
    image_to_text: torch.Tensor   # () share of images whose own caption scores highest
    text_to_image: torch.Tensor   # () share of captions whose own image scores highest


def clip_contrastive_loss(image: torch.Tensor, text: torch.Tensor, scale: torch.Tensor, *,
                          same_image: torch.Tensor | None = None, hard_text: torch.Tensor | None = None,
                          hard_valid: torch.Tensor | None = None, hard_images: torch.Tensor | None = None,
                          hard_images_valid: torch.Tensor | None = None, own_hard_text: torch.Tensor | None = None,
                          own_hard_valid: torch.Tensor | None = None) -> ContrastiveOutput:
    """Eq. 1 in both directions (CLIP): pair i is (image[i], text[i]); the rest of the batch are negatives.

    Args:
        image: (B, E) image messages; text: (B, E) caption messages (normalised here: cosine).
        scale: () exp(t), the inverse temperature.
        same_image: (B, B) bool, True where pairs i and j show the same image. Those captions are
            not negatives of each other's image (nor those images of each other's caption): masked.
        hard_text: (N, E) extra caption negatives offered to every image (NegCLIP: swapped captions).
        hard_valid: (N,) bool, False for a hard negative that could not be made (masked out).
        hard_images: (B, K, E) extra image negatives of caption i only (NegCLIP: its image's nearest
            neighbours in the pool of recent image representations; treated as constants by the caller).
        hard_images_valid: (B, K) bool, False where the pool had no neighbour (masked out).
        own_hard_text: (B, S, E) extra caption negatives of image i only (structural negatives: verified false
            of that image, not of the others, so they are never offered to another image).
        own_hard_valid: (B, S) bool, False where no such negative was made (masked out).
    """
    B = image.shape[0]
    if text.shape[0] != B:
        raise ValueError(f"image {tuple(image.shape)} and text {tuple(text.shape)} must pair row by row")
    image, text = F.normalize(image, dim=-1), F.normalize(text, dim=-1)
    eye = torch.eye(B, dtype=torch.bool, device=image.device)
    false_negative = (same_image & ~eye) if same_image is not None else torch.zeros_like(eye)  # (B, B)
    per_text = scale * text @ image.T                                                         # (B, B)
    per_text = per_text.masked_fill(false_negative, float("-inf"))
    per_image = per_text.T                                                                    # (B, B)
    if hard_text is not None and hard_text.shape[0]:
        hard = scale * image @ F.normalize(hard_text, dim=-1).T                               # (B, N)
        if hard_valid is not None:
            hard = hard.masked_fill(~hard_valid[None, :], float("-inf"))
        per_image = torch.cat([per_image, hard], dim=1)                                       # (B, B + N)
    if own_hard_text is not None and own_hard_text.shape[1]:
        own = scale * torch.einsum("be,bse->bs", image, F.normalize(own_hard_text, dim=-1))   # (B, S)
        if own_hard_valid is not None:
            own = own.masked_fill(~own_hard_valid, float("-inf"))
        per_image = torch.cat([per_image, own], dim=1)                                        # (B, B [+ N] + S)
    if hard_images is not None and hard_images.shape[1]:
        near = scale * torch.einsum("be,bke->bk", text, F.normalize(hard_images, dim=-1))     # (B, K)
        if hard_images_valid is not None:
            near = near.masked_fill(~hard_images_valid, float("-inf"))
        per_text = torch.cat([per_text, near], dim=1)                                         # (B, B + K)
    target = torch.arange(B, device=image.device)
    loss = 0.5 * (F.cross_entropy(per_image, target) + F.cross_entropy(per_text, target))
    with torch.no_grad():
        i2t = (per_image.argmax(1) == target).float().mean()
        t2i = (per_text.argmax(1) == target).float().mean()
    return ContrastiveOutput(loss, i2t, t2i)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, target: str = "embedding") -> torch.Tensor:
    """How far the new agent's outputs are from the old agent's on the same inputs.

    Args:
        student, teacher: (N, E) messages (``target="embedding"``: mean of 1 - cos) or (N, C) sparsemax
            code weights (``target="codes"``: mean squared L2 distance; the weights have exact zeros).
    """
    if student.shape != teacher.shape:
        raise ValueError(f"student {tuple(student.shape)} and teacher {tuple(teacher.shape)} differ in shape")
    teacher = teacher.detach()
    if target == "embedding":
        return (1 - F.cosine_similarity(student, teacher, dim=-1)).mean()
    if target == "codes":
        return ((student - teacher) ** 2).sum(-1).mean()
    raise ValueError(f"distillation target {target!r}; choose one of {DISTILL_TARGETS}")


# ---------------------------------------------------------------------- NegCLIP text negatives
_WORD = re.compile(r"[A-Za-z0-9'-]+")


def swap_two_words(sentence: str, candidates: Sequence[str], rng: np.random.Generator) -> str | None:
    """A NegCLIP-style hard negative: the sentence with two different words swapped.

    Two different ``candidates`` that occur as whole words (case-insensitive) are swapped (their
    first occurrences) when there are two; otherwise two different words of the sentence at random.
    None when the sentence has fewer than two different words.

    >>> swap_two_words("a red cube left of a blue ball", ["cube", "ball"], np.random.default_rng(0))
    'a red ball left of a blue cube'
    >>> swap_two_words("dogs dogs", [], np.random.default_rng(0)) is None
    True
    """
    spans = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(sentence)]
    first: dict[str, int] = {}
    for k, (_, _, w) in enumerate(spans):
        first.setdefault(w, k)
    wanted = [w for w in dict.fromkeys(c.lower() for c in candidates) if w in first]
    pool = wanted if len(wanted) >= 2 else list(first)
    if len(pool) < 2:
        return None
    a, b = rng.choice(len(pool), size=2, replace=False)
    i, j = sorted((first[pool[int(a)]], first[pool[int(b)]]))
    (si, ei, _), (sj, ej, _) = spans[i], spans[j]
    return sentence[:si] + sentence[sj:ej] + sentence[ei:sj] + sentence[si:ei] + sentence[ej:]
