"""Corpus -> parse trees (cached) -> concept trees -> :class:`~crg.graph.ConceptGraph`.

The pipeline streams: trees are parsed in chunks (in worker processes when asked), written to the
parse cache chunk by chunk (a killed run resumes where it stopped), and each caption's concept tree
goes straight into the graph builder, so memory stays proportional to the graph, not the trees.
Bad captions are counted per reason and reported, never dropped silently.
"""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing as mp
import os
import random
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from tqdm.auto import tqdm

from crg.caption_filter import caption_problem, normalize_caption
from crg.corpus import Corpus
from crg.extract import PRIMITIVE, extract_concepts, prune_tree
from crg.fork_pool import fork_pool
from crg.graph import ConceptGraph, GraphBuilder, GraphPart
from crg.parse_cache import ParseCache
from crg.parser_base import ConstituencyParser

if TYPE_CHECKING:  # nltk is imported in _analyze_chunk, where cached trees are read: `import crg` stays light
    from nltk import Tree

__all__ = ["BuildReport", "build_crg", "analyze_captions", "caption_record", "gc_paused", "iter_dump", "pruning_rng",
           "usable_captions", "graph_meta"]

logger = logging.getLogger(__name__)

_MAX_EXAMPLES = 20


@dataclass
class BuildReport:
    """What happened to every caption of the corpus."""

    num_captions: int = 0
    num_used: int = 0
    num_parsed: int = 0
    num_from_cache: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_examples: list[dict] = field(default_factory=list)
    parse_seconds: float = 0.0  # parsing and extraction (they run together, in the workers)
    extract_seconds: float = 0.0  # assembling the graph arrays

    def skip(self, reason: str, image_id: str, caption_index: int, text) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.skipped_examples) < _MAX_EXAMPLES:
            self.skipped_examples.append({"image_id": image_id, "caption_index": caption_index,
                                          "reason": reason, "text": str(text)[:200]})

    def as_dict(self) -> dict:
        d = asdict(self)
        d["num_skipped"] = sum(self.skipped.values())
        return d


# ---------------------------------------------------------------------- parsing with workers
_WORKER_PARSER: ConstituencyParser | None = None
_WORKER_SPEC: tuple | None = None


def _init_worker(spec: tuple | None) -> None:
    global _WORKER_SPEC
    _WORKER_SPEC = spec


def _portable_spec(parser_spec: tuple | None) -> tuple | None:
    """``(name, model, options)`` -> ``(factory, model, options)``: the registered factory pickles by reference,
    so a spawned worker imports the module that defines a plugged-in backend without knowing its name."""
    if parser_spec is None:
        return None
    from crg.parse import parser_factory

    name, model, options = parser_spec
    return parser_factory(name), model, options


def _worker_parser() -> ConstituencyParser:
    """The parser of this process: inherited through fork, or built from the spec on first use."""
    global _WORKER_PARSER
    if _WORKER_PARSER is None:
        factory, model, options = _WORKER_SPEC
        _WORKER_PARSER = factory(model, **options)
    return _WORKER_PARSER


def _parse_with(parser: ConstituencyParser, texts: list[str]) -> list[Tree | None]:
    """Trees for ``texts``; a sentence the parser fails on gives ``None``, not a crash."""
    try:
        return list(parser.parse_texts(texts))
    except Exception as err:  # one bad sentence must not sink the chunk: retry one by one
        logger.debug("chunk failed (%s); parsing its %d sentences one by one", err, len(texts))
        out = []
        for text in texts:
            try:
                out.append(parser.parse_texts([text])[0])
            except Exception as one_err:
                logger.warning("parser failed on %r: %s", text[:120], one_err)
                out.append(None)
        return out


def pruning_rng(seed: int, text: str) -> random.Random:
    """The random stream pruning one caption's parse: fixed by (seed, caption text), so a caption is pruned
    the same way whatever chunk, process or corpus it is parsed in."""
    return random.Random(f"prune:{seed}:{text}")


