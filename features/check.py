"""Validate a feature store, alone or against a caption corpus.

    python -m features.check data/coco_butd36.h5 --captions ../shared/data/coco/captions.jsonl.gz --split test

Finds: a missing, truncated or non-HDF5 file; a file that is not a feature store or is of another
format version; index rows whose block is missing, or whose rows lie outside it (a short block) or
overlap another image's; blocks with rows no image owns; shape mismatches (feature size, region counts,
boxes); dtypes other than the store's; NaN/Inf in features or boxes; boxes outside their image; corpus
images without features, and store ids spelled differently from the corpus's. Warns about blocks no
index row references (an interrupted commit) and byte offsets that no longer match the file (reads
then go through h5py). Each finding is a :class:`Problem` whose message names the image (or block)
and the fix.

Training and evaluation call :func:`require_valid_store`, which raises one :class:`FeatureStoreError`
listing the problems, so a broken store fails at start with the same message this tool prints, never
deep inside an epoch. A clean full scan is remembered (keyed by path, size and modification time) in
the cache directory, so the next run pays only the structural checks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from .ids import suggest_id_format
from .store import (FORMAT_NAME, FORMAT_VERSION, FeatureStore, FeatureStoreError, _all_finite, _open_h5, _stale_offsets,
                    _version_problem, block_name)

__all__ = ["Problem", "validate_store", "require_valid_store", "main"]

logger = logging.getLogger(__name__)

_TWIN_IMAGE = re.compile(r".+~(relation|binding)~[01]")  # features/world/generate.py's twin image ids

BOX_TOLERANCE_PX = 2.0  # detectors clip boxes to the image; allow rounding


@dataclass(frozen=True)
class Problem:
    """One finding.

    Attributes:
        code: a stable kind: ``missing_file``, ``truncated``, ``not_hdf5``, ``unreadable``, ``not_a_store``,
            ``version``, ``index``, ``shape``, ``dtype``, ``non_finite``, ``bad_box``, ``missing_image``,
            ``id_mismatch``, ``feature_dim``, ``orphan`` (warning), ``offsets`` (warning), ``extra_image``
            (warning).
        message: what is wrong, where, and how to fix it.
        image_id: the image concerned, if one is.
        severity: ``error`` (the store must not be used) or ``warning``.
    """

    code: str
    message: str
    image_id: str | None = None
    severity: str = "error"

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class _Collector:
    """Problems, capped per code so that a store with 100k bad images still gets a short report."""

    def __init__(self, per_code: int):
        self.per_code = per_code
        self.problems: list[Problem] = []
        self.counts: dict[str, int] = {}

    def add(self, p: Problem) -> None:
        self.counts[p.code] = self.counts.get(p.code, 0) + 1
        if self.counts[p.code] <= self.per_code:
            self.problems.append(p)

    def finish(self) -> list[Problem]:
        for code, n in self.counts.items():
            if n > self.per_code:
                sev = next(p.severity for p in self.problems if p.code == code)
                self.problems.append(Problem(code, f"... and {n - self.per_code} more {code} problem(s)",
                                             severity=sev))
        return self.problems


def validate_store(store_path: str | Path, corpus=None, *, check_values: bool = True, feature_dim: int | None = None,
                   per_code: int = 20, progress: bool = False) -> list[Problem]:
    """Every problem of a store (empty list = usable).

    Args:
        store_path: the ``.h5`` file.
        corpus: a :class:`crg.corpus.Corpus` (already narrowed to the splits in use) or an iterable of
            image ids; every one must have features.
        check_values: read every image to look for NaN/Inf and boxes outside the image (reads the whole
            file once, streaming); False checks only the structure.
        feature_dim: the size the model expects, if known.
        per_code: findings kept per kind (the rest are counted).
        progress: show a progress bar over images.
    """
    path = Path(store_path)
    out = _Collector(per_code)
    if not path.exists():
        return [Problem("missing_file", f"{path} does not exist; convert features into it first "
                                        f"(see docs/features.md)")]
    try:
        h5 = _open_h5(path, "r")
    except FeatureStoreError as err:
        msg = str(err)
        code = "truncated" if "truncated" in msg else "not_hdf5" if "not an HDF5" in msg else "unreadable"
        return [Problem(code, msg)]
    with h5:
        ids = _check_structure(h5, path, out, feature_dim)
    if ids is None:
        return out.finish()
    if check_values and not any(p.severity == "error" and p.code in ("index", "shape", "dtype")
                                for p in out.problems):
        _check_values(path, out, progress)
    if corpus is not None:
        _check_corpus(path, ids, corpus, out)
    return out.finish()


def _check_structure(h5, path: Path, out: _Collector, feature_dim: int | None) -> list[str] | None:
    attrs = h5.attrs
    if attrs.get("format") != FORMAT_NAME:
        out.add(Problem("not_a_store", f"{path} is an HDF5 file but not a grounded-composer feature store (no "
                                       f"format={FORMAT_NAME!r} attribute); convert the features with "
                                       f"python -m features.convert_butd_tsv / convert_scan_npy / convert_lmdb"))
        return None
    problem = _version_problem(path, int(attrs.get("format_version", -1)))
    if problem:
        out.add(Problem("version", problem))
        return None
    missing = [k for k in ("feature_dim", "dtype", "boxes_known", "num_images") if k not in attrs]
    if missing or "index" not in h5 or "features" not in h5:
        out.add(Problem("not_a_store", f"{path}: store attributes/groups missing ({missing or 'index/features'}); "
                                       f"the file is damaged, convert again"))
        return None
    n = int(attrs["num_images"])
    dim = int(attrs["feature_dim"])
    dtype = np.dtype(str(attrs["dtype"]))
    boxes_known = bool(attrs["boxes_known"])
    if feature_dim is not None and dim != feature_dim:
        out.add(Problem("feature_dim", f"{path} holds {dim}-d features but {feature_dim}-d are expected (the model's "
                                       f"visual feature size); use a store of matching features or change the config"))
    index = h5["index"]
    short = [k for k in ("image_id", "num_regions", "width", "height", "block", "row", "features_offset",
                         "boxes_offset") if k not in index or index[k].shape[0] < n]
    if short:
        out.add(Problem("index", f"{path}: index dataset(s) {short} missing or shorter than num_images={n}; "
                                 f"the file is damaged, convert again"))
        return None
    ids = [str(s) for s in index["image_id"].asstr()[:n]]
    counts = index["num_regions"][:n].astype(np.int64)
    widths, heights = index["width"][:n], index["height"][:n]
    blocks, rows = index["block"][:n].astype(np.int64), index["row"][:n].astype(np.int64)
    seen: set[str] = set()
    for i, image_id in enumerate(ids):
        if image_id in seen:
            out.add(Problem("index", f"image {image_id!r} is indexed twice (row {i}); convert again", image_id))
        seen.add(image_id)
    for i in np.flatnonzero(counts < 1):
        out.add(Problem("shape", f"image {ids[i]!r}: the index says {counts[i]} regions; convert again", ids[i]))
    order = np.lexsort((rows, blocks))  # index rows by block, then by first row
    cuts = np.flatnonzero(np.diff(blocks[order])) + 1
    for members in np.split(order, cuts) if n else []:
        _check_block(h5, int(blocks[members[0]]), members, ids, counts, rows, dim, dtype, boxes_known, out)
    if boxes_known:
        for i in np.flatnonzero(~((widths > 0) & (heights > 0))):
            out.add(Problem("bad_box", f"image {ids[i]!r}: image size {widths[i]}x{heights[i]} is not positive, so "
                                       f"its geometry cannot be computed; convert again", ids[i]))
    feat_off, box_off = index["features_offset"][:n], index["boxes_offset"][:n]
    if n and (feat_off >= 0).all() and (not boxes_known or (box_off >= 0).all()):
        stale = _stale_offsets(h5, blocks, rows, feat_off, box_off, dim, dtype, boxes_known)
        if len(stale):
            out.add(Problem("offsets", f"{len(stale)} stored byte offset(s) do not match the blocks in the file, e.g. "
                                       f"image {ids[stale[0]]!r} (was the file rewritten, e.g. by h5repack?); reads go "
                                       f"through h5py, several times slower: convert again for one pread per image",
                            severity="warning"))
    referenced = {block_name(int(k)) for k in np.unique(blocks)}
    orphans = [f"{group}/{name}" for group in ("features", "boxes") if group in h5
               for name in h5[group] if name not in referenced]
    if orphans:
        out.add(Problem("orphan", f"{len(orphans)} dataset(s) written but never committed (an interrupted "
                                  f"conversion), e.g. {orphans[:3]}; they are invisible to readers and the next "
                                  f"conversion run removes them", severity="warning"))
    return ids


def _some(ids: list[str], members: np.ndarray, k: int = 3) -> str:
    """``'a', 'b', 'c' and 5 more``: the images of a block, for messages."""
    shown = ", ".join(repr(ids[i]) for i in members[:k])
    return shown + (f" and {len(members) - k} more" if len(members) > k else "")


def _check_block(h5, block: int, members: np.ndarray, ids: list[str], counts: np.ndarray, rows: np.ndarray,
                 dim: int, dtype: np.dtype, boxes_known: bool, out: _Collector) -> None:
    """One block against the index rows ``members`` (sorted by first row) that place images in it."""
    name = block_name(block)
    first = ids[members[0]]
    who = f"{len(members)} image(s) ({_some(ids, members)})"
    ds = h5["features"].get(name) if block >= 0 else None
    if not isinstance(ds, h5py.Dataset):
        out.add(Problem("index", f"{who} are indexed in block {block}, but there is no dataset features/{name}; the "
                                 f"store is damaged: delete it and convert again", first))
        return
    if ds.dtype != dtype:
        out.add(Problem("dtype", f"features/{name} holds {ds.dtype}, the store says {dtype} ({who}); the file was "
                                 f"edited by hand: convert again", first))
    if ds.ndim != 2 or ds.shape[1] != dim:
        out.add(Problem("shape", f"features/{name} has shape {ds.shape}, expected (rows, {dim}) ({who}); features "
                                 f"of another extractor were mixed in: convert again", first))
        return
    start, stop = rows[members], rows[members] + counts[members]  # (m,) each, sorted by start
    total = ds.shape[0]
    outside = (start < 0) | (stop > total)
    for i in members[outside]:
        out.add(Problem("shape", f"image {ids[i]!r}: the index puts its {counts[i]} rows at {rows[i]}:"
                                 f"{rows[i] + counts[i]} of features/{name}, which has {total} rows (a short or "
                                 f"damaged block); convert again", ids[i]))
    overlap = np.flatnonzero(start[1:] < stop[:-1])
    for j in overlap:
        a, b = ids[members[j]], ids[members[j + 1]]
        out.add(Problem("index", f"images {a!r} and {b!r} share rows of features/{name} ({start[j]}:{stop[j]} and "
                                 f"{start[j + 1]}:{stop[j + 1]}); the index is damaged: convert again", b))
    owned = int(counts[members].sum())  # rows the images own, when they lie inside and do not overlap
    if not outside.any() and not len(overlap) and owned != total:
        out.add(Problem("index", f"features/{name} has {total} rows but its {who} own {owned} of them; the index and "
                                 f"the block disagree (the file was edited or damaged): convert again", first))
    if boxes_known:
        bd = h5["boxes"].get(name) if "boxes" in h5 else None
        if not isinstance(bd, h5py.Dataset):
            out.add(Problem("index", f"features/{name} has no boxes/{name} ({who}); convert again", first))
        elif bd.shape != (total, 4):
            out.add(Problem("shape", f"boxes/{name} has shape {bd.shape}, expected ({total}, 4) like its features "
                                     f"({who}); convert again", first))
        elif bd.dtype != np.float32:
            out.add(Problem("dtype", f"boxes/{name} holds {bd.dtype}, expected float32 ({who}); convert again", first))


def _check_values(path: Path, out: _Collector, progress: bool) -> None:
    from tqdm import tqdm

    try:
        store = FeatureStore(path)
        store_ids = store.image_ids
    except FeatureStoreError as err:
        out.add(Problem("unreadable", str(err)))
        return
    with store:
        for image_id in tqdm(store_ids, desc="checking values", unit="img", disable=not progress, mininterval=1.0):
            try:
                feats, boxes = store._read_into_scratch(store._row_of(image_id))
            except FeatureStoreError as err:
                out.add(Problem("truncated" if "truncated" in str(err) else "unreadable", str(err), image_id))
                continue
            if not _all_finite(feats):
                bad = np.argwhere(~np.isfinite(feats.astype(np.float32)))
                out.add(Problem("non_finite", f"image {image_id!r}: {len(bad)} NaN/Inf feature value(s), first at "
                                              f"region {bad[0][0]} dim {bad[0][1]}; the source is corrupt for this "
                                              f"image: re-extract or re-convert it", image_id))
            if boxes is None:
                continue
            if not np.isfinite(boxes).all():
                out.add(Problem("non_finite", f"image {image_id!r}: NaN/Inf in boxes; re-convert it", image_id))
                continue
            w, h = store.image_size(image_id)
            tol = BOX_TOLERANCE_PX
            outside = (boxes[:, 0] < -tol) | (boxes[:, 1] < -tol) | (boxes[:, 2] > w + tol) | \
                (boxes[:, 3] > h + tol) | (boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1])
            if w > 0 and h > 0 and outside.any():
                r = int(np.argmax(outside))
                out.add(Problem("bad_box", f"image {image_id!r}: {int(outside.sum())} box(es) outside the "
                                           f"{w}x{h} image or inverted, first region {r}: {boxes[r].tolist()}; were "
                                           f"width and height swapped (LXMERT TSVs put img_h first)?", image_id))


def _check_corpus(path: Path, store_ids: list[str], corpus, out: _Collector) -> None:
    images = getattr(corpus, "images", None)
    corpus_ids = [im.image_id for im in images] if images is not None else [str(i) for i in corpus]
    name = getattr(corpus, "path", "the corpus")
    have = set(store_ids)
    missing = [i for i in corpus_ids if i not in have]
    if missing and len(missing) == len(corpus_ids) and store_ids:
        hint = suggest_id_format(store_ids[:200], set(corpus_ids))
        fix = (f"the store spells ids differently: reconvert with --id-format {hint}" if hint else
               "either the store holds other images (another split or dataset?) or it spells ids differently "
               "(pick the converter's --id-format that matches the corpus)")
        out.add(Problem("id_mismatch", f"none of the {len(corpus_ids)} image ids of {name} is in {path}: the "
                                       f"corpus has e.g. {corpus_ids[:3]}, the store {store_ids[:3]}; {fix}"))
        return
    if missing:
        out.add(Problem("missing_image", f"{len(missing)} of {len(corpus_ids)} images of {name} have no features in "
                                         f"{path}, e.g. {missing[:5]}; convert their features into the store (the "
                                         f"converters resume), or select the splits the store covers"))
    # a generated world's store also holds its twin images (``<id>~relation~1``, docs/world.md): no caption names them
    extra = sum(1 for i in have - set(corpus_ids) if not _TWIN_IMAGE.fullmatch(i))
    if extra:
        out.add(Problem("extra_image", f"{extra} image(s) in the store are not in {name} (other splits?); "
                                       f"they are ignored", severity="warning"))


# ---- the gate training and evaluation call ------------------------------------------------------------


def _cache_file() -> Path:
    root = os.environ.get("GC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "grounded_composer")
    return Path(root) / "feature_store_checks.json"


def _fingerprint(path: Path) -> str:
    """Which version of the file a clean scan saw. The inode change time is in it: a write in place
    followed by restoring the modification time (``touch -r``, ``os.utime``) still changes it."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{FORMAT_VERSION}"
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def _load_clean() -> dict:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _remember_clean(path: Path) -> None:
    cache = _cache_file()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        clean = _load_clean()
        clean[_fingerprint(path)] = str(path.resolve())
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(clean))
        tmp.replace(cache)
    except OSError as err:  # a read-only home is no reason to fail
        logger.debug("could not record a clean check of %s: %s", path, err)


