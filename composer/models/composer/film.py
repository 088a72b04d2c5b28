"""Input concept modulation (§3.2, Appendix C, Table 4): binding child concepts to placeholders.

For each argument j of a predicate, the modulator combines the Predicate Transformer's output at
the placeholder, ``p_j``, with the child concept's embedding ``c_j``:

* ``film``    -- ``a = MLP_a(p_j)``, ``b = MLP_b(p_j)``, output ``MLP_proj(a * c_j + b)`` (FiLM, Perez et al. 2018);
* ``mlp``     -- ``MLP([p_j; c_j])``;
* ``replace`` -- ``c_j`` itself (the placeholder is ignored).

The MLPs are Linear -> GELU -> Linear with the config's hidden width (768 in the paper). The scale
MLP starts at ``a = 1`` and the bias MLP at ``b = 0`` (zero last layer, scale bias 1), so at
initialisation FiLM passes ``MLP_proj(c_j)`` and the child's information is not scaled towards zero;
the paper does not state an initialisation.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from composer.models.composer.attention import init_bert_weights
from composer.models.composer.config import MODULATORS, ComposerConfig

__all__ = ["MLP", "Modulator", "film_modulate"]


def film_modulate(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Feature-wise affine modulation ``a * c + b`` (all (..., D), broadcasting).

    >>> film_modulate(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.5]), torch.tensor([0.0, 1.0])).tolist()
    [3.0, 2.0]
    """
    return a * c + b


class MLP(nn.Module):
    """Linear -> GELU -> Linear."""

    def __init__(self, in_size: int, hidden_size: int, out_size: int):
        super().__init__()
        self.fc1 = nn.Linear(in_size, hidden_size)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_size, out_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Modulator(nn.Module):
    """Binds child concepts to placeholders: ``(..., D)`` placeholder and child -> ``(..., D)`` token.

    Args:
        cfg: ``cfg.modulator`` picks the variant; ``cfg.modulation.hidden_size`` the MLP width;
            D = ``cfg.text.hidden_size``.
    """

    def __init__(self, cfg: ComposerConfig):
        super().__init__()
        if cfg.modulator not in MODULATORS:
            raise ValueError(f"modulator={cfg.modulator!r}; choose one of {MODULATORS}")
        self.kind = cfg.modulator
        d, h = cfg.text.hidden_size, cfg.modulation.hidden_size
        if self.kind == "film":
            self.scale = MLP(d, h, d)
            self.bias = MLP(d, h, d)
            self.project = MLP(d, h, d)
            self.apply(partial(init_bert_weights, std=cfg.text.initializer_range))
            nn.init.zeros_(self.scale.fc2.weight)
            nn.init.ones_(self.scale.fc2.bias)      # a = 1 at initialisation
            nn.init.zeros_(self.bias.fc2.weight)    # b = 0 at initialisation
        elif self.kind == "mlp":
            self.mlp = MLP(2 * d, h, d)
            self.apply(partial(init_bert_weights, std=cfg.text.initializer_range))

    def forward(self, placeholder: torch.Tensor, child: torch.Tensor) -> torch.Tensor:
        """Modulate.

        Args:
            placeholder: (..., D) the PT's contextualised placeholder embeddings.
            child: (..., D) the child concepts' embeddings, same leading shape.

        Returns:
            (..., D) the tokens that take the placeholders' positions in the CT's input.
        """
        return self.bind(self.placeholder_terms(placeholder), child)

    def placeholder_terms(self, placeholder: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """What the modulation takes from the placeholder alone: FiLM's scale and bias, (..., D) each.

        A placeholder's embedding depends only on its predicate, and many concepts share a predicate:
        the recursion computes these once per distinct predicate and indexes them per concept.
        """
        if self.kind == "film":
            return self.scale(placeholder), self.bias(placeholder)
        if self.kind == "mlp":
            return (placeholder,)
        return ()

    def bind(self, terms: tuple[torch.Tensor, ...], child: torch.Tensor) -> torch.Tensor:
        """(..., D) tokens from :meth:`placeholder_terms`' ``terms`` and the (..., D) children."""
        if self.kind == "film":
            a, b = terms
            return self.project(film_modulate(child, a, b))
        if self.kind == "mlp":
            return self.mlp(torch.cat([terms[0], child], dim=-1))  # (..., 2D) -> (..., D)
        return child
