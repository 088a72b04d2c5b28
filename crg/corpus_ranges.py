"""Byte ranges of a JSONL or TSV corpus: how the workers of a partitioned build read their own input.

Why: a driver that reads the corpus and writes every shard's captions does serial work in proportion to the
corpus (about 20 min at CC12M's size) and holds it. Here the driver only cuts the file into ranges that
start and end at line boundaries (:func:`plan_byte_ranges`: one streaming pass counting newlines, so each
range knows its first line number for error messages) and each worker reads its range
(:func:`read_byte_range`) from a file system every node sees. One JSONL line is one image, so an image never
straddles two ranges and the ranges, in order, are the corpus in order. A TSV (``image_id<TAB>caption``, CC12M's
format) has a line per caption: cuts move past the lines of the image before them, and an image's lines must be
consecutive (``read_corpus`` also joins lines apart; a range cannot, so it refuses them).

Lines are checked by the same function :func:`crg.corpus.read_corpus` uses (:func:`crg.corpus.jsonl_record`),
so a bad line fails with the same ``FILE:LINE`` message.

>>> import tempfile, pathlib, json
>>> p = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
>>> _ = p.write_text("".join(json.dumps({"image_id": k, "split": "train", "captions": ["a dog"]}) + "\\n"
...                          for k in range(5)))
>>> ranges = plan_byte_ranges(p, 2)
>>> [(r.first_line, len(read_byte_range(r).images)) for r in ranges]
[(1, 3), (4, 2)]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from crg.corpus import CorpusFormatError, ImageRecord, jsonl_record, tsv_columns, tsv_fields

__all__ = ["ByteRange", "RangeImages", "plan_byte_ranges", "read_byte_range", "estimate_captions",
           "check_range_corpus"]

_BLOCK = 1 << 24


@dataclass(frozen=True)
class ByteRange:
    """Lines ``[start, stop)`` (bytes) of ``path``; ``first_line`` is the 1-based line number at ``start``."""

    index: int
    path: str
    start: int
    stop: int
    first_line: int
    format: str = "jsonl"     # or "tsv"
    columns: int = 0          # tsv: the columns of the file's first line (2 or 3), which every line must have
    first_record_line: int = 1  # tsv: that line's number (the error messages name it, as read_corpus does)


@dataclass
class RangeImages:
    """The images of a range that are in the wanted splits, and the split labels of all its images."""

    images: list[ImageRecord]
    split_counts: dict[str, int] = field(default_factory=dict)   # str(split) -> images, selected or not


def check_range_corpus(path: str | Path, format: str | None) -> str:
    """The format (``jsonl`` or ``tsv``) when byte ranges can be read from ``path`` (an uncompressed JSONL or TSV
    file), else a clear error."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"caption corpus not found: {path}")
    name = path.name.lower()
    detected = "jsonl" if name.endswith(".jsonl") else "tsv" if name.endswith(".tsv") else None
    if detected is None or format not in (None, detected):
        raise CorpusFormatError(f"{path}: workers read byte ranges of an uncompressed JSONL corpus (one image per "
                                f"line, name ending in .jsonl) or TSV (image_id<TAB>caption[<TAB>split], .tsv); this "
                                f"one is {format or ('gzip-compressed' if name.endswith('.gz') else 'neither')}: "
                                f"decompress or convert it (crg.corpus.read_corpus + write_jsonl), or use "
                                f"--merge driver")
    return detected


