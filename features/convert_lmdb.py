"""Convert a ViLBERT-style LMDB of region features into a feature store -- without unpickling anything.

    python -m features.convert_lmdb data/coco_trainval_safe.lmdb --out data/coco_vilbert.h5

ViLBERT (``vilbert-multi-task``, ``script/convert_to_lmdb.py``) keys an LMDB by image id and stores, per
image, a **pickled** dict ``{image_id, image_w, image_h, num_boxes, boxes, features}`` with ``boxes`` and
``features`` base64 float32 (plus a pickled id list under the key ``keys``). Unpickling runs arbitrary code
from the file, so this library never does it. It reads the same layout with safe encodings instead:

* **npz** (values start with ``PK``): ``numpy.savez`` of ``features (N, D)``, ``boxes (N, 4)`` pixels,
  ``image_w``, ``image_h`` -- what :func:`encode_npz_record` writes;
* **JSON** (values start with ``{``): ViLBERT's dict as JSON, ``boxes``/``features`` base64 float32
  strings, ``num_boxes``, ``image_w``, ``image_h``.

Pickled values are refused with a message pointing to the short re-encoding script in
``docs/features.md``, which you run yourself on a file you trust. The key ``keys`` is skipped unread.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import logging
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from .ids import ID_FORMATS, normalize_image_id
from .ingest import ConversionError, Decoded, SourceRecord, ingest, setup_cli_logging, run_conversion
from .store import FeatureStoreWriter

__all__ = ["encode_npz_record", "decode_record", "iter_lmdb", "convert_lmdb", "main"]

logger = logging.getLogger(__name__)

_RESERVED_KEYS = {b"keys", b"__keys__", b"__len__"}
PICKLE_REFUSED = ("the value is a Python pickle (ViLBERT's original encoding). This library never unpickles "
                  "data files: unpickling runs code stored in the file. Re-encode the LMDB once with the "
                  "trusted script in docs/features.md ('Pickled LMDBs'), then convert the result")


def encode_npz_record(features: np.ndarray, boxes: np.ndarray, image_w: int, image_h: int) -> bytes:
    """The safe LMDB value of one image: ``np.savez`` bytes, readable with ``allow_pickle=False``."""
    buf = io.BytesIO()
    np.savez(buf, features=np.asarray(features, dtype=np.float32), boxes=np.asarray(boxes, dtype=np.float32),
             image_w=np.int64(image_w), image_h=np.int64(image_h))
    return buf.getvalue()


def decode_record(value: bytes) -> Decoded:
    """Decode one LMDB value (npz or JSON, see the module docstring); refuses pickles."""
    if value[:1] == b"\x80" or value[:1] in (b"(", b"}", b"]"):  # pickle protocol >= 2, or 0/1 opcodes
        raise ValueError(PICKLE_REFUSED)
    if value[:2] == b"PK":
        try:
            with np.load(io.BytesIO(value), allow_pickle=False) as z:
                missing = {"features", "boxes", "image_w", "image_h"} - set(z.files)
                if missing:
                    raise ValueError(f"npz record lacks {sorted(missing)} (has {sorted(z.files)})")
                return Decoded(z["features"], z["boxes"], int(z["image_w"]), int(z["image_h"]))
        except (OSError, EOFError) as err:
            raise ValueError(f"npz record cannot be read ({err}); the value is damaged") from None
    if value[:1] == b"{":
        try:
            d = json.loads(value)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"JSON record is not valid JSON ({err})") from None
        missing = {"features", "boxes", "image_w", "image_h", "num_boxes"} - set(d)
        if missing:
            raise ValueError(f"JSON record lacks {sorted(missing)}")
        n = int(d["num_boxes"])
        boxes = np.frombuffer(base64.b64decode(d["boxes"]), dtype=np.float32)
        feats = np.frombuffer(base64.b64decode(d["features"]), dtype=np.float32)
        if n <= 0 or boxes.size != 4 * n or feats.size % n:
            raise ValueError(f"num_boxes={n} does not match {boxes.size} box values and {feats.size} feature values")
        return Decoded(feats.reshape(n, -1), boxes.reshape(n, 4), int(d["image_w"]), int(d["image_h"]))
    raise ValueError(f"unknown value encoding (starts with {value[:8]!r}); expected npz (PK...) or JSON ({{...)")


def iter_lmdb(path: Path, *, id_format: str = "verbatim") -> Iterator[SourceRecord]:
    import lmdb

    env = lmdb.open(str(path), readonly=True, lock=False, readahead=False, meminit=False,
                    subdir=path.is_dir(), max_readers=4)
    try:
        with env.begin(buffers=False) as txn:
            for key, value in txn.cursor():
                if key in _RESERVED_KEYS:
                    continue
                try:
                    image_id = normalize_image_id(key.decode("utf-8"), id_format)
                except (UnicodeDecodeError, ValueError) as err:
                    raise ConversionError(f"{path}: key {key[:40]!r} is not an image id ({err})") from None
                yield SourceRecord(image_id, f"{path}[{key.decode('utf-8', 'replace')}]",
                                   lambda value=value: decode_record(value))
    finally:
        env.close()


def lmdb_entries(path: Path) -> int:
    import lmdb

    env = lmdb.open(str(path), readonly=True, lock=False, subdir=path.is_dir())
    try:
        return int(env.stat()["entries"])
    finally:
        env.close()


def convert_lmdb(path: str | Path, out: str | Path, *, id_format: str = "verbatim", skip_bad: bool = False,
                 commit_every: int = 128, dtype: str = "float16", overwrite: bool = False, progress: bool = True):
    """Convert a safe-encoded LMDB into ``out`` (resuming it if it exists); returns ``IngestStats``."""
    import lmdb

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"LMDB not found: {path}")
    try:
        total = lmdb_entries(path)
    except lmdb.Error as err:
        raise ConversionError(f"{path}: not a readable LMDB ({err})") from None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="img", desc="converting", disable=not progress, mininterval=1.0)
    with FeatureStoreWriter(out, boxes_known=True, source=f"LMDB: {path.name}", dtype=dtype,
                            commit_every=commit_every, overwrite=overwrite) as writer:
        try:
            stats = ingest(iter_lmdb(path, id_format=id_format), writer, skip_bad=skip_bad,
                           progress=lambda rec: bar.update())
        finally:
            bar.close()
    return stats


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m features.convert_lmdb", description=__doc__.split("\n\n")[0],
        epilog="Values must be npz or JSON (see docs/features.md); pickled LMDBs are refused. "
               "Rerun the same command to resume.")
    ap.add_argument("lmdb", help="LMDB directory (or file) keyed by image id")
    ap.add_argument("--out", required=True, help="feature store (.h5) to create or resume")
    ap.add_argument("--id-format", choices=ID_FORMATS, default="verbatim", help="spelling of ids (see features.ids)")
    ap.add_argument("--skip-bad", action="store_true", help="skip broken records (listed at the end)")
    ap.add_argument("--dtype", choices=("float16", "float32"), default="float16", help="on-disk feature dtype")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing store instead of resuming it")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_cli_logging(args.verbose)
    return run_conversion(args.out, lambda: convert_lmdb(
        args.lmdb, args.out, id_format=args.id_format, skip_bad=args.skip_bad, dtype=args.dtype,
        overwrite=args.overwrite, progress=not args.no_progress))


if __name__ == "__main__":
    sys.exit(main())
