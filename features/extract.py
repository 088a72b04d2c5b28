"""Extract region features from raw images with a pretrained vision backbone loaded through transformers.

    python -m features.extract --images flickr30k-images/ --model facebook/dinov2-base --out data/f30k_dinov2.h5
    python -m features.extract --images val2014/ --model ./my-resnet --out data/coco_roi.h5 --boxes boxes.json

Two modes:

* **grid** (default): every cell of the backbone's last feature map is a region, its box the cell's
  rectangle in the original image's pixels. CNNs (ResNet, ConvNeXt, RegNet: ``(B, C, H, W)``) and
  ViT-style encoders (ViT, DeiT, BEiT, DINOv2, CLIP/SigLIP vision towers: ``(B, T, C)`` tokens, whose
  leading CLS/register tokens are dropped and patches reshaped to the grid) are both handled.
* **boxes** (``--boxes FILE``): regions are the given pixel boxes, pooled from the feature map with
  :func:`features.roi_align.roi_align` (``--pool`` x ``--pool`` bins, averaged). ``FILE`` is JSON
  ``{"image_id": [[x1, y1, x2, y2], ...]}`` or JSON lines ``{"image_id": ..., "boxes": [...]}``.

Images are resized (not cropped) to the backbone's input size and normalised with the mean/std of its
``preprocessor_config.json``, so the feature map covers the whole image and cell boxes map back
exactly. Batched, on the GPU when there is one, resumable (images already in the store are skipped;
every batch is committed). **Real use needs pretrained weights**: a local directory saved with
``save_pretrained`` or a hub name on a machine with internet; the tests run a tiny random config.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .geometry import grid_boxes
from .ids import ID_FORMATS, normalize_image_id
from .ingest import ConversionError, setup_cli_logging, run_conversion
from .roi_align import roi_align
from .store import FeatureStoreWriter

__all__ = ["ExtractConfig", "Backbone", "load_backbone", "list_images", "read_boxes", "extract", "main"]

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff")
_IMAGENET_MEAN, _IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass
class ExtractConfig:
    """What :func:`extract` does.

    Attributes:
        images: directory of images (searched recursively); an image's id is its file name mapped by ``id_format``.
        model: a local ``save_pretrained`` directory or a hub name.
        out: the feature store to create or resume.
        boxes: JSON/JSONL of pixel boxes per image id (box mode); ``None`` = grid mode.
        batch_size: images per forward pass (and per commit).
        device: ``auto`` (cuda when available), ``cpu``, ``cuda``, ``cuda:1``, ...
        image_size: square input side; ``None`` = the model's (its processor's crop/resize size, else the
            config's ``image_size``, else 224).
        id_format: how file names become ids (``stem``: ``1000092795.jpg`` -> ``1000092795``; ``int`` for COCO).
        pool: RoIAlign output bins per side in box mode (averaged into one vector per box).
        sampling_ratio: bilinear samples per bin per side in box mode.
        num_workers: image decoding processes.
        dtype: on-disk feature dtype.
        skip_bad: skip unreadable images (listed at the end) instead of stopping.
    """

    images: Path
    model: str
    out: Path
    boxes: Path | None = None
    batch_size: int = 16
    device: str = "auto"
    image_size: int | None = None
    id_format: str = "stem"
    pool: int = 7
    sampling_ratio: int = 2
    num_workers: int = 2
    dtype: str = "float16"
    skip_bad: bool = False

    def __post_init__(self):
        self.images, self.out = Path(self.images), Path(self.out)
        self.boxes = Path(self.boxes) if self.boxes is not None else None
        if self.batch_size < 1 or self.pool < 1 or self.sampling_ratio < 1:
            raise ValueError(f"batch_size, pool and sampling_ratio must be >= 1, got {self.batch_size}, "
                             f"{self.pool}, {self.sampling_ratio}")
        if self.id_format not in ID_FORMATS:
            raise ValueError(f"id_format must be one of {ID_FORMATS}, got {self.id_format!r}")


# ---- the backbone ---------------------------------------------------------------------------------------


@dataclass
class Backbone:
    """A vision model and how to feed it: square ``image_size`` input, normalised by ``mean``/``std``."""

    model: torch.nn.Module
    image_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    rescale: float
    resample: int
    patch_size: int | None
    name: str

    @torch.inference_mode()
    def feature_map(self, pixels: torch.Tensor) -> torch.Tensor:
        """``(B, 3, S, S)`` normalised pixels -> ``(B, C, h, w)`` last-layer feature map."""
        hidden = self.model(pixel_values=pixels).last_hidden_state
        if hidden.dim() == 4:  # CNN: (B, C, h, w)
            return hidden
        if hidden.dim() != 3:
            raise ValueError(f"{self.name}: last_hidden_state has shape {tuple(hidden.shape)}; expected a feature "
                             f"map (B, C, H, W) or tokens (B, T, C)")
        B, T, C = hidden.shape
        gh, gw = self._token_grid(T, pixels.shape[-2], pixels.shape[-1])
        patches = hidden[:, T - gh * gw:]  # (B, gh*gw, C): drop CLS / register tokens in front
        return patches.transpose(1, 2).reshape(B, C, gh, gw)  # (B, C, gh, gw)

    def _token_grid(self, T: int, H: int, W: int) -> tuple[int, int]:
        if self.patch_size:
            gh, gw = H // self.patch_size, W // self.patch_size
            if 0 <= T - gh * gw <= 16:
                return gh, gw
        for prefix in range(0, 17):  # hierarchical encoders (Swin) end on a coarser grid: find the square
            side = math.isqrt(T - prefix) if T > prefix else 0
            if side and side * side == T - prefix:
                return side, side
        raise ValueError(f"{self.name}: cannot lay {T} tokens out as a grid for a {H}x{W} input; pass a model "
                         f"whose last_hidden_state is patch tokens or a feature map")


def load_backbone(model_name: str, device: torch.device, image_size: int | None = None) -> Backbone:
    """Load ``AutoModel`` (its vision tower for CLIP-like models) and its preprocessing settings."""
    from transformers import AutoModel
    from transformers.image_processing_utils import ImageProcessingMixin

    try:
        model = AutoModel.from_pretrained(model_name)
    except OSError as err:
        raise ConversionError(f"cannot load model {model_name!r} ({err}). Pass a local directory written by "
                              f"save_pretrained, or a hub name on a machine with internet access") from None
    if hasattr(model, "vision_model"):  # CLIP, SigLIP, ...: image tower only
        model = model.vision_model
    model.eval().to(device)
    try:
        proc, _ = ImageProcessingMixin.get_image_processor_dict(model_name)
    except (OSError, ValueError):
        proc = {}
        logger.warning("%s has no preprocessor_config.json; using ImageNet mean/std", model_name)
    cfg = getattr(model, "config", None)
    # the processor's size first: DINOv2's config says 518 (its position table) but it runs at 224
    size = image_size or _processor_side(proc) or getattr(cfg, "image_size", None) or 224
    if isinstance(size, (list, tuple)):
        size = size[0]
    patch = getattr(cfg, "patch_size", None)
    if isinstance(patch, (list, tuple)):
        patch = patch[0]
    return Backbone(model, int(size), tuple(proc.get("image_mean", _IMAGENET_MEAN)),
                    tuple(proc.get("image_std", _IMAGENET_STD)),
                    float(proc.get("rescale_factor", 1 / 255)) if proc.get("do_rescale", True) else 1.0,
                    int(proc.get("resample", 3)), int(patch) if patch else None, model_name)


def _processor_side(proc: dict) -> int | None:
    for key in ("crop_size", "size"):
        v = proc.get(key)
        if isinstance(v, dict):
            v = v.get("height") or v.get("shortest_edge")
        if isinstance(v, int):
            return v
    return None


# ---- inputs -----------------------------------------------------------------------------------------------


def list_images(root: Path, id_format: str) -> list[tuple[str, Path]]:
    """``(image_id, path)`` of every image under ``root``, sorted by path; duplicate ids are an error."""
    if not root.is_dir():
        raise FileNotFoundError(f"image directory not found: {root}")
    found: dict[str, Path] = {}
    for p in sorted(root.rglob("*")):
        if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file():
            image_id = normalize_image_id(p.name, id_format)
            if image_id in found:
                raise ConversionError(f"{p} and {found[image_id]} both map to image id {image_id!r} "
                                      f"(--id-format {id_format}); use another --id-format or separate runs")
            found[image_id] = p
    if not found:
        raise ConversionError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) under {root}")
    return list(found.items())


def read_boxes(path: Path) -> dict[str, np.ndarray]:
    """Pixel boxes per image id from JSON ``{id: [[x1, y1, x2, y2], ...]}`` or JSONL ``{"image_id", "boxes"}``."""
    text = path.read_text(encoding="utf-8")
    try:
        if text.lstrip().startswith("{") and path.suffix != ".jsonl":
            raw = {str(k): v for k, v in json.loads(text).items()}
        else:
            raw = {}
            for line in text.splitlines():
                if line.strip():
                    rec = json.loads(line)
                    raw[str(rec["image_id"])] = rec["boxes"]
    except (json.JSONDecodeError, KeyError, AttributeError) as err:
        raise ConversionError(f"{path}: expected JSON {{image_id: [[x1, y1, x2, y2], ...]}} or JSON lines with "
                              f"'image_id' and 'boxes' ({err})") from None
    boxes = {}
    for image_id, b in raw.items():
        arr = np.asarray(b, dtype=np.float32).reshape(-1, 4) if len(b) else np.zeros((0, 4), np.float32)
        if len(arr) == 0:
            raise ConversionError(f"{path}: image {image_id!r} has no boxes; drop it or give at least one")
        boxes[image_id] = arr
    return boxes


class _ImageDataset(torch.utils.data.Dataset):
    """Decoded, resized, normalised images; unreadable files yield ``None`` pixels and the error."""

    def __init__(self, items: list[tuple[str, Path]], backbone: Backbone):
        self.items = items
        self.size = backbone.image_size
        self.mean = torch.tensor(backbone.mean).view(3, 1, 1)
        self.std = torch.tensor(backbone.std).view(3, 1, 1)
        self.rescale = backbone.rescale
        self.resample = backbone.resample

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        from PIL import Image, UnidentifiedImageError

        image_id, path = self.items[i]
        try:
            with Image.open(path) as im:
                im = im.convert("RGB")
                width, height = im.size
                im = im.resize((self.size, self.size), resample=self.resample)
                arr = np.asarray(im, dtype=np.float32)  # (S, S, 3)
        except (OSError, UnidentifiedImageError, ValueError) as err:
            return image_id, str(path), None, 0, 0, f"cannot read image ({err})"
        pixels = torch.from_numpy(arr).permute(2, 0, 1) * self.rescale  # (3, S, S)
        return image_id, str(path), (pixels - self.mean) / self.std, width, height, None


def _collate(items):
    return items  # a list: pixels are stacked after dropping unreadable images


# ---- the loop -----------------------------------------------------------------------------------------------


def extract(cfg: ExtractConfig, *, progress: bool = True):
    """Run the extraction; returns :class:`features.ingest.IngestStats`."""
    from tqdm import tqdm

    from .ingest import IngestStats

    device = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available() else
                          "cpu" if cfg.device == "auto" else cfg.device)
    items = list_images(cfg.images, cfg.id_format)
    boxes = read_boxes(cfg.boxes) if cfg.boxes else None
    if boxes is not None:
        without = [i for i, _ in items if i not in boxes]
        if without:
            logger.warning("%d image(s) have no boxes in %s and are skipped, e.g. %s", len(without), cfg.boxes,
                           without[:5])
        items = [(i, p) for i, p in items if i in boxes]
    backbone = load_backbone(cfg.model, device, cfg.image_size)
    mode = "boxes" if boxes is not None else "grid"
    stats = IngestStats()
    with FeatureStoreWriter(cfg.out, boxes_known=True, dtype=cfg.dtype, commit_every=10 ** 9,
                            source=f"extract: {cfg.model} ({mode}, {backbone.image_size}px)") as writer:
        todo = [(i, p) for i, p in items if i not in writer]
        stats.skipped_existing = len(items) - len(todo)
        logger.info("extracting %d images (%d already in %s) with %s on %s, %s mode", len(todo),
                    stats.skipped_existing, cfg.out, cfg.model, device, mode)
        loader = torch.utils.data.DataLoader(_ImageDataset(todo, backbone), batch_size=cfg.batch_size,
                                             num_workers=cfg.num_workers if len(todo) > cfg.batch_size else 0,
                                             collate_fn=_collate)
        bar = tqdm(total=len(todo), unit="img", desc="extracting", disable=not progress, mininterval=1.0)
        for batch in loader:
            good = []
            for image_id, path, pixels, w, h, err in batch:
                if err is None:
                    good.append((image_id, pixels, w, h, path))
                elif cfg.skip_bad:
                    logger.warning("skipping %s: %s", path, err)
                    stats.bad.append((path, err))
                else:
                    raise ConversionError(f"{path}: {err}; remove the file or pass --skip-bad")
            if good:
                pixels = torch.stack([g[1] for g in good]).to(device)  # (B, 3, S, S)
                fmap = backbone.feature_map(pixels).float()  # (B, C, h, w)
                for b, (image_id, _, w, h, path) in enumerate(good):
                    try:
                        feats, regions = _regions(fmap, b, w, h, boxes[image_id] if boxes is not None else None, cfg)
                        writer.add(image_id, feats, regions, w, h)
                    except ValueError as err:  # ConversionError included
                        if not cfg.skip_bad:
                            raise ConversionError(f"{path} (image {image_id!r}): {err}") from None
                        logger.warning("skipping %s: %s", path, err)
                        stats.bad.append((path, str(err)))
                        continue
                    stats.written += 1
                    stats.regions += len(regions)
                writer.commit()  # every batch survives a kill
            bar.update(len(batch))
        bar.close()
    return stats


def _regions(fmap: torch.Tensor, b: int, width: int, height: int, boxes: np.ndarray | None,
             cfg: ExtractConfig) -> tuple[np.ndarray, np.ndarray]:
    """Features ``(N, C)`` and pixel boxes ``(N, 4)`` of image ``b`` of a ``(B, C, h, w)`` feature map."""
    _, C, h, w = fmap.shape
    if boxes is None:  # grid: one region per cell, row by row
        feats = fmap[b].reshape(C, h * w).T  # (h*w, C)
        return feats.cpu().numpy(), grid_boxes(h, w, width, height)
    clipped = boxes.copy()
    clipped[:, [0, 2]] = clipped[:, [0, 2]].clip(0, width)
    clipped[:, [1, 3]] = clipped[:, [1, 3]].clip(0, height)
    if ((clipped[:, 2] <= clipped[:, 0]) | (clipped[:, 3] <= clipped[:, 1])).any():
        raise ConversionError(f"boxes for this {width}x{height} image include an empty or inverted one after "
                              f"clipping to the image: {boxes.tolist()[:3]}...; boxes are pixel x1, y1, x2, y2")
    # Pixel boxes -> feature-map cells; the image was resized to a square, so x and y scale differently.
    cells = torch.from_numpy(clipped).to(fmap.device) * torch.tensor(
        [w / width, h / height, w / width, h / height], device=fmap.device)  # (N, 4)
    rois = torch.cat([torch.full((len(cells), 1), float(b), device=fmap.device), cells], dim=1)  # (N, 5)
    pooled = roi_align(fmap, rois, cfg.pool, 1.0, cfg.sampling_ratio, aligned=True)  # (N, C, P, P)
    return pooled.mean(dim=(2, 3)).cpu().numpy(), clipped


# ---- CLI ----------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m features.extract", description=__doc__.split("\n\n")[0],
        epilog="Real use needs pretrained weights (a save_pretrained directory, or a hub name with internet). "
               "Rerun the same command to resume. See docs/features.md.")
    ap.add_argument("--images", required=True, help="directory of images (searched recursively)")
    ap.add_argument("--model", required=True, help="transformers vision model: local directory or hub name")
    ap.add_argument("--out", required=True, help="feature store (.h5) to create or resume")
    ap.add_argument("--boxes", default=None, help="pixel boxes per image id (JSON or JSONL): RoIAlign mode")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    ap.add_argument("--image-size", type=int, default=None, help="square input side (default: the model's)")
    ap.add_argument("--id-format", choices=ID_FORMATS, default="stem",
                    help="file name -> image id (default stem; int for COCO file names)")
    ap.add_argument("--pool", type=int, default=7, help="RoIAlign bins per side in box mode")
    ap.add_argument("--num-workers", type=int, default=2, help="image decoding processes")
    ap.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    ap.add_argument("--skip-bad", action="store_true", help="skip unreadable images instead of stopping")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_cli_logging(args.verbose)
    cfg = ExtractConfig(images=args.images, model=args.model, out=args.out, boxes=args.boxes,
                        batch_size=args.batch_size, device=args.device, image_size=args.image_size,
                        id_format=args.id_format, pool=args.pool, num_workers=args.num_workers, dtype=args.dtype,
                        skip_bad=args.skip_bad)
    return run_conversion(cfg.out, lambda: extract(cfg, progress=not args.no_progress))


if __name__ == "__main__":
    sys.exit(main())
