"""Visual feature stores (HDF5), converters from the formats the field distributes, and checks.

Knows nothing of models: it reads, writes and validates region features, boxes and geometry.

* :mod:`features.geometry` -- pixel boxes -> ViLBERT's 5-d position feature (pure numpy).
* :mod:`features.store` -- :class:`FeatureStore` (lazy, fork-safe reader) and :class:`FeatureStoreWriter`.
* :mod:`features.dataset` -- a torch ``Dataset`` reading whole batches in DataLoader workers.
* :mod:`features.check` -- ``python -m features.check``; :func:`require_valid_store` for training/evaluation.
* ``features.convert_butd_tsv`` / ``convert_scan_npy`` / ``convert_lmdb`` -- streaming, resumable converters.
* :mod:`features.extract` -- features from raw images with a transformers backbone (grid or RoIAlign).

See ``docs/features.md`` for the store layout and the exact commands for Flickr30K and COCO.
"""

import importlib

__all__ = ["FeatureStore", "FeatureStoreWriter", "FeatureStoreError", "RegionFeatures", "RegionBatch",
           "box_geometry", "Problem", "validate_store", "require_valid_store"]

# Imported on first access (PEP 562), so that `python -m features.check` does not find its own module
# already imported, and `import features.world` stays light.
_LAZY = {"FeatureStore": "store", "FeatureStoreWriter": "store", "FeatureStoreError": "store",
         "RegionFeatures": "store", "RegionBatch": "store", "box_geometry": "geometry",
         "Problem": "check", "validate_store": "check", "require_valid_store": "check"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
