"""Shard files of a distributed CRG build: the captions of each shard, and its parses and extractions.

A distributed build (:mod:`crg.ray_engine`) cuts the usable captions into contiguous shards. For each
shard the driver writes an **input file** (``NNNNN.in.jsonl``: a header line, then one caption per
line) and a worker writes an **output file** (``NNNNN.out.jsonl.gz``): the shard's captions as a
:class:`~crg.graph.GraphPart` (its own string tables and ids), each caption's bracketed parse, and the
captions it could not use. Output files are written through a temporary file and a rename, and their
header carries a key of everything that decides their content, so a rerun keeps every finished shard
whose key still matches and a killed worker never leaves half a file behind.

The driver then merges the parts in shard order (:func:`merge_shards`), one file at a time: it holds
the growing graph, never every caption's parse. :func:`shard_count_matrices` reads the MCD splitter's
per-image compound and atom counts from the same files.

Nothing here imports Ray: a shard is analysed by :func:`analyze_shard` whoever calls it.

A file that is not what it claims (bad JSON, a missing field, another shard's header, a truncated
stream) raises :class:`ShardFileError`, whose message names the file and the line:

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> spec = write_shard_input(d, 0, [ShardCaption(0, 0, "im0", "a dog runs")])
>>> read_shard_input(spec).captions
[ShardCaption(image=0, index=0, image_id='im0', text='a dog runs')]
>>> _ = spec.path.write_text(spec.path.read_text().replace('"a dog runs"', '"a dog'))
>>> read_shard_input(spec).problems[0].endswith(".in.jsonl:2: not valid JSON")
True
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import resource
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import scipy.sparse as sp

from crg.build import BuildReport, analyze_captions, caption_record, gc_paused
from crg.extract import PRIMITIVE
from crg.graph import KIND_BITS, GraphBuilder, GraphPart, PartCaption, PartDerivation
from crg.parse_cache import ParseCache
from crg.parser_base import ConstituencyParser

__all__ = ["SHARD_VERSION", "ShardCaption", "ShardSpec", "ShardInput", "ShardSummary", "ShardOutput",
           "ShardFileError", "plan_shards", "write_shard_input", "read_shard_input", "output_key",
           "analyze_shard", "write_shard_output", "read_shard_output", "check_shard_output",
           "shard_count_matrices", "output_path", "merge_shard", "peak_rss_mb"]

logger = logging.getLogger(__name__)

SHARD_VERSION = 1
_INPUT_KIND = "crg-shard-input"
_OUTPUT_KIND = "crg-shard-output"


class ShardFileError(ValueError):
    """A shard file is unreadable or not what it claims; the message is ``FILE:LINE: what is wrong``."""

    def __init__(self, path: str | Path, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line = str(path), line


@dataclass
class ShardCaption:
    """One caption to analyse: where it belongs in the corpus, and its normalized text."""

    image: int        # image index in the (selected) corpus
    index: int        # the caption's position among its image's captions
    image_id: str
    text: str


@dataclass
class ShardSpec:
    """A shard's input file and what its header promises."""

    index: int
    path: Path
    num_captions: int
    digest: str       # of the captions it holds: a changed corpus or cut gives another digest


@dataclass
class ShardInput:
    """What :func:`read_shard_input` could read; ``problems`` are ``FILE:LINE: ...`` of lines it could not."""

    captions: list[ShardCaption]
    problems: list[str]


@dataclass
class ShardSummary:
    """What a worker reports of one shard (small: the parses stay in the file)."""

    shard: int
    path: str
    num_captions: int
    num_used: int
    num_parsed: int
    num_from_cache: int
    seconds: float = 0.0
    peak_rss_mb: float = 0.0      # the worker process' peak resident memory so far


@dataclass
class ShardOutput:
    """A shard output file, read back: its part, per-caption parse trees and dump records, and skips."""

    summary: ShardSummary
    part: GraphPart
    trees: list[str]                                        # bracketed parse of each used caption
    records: list[dict]                                     # captions.jsonl lines (empty unless dumped)
    skipped: list[dict] = field(default_factory=list)       # {"reason", "image_id", "caption_index", "text"}
    problems: list[str] = field(default_factory=list)       # bad input lines, FILE:LINE: ...