def estimate_captions(path: str | Path, format: str = "jsonl", sample_bytes: int = 1 << 22) -> int:
    """About how many captions ``path`` holds, from the captions per byte of its first ``sample_bytes`` (a TSV:
    one caption a line)."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(sample_bytes)
    lines = head.split(b"\n")
    if len(head) == sample_bytes and len(lines) > 1:
        lines = lines[:-1]  # a cut last line
    used = sum(len(line) + 1 for line in lines)
    caps = 0
    for line in lines:
        if line.strip() and format == "tsv":
            caps += 1
        elif line.strip():
            try:
                caps += len(json.loads(line).get("captions", []))
            except (ValueError, AttributeError):
                pass  # reported with its line number by the worker that reads it
    return max(1, round(caps * size / max(used, 1)))


def plan_byte_ranges(path: str | Path, num_ranges: int, format: str = "jsonl") -> list[ByteRange]:
    """About ``num_ranges`` ranges of equal size, each starting at a line start (empty ones dropped).

    One pass over the file counts newlines (to give each range its first line number); nothing else is decoded
    but, for a TSV, the image ids around each cut: a cut moves down past the lines of the image before it, so
    that an image's (consecutive) lines stay in one range.
    """
    if num_ranges < 1:
        raise ValueError(f"num_ranges must be at least 1, got {num_ranges}")
    if format not in ("jsonl", "tsv"):
        raise ValueError(f"byte ranges of jsonl or tsv, not {format!r}")
    path = Path(path)
    size = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, num_ranges):
            target = k * size // num_ranges
            if target <= cuts[-1]:
                continue
            f.seek(target - 1)
            f.readline()  # to the end of the line holding byte target-1: the next line starts at or after target
            pos = f.tell()
            if format == "tsv" and pos < size:
                image = _tsv_id(f.readline())
                pos = f.tell()
                while pos < size and _tsv_id(f.readline()) == image:
                    pos = f.tell()
                f.seek(pos)
            if cuts[-1] < pos < size:
                cuts.append(pos)
    cuts.append(size)
    lines = _line_numbers(path, cuts[:-1])
    columns, first = _tsv_shape(path) if format == "tsv" else (0, 1)
    return [ByteRange(k, str(path), a, b, line, format, columns, first)
            for k, (a, b, line) in enumerate(zip(cuts[:-1], cuts[1:], lines)) if b > a]


def _tsv_id(line: bytes) -> bytes:
    return line.split(b"\t", 1)[0].strip()


def _tsv_shape(path: Path) -> tuple[int, int]:
    """The columns of a TSV's first non-blank line, and its line number (``read_corpus``'s rule)."""
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if line.strip():
                return len(line.split("\t")), lineno
    return 0, 1


def _line_numbers(path: Path, offsets: list[int]) -> list[int]:
    """The 1-based line number starting at each of the sorted ``offsets`` (one streaming pass)."""
    out, newlines, pos = [], 0, 0
    pending = list(offsets)
    with open(path, "rb") as f:
        while pending:
            while pending and pending[0] <= pos:
                out.append(newlines + 1)
                pending.pop(0)
            if not pending:
                break
            block = f.read(min(_BLOCK, pending[0] - pos))
            if not block:
                out.extend(newlines + 1 for _ in pending)
                break
            newlines += block.count(b"\n")
            pos += len(block)
    return out


def read_byte_range(rng: ByteRange, splits: set[str] | None = None) -> RangeImages:
    """The images of ``rng`` in ``splits`` (``None``: all), in file order; a bad line raises
    :class:`~crg.corpus.CorpusFormatError` with the file and line."""
    with open(rng.path, "rb") as f:
        f.seek(rng.start)
        raw = f.read(rng.stop - rng.start)
    try:
        text = raw.decode("utf-8-sig" if rng.start == 0 else "utf-8")
    except UnicodeDecodeError as err:
        line = rng.first_line + raw[:err.start].count(b"\n")
        raise CorpusFormatError(f"{rng.path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x})") from None
    if rng.format == "tsv":
        return _read_tsv_range(rng, text, splits)
    out = RangeImages([])
    seen: dict[str, int] = {}
    pieces = text.split("\n")
    for k, line in enumerate(pieces):
        if k < len(pieces) - 1:
            line += "\n"  # as a file iterator gives it (a JSON error's column counts it)
        rec = jsonl_record(line, rng.path, rng.first_line + k)
        if rec is None:
            continue
        if rec.image_id in seen:
            raise CorpusFormatError(f"{rng.path}: image id {rec.image_id!r} appears twice (lines {seen[rec.image_id]} "
                                    f"and {rng.first_line + k})")
        seen[rec.image_id] = rng.first_line + k
        label = str(rec.split)
        out.split_counts[label] = out.split_counts.get(label, 0) + 1
        if splits is None or rec.split in splits:
            out.images.append(rec)
    return out


def _read_tsv_range(rng: ByteRange, text: str, splits: set[str] | None) -> RangeImages:
    """A TSV range's images, line by line as :func:`crg.corpus.read_corpus` reads them, except that an image's
    lines must be consecutive (a range cannot see the rest of the file): lines of one image apart are refused."""
    path, width, first = rng.path, rng.columns, rng.first_record_line
    images: list[ImageRecord] = []
    where: dict[str, int] = {}
    for k, line in enumerate(text.split("\n")):
        lineno = rng.first_line + k
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = tsv_fields(path, lineno, line, tsv_columns(path, lineno, line), width, first)
        if fields is None:
            continue
        image_id, caption, split = fields
        if images and images[-1].image_id == image_id:
            rec = images[-1]
            if split is not None and rec.split != split:
                raise CorpusFormatError(f"{path}:{lineno}: image {image_id!r} is in split {split!r} here "
                                        f"but {rec.split!r} earlier")
        elif image_id in where:
            raise CorpusFormatError(f"{path}:{lineno}: image {image_id!r} has lines apart (line {where[image_id]} "
                                    f"too); a partitioned build needs each image's lines together: sort the TSV by "
                                    f"image id, or use --merge driver")
        else:
            rec = ImageRecord(image_id, split, [], {"image_id": image_id, "split": split})
            images.append(rec)
            where[image_id] = lineno
        rec.captions.append(caption)
    out = RangeImages([])
    for rec in images:
        rec.raw["captions"] = rec.captions
        label = str(rec.split)
        out.split_counts[label] = out.split_counts.get(label, 0) + 1
        if splits is None or rec.split in splits:
            out.images.append(rec)
    return out