def require_valid_store(store_path: str | Path, corpus=None, *, feature_dim: int | None = None,
                        check_values: bool | str = "once", max_listed: int = 10) -> None:
    """Raise :class:`FeatureStoreError` with one message listing the problems, if the store is unusable.

    ``check_values``: True scans every value each call; ``"once"`` (default) scans until a scan of this exact
    file (path, size, mtime) came back clean, then only checks structure; False never scans.
    """
    path = Path(store_path)
    scan = bool(check_values)
    if check_values == "once" and path.exists() and _fingerprint(path) in _load_clean():
        scan = False
    problems = validate_store(path, corpus, check_values=scan, feature_dim=feature_dim)
    errors = [p for p in problems if p.severity == "error"]
    for p in problems:
        if p.severity == "warning":
            logger.warning("%s: %s", path, p.message)
    if errors:
        raise FeatureStoreError(format_problems(path, errors, max_listed))
    if scan and check_values == "once":
        _remember_clean(path)


def format_problems(path: Path, errors: list[Problem], max_listed: int = 10) -> str:
    shown = errors[:max_listed]
    lines = [f"feature store {path} is not usable ({len(errors)} problem(s)" +
             (f", first {len(shown)} shown" if len(errors) > len(shown) else "") + "):"]
    lines += [f"  - {p}" for p in shown]
    lines.append(f"Run `python -m features.check {path} --captions CORPUS` for the full report.")
    return "\n".join(lines)