# ---------------------------------------------------------------------------------------- inputs
def plan_shards(num_captions: int, *, shards: int | None = None, shard_size: int = 5000) -> list[tuple[int, int]]:
    """``[start, stop)`` caption ranges of the shards: ``shards`` of them, else about ``shard_size`` each.

    >>> plan_shards(10, shards=3)
    [(0, 4), (4, 7), (7, 10)]
    >>> plan_shards(0, shard_size=5)
    []
    """
    if num_captions <= 0:
        return []
    if shards is not None and shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, got {shard_size}")
    n = min(shards or -(-num_captions // shard_size), num_captions)
    base, extra = divmod(num_captions, n)           # the first `extra` shards take one caption more
    sizes = [base + (k < extra) for k in range(n)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    return [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


def _caption_digest(captions: Sequence[ShardCaption]) -> str:
    h = hashlib.blake2b(digest_size=12)
    for c in captions:
        h.update(json.dumps([c.image, c.index, c.image_id, c.text], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def write_shard_input(directory: str | Path, index: int, captions: Sequence[ShardCaption]) -> ShardSpec:
    """Write shard ``index``'s input file (kept as it is when an identical one is there, so a rerun reuses
    the outputs made from it)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{index:05d}.in.jsonl"
    spec = ShardSpec(index, path, len(captions), _caption_digest(captions))
    header = {"kind": _INPUT_KIND, "version": SHARD_VERSION, "shard": index, "num_captions": len(captions),
              "digest": spec.digest}
    if path.exists():
        try:
            with open(path, encoding="utf-8") as f:
                if json.loads(f.readline()) == header:
                    return spec
        except (OSError, ValueError, UnicodeDecodeError):
            pass  # rewritten below
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for c in captions:
            f.write(json.dumps({"i": c.image, "j": c.index, "id": c.image_id, "text": c.text},
                               ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return spec


def read_shard_input(spec: ShardSpec) -> ShardInput:
    """The captions of a shard input file. A bad caption line is reported (``FILE:LINE: ...``) and left out;
    a file whose header is not this shard's gives no caption and one problem."""
    captions: list[ShardCaption] = []
    problems: list[str] = []
    try:
        with open(spec.path, encoding="utf-8") as f:
            lineno = 1
            try:
                header = json.loads(f.readline())
            except ValueError:
                raise ShardFileError(spec.path, 1, "not valid JSON (expected the shard header)") from None
            want = {"kind": _INPUT_KIND, "version": SHARD_VERSION, "shard": spec.index}
            got = {k: header.get(k) for k in want} if isinstance(header, dict) else header
            if got != want:
                raise ShardFileError(spec.path, 1, f"header {got} is not shard {spec.index}'s ({want})")
            for lineno, line in enumerate(f, 2):
                try:
                    row = json.loads(line)
                    captions.append(ShardCaption(int(row["i"]), int(row["j"]), str(row["id"]), _text(row["text"])))
                except ValueError:
                    problems.append(f"{spec.path}:{lineno}: not valid JSON")
                except (KeyError, TypeError) as err:
                    problems.append(f"{spec.path}:{lineno}: not a caption row ({type(err).__name__}: {err})")
    except ShardFileError as err:
        return ShardInput([], [str(err)])
    except (OSError, UnicodeDecodeError) as err:
        return ShardInput([], [f"{spec.path}:{lineno if 'lineno' in locals() else 0}: unreadable ({err})"])
    if len(captions) + len(problems) != spec.num_captions:
        problems.append(f"{spec.path}:{spec.num_captions + 1}: {len(captions) + len(problems)} caption lines, "
                        f"the header promises {spec.num_captions}")
    return ShardInput(captions, problems)


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"text is {type(value).__name__}, not a string")
    return value


# ---------------------------------------------------------------------------------------- outputs
def output_path(directory: str | Path, index: int) -> Path:
    return Path(directory) / f"{index:05d}.out.jsonl.gz"


def output_key(spec: ShardSpec, settings: dict) -> str:
    """What decides a shard's output: its captions and the analysis settings (parser, pruning, dump)."""
    blob = json.dumps({"digest": spec.digest, "settings": settings, "version": SHARD_VERSION}, sort_keys=True)
    return hashlib.blake2b(blob.encode("utf-8"), digest_size=12).hexdigest()


def analyze_shard(spec: ShardSpec, parser: ConstituencyParser, out_path: str | Path, *, key: str,
                  cache: ParseCache | None = None, dump: bool = False, prune_probability: float = 0.0,
                  prune_seed: int = 0, on_caption: Callable[[int], None] | None = None) -> ShardSummary:
    """Parse (where the cache has no tree) and extract every caption of a shard; write its output file.

    Each caption goes through exactly what :func:`crg.build.build_crg` does to it, so merging the shards
    gives the single-process graph. ``on_caption(n)`` is called after the n-th caption (progress, and the
    fault-injection tests).
    """
    started = time.perf_counter()
    shard_in = read_shard_input(spec)
    report = BuildReport()
    builder = GraphBuilder([], [])
    trees, records, skipped = [], [], []
    results = analyze_captions([c.text for c in shard_in.captions], parser, cache=cache, n_process=1,
                               progress=False, report=report, prune_probability=prune_probability,
                               prune_seed=prune_seed)
    with gc_paused():  # as the default engine's workers (crg.build.gc_paused)
        for n, (cap, (bracketed, root)) in enumerate(zip(shard_in.captions, results)):
            if root is None:
                skipped.append({"reason": "parse_failed", "image_id": cap.image_id, "caption_index": cap.index,
                                "text": cap.text})
            else:
                builder.add_caption(cap.image, cap.index, cap.text, root)
                trees.append(bracketed)
                if dump:
                    records.append(caption_record(cap.image_id, cap.text, bracketed, root))
            if on_caption is not None:
                on_caption(n)
    summary = ShardSummary(spec.index, str(out_path), spec.num_captions, len(trees), report.num_parsed,
                           report.num_from_cache, round(time.perf_counter() - started, 3), peak_rss_mb())
    write_shard_output(out_path, ShardOutput(summary, builder.part(), trees, records, skipped, shard_in.problems),
                       key=key)
    return summary


def write_shard_output(path: str | Path, out: ShardOutput, *, key: str) -> None:
    """Write a shard output file atomically: header, concepts, predicates, derivations, captions, skips, end."""
    path = Path(path)
    part = out.part
    header = {"kind": _OUTPUT_KIND, "version": SHARD_VERSION, "key": key, **asdict(out.summary),
              "num_concepts": len(part.concept_texts), "num_predicates": len(part.predicate_templates),
              "num_derivations": len(part.derivations), "num_skipped": len(out.skipped),
              "num_problems": len(out.problems), "dump": bool(out.records)}
    header.pop("path")
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as f:
        def put(obj) -> None:
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        put(header)
        for row in zip(part.concept_texts, part.concept_labels, part.concept_kinds):
            put(list(row))
        for template in part.predicate_templates:
            put(template)
        for d in part.derivations:
            put([d.parent, d.predicate, d.children])
        for k, cap in enumerate(part.captions):
            row = {"i": cap.image, "j": cap.index, "text": cap.text, "root": cap.root, "height": cap.height,
                   "derivs": cap.derivs, "concepts": cap.concepts, "tree": out.trees[k]}
            if out.records:
                row["record"] = out.records[k]
            put(row)
        for skip in out.skipped:
            put(skip)
        for problem in out.problems:
            put(problem)
        put({"end": out.summary.shard})
    os.replace(tmp, path)


def _lines(path: Path) -> Iterator[tuple[int, object]]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lineno = 0
            for lineno, line in enumerate(f, 1):
                try:
                    yield lineno, json.loads(line)
                except ValueError:
                    raise ShardFileError(path, lineno, "not valid JSON") from None
    except ShardFileError:
        raise
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:
        raise ShardFileError(path, lineno + 1, f"unreadable ({type(err).__name__}: {err})") from None


def read_shard_output(path: str | Path, *, shard: int | None = None, key: str | None = None) -> ShardOutput:
    """Read a shard output file back, checking it is complete and, when given, of ``shard`` made with ``key``.

    Raises :class:`ShardFileError` (file and line) on anything else.
    """
    path = Path(path)
    lines = _lines(path)
    lineno = 0

    def take(what: str):
        nonlocal lineno
        try:
            lineno, obj = next(lines)
        except StopIteration:
            raise ShardFileError(path, lineno + 1, f"ends early: expected {what}") from None
        return obj

    header = take("the header")
    if not isinstance(header, dict) or header.get("kind") != _OUTPUT_KIND or header.get("version") != SHARD_VERSION:
        raise ShardFileError(path, 1, f"not a shard output file of version {SHARD_VERSION}")
    if shard is not None and header.get("shard") != shard:
        raise ShardFileError(path, 1, f"holds shard {header.get('shard')}, not shard {shard}")
    if key is not None and header.get("key") != key:
        raise ShardFileError(path, 1, "made from other captions or settings (its key differs)")
    try:
        summary = ShardSummary(**{k: header[k] for k in ("shard", "num_captions", "num_used", "num_parsed",
                                                          "num_from_cache", "seconds", "peak_rss_mb")},
                               path=str(path))
        texts, labels, kinds = [], [], []
        for _ in range(int(header["num_concepts"])):
            text, label, bits = take("a concept row")
            texts.append(str(text)), labels.append(str(label)), kinds.append(int(bits))
        templates = [str(take("a predicate row")) for _ in range(int(header["num_predicates"]))]
        derivations = []
        for _ in range(int(header["num_derivations"])):
            parent, predicate, children = take("a derivation row")
            derivations.append(PartDerivation(int(parent), int(predicate), [int(c) for c in children]))
        captions, trees, records = [], [], []
        for _ in range(int(header["num_used"])):
            row = take("a caption row")
            captions.append(PartCaption(int(row["i"]), int(row["j"]), str(row["text"]), int(row["root"]),
                                        int(row["height"]), [int(d) for d in row["derivs"]],
                                        [int(c) for c in row["concepts"]]))
            trees.append(str(row["tree"]))
            if header.get("dump"):
                records.append(row["record"])
        skipped = [dict(take("a skipped caption")) for _ in range(int(header["num_skipped"]))]
        problems = [str(take("a problem line")) for _ in range(int(header["num_problems"]))]
        end = take("the end line")
    except ShardFileError:
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise ShardFileError(path, lineno, f"not what it claims ({type(err).__name__}: {err})") from None
    if end != {"end": summary.shard}:
        raise ShardFileError(path, lineno, f"expected the end line, got {str(end)[:80]}")
    _check_ids(path, lineno, texts, templates, derivations, captions)
    return ShardOutput(summary, GraphPart(texts, labels, kinds, templates, derivations, captions), trees, records,
                       skipped, problems)


def _check_ids(path, lineno, texts, templates, derivations, captions) -> None:
    """Every id a part uses points into its tables (a file that passes this merges without an IndexError)."""
    n_c, n_p, n_d = len(texts), len(templates), len(derivations)
    for d in derivations:
        if not (0 <= d.parent < n_c and 0 <= d.predicate < n_p and all(0 <= c < n_c for c in d.children)):
            raise ShardFileError(path, lineno, f"a derivation points outside the tables: {d}")
    for cap in captions:
        if not (0 <= cap.root < n_c and all(0 <= d < n_d for d in cap.derivs)
                and all(0 <= c < n_c for c in cap.concepts)):
            raise ShardFileError(path, lineno, f"caption {cap.text[:60]!r} points outside the tables")


def check_shard_output(path: str | Path, *, shard: int, key: str) -> str | None:
    """``None`` if ``path`` is a complete output of ``shard`` made with ``key``, else why not (``FILE:LINE: ...``).

    A missing file is not a problem worth reporting: it gives ``""``.
    """
    if not Path(path).exists():
        return ""
    try:
        read_shard_output(path, shard=shard, key=key)
    except ShardFileError as err:
        return str(err)
    return None


def peak_rss_mb() -> float:
    """This process' peak resident memory in MiB.

    On Linux, ``VmHWM`` of ``/proc/self/status``, which starts afresh when a program is executed:
    ``getrusage``'s ``ru_maxrss`` survives ``execve``, so a build started by a process that once held 650 MiB
    reported 650 MiB as its own peak. Elsewhere ``ru_maxrss``."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 2**10, 1)  # kB
    except OSError:  # no /proc (macOS): getrusage below
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)  # bytes on macOS, KiB on Linux


def merge_shard(spec: ShardSpec, key: str, builder: GraphBuilder, report: BuildReport, *,
                dump=None, problems: list[str] | None = None) -> ShardSummary | None:
    """Add one finished shard to ``builder`` and ``report`` (and its records to the open ``dump`` file).

    A shard output that cannot be read is reported (``FILE:LINE: ...`` into ``problems`` and the log) and
    its captions are counted as skipped ``bad_shard``: the rest of the build goes on. Returns the shard's
    summary, ``None`` for a bad file.
    """
    path = output_path(spec.path.parent, spec.index)
    try:
        out = read_shard_output(path, shard=spec.index, key=key)
    except ShardFileError as err:
        logger.warning("skipping the %d captions of a bad shard file: %s", spec.num_captions, err)
        if problems is not None:
            problems.append(str(err))
        report.skipped["bad_shard"] = report.skipped.get("bad_shard", 0) + spec.num_captions
        return None
    builder.add_part(out.part)
    report.num_used += len(out.part.captions)
    report.num_parsed += out.summary.num_parsed
    report.num_from_cache += out.summary.num_from_cache
    for skip in out.skipped:
        report.skip(skip["reason"], skip["image_id"], skip["caption_index"], skip["text"])
    for problem in out.problems:
        logger.warning("bad line in a shard input file: %s", problem)
        report.skip("bad_shard_line", "", -1, problem)
        if problems is not None:
            problems.append(problem)
    if dump is not None:
        for record in out.records:
            dump.write(json.dumps(record, ensure_ascii=False) + "\n")
    return out.summary


# ---------------------------------------------------------------------------------------- MCD counts
def shard_count_matrices(paths: Iterable[str | Path], num_images: int, compound_index: dict[str, int],
                         atom_index: dict[str, int]) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Per-image compound and atom counts read from shard outputs (in shard order), summed across shards.

    The same matrices :func:`crg.mcd.image_count_matrices` builds from the merged graph, with the same
    vocabulary growth: compounds are predicate templates in the graph's first-occurrence order, one count
    per composition step; atoms are primitive texts in concept-id order, once per caption containing them.
    Only the distinct concepts are held (to know which are primitives); per shard, a sparse matrix.

    Returns:
        ``(compounds, atoms)``: CSR matrices ``(num_images, len(compound_index))`` and
        ``(num_images, len(atom_index))`` (sizes after this call).
    """
    concept_ids: dict[str, int] = {}
    concept_kinds: list[int] = []
    compounds = sp.csr_matrix((num_images, 0))
    by_concept = sp.csr_matrix((num_images, 0))   # (I, concepts so far): caption-concept counts
    for path in paths:
        part = read_shard_output(path).part
        cmap = np.empty(len(part.concept_texts), dtype=np.int64)
        for k, (text, bits) in enumerate(zip(part.concept_texts, part.concept_kinds)):
            cid = concept_ids.setdefault(text, len(concept_ids))
            if cid == len(concept_kinds):
                concept_kinds.append(0)
            concept_kinds[cid] |= int(bits)
            cmap[k] = cid
        pcol = np.asarray([compound_index.setdefault(t, len(compound_index)) for t in part.predicate_templates],
                          dtype=np.int64)
        deriv_col = pcol[np.asarray([d.predicate for d in part.derivations], dtype=np.int64)]
        steps = [np.asarray(c.derivs, dtype=np.int64) for c in part.captions]
        holds = [np.asarray(c.concepts, dtype=np.int64) for c in part.captions]
        images = np.asarray([c.image for c in part.captions], dtype=np.int64)
        rows = np.repeat(images, [len(s) for s in steps])
        cols = deriv_col[np.concatenate(steps)] if steps else np.zeros(0, np.int64)
        compounds = _pad(compounds, len(compound_index)) + sp.csr_matrix(
            (np.ones(len(cols)), (rows, cols)), shape=(num_images, len(compound_index)))
        rows = np.repeat(images, [len(h) for h in holds])
        cols = cmap[np.concatenate(holds)] if holds else np.zeros(0, np.int64)
        by_concept = _pad(by_concept, len(concept_ids)) + sp.csr_matrix(
            (np.ones(len(cols)), (rows, cols)), shape=(num_images, len(concept_ids)))
    compounds = _pad(compounds, len(compound_index))
    texts = list(concept_ids)
    atom_col = np.full(len(texts), -1, dtype=np.int64)
    for cid in np.flatnonzero(np.asarray(concept_kinds, dtype=np.int64) & KIND_BITS[PRIMITIVE]):
        atom_col[cid] = atom_index.setdefault(texts[cid], len(atom_index))
    coo = by_concept.tocoo()
    keep = atom_col[coo.col] >= 0
    atoms = sp.csr_matrix((coo.data[keep], (coo.row[keep], atom_col[coo.col[keep]])),
                          shape=(num_images, len(atom_index)))
    compounds.sum_duplicates()
    atoms.sum_duplicates()
    return compounds, atoms


def _pad(m: sp.csr_matrix, width: int) -> sp.csr_matrix:
    m = sp.csr_matrix(m)
    if m.shape[1] == width:
        return m
    return sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], width))
