"""NegCLIP's image negatives, trained from scratch: a running pool of image representations.

IL-CLIP's paper (Zheng et al. 2024, §4.1) trains NegCLIP (Yuksekgonul et al. 2023) from scratch and
"generate[s] image negatives by maintaining a running pool of image representations, from which we extract
the nearest neighbors for each batch". NegCLIP itself precomputes every image's nearest neighbours with a
pretrained CLIP; a model trained from scratch has none, so the neighbours come from its own recent
embeddings instead:

* the pool is a FIFO of the most recent ``size`` distinct images' unit embeddings (detached: constants, as
  the keys of a MoCo queue), each with its image id; an image seen again replaces its older entry;
* each caption of a batch gets the ``k`` pool entries nearest (cosine) to its own image's current
  embedding, never its own image and never an image of the current batch (those are in-batch negatives
  already); with fewer candidates, the rest are marked invalid.

The neighbours are negatives of their caption only (the text-to-image direction of the loss,
:func:`composer.models.clip.iterated_learning.clip_contrastive_loss`'s ``hard_images``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["ImagePool", "PoolNeighbours"]


@dataclass
class PoolNeighbours:
    """Each query's nearest pool images."""

    embeddings: torch.Tensor  # (B, k, E) unit embeddings (zeros where invalid)
    valid: torch.Tensor       # (B, k) bool, True = a real neighbour
    image_ids: list[list[str | None]]  # (B, k) the neighbours' image ids (None where invalid)


class ImagePool:
    """A FIFO of recent images' unit embeddings and ids (NegCLIP's running pool)."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"ImagePool size must be >= 1, got {size}")
        self.size = size
        self.embeddings: torch.Tensor | None = None  # (P, E), oldest first
        self.image_ids: list[str] = []                # (P,)
        self._codes: dict[str, int] = {}              # image id -> an integer, for tensor comparisons

    def _code(self, image_ids: Sequence[str]) -> torch.Tensor:
        """(N,) long: each id's integer (new ids get new ones; the table is rebuilt when it outgrows the pool)."""
        if len(self._codes) > 4 * self.size + len(image_ids):
            self._codes = {i: k for k, i in enumerate(dict.fromkeys(self.image_ids))}
        for i in image_ids:
            self._codes.setdefault(i, len(self._codes))
        return torch.tensor([self._codes[i] for i in image_ids], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.image_ids)

    @torch.no_grad()
    def push(self, embeddings: torch.Tensor, image_ids: Sequence[str]) -> None:
        """Append a batch's images (embeddings (N, E), detached and normalised here), dropping the oldest past
        ``size``; an id already in the pool loses its older entry (one representation per image, the newest)."""
        if embeddings.dim() != 2 or embeddings.shape[0] != len(image_ids):
            raise ValueError(f"push needs (N, E) embeddings for N ids, got {tuple(embeddings.shape)} and "
                             f"{len(image_ids)} ids")
        if len(set(image_ids)) != len(image_ids):
            raise ValueError("push: image ids must be distinct within one call")
        new = F.normalize(embeddings.detach().float(), dim=-1)                        # (N, E)
        if self.embeddings is not None:
            codes = self._code([*self.image_ids, *image_ids])                          # one table for both
            keep = ~torch.isin(codes[:len(self)], codes[len(self):])                   # (P,) not seen again
            old = self.embeddings.to(new.device)[keep.to(new.device)]                  # (P', E)
            new = torch.cat([old, new])                                                # (P' + N, E)
            image_ids = [i for i, k in zip(self.image_ids, keep.tolist()) if k] + list(image_ids)
        self.embeddings = new[-self.size:]
        self.image_ids = list(image_ids)[-self.size:]

    @torch.no_grad()
    def neighbours(self, queries: torch.Tensor, query_ids: Sequence[str], k: int,
                   exclude: Sequence[str] = ()) -> PoolNeighbours:
        """The ``k`` pool images nearest (cosine) to each query, never the query's own image nor one of
        ``exclude`` (the batch's images).

        Args:
            queries: (B, E) the captions' own images' embeddings (normalised here).
            query_ids: (B,) the captions' own image ids.
        """
        B, E = queries.shape
        if len(query_ids) != B:
            raise ValueError(f"{B} queries but {len(query_ids)} query ids")
        device = queries.device
        out_emb = torch.zeros(B, k, E, device=device)
        out_valid = torch.zeros(B, k, dtype=torch.bool, device=device)
        out_ids: list[list[str | None]] = [[None] * k for _ in range(B)]
        if not len(self) or k == 0:
            return PoolNeighbours(out_emb, out_valid, out_ids)
        pool = self.embeddings.to(device=device, dtype=torch.float32)                  # (P, E)
        sim = F.normalize(queries.detach().float(), dim=-1) @ pool.T                   # (B, P)
        P, X = len(self), len(exclude)
        codes = self._code([*self.image_ids, *exclude, *query_ids])                    # one table for all three
        pooled = codes[:P]                                                             # (P,)
        shared = torch.isin(pooled, codes[P:P + X])                                    # (P,)
        own = codes[P + X:, None] == pooled[None, :]                                   # (B, P)
        sim = sim.masked_fill((shared[None, :] | own).to(device), float("-inf"))
        top = sim.topk(min(k, len(self)), dim=1)                                       # (B, k')
        got = torch.isfinite(top.values)                                               # (B, k')
        kk = top.indices.shape[1]
        out_emb[:, :kk] = pool[top.indices] * got[..., None]
        out_valid[:, :kk] = got
        for b, (row, ok) in enumerate(zip(top.indices.tolist(), got.tolist())):
            for j in range(kk):
                if ok[j]:
                    out_ids[b][j] = self.image_ids[row[j]]
        return PoolNeighbours(out_emb, out_valid, out_ids)

    def state_dict(self) -> dict:
        """Plain tensors and strings (a checkpoint loads with ``weights_only=True``)."""
        return {"size": self.size, "image_ids": list(self.image_ids),
                "embeddings": None if self.embeddings is None else self.embeddings.detach().cpu()}

    def load_state_dict(self, state: dict) -> None:
        self.size = int(state["size"])
        self.image_ids = list(state["image_ids"])
        self.embeddings = state["embeddings"]
        self._codes = {}