def _analyze_chunk(payload: tuple) -> list[tuple[str | None, object, bool]]:
    """Parse (where not cached) and extract concepts: ``(bracketed, concept_root, newly_parsed)`` per text.

    ``payload`` is ``(texts, cached_trees, (prune_probability, prune_seed))``; with a probability > 0 the
    concepts come from a pruned copy of each parse (Table 7), while the bracketed tree returned (and
    cached) stays the parser's own. A new parse is extracted from the parser's tree itself, a cached one
    from its bracketed string: the same concepts (``tests/test_build_crg.py`` checks the round trip).
    """
    from nltk import Tree

    texts, cached, (prune_p, prune_seed) = payload
    todo = [k for k, tree in enumerate(cached) if tree is None]
    parsed: dict[int, Tree | None] = {}
    if todo:
        parsed = dict(zip(todo, _parse_with(_worker_parser(), [texts[k] for k in todo])))
    out = []
    for k, bracketed in enumerate(cached):
        root = None
        try:
            if bracketed is None:
                tree = parsed[k]
                bracketed = None if tree is None else tree.pformat(margin=10**9)
            else:
                tree = Tree.fromstring(bracketed)
            if tree is not None:
                if prune_p > 0:
                    tree = prune_tree(tree, prune_p, pruning_rng(prune_seed, texts[k]))
                root = extract_concepts(tree)
        except ValueError as err:  # a malformed cached or pre-parsed tree
            logger.warning("cannot read the tree of %r: %s", texts[k][:120], err)
            bracketed = None
        out.append((bracketed, root, cached[k] is None))
    return out


@dataclass
class ChunkResult:
    """One chunk of a build, as a worker sends it back: flat tables, cheap to pickle (no concept trees)."""

    part: GraphPart                   # the chunk's used captions, with the chunk's own ids
    fresh: list[tuple[str, str]]      # (text, bracketed tree) of every caption parsed now: for the cache
    failed: list[int]                 # positions in the chunk of the captions with no usable parse
    dump: str                         # the captions.jsonl lines of the used captions ("" without a dump)
    num_from_cache: int


def _build_chunk(payload: tuple) -> ChunkResult:
    """:func:`_analyze_chunk`, then the chunk's graph part (and dump lines) on the worker.

    ``payload`` is ``(captions, cached_trees, prune, dump)`` with ``captions`` a list of ``(image_index,
    caption_index, image_id, text)``.
    """
    captions, cached, prune, dump = payload
    with gc_paused():
        results = _analyze_chunk(([c[3] for c in captions], cached, prune))
        builder = GraphBuilder([], [])
        fresh, failed, lines = [], [], []
        for k, ((i, j, image_id, text), (bracketed, root, new)) in enumerate(zip(captions, results)):
            if new and bracketed is not None:
                fresh.append((text, bracketed))
            if root is None:
                failed.append(k)
                continue
            builder.add_caption(i, j, text, root)
            if dump:
                lines.append(json.dumps(caption_record(image_id, text, bracketed, root), ensure_ascii=False) + "\n")
        return ChunkResult(builder.part(), fresh, failed, "".join(lines), sum(1 for c in cached if c is not None))


