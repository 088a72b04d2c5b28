"""Caption corpora: one abstraction over the formats researchers have on disk.

Supported formats (detected from the file name and contents, or named with ``format=``):

* ``jsonl`` -- one image per line, ``{"image_id", "split", "captions": [...]}`` (the schema of
  the corpora in ``shared/data``); ``.jsonl.gz`` is read transparently;
* ``karpathy`` -- Karpathy's ``dataset_flickr30k.json`` / ``dataset_coco.json``
  (``{"images": [{"filename", "cocoid"?, "split", "sentences": [{"raw", "tokens"}]}]}``);
* ``tsv`` -- ``image_id<TAB>caption`` per line, an optional ``image_id<TAB>caption`` header, and
  optionally a third ``split`` column;
* ``scan`` -- SCAN's precomputed ``{split}_caps.txt`` (consecutive lines per image, 5 by default)
  with an id list ``{split}_ids.txt`` beside it (one id per image or per caption).

Every record keeps the raw object it was read from, so tools that select images (the MCD splitter)
can write them back in the input's own schema.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

__all__ = ["ImageRecord", "Corpus", "CorpusFormatError", "read_corpus", "write_jsonl", "CORPUS_FORMATS",
           "KARPATHY_SPLITS", "SPLIT_ALIASES", "parse_splits", "jsonl_record"]

logger = logging.getLogger(__name__)

CORPUS_FORMATS = ("jsonl", "karpathy", "tsv", "scan")
# Karpathy's split labels. COCO's val2014 minus val/test is "restval"; the usual protocol trains on
# train + restval (113,287 images) and tests on the 5K test split (or its five 1K folds).
KARPATHY_SPLITS = ("train", "restval", "val", "test")
# Names users type for split groups -> the labels they stand for.
SPLIT_ALIASES = {"trainval": ("train", "restval"), "train+restval": ("train", "restval"), "all": None}
# SCAN names its validation split "dev" and its 5K COCO test "testall".
_SCAN_SPLITS = {"train": "train", "dev": "val", "val": "val", "test": "test", "testall": "test"}


class CorpusFormatError(ValueError):
    """A corpus file is not what it claims to be. The message names the file and the line."""


@dataclass
class ImageRecord:
    """One image and its captions.

    Attributes:
        image_id: the image's id as a string (COCO's integer ids are converted).
        split: Karpathy split label (``train``, ``val``, ``test``, ``restval``) or ``None``.
        captions: the captions, in the corpus's order.
        raw: the record as read (a dict), written back unchanged by :func:`write_jsonl`.
    """

    image_id: str
    split: str | None
    captions: list[str]
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class Corpus:
    """An ordered list of images with captions, read from ``path`` in ``format``."""

    path: Path
    format: str
    images: list[ImageRecord]

    def __len__(self) -> int:
        return len(self.images)

    @property
    def num_captions(self) -> int:
        return sum(len(im.captions) for im in self.images)

    @property
    def splits(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for im in self.images:
            counts[str(im.split)] = counts.get(str(im.split), 0) + 1
        return counts

    def select(self, splits: Iterable[str] | str | None) -> "Corpus":
        """The images of the given splits (all images for ``None``), in corpus order."""
        if splits is None:
            return self
        wanted = {splits} if isinstance(splits, str) else set(splits)
        unknown = wanted - set(self.splits)
        if unknown:
            raise ValueError(f"{self.path}: no images in split(s) {sorted(unknown)}; "
                             f"the corpus has {self.splits}")
        return Corpus(self.path, self.format, [im for im in self.images if im.split in wanted])

    @property
    def image_ids(self) -> list[str]:
        """The images' ids, in corpus order."""
        return [im.image_id for im in self.images]

    def iter_captions(self) -> Iterator[tuple[int, int, str]]:
        """``(image_index, caption_index_within_image, caption)`` for every caption."""
        for i, im in enumerate(self.images):
            for j, cap in enumerate(im.captions):
                yield i, j, cap


