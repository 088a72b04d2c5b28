"""The feature store: region features, boxes and image sizes of many images in one HDF5 file.

Layout (format version 1)::

    STORE.h5
    ├── attrs: format="grounded-composer-features", format_version=1, feature_dim, dtype ("float16"),
    │          boxes_known (False for sources without boxes, e.g. SCAN's .npy), source, num_images,
    │          max_regions (largest region count of any image)
    ├── features/<image_id>   (N, D) float16, contiguous, one dataset per image
    ├── boxes/<image_id>      (N, 4) float32 pixel boxes x1, y1, x2, y2 (absent when boxes_known is False)
    └── index/                one row per committed image, in insertion order
        ├── image_id          utf-8 strings
        ├── num_regions       int32 N
        ├── width, height     int32 image size in pixels (0 = unknown)
        └── features_offset, boxes_offset   int64 byte offsets of the contiguous datasets (-1 = none)

Design choices:

* **Committed index.** Writers create an image's datasets, flush, then append its index row and bump
  ``num_images``, flush again (:meth:`FeatureStoreWriter.commit`). Readers only see indexed images, so a
  converter killed between commits leaves a valid store, and the rerun resumes after the last commit.
  SIGINT/SIGTERM arriving during a commit are deferred until it ends. Only SIGKILL or power loss in the
  milliseconds of a flush can damage the file; :mod:`features.check` detects that.
* **One pread per image.** A contiguous, unfiltered HDF5 dataset is one byte range of the file. The
  index keeps its offset (HDF5's own ``H5Dget_offset``), so a read is an ``os.preadv`` into a reusable
  buffer: ~40 us for 100 x 2048 float16, against ~300 us through h5py's per-dataset machinery. Stores
  written with ``compression="gzip"`` (or rewritten by ``h5repack``) fall back to h5py reads.
* **Lazy, per process.** Nothing is opened in ``__init__``; the file is opened on first use and again
  in every process that uses the object after a fork (the pid is checked), so a ``FeatureStore`` can be
  handed to DataLoader workers. Pickling drops the handles.
* **Never whole.** The reader holds the index (ids, counts, offsets: a few MB for COCO) and one
  scratch buffer; feature data are read per image on demand.
* The store is written once and then read: no SWMR. HDF5's file locking refuses a reader while a
  writer holds the file (set ``HDF5_USE_FILE_LOCKING=FALSE`` on file systems without locks).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import h5py
import numpy as np

from .geometry import GLOBAL_GEOMETRY, box_geometry

__all__ = ["FeatureStore", "FeatureStoreWriter", "FeatureStoreError", "RegionFeatures", "RegionBatch",
           "FORMAT_NAME", "FORMAT_VERSION", "h5_name"]

logger = logging.getLogger(__name__)

FORMAT_NAME = "grounded-composer-features"
FORMAT_VERSION = 1
_INDEX_FIELDS = {  # name -> dtype of the index datasets
    "image_id": h5py.string_dtype("utf-8"),
    "num_regions": np.int32,
    "width": np.int32,
    "height": np.int32,
    "features_offset": np.int64,
    "boxes_offset": np.int64,
}
_STORE_DTYPES = ("float16", "float32")


class FeatureStoreError(ValueError):
    """A feature store cannot be used. The message names the file, the problem and the fix."""


def h5_name(image_id: str) -> str:
    """The HDF5 link name of an image id (``/`` and ``%`` escaped; HDF5 names cannot contain ``/``).

    >>> h5_name("391895"), h5_name("val2014/COCO_1.jpg"), h5_name(".")
    ('391895', 'val2014%2FCOCO_1.jpg', '%2E')
    """
    name = image_id.replace("%", "%25").replace("/", "%2F")
    return "%2E" if name == "." else name


def _open_h5(path: Path, mode: str) -> h5py.File:
    """``h5py.File`` with the errors users meet rewritten to say what happened and what to do."""
    try:
        return h5py.File(path, mode)
    except FileNotFoundError:
        raise FeatureStoreError(f"feature store not found: {path}. Convert features into it first (python -m "
                                f"features.convert_butd_tsv ... --out {path}; see docs/features.md)") from None
    except OSError as err:
        msg = str(err)
        if "truncated file" in msg:
            raise FeatureStoreError(
                f"{path}: the file is truncated ({msg.split('(', 1)[-1].rstrip(')')}). It was cut short "
                f"by an interrupted copy or download, or a converter killed mid-write; copy it again, or "
                f"delete it and rerun the converter") from None
        if "signature not found" in msg:
            raise FeatureStoreError(f"{path}: not an HDF5 file (file signature not found); a feature store is "
                                    f"written by the features.convert_* tools (see docs/features.md)") from None
        if "already open" in msg:
            raise FeatureStoreError(
                f"{path}: this process already has the file open in another mode ({msg}); close the "
                f"FeatureStore reading it (store.close()) before writing, or the writer before reading") from None
        if "lock" in msg:
            raise FeatureStoreError(
                f"{path}: HDF5 could not lock the file ({msg}). Another process is writing it; wait for it, or "
                f"on file systems without locking set HDF5_USE_FILE_LOCKING=FALSE") from None
        raise FeatureStoreError(f"{path}: cannot be opened as HDF5 ({msg}); it is damaged, delete it and "
                                f"convert again") from None


@dataclass
class RegionFeatures:
    """The regions of one image, padded to a fixed count.

    Attributes:
        image_id: the image.
        features: ``(R, D)`` float32; row 0 is the mean-pooled global region when it was asked for.
        geometry: ``(R, 5)`` float32 ``[x1/w, y1/h, x2/w, y2/h, area fraction]`` (zeros when the store has
            no boxes; ``[0, 0, 1, 1, 1]`` for the global region).
        boxes: ``(R, 4)`` float32 pixel boxes (zeros for padding, unknown boxes and the global region).
        mask: ``(R,)`` bool, True = a real region (attend), False = padding.
        width, height: the image size in pixels (0 when unknown).
    """

    image_id: str
    features: np.ndarray
    geometry: np.ndarray
    boxes: np.ndarray
    mask: np.ndarray
    width: int
    height: int


@dataclass
class RegionBatch:
    """Regions of ``B`` images, padded to ``R`` rows. Fields as in :class:`RegionFeatures`, batched:
    features ``(B, R, D)``, geometry ``(B, R, 5)``, boxes ``(B, R, 4)``, mask ``(B, R)`` (True = real),
    sizes ``(B, 2)`` as (width, height). numpy arrays from :meth:`FeatureStore.read_batch`, torch tensors
    from :class:`features.dataset.RegionFeatureDataset`."""

    image_ids: list[str]
    features: object
    geometry: object
    boxes: object
    mask: object
    sizes: object

    def __len__(self) -> int:
        return len(self.image_ids)


class FeatureStore:
    """Read-only access to a feature store, opened lazily in each process.

    >>> store = FeatureStore("coco.h5")                      # doctest: +SKIP
    >>> r = store.read("391895", max_regions=100)            # doctest: +SKIP
    >>> r.features.shape, r.mask.sum()                       # doctest: +SKIP
    ((101, 2048), 37)

    Args:
        path: the ``.h5`` file.
        verify_offsets: check a sample of stored byte offsets against HDF5 at open, falling back to h5py
            reads if the file was rewritten (``h5repack``) since.
    """

    def __init__(self, path: str | Path, *, verify_offsets: bool = True):
        self.path = Path(path)
        self.verify_offsets = verify_offsets
        self._pid: int | None = None  # the process the handles below belong to

    # ---- opening ---------------------------------------------------------------------------------
    def _ensure_open(self) -> None:
        if self._pid == os.getpid():
            return
        # A fresh process (first use, or a forked DataLoader worker): open our own handles. Handles
        # inherited through fork are dropped, not shared.
        self._h5 = None
        self._fd = None
        h5 = _open_h5(self.path, "r")
        attrs = h5.attrs
        if attrs.get("format") != FORMAT_NAME:
            h5.close()
            raise FeatureStoreError(
                f"{self.path}: not a grounded-composer feature store (no format={FORMAT_NAME!r} attribute). "
                f"Convert the features with python -m features.convert_butd_tsv / convert_scan_npy / "
                f"convert_lmdb (see docs/features.md)")
        version = int(attrs.get("format_version", -1))
        if version > FORMAT_VERSION:
            h5.close()
            raise FeatureStoreError(f"{self.path}: store format version {version} is newer than this library "
                                    f"reads ({FORMAT_VERSION}); upgrade grounded-composer")
        self._feature_dim = int(attrs["feature_dim"])
        self._dtype = np.dtype(str(attrs["dtype"]))
        self._boxes_known = bool(attrs["boxes_known"])
        self._source = str(attrs.get("source", ""))
        self._max_regions = int(attrs.get("max_regions", 0))
        n = int(attrs["num_images"])
        index = h5["index"]
        self._ids = [str(s) for s in index["image_id"].asstr()[:n]]
        self._num_regions = index["num_regions"][:n].astype(np.int64)
        self._width = index["width"][:n].astype(np.int64)
        self._height = index["height"][:n].astype(np.int64)
        self._feat_off = index["features_offset"][:n]
        self._box_off = index["boxes_offset"][:n]
        self._row = {image_id: i for i, image_id in enumerate(self._ids)}
        self._fast = bool(n) and bool(np.all(self._feat_off >= 0)) and \
            (not self._boxes_known or bool(np.all(self._box_off >= 0)))
        if self._fast and self.verify_offsets:
            self._fast = self._offsets_match(h5, sample=16)
            if not self._fast:
                logger.warning("%s: stored byte offsets do not match the file (was it rewritten by h5repack?); "
                               "reading through h5py, which is several times slower", self.path)
        self._h5 = h5
        self._fd = os.open(self.path, os.O_RDONLY) if self._fast else None
        self._scratch = np.empty((max(self._max_regions, 1), self._feature_dim), dtype=self._dtype)  # (N_max, D)
        self._pid = os.getpid()

    def _offsets_match(self, h5: h5py.File, sample: int) -> bool:
        n = len(self._ids)
        rows = sorted({0, n - 1, *np.linspace(0, n - 1, min(sample, n)).astype(int).tolist()})
        for i in rows:
            name = h5_name(self._ids[i])
            if h5["features"][name].id.get_offset() != self._feat_off[i]:
                return False
            if self._boxes_known and h5["boxes"][name].id.get_offset() != self._box_off[i]:
                return False
        return True

    def close(self) -> None:
        if self._pid == os.getpid():
            if self._fd is not None:
                os.close(self._fd)
            if self._h5 is not None:
                self._h5.close()
        self._pid = None

    def __enter__(self) -> "FeatureStore":
        self._ensure_open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {"path": self.path, "verify_offsets": self.verify_offsets, "_pid": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # ---- store attributes (each opens the store in this process if needed) -------------------------
    @property
    def feature_dim(self) -> int:
        """``D``, the size of a region feature."""
        self._ensure_open()
        return self._feature_dim

    @property
    def dtype(self) -> np.dtype:
        """On-disk feature dtype (float16 unless written with ``dtype="float32"``)."""
        self._ensure_open()
        return self._dtype

    @property
    def boxes_known(self) -> bool:
        """False for sources without boxes (SCAN's .npy): geometry reads as zeros."""
        self._ensure_open()
        return self._boxes_known

    @property
    def max_regions(self) -> int:
        """The largest region count of any image."""
        self._ensure_open()
        return self._max_regions

    @property
    def source(self) -> str:
        """Where the features came from, as the converter recorded it."""
        self._ensure_open()
        return self._source

    # ---- the index ---------------------------------------------------------------------------------
    @property
    def image_ids(self) -> list[str]:
        """Ids of all committed images, in the order they were written."""
        self._ensure_open()
        return self._ids

    def __len__(self) -> int:
        self._ensure_open()
        return len(self._ids)

    def __contains__(self, image_id: object) -> bool:
        self._ensure_open()
        return str(image_id) in self._row

    def num_regions(self, image_id: str) -> int:
        i = self._row_of(image_id)
        return int(self._num_regions[i])

    def image_size(self, image_id: str) -> tuple[int, int]:
        """``(width, height)`` in pixels, ``(0, 0)`` when the source did not give it."""
        i = self._row_of(image_id)
        return int(self._width[i]), int(self._height[i])

    def _row_of(self, image_id: str) -> int:
        self._ensure_open()
        try:
            return self._row[str(image_id)]
        except KeyError:
            raise KeyError(f"image {image_id!r} is not in the feature store {self.path} ({len(self._ids)} images, "
                           f"e.g. {self._ids[:3]}); run python -m features.check {self.path} --captions CORPUS "
                           f"to list every missing image") from None

    # ---- raw reads -----------------------------------------------------------------------------------
    def read_raw(self, image_id: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The stored arrays of one image: features ``(N, D)`` in the store's dtype and boxes ``(N, 4)``
        float32 (``None`` when the store has no boxes). Fresh arrays, safe to keep."""
        feats, boxes = self._read_into_scratch(self._row_of(image_id))
        return feats.copy(), boxes

    def _read_into_scratch(self, i: int, dest: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Features of row ``i`` read into ``dest`` (``(N, D)``, the store's dtype) or else into a view of
        the per-process scratch buffer (valid until the next read), and the boxes (a fresh array)."""
        n = int(self._num_regions[i])
        if dest is None:
            if n > self._scratch.shape[0]:
                self._scratch = np.empty((n, self._feature_dim), dtype=self._dtype)
            dest = self._scratch[:n]  # (N, D)
        boxes = None
        if self._fast:
            if os.preadv(self._fd, [dest], int(self._feat_off[i])) != dest.nbytes:
                raise self._truncated(i, "features")
            if self._boxes_known:
                boxes = np.empty((n, 4), dtype=np.float32)
                if os.preadv(self._fd, [boxes], int(self._box_off[i])) != boxes.nbytes:
                    raise self._truncated(i, "boxes")
        else:
            name = h5_name(self._ids[i])
            try:
                self._h5["features"][name].read_direct(dest)
                if self._boxes_known:
                    boxes = self._h5["boxes"][name][()].astype(np.float32, copy=False)
            except (KeyError, OSError, TypeError, ValueError) as err:
                raise FeatureStoreError(f"{self.path}: image {self._ids[i]!r} is indexed but its datasets cannot "
                                        f"be read ({err}); run python -m features.check {self.path}") from None
        return dest, boxes

    def _truncated(self, i: int, what: str) -> FeatureStoreError:
        return FeatureStoreError(f"{self.path}: the file ends inside image {self._ids[i]!r}'s {what}; the store is "
                                 f"truncated (interrupted copy?). Copy it again or rerun the converter")

    # ---- padded reads --------------------------------------------------------------------------------
    def read(self, image_id: str, max_regions: int | None = None, add_global: bool = True) -> RegionFeatures:
        """One image's regions as float32, padded (or truncated) to ``max_regions`` detector regions.

        Args:
            image_id: the image.
            max_regions: regions kept (the first ones in stored order); ``None`` keeps the image's own count
                without padding. The output has ``R = max_regions + add_global`` rows.
            add_global: prepend ViLBERT's global region: the mean of *all* stored regions (before
                truncation, as ViLBERT computes it) with geometry ``[0, 0, 1, 1, 1]``.
        """
        batch = self.read_batch([image_id], max_regions if max_regions is not None else
                                self.num_regions(image_id), add_global)
        return RegionFeatures(batch.image_ids[0], batch.features[0], batch.geometry[0], batch.boxes[0],
                              batch.mask[0], int(batch.sizes[0, 0]), int(batch.sizes[0, 1]))

    def read_batch(self, image_ids: Sequence[str], max_regions: int | None = None, add_global: bool = True,
                   out: RegionBatch | None = None, dtype: str = "float32") -> RegionBatch:
        """Regions of several images, padded to a common ``R = max_regions + add_global`` rows.

        ``max_regions=None`` pads to the largest count in the store. ``out`` may hold preallocated numpy
        arrays of the right shapes (e.g. views of shared-memory tensors); they are overwritten.
        ``dtype="float16"`` returns features as stored (when the store is float16): half the bytes and no
        conversion, for callers that convert on the GPU.
        """
        self._ensure_open()
        rows = [self._row_of(i) for i in image_ids]
        keep = self._max_regions if max_regions is None else int(max_regions)
        g = int(bool(add_global))
        B, R, D = len(rows), keep + g, self._feature_dim
        if out is None:
            out = RegionBatch([], np.empty((B, R, D), np.dtype(dtype)), np.empty((B, R, 5), np.float32),
                              np.empty((B, R, 4), np.float32), np.empty((B, R), np.bool_),
                              np.empty((B, 2), np.int64))
        out.image_ids = [self._ids[i] for i in rows]
        for b, i in enumerate(rows):
            self._fill(i, keep, g, out.features[b], out.geometry[b], out.boxes[b], out.mask[b])
            out.sizes[b, 0], out.sizes[b, 1] = self._width[i], self._height[i]
        return out

    def _fill(self, i: int, keep: int, g: int, feat_out: np.ndarray, geo_out: np.ndarray, box_out: np.ndarray,
              mask_out: np.ndarray) -> None:
        """Write row ``i`` into one image's slices of a batch: ``feat_out (R, D)``, ``geo_out (R, 5)``,
        ``box_out (R, 4)``, ``mask_out (R,)``."""
        n = int(self._num_regions[i])
        k = min(n, keep)
        if k == n and feat_out.dtype == self._dtype:  # straight from the file into the batch
            feats, boxes = self._read_into_scratch(i, dest=feat_out[g:g + n])
        else:
            feats, boxes = self._read_into_scratch(i)  # (N, D) store dtype, (N, 4) | None
            _convert(feats[:k], feat_out[g:g + k])
        feat_out[g + k:] = 0
        if g:
            feat_out[0] = _mean_rows(feats)  # over all N stored regions, as ViLBERT
            geo_out[0] = GLOBAL_GEOMETRY
            box_out[0] = 0.0
        if boxes is not None and self._width[i] > 0 and self._height[i] > 0:
            geo_out[g:g + k] = box_geometry(boxes[:k], self._width[i], self._height[i])
            box_out[g:g + k] = boxes[:k]
        else:
            geo_out[g:g + k] = 0.0
            box_out[g:g + k] = 0.0
        geo_out[g + k:] = 0.0
        box_out[g + k:] = 0.0
        mask_out[:g + k] = True
        mask_out[g + k:] = False

    def iter_raw(self, image_ids: Sequence[str] | None = None) -> Iterator[tuple[str, np.ndarray, np.ndarray | None]]:
        """``(image_id, features (N, D), boxes (N, 4) | None)`` per image; the arrays are reused between steps."""
        self._ensure_open()
        for image_id in self._ids if image_ids is None else image_ids:
            feats, boxes = self._read_into_scratch(self._row_of(image_id))
            yield image_id, feats, boxes


_TORCH_GRAIN = 32768  # at::internal::GRAIN_SIZE: smaller ops run on the calling thread
_torch_module: list = []  # [torch] or [None], filled on first use: importing the store stays light


def _torch():
    """torch if importable (a project dependency, but the store does not need it), imported lazily."""
    if not _torch_module:
        try:
            import torch
        except ImportError:  # pragma: no cover
            torch = None
        _torch_module.append(torch)
    return _torch_module[0]


def _row_blocks(x: np.ndarray) -> range:
    """Row starts of blocks under torch's parallel grain size. Spreading one image over intra-op threads
    costs more than it saves, and on a loaded machine (threads waiting at a barrier for a descheduled
    peer) 50x more; blocks keep every op on the calling thread whatever ``torch.set_num_threads`` says."""
    return range(0, x.shape[0], max(1, (_TORCH_GRAIN - 1) // max(1, x.shape[1])))


def _convert(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst[...] = src`` across float dtypes; torch casts float16 ~10x faster than numpy (scalar casts)."""
    torch = _torch()
    if src.dtype == dst.dtype or torch is None or not src.size or src.dtype.kind != "f":
        dst[...] = src
        return
    if not src.flags.writeable:  # torch wraps only writable arrays (np.frombuffer's are not): a cheap copy
        src = src.copy()
    s, d = torch.from_numpy(src), torch.from_numpy(dst)
    step = _row_blocks(src).step
    for r in _row_blocks(src):
        d[r:r + step].copy_(s[r:r + step])


def _mean_rows(x: np.ndarray) -> np.ndarray:
    """Mean over rows of ``(N, D)``, accumulated in float32."""
    torch = _torch()
    if x.dtype == np.float32 or torch is None:
        return x.mean(axis=0, dtype=np.float32)
    t = torch.from_numpy(x)
    step = _row_blocks(x).step
    acc = torch.zeros(x.shape[1], dtype=torch.float32)
    for r in _row_blocks(x):
        acc += t[r:r + step].sum(0, dtype=torch.float32)
    return (acc / x.shape[0]).numpy()




# ======================================================================================================
# writing


@dataclass
class _Pending:
    image_id: str
    features: np.ndarray  # (N, D) store dtype
    boxes: np.ndarray | None  # (N, 4) float32
    width: int
    height: int


class FeatureStoreWriter:
    """Append images to a feature store, committing in batches (see the module docstring).

    Opening an existing store resumes it: images already committed are reported by ``in`` and must not be
    added again. Use as a context manager; leaving the block commits what was added, even on an error or
    Ctrl-C (everything added passed the checks of :meth:`add`).

    Args:
        path: the ``.h5`` file, created if absent.
        feature_dim: ``D``; ``None`` takes it from the first image (or from the existing store).
        boxes_known: False for sources without boxes (SCAN's ``.npy``): no boxes are stored and geometry
            reads as zeros.
        source: a free-text note of where the features came from, kept in the store.
        dtype: on-disk dtype of features, ``float16`` (default, half the disk and I/O) or ``float32``.
        compression: ``None`` (default, fastest reads) or ``"gzip"`` (smaller, reads through h5py).
        commit_every: images buffered before an automatic commit.
        overwrite: delete an existing store instead of resuming it.
    """

    def __init__(self, path: str | Path, *, feature_dim: int | None = None, boxes_known: bool = True,
                 source: str = "", dtype: str = "float16", compression: str | None = None,
                 commit_every: int = 256, overwrite: bool = False):
        if dtype not in _STORE_DTYPES:
            raise ValueError(f"dtype must be one of {_STORE_DTYPES}, got {dtype!r}")
        if compression not in (None, "gzip"):
            raise ValueError(f"compression must be None or 'gzip', got {compression!r}")
        self.path = Path(path)
        self.commit_every = int(commit_every)
        self.compression = compression
        self._pending: list[_Pending] = []
        self._pending_ids: set[str] = set()
        if overwrite and self.path.exists():
            self.path.unlink()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        resuming = self.path.exists()
        self._h5 = _open_h5(self.path, "a")
        f = self._h5
        if resuming:
            self._check_resumable(feature_dim, boxes_known, dtype)
            self.feature_dim = int(f.attrs["feature_dim"]) or feature_dim
            self.boxes_known = bool(f.attrs["boxes_known"])
            self.dtype = np.dtype(str(f.attrs["dtype"]))
        else:
            f.attrs.update({"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "feature_dim": feature_dim or 0,
                            "dtype": dtype, "boxes_known": bool(boxes_known), "source": source, "num_images": 0,
                            "max_regions": 0, "compression": compression or "none"})
            for group in ("features", "boxes", "index"):
                f.create_group(group)
            for name, dt in _INDEX_FIELDS.items():
                f["index"].create_dataset(name, shape=(0,), maxshape=(None,), dtype=dt, chunks=(4096,))
            f.flush()
            self.feature_dim, self.boxes_known, self.dtype = feature_dim, bool(boxes_known), np.dtype(dtype)
        self._num = int(f.attrs["num_images"])
        self._max_regions = int(f.attrs["max_regions"])
        self._ids = set(f["index"]["image_id"].asstr()[: self._num].tolist())
        self._remove_uncommitted()
        if resuming and self._num:
            logger.info("resuming %s: %d images already committed", self.path, self._num)

    def _check_resumable(self, feature_dim: int | None, boxes_known: bool, dtype: str) -> None:
        attrs = dict(self._h5.attrs)
        problem = None
        have_dim = int(attrs.get("feature_dim", 0))
        if attrs.get("format") != FORMAT_NAME:
            problem = "exists but is not a feature store; choose another --out or pass --overwrite to replace it"
        elif feature_dim and have_dim and feature_dim != have_dim:
            problem = (f"holds {have_dim}-d features but these are {feature_dim}-d; write them to another store "
                       f"(or pass --overwrite to replace it)")
        elif bool(attrs["boxes_known"]) != bool(boxes_known):
            problem = (f"was written {'with' if attrs['boxes_known'] else 'without'} boxes; this source has "
                       f"{'boxes' if boxes_known else 'none'}; use another store")
        elif str(attrs["dtype"]) != dtype:
            problem = (f"stores {attrs['dtype']} features, asked for {dtype}; use the same --dtype to resume, "
                       f"or another store")
        if problem:
            self._h5.close()
            raise FeatureStoreError(f"{self.path} {problem}")

    def _remove_uncommitted(self) -> None:
        """Delete datasets of images written but never indexed (a run killed inside a commit)."""
        f = self._h5
        removed = 0
        if len(f["features"]) > self._num:
            names = {h5_name(i) for i in self._ids}
            for group in ("features", "boxes"):
                for name in [n for n in f[group] if n not in names]:
                    del f[group][name]
                    removed += 1
            f.flush()
        if removed:
            logger.warning("%s: removed %d dataset(s) of an interrupted commit; those images are converted again",
                           self.path, removed)

    def __contains__(self, image_id: object) -> bool:
        image_id = str(image_id)
        return image_id in self._ids or image_id in self._pending_ids

    @property
    def num_images(self) -> int:
        """Images committed so far (pending ones not included)."""
        return self._num

    def add(self, image_id: str, features: np.ndarray, boxes: np.ndarray | None, width: int = 0,
            height: int = 0) -> None:
        """Queue one image; raises ``ValueError`` naming the image when the arrays are not valid.

        Args:
            features: ``(N, D)`` any float dtype, N >= 1.
            boxes: ``(N, 4)`` pixel boxes x1, y1, x2, y2; ``None`` iff the store has no boxes.
            width, height: image size in pixels (required with boxes: geometry divides by them).
        """
        image_id = str(image_id)
        if image_id in self:
            raise ValueError(f"image {image_id!r} is already in {self.path}; skip ids that are `in` the writer")
        features = np.asarray(features)
        if features.ndim != 2 or features.shape[0] < 1:
            raise ValueError(f"image {image_id!r}: features must be (N, D) with N >= 1, got shape {features.shape}")
        if self.feature_dim is None or self.feature_dim == 0:
            self.feature_dim = int(features.shape[1])
            self._h5.attrs["feature_dim"] = self.feature_dim
        if features.shape[1] != self.feature_dim:
            raise ValueError(f"image {image_id!r}: {features.shape[1]}-d features, but the store holds "
                             f"{self.feature_dim}-d ones")
        stored = np.empty(features.shape, dtype=self.dtype)  # (N, D)
        with np.errstate(over="ignore"):  # overflow is reported below, naming the image
            _convert(np.ascontiguousarray(features), stored)
        if not _all_finite(stored):
            what = "NaN/Inf values" if not _all_finite(features) else \
                f"values beyond the float16 range (max |x| = {float(np.abs(features).max()):.4g})"
            raise ValueError(f"image {image_id!r}: features contain {what}"
                             + ("; write a float32 store (--dtype float32)" if "range" in what else ""))
        if self.boxes_known:
            if boxes is None:
                raise ValueError(f"image {image_id!r}: this store keeps boxes but none were given")
            boxes = np.asarray(boxes, dtype=np.float32)
            if boxes.shape != (features.shape[0], 4):
                raise ValueError(f"image {image_id!r}: boxes must be ({features.shape[0]}, 4), got {boxes.shape}")
            if not np.isfinite(boxes).all():
                raise ValueError(f"image {image_id!r}: boxes contain NaN/Inf")
            if not (width > 0 and height > 0):
                raise ValueError(f"image {image_id!r}: image size must be positive with boxes, got "
                                 f"width={width} height={height}")
        elif boxes is not None:
            raise ValueError(f"image {image_id!r}: the store was created with boxes_known=False; pass boxes=None")
        self._pending.append(_Pending(image_id, stored, boxes, int(width), int(height)))
        self._pending_ids.add(image_id)
        if len(self._pending) >= self.commit_every:
            self.commit()

    def commit(self) -> None:
        """Write pending images and index them. After it returns they survive any later kill."""
        if not self._pending:
            return
        f = self._h5
        with _deferred_signals():
            rows = {k: [] for k in _INDEX_FIELDS}
            for p in self._pending:
                name = h5_name(p.image_id)
                fd = self._create(f["features"], name, p.features)
                rows["features_offset"].append(_offset(fd))
                if p.boxes is not None:
                    bd = self._create(f["boxes"], name, p.boxes)
                    rows["boxes_offset"].append(_offset(bd))
                else:
                    rows["boxes_offset"].append(-1)
                rows["image_id"].append(p.image_id)
                rows["num_regions"].append(p.features.shape[0])
                rows["width"].append(p.width)
                rows["height"].append(p.height)
            f.flush()  # data first ...
            n0, n1 = self._num, self._num + len(self._pending)
            for key, values in rows.items():
                ds = f["index"][key]
                ds.resize((n1,))
                ds[n0:n1] = np.asarray(values, dtype=object if key == "image_id" else _INDEX_FIELDS[key])
            self._max_regions = max(self._max_regions, max(rows["num_regions"]))
            f.attrs["max_regions"] = self._max_regions
            f.attrs["num_images"] = n1  # ... then the index row count that makes them visible
            f.flush()
            self._num = n1
            self._ids.update(rows["image_id"])
            logger.debug("committed %d images (%d total) to %s", len(self._pending), n1, self.path)
            self._pending.clear()
            self._pending_ids.clear()

    def _create(self, group: h5py.Group, name: str, data: np.ndarray) -> h5py.Dataset:
        if name in group:  # left by an interrupted commit of this same run
            del group[name]
        if self.compression:
            return group.create_dataset(name, data=data, chunks=data.shape, compression=self.compression)
        return group.create_dataset(name, data=data)  # contiguous: one byte range, one pread

    def close(self) -> None:
        """Commit what is pending and close the file."""
        if self._h5 is None:
            return
        try:
            self.commit()
        finally:
            self._h5.close()
            self._h5 = None

    def __enter__(self) -> "FeatureStoreWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _offset(ds: h5py.Dataset) -> int:
    off = ds.id.get_offset()
    return -1 if off is None else int(off)


def _all_finite(a: np.ndarray) -> bool:
    """``np.isfinite(a).all()``; for float16, a bit test on the exponent (numpy's half isfinite is slow)."""
    if a.dtype == np.float16:
        return not bool(np.any((a.view(np.uint16) & 0x7C00) == 0x7C00))
    return bool(np.isfinite(a).all())


@contextmanager
def _deferred_signals():
    """Hold SIGINT/SIGTERM until the block ends, then deliver them (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def hold(signum, frame):
        received.append(signum)

    for s in old:
        signal.signal(s, hold)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in received:
            os.kill(os.getpid(), s)
