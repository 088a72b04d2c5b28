"""Byte ranges of a JSONL corpus: how the workers of a partitioned build read their own input.

Why: a driver that reads the corpus and writes every shard's captions does serial work in proportion to the
corpus (about 20 min at CC12M's size) and holds it. Here the driver only cuts the file into ranges that
start and end at line boundaries (:func:`plan_byte_ranges`: one streaming pass counting newlines, so each
range knows its first line number for error messages) and each worker reads its range
(:func:`read_byte_range`) from a file system every node sees. One JSONL line is one image, so an image never
straddles two ranges and the ranges, in order, are the corpus in order.

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

from crg.corpus import CorpusFormatError, ImageRecord, jsonl_record

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


@dataclass
class RangeImages:
    """The images of a range that are in the wanted splits, and the split labels of all its images."""

    images: list[ImageRecord]
    split_counts: dict[str, int] = field(default_factory=dict)   # str(split) -> images, selected or not


def check_range_corpus(path: str | Path, format: str | None) -> Path:
    """``path`` if byte ranges can be read from it (an uncompressed JSONL file), else a clear error."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"caption corpus not found: {path}")
    name = path.name.lower()
    if format not in (None, "jsonl") or not name.endswith(".jsonl"):
        raise CorpusFormatError(f"{path}: workers read byte ranges of an uncompressed JSONL corpus (one image per "
                                f"line, name ending in .jsonl); this one is "
                                f"{format or ('gzip-compressed' if name.endswith('.gz') else 'not .jsonl')}: "
                                f"decompress or convert it (crg.corpus.read_corpus + write_jsonl), or use "
                                f"--merge driver")
    return path


def estimate_captions(path: str | Path, sample_bytes: int = 1 << 22) -> int:
    """About how many captions ``path`` holds, from the captions per byte of its first ``sample_bytes``."""
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
        if line.strip():
            try:
                caps += len(json.loads(line).get("captions", []))
            except (ValueError, AttributeError):
                pass  # reported with its line number by the worker that reads it
    return max(1, round(caps * size / max(used, 1)))


def plan_byte_ranges(path: str | Path, num_ranges: int) -> list[ByteRange]:
    """About ``num_ranges`` ranges of equal size, each starting at a line start (empty ones dropped).

    One pass over the file counts newlines (to give each range its first line number); nothing is decoded.
    """
    if num_ranges < 1:
        raise ValueError(f"num_ranges must be at least 1, got {num_ranges}")
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
            if cuts[-1] < pos < size:
                cuts.append(pos)
    cuts.append(size)
    lines = _line_numbers(path, cuts[:-1])
    return [ByteRange(k, str(path), a, b, line) for k, (a, b, line) in enumerate(zip(cuts[:-1], cuts[1:], lines))
            if b > a]


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
