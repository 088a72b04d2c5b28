"""Convert bottom-up-attention TSV files into a feature store.

    python -m features.convert_butd_tsv trainval_36/trainval_resnet101_faster_rcnn_genome_36.tsv.* \\
        --out data/coco_butd36.h5

The bottom-up-attention project (Anderson et al. 2018, ``generate_tsv.py``) writes one image per line,
tab-separated, no header::

    image_id  image_w  image_h  num_boxes  boxes  features

with ``boxes`` the base64 of a float32 ``(num_boxes, 4)`` array of pixel ``x1, y1, x2, y2`` and
``features`` the base64 of a float32 ``(num_boxes, 2048)`` array. LXMERT's TSVs (10 columns:
``img_id img_h img_w objects_id objects_conf attrs_id attrs_conf num_boxes boxes features``) are
recognised by their column count. Lines are split on tabs directly (the fields hold no quotes or tabs),
which is faster than ``csv`` and needs no ``csv.field_size_limit`` raise for the megabyte-long fields.

Streaming: one line in memory at a time plus one commit batch. Resumable: images already in the store
are skipped, so rerunning the same command after a kill finishes the job.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import logging
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from .ids import ID_FORMATS, normalize_image_id
from .ingest import ConversionError, Decoded, SourceRecord, ingest, setup_cli_logging, run_conversion
from .store import FeatureStoreWriter

__all__ = ["TSV_LAYOUTS", "iter_butd_tsv", "convert_butd_tsv", "main"]

logger = logging.getLogger(__name__)

# Column positions per layout, keyed by the number of columns a line has.
TSV_LAYOUTS = {
    6: {"name": "butd", "image_id": 0, "image_w": 1, "image_h": 2, "num_boxes": 3, "boxes": 4, "features": 5},
    10: {"name": "lxmert", "image_id": 0, "image_h": 1, "image_w": 2, "num_boxes": 7, "boxes": 8, "features": 9},
}
_HEADER_FIRST = (b"image_id", b"img_id")


def _b64_array(field: bytes, what: str, rows: int, cols: int | None) -> np.ndarray:
    """Decode a base64 field into a ``(rows, cols)`` float32 array (``cols=None``: inferred)."""
    if field[:2] in (b"b'", b'b"'):  # written by str(base64.b64encode(x)) under Python 3
        field = field[2:-1]
    try:
        raw = base64.b64decode(field, validate=False)
    except (binascii.Error, ValueError) as err:
        raise ValueError(f"{what} is not valid base64 ({err}); the line is damaged or cut short") from None
    if rows <= 0:
        raise ValueError(f"num_boxes is {rows}")
    per_row, rem = divmod(len(raw), rows)
    if rem or per_row == 0:
        raise ValueError(f"{what} decode to {len(raw)} bytes, not a multiple of num_boxes={rows} rows; "
                         f"the line is cut short (truncated download?)")
    if cols is not None:
        if per_row == cols * 4:
            return np.frombuffer(raw, dtype=np.float32).reshape(rows, cols)
        if per_row == cols * 8:
            return np.frombuffer(raw, dtype=np.float64).reshape(rows, cols).astype(np.float32)
        raise ValueError(f"{what} decode to {len(raw)} bytes, expected num_boxes={rows} x {cols} float32 "
                         f"= {rows * cols * 4}; the line is cut short or the layout differs")
    if per_row % 4:
        raise ValueError(f"{what} decode to {per_row} bytes per region, not float32")
    return np.frombuffer(raw, dtype=np.float32).reshape(rows, per_row // 4)


def iter_butd_tsv(path: str | Path, *, id_format: str = "verbatim", feature_dim: int | None = None,
                  on_line=None) -> Iterator[SourceRecord]:
    """Records of one TSV file, decoded lazily. ``on_line(nbytes)`` is called per line (progress)."""
    path = Path(path)
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if on_line is not None:
                on_line(len(line))
            if len(line) < 3 and not line.strip():
                continue
            tab = line.find(b"\t")
            first = line[:tab] if tab >= 0 else line.rstrip(b"\r\n")  # the id, without copying the rest
            if lineno == 1 and first.strip() in _HEADER_FIRST:
                continue
            where = f"{path}:{lineno}"
            try:
                image_id = normalize_image_id(first.decode("utf-8"), id_format)
            except (UnicodeDecodeError, ValueError) as err:
                raise ConversionError(f"{where}: bad image id {first[:40]!r} ({err})") from None
            yield SourceRecord(image_id, where, lambda line=line: _decode_line(line, feature_dim))


def _decode_line(line: bytes, feature_dim: int | None) -> Decoded:
    cols = line.rstrip(b"\r\n").split(b"\t")
    layout = TSV_LAYOUTS.get(len(cols))
    if layout is None:
        raise ValueError(f"{len(cols)} tab-separated columns; expected 6 (image_id image_w image_h num_boxes "
                         f"boxes features) or 10 (LXMERT); the line is cut short or not a bottom-up TSV")
    try:
        width = int(float(cols[layout["image_w"]]))
        height = int(float(cols[layout["image_h"]]))
        n = int(cols[layout["num_boxes"]])
    except ValueError:
        raise ValueError("image_w, image_h and num_boxes must be numbers, got "
                         f"{[cols[layout[k]][:20] for k in ('image_w', 'image_h', 'num_boxes')]}") from None
    boxes = _b64_array(cols[layout["boxes"]], "boxes", n, 4)
    feats = _b64_array(cols[layout["features"]], "features", n, feature_dim)
    return Decoded(feats, boxes, width, height)


def convert_butd_tsv(paths: list[str | Path], out: str | Path, *, id_format: str = "verbatim",
                     feature_dim: int | None = None, skip_bad: bool = False, commit_every: int = 128,
                     dtype: str = "float16", compression: str | None = None, overwrite: bool = False,
                     progress: bool = True):
    """Convert TSV files into the store ``out`` (resuming it if it exists); returns :class:`IngestStats`."""
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"TSV not found: {p}")
    bar = _byte_bar(sum(p.stat().st_size for p in paths), progress)
    source = "bottom-up-attention TSV: " + ", ".join(p.name for p in paths)
    with FeatureStoreWriter(out, feature_dim=feature_dim, boxes_known=True, source=source, dtype=dtype,
                            compression=compression, commit_every=commit_every, overwrite=overwrite) as writer:
        records = (r for p in paths for r in iter_butd_tsv(p, id_format=id_format, feature_dim=feature_dim,
                                                            on_line=bar.update))
        try:
            stats = ingest(records, writer, skip_bad=skip_bad)
        finally:
            bar.close()
    return stats


def _byte_bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="converting",
                disable=not enabled, mininterval=1.0)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m features.convert_butd_tsv", description=__doc__.split("\n\n")[0],
        epilog="Example: python -m features.convert_butd_tsv trainval_36/*.tsv.* --out data/coco_butd36.h5 "
               "(see docs/features.md). Rerun the same command to resume an interrupted conversion.")
    ap.add_argument("tsv", nargs="+", help="bottom-up-attention TSV file(s), e.g. the four trainval .tsv.N parts")
    ap.add_argument("--out", required=True, help="feature store (.h5) to create or resume")
    ap.add_argument("--id-format", choices=ID_FORMATS, default="verbatim",
                    help="how to spell the TSV's image ids to match the caption corpus (default: verbatim)")
    ap.add_argument("--feature-dim", type=int, default=None,
                    help="feature size D (default: inferred; set it to accept float64 feature fields)")
    ap.add_argument("--skip-bad", action="store_true", help="skip broken lines (listed at the end) instead of stopping")
    ap.add_argument("--commit-every", type=int, default=128, help="images per atomic commit (default 128)")
    ap.add_argument("--dtype", choices=("float16", "float32"), default="float16", help="on-disk feature dtype")
    ap.add_argument("--gzip", action="store_true", help="gzip-compress features (smaller, slower reads)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing store instead of resuming it")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_cli_logging(args.verbose)
    return run_conversion(args.out, lambda: convert_butd_tsv(
        args.tsv, args.out, id_format=args.id_format, feature_dim=args.feature_dim, skip_bad=args.skip_bad,
        commit_every=args.commit_every, dtype=args.dtype, compression="gzip" if args.gzip else None,
        overwrite=args.overwrite, progress=not args.no_progress))


if __name__ == "__main__":
    sys.exit(main())