@contextmanager
def gc_paused():
    """No cyclic garbage collection inside the block (reference counting still frees everything else).

    Why: a chunk allocates some 10^5 short-lived objects (spaCy docs, trees, concept nodes), and each
    allocation burst set off a collection that also walked the parser's long-lived objects: a chunk of
    1,000 new Flickr30K captions took 2.02 ms of CPU per caption with collection paused against 2.33
    with it (3 runs each, spread about 0.2). The block's few cycles are collected after it ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def analyze_captions(texts: Sequence[str], parser: ConstituencyParser, *, cache: ParseCache | None = None,
                     n_process: int = 1, chunk_size: int = 1000, parser_spec: tuple | None = None,
                     progress: bool = True, report: BuildReport | None = None, prune_probability: float = 0.0,
                     prune_seed: int = 0) -> Iterator[tuple]:
    """Yield ``(bracketed_tree, concept_root)`` for each text, in order; ``(None, None)`` on failure.

    Trees come from the cache when present; the rest are parsed (in ``n_process`` worker processes,
    which also run the extraction) and written back to the cache chunk by chunk, so a killed run
    resumes where it stopped.

    ``prune_probability`` > 0 degrades each parse before extraction (:func:`crg.extract.prune_tree`,
    the paper's Table 7), each caption with its own stream :func:`pruning_rng` ``(prune_seed, text)``;
    the parse cache always holds the unpruned trees.
    """
    prune = _prune_setting(prune_probability, prune_seed)
    key = parser.cache_key()
    texts = list(texts)
    cached = _cached_trees(texts, cache, key)
    payloads = [(texts[i:i + chunk_size], [cached.get(t) for t in texts[i:i + chunk_size]], prune)
                for i in range(0, len(texts), chunk_size)]
    del cached
    started = time.perf_counter()
    bar = tqdm(total=len(texts), desc=f"parsing + extracting ({parser.name})", unit="cap", disable=not progress)
    try:
        results = _map_chunks(_analyze_chunk, payloads, parser, n_process, parser_spec)
        yield from _consume(results, payloads, cache, key, report, bar)
    finally:
        bar.close()
        if report is not None:
            report.parse_seconds += time.perf_counter() - started


def _prune_setting(probability: float, seed: int) -> tuple[float, int]:
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"prune_probability must lie in [0, 1], got {probability}")
    return float(probability), int(seed)


def _map_chunks(analyze, payloads: list, parser: ConstituencyParser, n_process: int,
                parser_spec: tuple | None) -> Iterator:
    """``analyze(payload)`` for each payload, in order: in ``n_process`` worker processes when there is more
    than one chunk and the parser can reach them (inherited through fork, or rebuilt from ``parser_spec``)."""
    global _WORKER_PARSER
    _WORKER_PARSER = parser  # forked workers inherit it; spawned ones rebuild it from parser_spec
    try:
        can_fork = "fork" in mp.get_all_start_methods()
        if n_process > 1 and len(payloads) > 1 and (can_fork or parser_spec is not None):
            with fork_pool(n_process, _init_worker, (_portable_spec(parser_spec),)) as pool:
                yield from pool.imap(analyze, payloads)
                pool.close()  # every result read: let the workers finish (the with's terminate() is for an
                pool.join()   # abandoned or failed map)
        else:
            yield from map(analyze, payloads)
    finally:
        _WORKER_PARSER = None


def _consume(results, payloads, cache, key, report, bar):
    for (texts, _, _), result in zip(payloads, results):
        fresh = [(t, r[0]) for t, r in zip(texts, result) if r[2] and r[0] is not None]
        if cache is not None and fresh:
            cache.put_many(key, fresh)
        if report is not None:
            n_new = sum(1 for r in result if r[2])
            report.num_parsed += n_new
            report.num_from_cache += len(result) - n_new
        bar.update(len(texts))
        for bracketed, root, _ in result:
            yield bracketed, root


# ---------------------------------------------------------------------- the build
def build_crg(corpus: Corpus, parser: ConstituencyParser, *, cache: ParseCache | None = None,
              n_process: int = 1, parser_spec: tuple | None = None, dump_path: str | Path | None = None,
              progress: bool = True, max_words: int = 100, prune_probability: float = 0.0,
              prune_seed: int = 0, chunk_size: int = 1000) -> tuple[ConceptGraph, BuildReport]:
    """Build the CRG of every caption of ``corpus`` (select splits first with ``corpus.select``).

    ``dump_path`` writes one JSON line per used caption (see :func:`caption_record`).
    ``prune_probability`` / ``prune_seed``: build from degraded parses (see :func:`analyze_captions`).

    Captions go in chunks of ``chunk_size`` to ``n_process`` worker processes, which parse (where the
    cache has no tree), extract, and send back each chunk as a :class:`~crg.graph.GraphPart`; this process
    merges the parts in corpus order (the graph of adding every caption in order), writes new trees to
    the cache chunk by chunk (a killed build resumes where it stopped) and the dump.
    """
    prune = _prune_setting(prune_probability, prune_seed)
    report = BuildReport()
    todo = usable_captions(corpus, report, max_words=max_words)
    builder = GraphBuilder([im.image_id for im in corpus.images], [im.split for im in corpus.images])
    key = parser.cache_key()
    cached = _cached_trees([t for _, _, t in todo], cache, key)
    payloads = []
    for start in range(0, len(todo), chunk_size):
        rows = todo[start:start + chunk_size]
        payloads.append(([(i, j, corpus.images[i].image_id, t) for i, j, t in rows],
                         [cached.get(t) for _, _, t in rows], prune, dump_path is not None))
    del cached
    dump = _open_atomic(dump_path) if dump_path else None
    started = time.perf_counter()
    bar = tqdm(total=len(todo), desc=f"parsing + extracting ({parser.name})", unit="cap", disable=not progress)
    try:
        for payload, chunk in zip(payloads, _map_chunks(_build_chunk, payloads, parser, n_process, parser_spec)):
            _merge_chunk(payload, chunk, builder, report, cache, key, dump, bar)
    finally:
        bar.close()
        report.parse_seconds += time.perf_counter() - started
        if dump is not None:
            dump.close()
    if dump is not None:
        os.replace(dump.name, dump_path)
    if report.skipped:
        logger.warning("skipped %d of %d captions: %s (first examples in the report)",
                       sum(report.skipped.values()), report.num_captions, report.skipped)
    started = time.perf_counter()
    graph = builder.build(meta=graph_meta(corpus, key, report, prune_probability, prune_seed))
    report.extract_seconds = time.perf_counter() - started
    return graph, report


def _cached_trees(texts: list[str], cache: ParseCache | None, key: str) -> dict[str, str]:
    cached: dict[str, str] = {}
    if cache is not None:
        distinct = list(dict.fromkeys(texts))
        for start in range(0, len(distinct), 50_000):
            chunk = distinct[start:start + 50_000]
            cached.update((t, tree) for t, tree in zip(chunk, cache.get_many(key, chunk)) if tree is not None)
    return cached


def _merge_chunk(payload: tuple, chunk: ChunkResult, builder: GraphBuilder, report: BuildReport,
                 cache: ParseCache | None, key: str, dump, bar) -> None:
    captions = payload[0]
    if cache is not None and chunk.fresh:
        cache.put_many(key, chunk.fresh)
    for k in chunk.failed:
        i, j, image_id, text = captions[k]
        report.skip("parse_failed", image_id, j, text)
    builder.add_part(chunk.part)
    report.num_used += len(chunk.part.captions)
    report.num_from_cache += chunk.num_from_cache
    report.num_parsed += len(captions) - chunk.num_from_cache
    if dump is not None:
        dump.write(chunk.dump)
    bar.update(len(captions))


def usable_captions(corpus: Corpus, report: BuildReport, *, max_words: int = 100) -> list[tuple[int, int, str]]:
    """``(image_index, caption_index, normalized_text)`` of every caption worth parsing; the rest are counted
    in ``report`` with their reason. Shared by every engine, so they all skip the same captions."""
    todo: list[tuple[int, int, str]] = []
    for i, j, raw in corpus.iter_captions():
        report.num_captions += 1
        problem = caption_problem(raw, max_words=max_words)
        if problem:
            report.skip(problem, corpus.images[i].image_id, j, raw)
            continue
        todo.append((i, j, normalize_caption(raw)))
    return todo


def graph_meta(corpus: Corpus, parser_key: str, report: BuildReport, prune_probability: float = 0.0,
               prune_seed: int = 0) -> dict:
    """The ``meta`` of a built graph (the same whatever engine built it)."""
    meta = {"corpus": str(corpus.path), "corpus_format": corpus.format, "parser": parser_key,
            "report": report.as_dict()}
    if prune_probability > 0:
        meta["prune"] = {"probability": float(prune_probability), "seed": int(prune_seed)}
    return meta


def _open_atomic(path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path.with_name(path.name + ".tmp"), "w", encoding="utf-8")


def caption_record(image_id: str, caption: str, bracketed: str, root) -> dict:
    """The ``captions.jsonl`` line of one caption.

    ``concepts`` are the sentence and phrase concepts (the paper's C, which excludes primitives),
    parents first; ``predicates`` the template of each composition step, in the same order;
    ``primitives`` the primitive concepts in sentence order.
    """
    nodes = list(root.walk())
    return {
        "image_id": image_id,
        "caption": caption,
        "tree": bracketed,
        "concepts": [n.text for n in nodes if n.kind != PRIMITIVE],
        "predicates": [n.predicate.template for n in nodes if n.predicate is not None],
        "primitives": [n.text for n in sorted(nodes, key=lambda n: n.start) if n.kind == PRIMITIVE],
        "height": root.height,
    }


def iter_dump(path: str | Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)
