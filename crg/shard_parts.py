"""Columnar shard parts: what a worker of a partitioned build writes for its byte range of the corpus.

A worker reads its range (:mod:`crg.corpus_ranges`), drops the captions every engine drops, parses what the
parse cache lacks, extracts, and writes (:func:`analyze_range`):

* ``NNNNN.part.npz`` -- the range's :class:`~crg.graph.GraphPart` as flat arrays, ids local to the shard
  (first-occurrence order); its key tables (concepts, predicates, image ids) as UTF-8 bytes + offsets, already
  split into the merge's hash partitions (``zlib.crc32`` modulo the partitions), one group of members each, so
  a merge partition reads its own members and no other; captions and images with local indices;
* ``NNNNN.dump.jsonl`` -- its ``captions.jsonl`` lines (``--dump`` only);
* ``NNNNN.summary.json`` -- written last, the commit mark: sizes, the report's counts and skip examples, the
  key of everything that decides the part (a rerun keeps a shard whose key matches).

Nothing here imports Ray; :mod:`crg.partitioned_merge` merges the parts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from crg.build import BuildReport, analyze_captions, caption_record, gc_paused, usable_captions
from crg.corpus import Corpus
from crg.corpus_ranges import ByteRange, read_byte_range
from crg.graph import GraphBuilder
from crg.parse_cache import ParseCache
from crg.parser_base import ConstituencyParser
from crg.shards import peak_rss_mb

__all__ = ["PART_VERSION", "PartSummary", "part_paths", "range_key", "analyze_range", "load_part", "key_partitions",
           "partitioned_keys", "encode_bytes",
           "encode_strings", "read_summary"]

PART_VERSION = 1
_KIND = "crg-shard-part"


@dataclass
class PartSummary:
    """What a worker reports of its range (the summary file's body); sizes let the merge place each shard's
    slice of the final arrays without reading the part."""

    shard: int
    key: str
    num_images: int = 0                 # selected images of the range
    num_captions: int = 0               # of the selected images
    num_used: int = 0
    num_parsed: int = 0
    num_from_cache: int = 0
    num_concepts: int = 0               # the part's own tables
    num_predicates: int = 0
    num_derivations: int = 0
    num_caption_derivs: int = 0         # sum over captions of their derivation lists
    num_caption_concepts: int = 0
    caption_text_bytes: int = 0
    image_id_bytes: int = 0
    num_partitions: int = 1             # the merge partitions its key tables are split into
    split_names: list[str] = field(default_factory=list)   # the selected images' split labels, by local code
    split_counts: dict[str, int] = field(default_factory=dict)  # every image of the range by str(split)
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_examples: list[dict] = field(default_factory=list)  # the range's first ones (BuildReport's order)
    seconds: float = 0.0
    peak_rss_mb: float = 0.0


def part_paths(directory: str | Path, index: int) -> dict[str, Path]:
    directory = Path(directory)
    return {"part": directory / f"{index:05d}.part.npz", "dump": directory / f"{index:05d}.dump.jsonl",
            "summary": directory / f"{index:05d}.summary.json"}


def range_key(rng: ByteRange, splits: Sequence[str] | None, settings: dict) -> str:
    """What decides a shard's part: the file (size and modification time), the range, the splits, the settings."""
    st = os.stat(rng.path)
    blob = json.dumps({"path": str(Path(rng.path).resolve()), "size": st.st_size, "mtime": st.st_mtime_ns,
                       "range": [rng.start, rng.stop], "splits": sorted(splits) if splits is not None else None,
                       "settings": settings, "version": PART_VERSION}, sort_keys=True)
    return hashlib.blake2b(blob.encode("utf-8"), digest_size=12).hexdigest()


def read_summary(directory: str | Path, index: int, key: str | None = None) -> PartSummary | None:
    """The shard's summary when its part is complete (and made with ``key``), else ``None``."""
    paths = part_paths(directory, index)
    try:
        body = json.loads(paths["summary"].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if body.pop("kind", None) != _KIND or body.pop("version", None) != PART_VERSION or not paths["part"].exists():
        return None
    summary = PartSummary(**body)
    if key is not None and summary.key != key:
        return None
    return summary


def encode_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets (n+1,) int64, utf8 bytes uint8)`` of ``strings``."""
    return encode_bytes([s.encode("utf-8") for s in strings])


def key_partitions(keys: Sequence[bytes], num_partitions: int) -> np.ndarray:
    """``(n,)`` the merge partition of each key: its crc32 modulo ``num_partitions`` (stable across processes and
    machines, as Python's ``hash`` is not)."""
    return np.asarray([zlib.crc32(k) % num_partitions for k in keys], dtype=np.int64)


def partitioned_keys(arrays: dict, table: str, keys: Sequence[bytes], num_partitions: int,
                     extra: dict[str, np.ndarray] | None = None) -> None:
    """Into ``arrays``: for each partition ``p``, the members ``TABLE.p.local`` (its keys' local ids, ascending),
    ``TABLE.p.off`` / ``TABLE.p.key`` (the keys' bytes) and ``TABLE.p.NAME`` for each per-key array of ``extra``
    (ragged ones as ``NAME_off`` / ``NAME``), so that a merge partition reads its own members only."""
    part_of = key_partitions(keys, num_partitions)
    for p in range(num_partitions):
        local = np.flatnonzero(part_of == p)
        arrays[f"{table}.{p}.local"] = local
        arrays[f"{table}.{p}.off"], arrays[f"{table}.{p}.key"] = encode_bytes([keys[i] for i in local])
        for name, values in (extra or {}).items():
            if isinstance(values, list):  # ragged: bytes per key
                arrays[f"{table}.{p}.{name}_off"], arrays[f"{table}.{p}.{name}"] = encode_bytes([values[i] for i in local])
            else:
                arrays[f"{table}.{p}.{name}"] = values[local]


def encode_bytes(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets (n+1,) int64, concatenated bytes uint8)``."""
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(blobs), dtype=np.uint8).copy()


def _ragged(chunks: Sequence[Sequence[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in chunks], out=ptr[1:])
    flat = np.fromiter((x for c in chunks for x in c), dtype=dtype, count=int(ptr[-1]))
    return ptr, flat


def analyze_range(rng: ByteRange, splits: Sequence[str] | None, parser: ConstituencyParser, directory: str | Path,
                  *, key: str, cache: ParseCache | None = None, max_words: int = 100, dump: bool = False,
                  prune_probability: float = 0.0, prune_seed: int = 0, num_partitions: int = 1,
                  before_summary: Callable[[], None] | None = None) -> PartSummary:
    """Read, parse, extract and write one shard's part (the module docstring); returns its summary.

    ``num_partitions``: the merge's; each key table is written split by partition (:func:`partitioned_keys`).
    ``before_summary()`` runs between writing the part and its summary (the fault-injection tests kill the
    worker there: a part without its summary is not finished and is made again).

    Each caption goes through what :func:`crg.build.build_crg` does to it, so merging the parts in order
    gives the default engine's graph.
    """
    started = time.perf_counter()
    paths = part_paths(directory, rng.index)
    got = read_byte_range(rng, None if splits is None else set(splits))
    corpus = Corpus(Path(rng.path), rng.format, got.images)
    report = BuildReport()
    todo = usable_captions(corpus, report, max_words=max_words)
    builder = GraphBuilder([], [])
    records = []
    results = analyze_captions([t for _, _, t in todo], parser, cache=cache, n_process=1, progress=False,
                               report=report, prune_probability=prune_probability, prune_seed=prune_seed)
    with gc_paused():  # as the default engine's workers (crg.build.gc_paused)
        for (i, j, text), (bracketed, root) in zip(todo, results):
            if root is None:
                report.skip("parse_failed", got.images[i].image_id, j, text)
                continue
            builder.add_caption(i, j, text, root)
            if dump:
                records.append(json.dumps(caption_record(got.images[i].image_id, text, bracketed, root),
                                          ensure_ascii=False) + "\n")
    part = builder.part()
    arrays: dict[str, np.ndarray] = {}
    partitioned_keys(arrays, "concepts", [t.encode("utf-8") for t in part.concept_texts], num_partitions,
                     {"kinds": np.asarray(part.concept_kinds, dtype=np.uint8),
                      "label": [t.encode("utf-8") for t in part.concept_labels]})
    partitioned_keys(arrays, "predicates", [t.encode("utf-8") for t in part.predicate_templates], num_partitions)
    arrays["d_parent"] = np.asarray([d.parent for d in part.derivations], dtype=np.int32)
    arrays["d_predicate"] = np.asarray([d.predicate for d in part.derivations], dtype=np.int32)
    arrays["d_child_ptr"], arrays["d_children"] = _ragged([d.children for d in part.derivations], np.int32)
    caps = part.captions
    arrays["cap_image"] = np.asarray([c.image for c in caps], dtype=np.int32)   # local image index
    arrays["cap_index"] = np.asarray([c.index for c in caps], dtype=np.int16)
    arrays["cap_root"] = np.asarray([c.root for c in caps], dtype=np.int32)
    arrays["cap_height"] = np.asarray([c.height for c in caps], dtype=np.int16)
    arrays["cap_deriv_ptr"], arrays["cap_derivs"] = _ragged([c.derivs for c in caps], np.int32)
    arrays["cap_concept_ptr"], arrays["cap_concepts"] = _ragged([c.concepts for c in caps], np.int32)
    arrays["cap_text_off"], arrays["cap_text_utf8"] = encode_strings([c.text for c in caps])
    arrays["img_off"], arrays["img_utf8"] = encode_strings([im.image_id for im in got.images])
    partitioned_keys(arrays, "images", [im.image_id.encode("utf-8") for im in got.images], num_partitions)
    split_names: dict[str, int] = {}
    arrays["img_split"] = np.asarray([-1 if im.split is None else split_names.setdefault(im.split, len(split_names))
                                      for im in got.images], dtype=np.int32)
    tmp = paths["part"].with_name(paths["part"].name + ".tmp.npz")
    np.savez(tmp, **arrays)  # uncompressed: read back by several merge partitions
    os.replace(tmp, paths["part"])
    if dump:
        tmp = paths["dump"].with_name(paths["dump"].name + ".tmp")
        tmp.write_text("".join(records), encoding="utf-8")
        os.replace(tmp, paths["dump"])
    if before_summary is not None:
        before_summary()
    summary = PartSummary(
        shard=rng.index, key=key, num_images=len(got.images), num_captions=report.num_captions,
        num_used=len(caps), num_parsed=report.num_parsed, num_from_cache=report.num_from_cache,
        num_concepts=len(part.concept_texts), num_predicates=len(part.predicate_templates),
        num_derivations=len(part.derivations), num_caption_derivs=int(arrays["cap_derivs"].size),
        num_caption_concepts=int(arrays["cap_concepts"].size), caption_text_bytes=int(arrays["cap_text_utf8"].size),
        image_id_bytes=int(arrays["img_utf8"].size), num_partitions=num_partitions, split_names=list(split_names), split_counts=got.split_counts,
        skipped=dict(report.skipped), skipped_examples=list(report.skipped_examples),
        seconds=round(time.perf_counter() - started, 3), peak_rss_mb=peak_rss_mb())
    tmp = paths["summary"].with_name(paths["summary"].name + ".tmp")
    tmp.write_text(json.dumps({"kind": _KIND, "version": PART_VERSION, **asdict(summary)}, ensure_ascii=False),
                   encoding="utf-8")
    os.replace(tmp, paths["summary"])
    return summary


def load_part(directory: str | Path, index: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Arrays of shard ``index``'s part (all, or ``names``)."""
    with np.load(part_paths(directory, index)["part"], allow_pickle=False) as data:
        return {name: data[name] for name in (names if names is not None else data.files)}
