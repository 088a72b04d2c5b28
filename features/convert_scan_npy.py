"""Convert SCAN's precomputed features (``{split}_ims.npy``) into a feature store.

    python -m features.convert_scan_npy data/coco_precomp/testall_ims.npy --out data/coco_scan_testall.h5

SCAN (Lee et al. 2018) distributes ``data/{f30k,coco}_precomp/{split}_ims.npy``: float32
``(num_images, 36, 2048)`` bottom-up features, one row per image in the order of ``{split}_caps.txt``
(5 captions per image). **They carry no boxes and no image sizes**, so the store is marked
``boxes_known=False`` and every region's 5-d geometry reads as zeros: Appendix C's position feature is
lost. Use the bottom-up TSVs when geometry matters.

Ids come from ``{split}_ids.txt`` beside the file (one per image, or one per caption as in SCAN's COCO
files), or ``--ids FILE``; ``--row-ids`` numbers the images 0..N-1 instead (then the caption corpus must
use the same numbers). An array with one row per *caption* (SCAN's "im_div = 5" case) is detected and
every 5th row kept. The array is memory-mapped: memory stays at one commit batch whatever its size.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from .ids import ID_FORMATS, normalize_image_id
from .ingest import ConversionError, Decoded, SourceRecord, ingest, setup_cli_logging, run_conversion
from .store import FeatureStoreWriter

__all__ = ["read_scan_ids", "iter_scan_npy", "convert_scan_npy", "main"]

logger = logging.getLogger(__name__)

NO_BOXES_WARNING = ("SCAN's precomputed features carry no boxes: region geometry will read as zeros "
                    "(the 5-d position feature of Appendix C is lost); convert the bottom-up TSVs to keep it")


def read_scan_ids(ids_path: Path, num_rows: int, captions_per_image: int = 5) -> tuple[list[str], int]:
    """Image ids in row order and the row stride (1, or ``captions_per_image`` for per-caption arrays).

    The id file has one id per image, or one per caption (consecutive repeats of each image's id).
    """
    with open(ids_path, encoding="utf-8") as f:
        raw = [line.strip() for line in f if line.strip()]
    per_image: list[str] = []
    for i in raw:  # collapse consecutive repeats (one id per caption)
        if not per_image or per_image[-1] != i:
            per_image.append(i)
    if len(raw) != len(per_image) and len(raw) != captions_per_image * len(per_image):
        per_image = raw  # not a per-caption list after all
    if num_rows == len(per_image):
        return per_image, 1
    if num_rows == captions_per_image * len(per_image):
        return per_image, captions_per_image
    raise ConversionError(f"{ids_path}: {len(per_image)} image ids do not match the {num_rows} rows of the "
                          f"features (expected one row per image, or {captions_per_image} per image); "
                          f"is this the id list of the same split?")


def iter_scan_npy(ims_path: Path, image_ids: list[str], stride: int) -> Iterator[SourceRecord]:
    ims = np.load(ims_path, mmap_mode="r")  # (rows, R, D): memory-mapped, never loaded whole
    for k, image_id in enumerate(image_ids):
        row = k * stride
        yield SourceRecord(image_id, f"{ims_path}[{row}]",
                           lambda row=row: Decoded(np.asarray(ims[row], dtype=np.float32), None))


def convert_scan_npy(ims_path: str | Path, out: str | Path, *, ids_path: str | Path | None = None,
                     row_ids: bool = False, id_format: str = "verbatim", captions_per_image: int = 5,
                     skip_bad: bool = False, commit_every: int = 256, dtype: str = "float16",
                     overwrite: bool = False, progress: bool = True):
    """Convert one ``{split}_ims.npy`` into ``out`` (resuming it if it exists); returns ``IngestStats``."""
    ims_path = Path(ims_path)
    if not ims_path.exists():
        raise FileNotFoundError(f"SCAN features not found: {ims_path}")
    try:
        ims = np.load(ims_path, mmap_mode="r")
    except ValueError as err:
        raise ConversionError(f"{ims_path}: not a readable .npy array ({err}); is the download complete?") from None
    if ims.ndim != 3:
        raise ConversionError(f"{ims_path}: expected (num_images, regions, dim) features, got shape {ims.shape}")
    if row_ids:
        image_ids, stride = [str(i) for i in range(ims.shape[0])], 1
    else:
        prefix = ims_path.name[: -len("_ims.npy")] if ims_path.name.endswith("_ims.npy") else ims_path.stem
        ids_file = Path(ids_path) if ids_path else ims_path.with_name(f"{prefix}_ids.txt")
        if not ids_file.exists():
            raise ConversionError(
                f"{ims_path}: no id list ({ids_file} does not exist). Pass --ids FILE (one id per image, in the "
                f"array's row order), or --row-ids to number the images 0..{ims.shape[0] - 1}")
        image_ids, stride = read_scan_ids(ids_file, ims.shape[0], captions_per_image)
        image_ids = [normalize_image_id(i, id_format) for i in image_ids]
    if stride > 1:
        logger.info("%s has one row per caption; keeping every %dth row", ims_path, stride)
    logger.warning(NO_BOXES_WARNING)
    from tqdm import tqdm

    bar = tqdm(total=len(image_ids), unit="img", desc="converting", disable=not progress, mininterval=1.0)
    with FeatureStoreWriter(out, feature_dim=int(ims.shape[2]), boxes_known=False,
                            source=f"SCAN precomp npy: {ims_path.name} (no boxes)", dtype=dtype,
                            commit_every=commit_every, overwrite=overwrite) as writer:
        try:
            stats = ingest(iter_scan_npy(ims_path, image_ids, stride), writer, skip_bad=skip_bad,
                           progress=lambda rec: bar.update())
        finally:
            bar.close()
    return stats


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m features.convert_scan_npy", description=__doc__.split("\n\n")[0],
        epilog="SCAN's features have no boxes: geometry reads as zeros. Rerun the same command to resume.")
    ap.add_argument("ims", help="SCAN's {split}_ims.npy")
    ap.add_argument("--out", required=True, help="feature store (.h5) to create or resume")
    ap.add_argument("--ids", default=None, help="image id list (default: {split}_ids.txt beside the .npy)")
    ap.add_argument("--row-ids", action="store_true", help="use row numbers 0..N-1 as image ids")
    ap.add_argument("--id-format", choices=ID_FORMATS, default="verbatim", help="spelling of ids (see features.ids)")
    ap.add_argument("--captions-per-image", type=int, default=5)
    ap.add_argument("--skip-bad", action="store_true", help="skip broken rows (listed at the end) instead of stopping")
    ap.add_argument("--dtype", choices=("float16", "float32"), default="float16", help="on-disk feature dtype")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing store instead of resuming it")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_cli_logging(args.verbose)
    return run_conversion(args.out, lambda: convert_scan_npy(
        args.ims, args.out, ids_path=args.ids, row_ids=args.row_ids, id_format=args.id_format,
        captions_per_image=args.captions_per_image, skip_bad=args.skip_bad, dtype=args.dtype,
        overwrite=args.overwrite, progress=not args.no_progress), note=" (no boxes: geometry reads as zeros)")


if __name__ == "__main__":
    sys.exit(main())
