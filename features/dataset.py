"""A torch ``Dataset`` over a feature store, batched for DataLoader workers.

    ds = RegionFeatureDataset("coco.h5", image_ids, max_regions=100)
    loader = DataLoader(ds, batch_size=64, num_workers=2, collate_fn=collate_regions)
    for batch in loader:          # RegionBatch of torch tensors
        batch.features            # (B, R, D) float32, R = max_regions + 1 (global region first)
        batch.mask                # (B, R) bool, True = real region

The dataset implements ``__getitems__``, so a DataLoader worker reads a whole batch straight into
tensors it allocates in shared memory: no per-image tensors, no collate copy, and the main process
receives file descriptors instead of pickled bytes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch
from torch.utils.data import Dataset, get_worker_info

from .store import FeatureStore, RegionBatch, RegionFeatures

__all__ = ["RegionFeatureDataset", "collate_regions"]


class RegionFeatureDataset(Dataset):
    """Images of a feature store, item ``i`` being ``image_ids[i]``.

    Args:
        store: a path or a :class:`FeatureStore` (opened lazily in each worker).
        image_ids: images to serve, in order; ``None`` serves the whole store.
        max_regions: detector regions per image after padding/truncation; ``None`` = the store's largest
            count, so nothing is truncated.
        add_global: prepend the mean-pooled global region (ViLBERT), so ``R = max_regions + 1``.
        dtype: ``torch.float32`` (default) or ``torch.float16``: features as stored, half the bytes to move
            and no conversion on the CPU; call ``.float()`` after moving the batch to the GPU.
    """

    def __init__(self, store: str | Path | FeatureStore, image_ids: Sequence[str] | None = None, *,
                 max_regions: int | None = None, add_global: bool = True, dtype: torch.dtype = torch.float32):
        if dtype not in (torch.float32, torch.float16):
            raise ValueError(f"dtype must be torch.float32 or torch.float16, got {dtype}")
        self.store = store if isinstance(store, FeatureStore) else FeatureStore(store)
        self.image_ids = [str(i) for i in image_ids] if image_ids is not None else None
        self.max_regions = max_regions
        self.add_global = add_global
        self.dtype = dtype

    def _ids(self) -> list[str]:
        return self.image_ids if self.image_ids is not None else self.store.image_ids

    def __len__(self) -> int:
        return len(self._ids())

    def __getitem__(self, index: int) -> RegionFeatures:
        r = self.store.read(self._ids()[index], self._keep(), self.add_global)
        if self.dtype == torch.float16:
            r.features = r.features.astype("float16")
        return r

    def __getitems__(self, indices: Sequence[int]) -> RegionBatch:
        ids = self._ids()
        B, R, D = len(indices), self._keep() + int(self.add_global), self.store.feature_dim
        shared = get_worker_info() is not None  # in a worker: allocate where the main process can map it
        t = RegionBatch([], *(_empty(shape, dtype, shared) for shape, dtype in (
            ((B, R, D), self.dtype), ((B, R, 5), torch.float32), ((B, R, 4), torch.float32),
            ((B, R), torch.bool), ((B, 2), torch.int64))))
        views = RegionBatch([], t.features.numpy(), t.geometry.numpy(), t.boxes.numpy(), t.mask.numpy(),
                            t.sizes.numpy())
        self.store.read_batch([ids[i] for i in indices], self._keep(), self.add_global, out=views)
        t.image_ids = views.image_ids
        return t

    def _keep(self) -> int:
        if self.max_regions is not None:
            return self.max_regions
        _ = len(self.store)  # opens the store (lazily, in this process)
        return self.store.max_regions


def _empty(shape: tuple[int, ...], dtype: torch.dtype, shared: bool) -> torch.Tensor:
    """An uninitialised tensor, allocated in shared memory when ``shared`` (as ``default_collate`` does in
    workers: ``share_memory_()`` on a fresh tensor would allocate twice and copy)."""
    if not shared:
        return torch.empty(shape, dtype=dtype)
    try:
        storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(math.prod(shape))
        return torch.empty(0, dtype=dtype).new(storage).view(shape)
    except (AttributeError, RuntimeError):  # private API moved: fall back to the public one
        return torch.empty(shape, dtype=dtype).share_memory_()


def collate_regions(items: RegionBatch | list[RegionFeatures]) -> RegionBatch:
    """DataLoader ``collate_fn``: passes batches from ``__getitems__`` through, stacks single items otherwise."""
    if isinstance(items, RegionBatch):
        return items
    return RegionBatch(
        [it.image_id for it in items],
        torch.stack([torch.from_numpy(it.features) for it in items]),  # (B, R, D)
        torch.stack([torch.from_numpy(it.geometry) for it in items]),  # (B, R, 5)
        torch.stack([torch.from_numpy(it.boxes) for it in items]),  # (B, R, 4)
        torch.stack([torch.from_numpy(it.mask) for it in items]),  # (B, R)
        torch.tensor([[it.width, it.height] for it in items], dtype=torch.int64))  # (B, 2)