def parse_splits(spec: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """Split names from a ``--split`` value, for :meth:`Corpus.select` (``None`` = every image).

    Comma-separated names; ``trainval`` / ``train+restval`` stand for Karpathy's ``train`` and ``restval``
    (the COCO training protocol), ``all`` for every image.

    >>> parse_splits("test"), parse_splits("val, test"), parse_splits("train+restval")
    (('test',), ('val', 'test'), ('train', 'restval'))
    >>> parse_splits("trainval,val"), parse_splits(None), parse_splits("all")
    (('train', 'restval', 'val'), None, None)
    """
    if spec is None:
        return None
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    out: list[str] = []
    for part in parts:
        if part in SPLIT_ALIASES:
            expanded = SPLIT_ALIASES[part]
            if expanded is None:
                return None
            out.extend(expanded)
        else:
            out.append(part)
    return tuple(dict.fromkeys(out)) or None


def read_corpus(path: str | Path, format: str | None = None, *, ids_path: str | Path | None = None,
                captions_per_image: int = 5) -> Corpus:
    """Read a caption corpus in any supported format (see the module docstring).

    Raises :class:`CorpusFormatError` naming the file and line when the file is not of the format.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"caption corpus not found: {path}")
    if path.is_dir():
        raise CorpusFormatError(f"{path} is a folder: give the caption file inside it (JSONL, Karpathy JSON, TSV "
                                f"or SCAN *_caps.txt)")
    try:
        fmt = format or detect_format(path)
        if fmt not in CORPUS_FORMATS:
            raise ValueError(f"unknown corpus format {fmt!r}; choose one of {CORPUS_FORMATS}")
        if fmt == "jsonl":
            images = _read_jsonl(path)
        elif fmt == "karpathy":
            images = _read_karpathy(path)
        elif fmt == "tsv":
            images = _read_tsv(path)
        else:
            images = _read_scan(path, ids_path, captions_per_image)
    except UnicodeDecodeError as err:
        raise CorpusFormatError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset "
                                f"{err.start} of a read block): a caption corpus is UTF-8 text; is this a "
                                f"binary or compressed file without a .gz name?") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise CorpusFormatError(f"{path}: a truncated or damaged gzip file ({err or type(err).__name__}); "
                                f"download or copy it again") from None
    seen: dict[str, int] = {}
    for k, im in enumerate(images):
        if im.image_id in seen:
            raise CorpusFormatError(f"{path}: image id {im.image_id!r} appears twice "
                                    f"(records {seen[im.image_id] + 1} and {k + 1})")
        seen[im.image_id] = k
    logger.info("read %d images, %d captions from %s (%s)", len(images),
                sum(len(im.captions) for im in images), path, fmt)
    return Corpus(path, fmt, images)


def detect_format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return "jsonl"
    if name.endswith(".json"):
        return "karpathy"
    if name.endswith((".tsv", ".tsv.gz")):
        return "tsv"
    if name.endswith("_caps.txt"):
        return "scan"
    with _open_text(path) as f:
        first = f.readline()
    if first.lstrip().startswith("{"):
        return "jsonl"
    if "\t" in first:
        return "tsv"
    raise CorpusFormatError(f"{path}: cannot tell the corpus format from the name or the first line; "
                            f"pass format= one of {CORPUS_FORMATS}")


def _open_text(path: Path):
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")  # -sig: a byte-order mark is not part of the first id


def _read_jsonl(path: Path) -> list[ImageRecord]:
    images = []
    try:
        with _open_text(path) as f:
            for lineno, line in enumerate(f, 1):
                rec = jsonl_record(line, path, lineno)
                if rec is not None:
                    images.append(rec)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as err:
        raise CorpusFormatError(f"{path}: cannot be read as UTF-8 JSON lines ({err})") from None
    return images


def jsonl_record(line: str, path: str | Path, lineno: int) -> ImageRecord | None:
    """One line of a JSONL corpus as an :class:`ImageRecord` (``None`` for a blank line); a bad line raises
    :class:`CorpusFormatError` naming ``path:lineno``. Shared by :func:`read_corpus` and the readers of byte
    ranges (:mod:`crg.corpus_ranges`), so both accept and refuse the same lines."""
    if not line.strip():
        return None
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as err:
        raise CorpusFormatError(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(rec, dict) or "image_id" not in rec or "captions" not in rec:
        raise CorpusFormatError(f"{path}:{lineno}: expected an object with 'image_id' and 'captions', "
                                f"got {str(rec)[:120]}")
    caps = rec["captions"]
    if not isinstance(caps, list):
        raise CorpusFormatError(f"{path}:{lineno}: 'captions' must be a list, got {type(caps).__name__}")
    split = rec.get("split")
    if split is not None and not isinstance(split, str):
        raise CorpusFormatError(f"{path}:{lineno}: 'split' must be a string such as \"train\", got "
                                f"{json.dumps(split)[:60]}")
    return ImageRecord(str(rec["image_id"]), split, caps, rec)


def _read_karpathy(path: Path) -> list[ImageRecord]:
    try:
        with _open_text(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise CorpusFormatError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise CorpusFormatError(f"{path}: not UTF-8 text ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise CorpusFormatError(f"{path}: expected Karpathy's dataset json, an object with an 'images' list")
    images = []
    for k, im in enumerate(data["images"]):
        if not isinstance(im, dict) or "sentences" not in im:
            raise CorpusFormatError(f"{path}: images[{k}] has no 'sentences'")
        if "cocoid" in im:
            image_id = str(im["cocoid"])
        elif "filename" in im:
            image_id = Path(im["filename"]).stem
        elif "imgid" in im:
            image_id = str(im["imgid"])
        else:
            raise CorpusFormatError(f"{path}: images[{k}] has neither 'cocoid', 'filename' nor 'imgid'")
        caps = []
        for s, sent in enumerate(im["sentences"]):
            if isinstance(sent, dict) and "raw" in sent:
                caps.append(sent["raw"])
            elif isinstance(sent, dict) and "tokens" in sent:
                caps.append(" ".join(sent["tokens"]))
            else:
                raise CorpusFormatError(f"{path}: images[{k}].sentences[{s}] has neither 'raw' nor 'tokens'")
        record = {"image_id": im["cocoid"] if "cocoid" in im else image_id, "split": im.get("split"),
                  "captions": caps, "filename": im.get("filename")}
        images.append(ImageRecord(image_id, im.get("split"), caps, record))
    return images


def tsv_columns(path, lineno: int, line: str) -> list[str]:
    """A TSV line's columns: ``image_id<TAB>caption[<TAB>split]``, else an error naming the line."""
    cols = line.split("\t")
    if len(cols) not in (2, 3):
        raise CorpusFormatError(f"{path}:{lineno}: expected 'image_id<TAB>caption[<TAB>split]', "
                                f"got {len(cols)} column(s): {line[:120]!r}")
    return cols


def tsv_fields(path, lineno: int, line: str, cols: list[str], width: int, first: int) -> tuple | None:
    """``(image_id, caption, split)`` of a TSV line whose file's first line (``first``) has ``width``
    columns; None for that first line when it is a header. Shared by :func:`read_corpus` and the Ray
    engine's byte-range readers (:mod:`crg.corpus_ranges`), so both refuse the same lines alike."""
    if len(cols) != width:
        raise CorpusFormatError(f"{path}:{lineno}: {len(cols)} tab-separated columns where line {first} has "
                                f"{width} (a caption holding a tab?): {line[:120]!r}")
    if lineno == first and cols[0].strip().lower() in ("image_id", "image", "id"):
        return None
    if len(cols) == 3 and len(cols[2].split()) > 1:
        raise CorpusFormatError(f"{path}:{lineno}: the split column is {cols[2][:60]!r}, several words "
                                f"(a caption holding a tab?); a split is one word such as train")
    return cols[0].strip(), cols[1], cols[2].strip() if len(cols) == 3 else None


def _read_tsv(path: Path) -> list[ImageRecord]:
    """Every line has the columns of the file's first (header or record) line: a caption holding a tab
    would otherwise be cut there and its rest taken for the split."""
    by_id: dict[str, ImageRecord] = {}
    width = first = None
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            cols = tsv_columns(path, lineno, line)
            if width is None:
                width, first = len(cols), lineno
            fields = tsv_fields(path, lineno, line, cols, width, first)
            if fields is None:
                continue
            image_id, caption, split = fields
            rec = by_id.get(image_id)
            if rec is None:
                rec = by_id[image_id] = ImageRecord(image_id, split, [], {"image_id": image_id, "split": split})
            elif split is not None and rec.split != split:
                raise CorpusFormatError(f"{path}:{lineno}: image {image_id!r} is in split {split!r} here "
                                        f"but {rec.split!r} earlier")
            rec.captions.append(caption)
    for rec in by_id.values():
        rec.raw["captions"] = rec.captions
    return list(by_id.values())


def _read_scan(path: Path, ids_path: str | Path | None, per_image: int) -> list[ImageRecord]:
    prefix = path.name[: -len("_caps.txt")] if path.name.endswith("_caps.txt") else path.stem
    split = _SCAN_SPLITS.get(prefix, prefix)
    ids_file = Path(ids_path) if ids_path else path.with_name(f"{prefix}_ids.txt")
    with _open_text(path) as f:
        caps = [line.rstrip("\n") for line in f]
    if caps and caps[-1] == "":
        caps.pop()
    if not ids_file.exists():
        raise FileNotFoundError(f"{path}: SCAN captions need their id list; expected {ids_file} "
                                f"(build_crg: --scan-ids FILE; Python: read_corpus(..., ids_path=FILE))")
    with open(ids_file, encoding="utf-8-sig") as f:
        ids = [line.strip() for line in f if line.strip()]
    if len(ids) == len(caps):  # one id per caption: consecutive runs belong to one image
        order: list[str] = []
        grouped: dict[str, list[str]] = {}
        for image_id, cap in zip(ids, caps):
            if image_id not in grouped:
                order.append(image_id)
                grouped[image_id] = []
            grouped[image_id].append(cap)
        pairs = [(i, grouped[i]) for i in order]
    elif len(ids) * per_image == len(caps):
        pairs = [(image_id, caps[k * per_image:(k + 1) * per_image]) for k, image_id in enumerate(ids)]
    else:
        raise CorpusFormatError(
            f"{path}: {len(caps)} captions do not match {len(ids)} ids in {ids_file} "
            f"(expected one id per caption, or one per {per_image} captions)")
    return [ImageRecord(i, split, c, {"image_id": i, "split": split, "captions": c}) for i, c in pairs]


def write_jsonl(images: Iterable[ImageRecord], path: str | Path) -> None:
    """Write images in the JSONL schema, each line being the record's raw object (atomically)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        for im in images:
            rec = dict(im.raw) if im.raw else {"image_id": im.image_id, "split": im.split}
            rec["captions"] = im.captions
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    tmp.replace(path)