# ---- CLI -------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m features.check", description="Validate a feature store, alone or against a caption corpus.",
        epilog="Exit status 0 when usable, 1 when not. Example: python -m features.check data/f30k.h5 "
               "--captions ../shared/data/flickr30k/captions.jsonl --split test")
    ap.add_argument("store", help="feature store (.h5)")
    ap.add_argument("--captions", default=None, help="caption corpus whose images must all have features")
    ap.add_argument("--format", default=None, help="corpus format if not detected (jsonl, karpathy, tsv, scan)")
    ap.add_argument("--split", default=None,
                    help="comma-separated splits of the corpus to require, e.g. test or train,restval (default: all)")
    ap.add_argument("--feature-dim", type=int, default=None, help="the feature size the model expects")
    ap.add_argument("--structure-only", action="store_true", help="skip the value scan (NaN/Inf, boxes)")
    ap.add_argument("--max-problems", type=int, default=20, help="findings listed per kind (default 20)")
    ap.add_argument("--no-progress", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    corpus = None
    if args.captions:
        from crg.corpus import parse_splits, read_corpus

        try:
            corpus = read_corpus(args.captions, args.format).select(parse_splits(args.split))
        except (ValueError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    problems = validate_store(args.store, corpus, check_values=not args.structure_only,
                              feature_dim=args.feature_dim, per_code=args.max_problems,
                              progress=not args.no_progress)
    errors = [p for p in problems if p.severity == "error"]
    for p in problems:
        print(f"{p.severity}: {p}")
    if errors:
        print(f"FAIL: {args.store} has {len(errors)} problem(s)")
        return 1
    desc = _describe(Path(args.store))
    print(f"OK: {desc}" + (f"; all {len(corpus)} corpus images present" if corpus is not None else ""))
    if not args.structure_only:
        _remember_clean(Path(args.store))
    return 0


def _describe(path: Path) -> str:
    with FeatureStore(path) as s:
        counts = np.asarray([s.num_regions(i) for i in s.image_ids[:100000]])
        return (f"{path}: {len(s)} images, {s.feature_dim}-d {s.dtype} features, regions per image "
                f"{counts.min() if len(counts) else 0}-{s.max_regions}"
                + ("" if s.boxes_known else ", NO boxes (geometry reads as zeros)") + f", source: {s.source}")


if __name__ == "__main__":
    sys.exit(main())
