"""The shared codebook of codebook-CLIP and IL-CLIP (Zheng et al., 2024, §3.2; Chen et al., 2023).

Both agents speak through the same finite set of codes ``{c_i}``. An agent's output tokens ``p_j``
(image regions or caption tokens, already projected to the code width) score each code by their
best cosine match (Eq. 2)::

    r_i = max_j cos(p_j, c_i)

the scores are normalised with sparsemax (Martins & Astudillo, 2016), which puts exactly zero
weight on most codes, and the agent's representation is the weighted sum of codes (Eq. 3)::

    f = sum_i w_i c_i,    w = sparsemax(r / temperature)

Sizes: N agents' inputs (images or captions), T tokens each, C codes of width E.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Codebook", "CodebookOutput", "sparsemax"]


def sparsemax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Euclidean projection of ``z`` onto the probability simplex along ``dim``.

    ``sparsemax(z) = argmin_{p in simplex} ||p - z||^2 = max(z - tau, 0)``, with the threshold
    ``tau`` chosen so that the result sums to 1: sort ``z`` descending, keep the largest ``k`` with
    ``1 + k z_(k) > sum_{j<=k} z_(j)``, and ``tau = (sum_{j<=k} z_(j) - 1) / k``. The result is
    piecewise linear in ``z``, so autograd through the sort gives the exact Jacobian on each piece.

    >>> sparsemax(torch.tensor([3.0, 1.0, 0.5])).tolist()
    [1.0, 0.0, 0.0]
    >>> [round(x, 6) for x in sparsemax(torch.tensor([0.6, 0.5, -1.0])).tolist()]
    [0.55, 0.45, 0.0]
    """
    if z.shape[dim] == 0:
        raise ValueError(f"sparsemax over an empty dimension {dim} of a {tuple(z.shape)} tensor")
    z = z.transpose(dim, -1)                                             # (..., K)
    z = z - z.max(dim=-1, keepdim=True).values                           # shift: same projection, stabler
    sorted_z = torch.sort(z, dim=-1, descending=True).values             # (..., K)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)  # (K,)
    cumsum = sorted_z.cumsum(dim=-1)                                     # (..., K)
    support = (1 + k * sorted_z) > cumsum                                # (..., K) True for the first k(z)
    k_z = support.sum(dim=-1, keepdim=True)                              # (..., 1) >= 1: the max is in it
    tau = (cumsum.gather(-1, k_z - 1) - 1) / k_z.to(z.dtype)             # (..., 1)
    return torch.clamp(z - tau, min=0).transpose(dim, -1)


@dataclass
class CodebookOutput:
    """An agent's codebook representation of each of its N inputs."""

    embedding: torch.Tensor   # (N, E) sum_i w_i c_i (not normalised)
    weights: torch.Tensor     # (N, C) sparsemax weights w, each row on the simplex, mostly zero
    scores: torch.Tensor      # (N, C) r: the best cosine of any real token with each code


class Codebook(nn.Module):
    """C learnable codes of width E, shared by the vision and the language agent.

    Args:
        num_codes: C (paper: 16,384).
        dim: E, the code width = the agents' projected token width (paper: 512).
        temperature: sparsemax input scale, ``w = sparsemax(r / temperature)``. The IL paper states
            none (1.0 here); a smaller value makes the weights sparser.
    """

    def __init__(self, num_codes: int, dim: int, *, temperature: float = 1.0):
        super().__init__()
        if num_codes < 1 or dim < 1 or temperature <= 0:
            raise ValueError(f"Codebook needs num_codes >= 1, dim >= 1 and temperature > 0; got {num_codes}, "
                             f"{dim}, {temperature}")
        self.temperature = temperature
        self.codes = nn.Parameter(torch.empty(num_codes, dim))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Codes ~ N(0, 1/E): unit expected norm, the same scale as a normalised token."""
        values = torch.randn(self.codes.shape, generator=generator) * self.codes.shape[1] ** -0.5
        with torch.no_grad():
            self.codes.copy_(values)

    @property
    def num_codes(self) -> int:
        return self.codes.shape[0]

    def forward(self, tokens: torch.Tensor, token_mask: torch.Tensor, *, frozen: bool = False) -> CodebookOutput:
        """Represent N inputs as sparse combinations of codes.

        Args:
            tokens: (N, T, E) an agent's projected output tokens.
            token_mask: (N, T) bool, True = a real token (padding never wins the max); each row needs one.
            frozen: use the codes without letting gradients reach them (IL's distillation phase, §3.3):
                the codes stay exactly as they are, while the agent still learns to use them.
        """
        if tokens.dim() != 3 or token_mask.shape != tokens.shape[:2] or tokens.shape[2] != self.codes.shape[1]:
            raise ValueError(f"expected tokens (N, T, {self.codes.shape[1]}) and token_mask (N, T); got "
                             f"{tuple(tokens.shape)} and {tuple(token_mask.shape)}")
        if token_mask.dtype != torch.bool or not bool(token_mask.any(1).all()):
            empty = torch.nonzero(~token_mask.any(1)).flatten().tolist() if token_mask.dtype == torch.bool else "?"
            raise ValueError(f"token_mask must be bool with a real token in every row; rows without one: {empty}")
        codes = self.codes.detach() if frozen else self.codes                      # (C, E)
        # fp32 even under bf16 autocast: sparsemax's threshold compares a cumulative sum over C codes
        with torch.autocast(device_type=tokens.device.type, enabled=False):
            unit_tokens = nn.functional.normalize(tokens.float(), dim=-1)          # (N, T, E)
            unit_codes = nn.functional.normalize(codes.float(), dim=-1)            # (C, E)
            cosine = torch.einsum("nte,ce->ntc", unit_tokens, unit_codes)          # (N, T, C)
            cosine = cosine.masked_fill(~token_mask[:, :, None], float("-inf"))
            scores = cosine.max(dim=1).values                                      # (N, C) Eq. 2
            weights = sparsemax(scores / self.temperature, dim=-1)                 # (N, C)
            embedding = weights @ codes.float()                                    # (N, E) Eq. 3
        return CodebookOutput(embedding=embedding, weights=weights, scores=scores)
