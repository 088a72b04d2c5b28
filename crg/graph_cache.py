"""Get-or-build a :class:`~crg.graph.ConceptGraph` for a corpus, so tools load graphs instead of rebuilding.

Graphs live under ``$GC_CACHE_DIR/graphs/<key>/`` (the parse cache's root, see
:func:`crg.parse_cache.default_cache_path`), keyed by everything that decides their content:

* the corpus file (resolved path, size and modification time), its format,
* the selected splits (``None`` = all images),
* the parser's :meth:`~crg.parser_base.ConstituencyParser.cache_key` and ``max_words``,
* the graph format version,
* for graphs built from degraded parses (Table 7), the pruning probability and seed.

A hit loads the saved graph (about a second for 145,000 captions) without building a parser: for the
spaCy backend the parser key is read from the installed model's ``meta.json``
(:func:`parser_cache_key`). A miss builds the graph with :func:`crg.build.build_crg`, using the parse
cache, and saves it atomically (a rename), so concurrent builders never leave a half-written graph.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from crg.graph import FORMAT_VERSION, ConceptGraph

__all__ = ["GraphKey", "graph_cache_root", "parser_cache_key", "get_or_build_graph"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GraphKey:
    """What a cached graph was built from; :meth:`digest` names its directory."""

    corpus: str                      # resolved path of the corpus file
    size: int                        # bytes, with mtime_ns: a changed file is a different corpus
    mtime_ns: int
    format: str | None               # corpus format name, None = detected from the file
    splits: tuple[str, ...] | None   # sorted split names, None = all images
    parser: str                      # the parser's cache_key()
    max_words: int                   # build_crg's caption length limit
    graph_format: int = FORMAT_VERSION
    prune: tuple[float, int] | None = None  # (probability, seed) of pruned parses; None = the parser's trees

    @classmethod
    def for_corpus(cls, path: str | Path, splits: Sequence[str] | None, parser_key: str, *,
                   format: str | None = None, max_words: int = 100,
                   prune: tuple[float, int] | None = None) -> "GraphKey":
        path = Path(path).resolve()
        st = path.stat()
        return cls(str(path), st.st_size, st.st_mtime_ns, format,
                   None if splits is None else tuple(sorted(set(splits))), parser_key, max_words,
                   prune=None if prune is None else (float(prune[0]), int(prune[1])))

    def digest(self) -> str:
        """A stable 20-hex-digit name (an unpruned key hashes as before pruning existed: caches stay valid).

        >>> GraphKey("/c.jsonl", 1, 2, None, ("train",), "spacy:x", 100, 1).digest()
        '61500b6fdfd4343d0fbf'
        >>> pruned = GraphKey("/c.jsonl", 1, 2, None, ("train",), "spacy:x", 100, 1, prune=(0.3, 0))
        >>> pruned.digest() != GraphKey("/c.jsonl", 1, 2, None, ("train",), "spacy:x", 100, 1).digest()
        True
        """
        fields = asdict(self)
        if fields["prune"] is None:
            del fields["prune"]
        blob = json.dumps(fields, sort_keys=True).encode("utf-8")
        return hashlib.blake2b(blob, digest_size=10).hexdigest()


def graph_cache_root() -> Path:
    """``$GC_CACHE_DIR/graphs`` (default ``~/.cache/grounded_composer/graphs``)."""
    from crg.parse_cache import default_cache_path

    return default_cache_path().parent / "graphs"


def parser_cache_key(name: str, model: str | None = None) -> str | None:
    """The parser's ``cache_key()`` computed without loading it, where that is possible; else ``None``.

    spaCy: ``spacy:{lang}_{name}-{version}:conv{N}`` from the model package's ``meta.json``, found the
    way :func:`crg.spacy_parser.load_spacy_model` finds it (``en_core_web_sm`` first). Pre-parsed
    trees: the file's path, size and mtime. benepar: ``None`` (its key hashes the weights; build it).
    """
    if name == "spacy":
        from crg.dep_to_constituency import CONVERTER_VERSION
        from crg.spacy_parser import SPACY_MODEL_NAMES

        for candidate in ((model,) if model else SPACY_MODEL_NAMES):
            meta_path = None
            if Path(candidate).is_dir():
                meta_path = Path(candidate) / "meta.json"
            else:
                try:
                    spec = importlib.util.find_spec(candidate)
                except (ImportError, ValueError):
                    spec = None
                if spec is not None and spec.submodule_search_locations:
                    meta_path = Path(list(spec.submodule_search_locations)[0]) / "meta.json"
            if meta_path is not None and meta_path.exists():
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                return f"spacy:{meta.get('lang')}_{meta.get('name')}-{meta.get('version')}:conv{CONVERTER_VERSION}"
        return None
    if name == "preparsed" and model:
        path = Path(model)
        if path.exists():
            st = path.stat()
            return f"preparsed:{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    return None


def get_or_build_graph(path: str | Path, splits: Sequence[str] | None, *, parser_name: str = "spacy",
                       parser_model: str | None = None, format: str | None = None, max_words: int = 100,
                       cache_root: str | Path | None = None, parse_cache_path: str | Path | None = None,
                       n_process: int | None = None, progress: bool = True, prune_probability: float = 0.0,
                       prune_seed: int = 0) -> tuple[ConceptGraph, bool]:
    """The CRG of ``path``'s images in ``splits`` (``None`` = all), from the graph cache or built.

    Args:
        path: the caption corpus (any format :func:`crg.corpus.read_corpus` reads).
        splits: split names to keep, or ``None`` for all images.
        parser_name, parser_model: as ``--parser`` / ``--parser-model`` (:func:`crg.parse.make_parser`).
        format: the corpus format, ``None`` to detect it.
        max_words: skip longer captions (as :func:`crg.build.build_crg`).
        cache_root: where graphs are kept (default :func:`graph_cache_root`).
        parse_cache_path: the parse cache used on a miss (default ``$GC_CACHE_DIR/parse_cache.sqlite``).
        n_process: parser processes on a miss (default: all cores for more than 20,000 captions).
        progress: show the build's progress bar.
        prune_probability, prune_seed: build from parses with branches removed at random (the paper's
            Table 7; :func:`crg.build.analyze_captions`); cached under their own key.

    Returns:
        ``(graph, hit)``; ``hit`` is True when the graph came from the cache.
    """
    root = Path(cache_root) if cache_root is not None else graph_cache_root()
    parser = None
    key_str = parser_cache_key(parser_name, parser_model)
    if key_str is None:
        from crg.parse import make_parser

        parser = make_parser(parser_name, parser_model)
        key_str = parser.cache_key()
    prune = (prune_probability, prune_seed) if prune_probability > 0 else None
    key = GraphKey.for_corpus(path, splits, key_str, format=format, max_words=max_words, prune=prune)
    directory = root / key.digest()
    if (directory / "graph.npz").exists() and (directory / "graph_strings.json.gz").exists():
        logger.info("loading cached graph %s (%s, splits %s)", directory, path, splits)
        return ConceptGraph.load(directory), True

    from crg.build import build_crg
    from crg.corpus import read_corpus
    from crg.parse import make_parser
    from crg.parse_cache import ParseCache, default_cache_path

    corpus = read_corpus(path, format)
    if splits is not None:
        corpus = corpus.select(list(splits))
    if parser is None:
        parser = make_parser(parser_name, parser_model)
        if parser.cache_key() != key_str:  # the cheap key must agree, or the cache would never hit
            logger.warning("parser key %r differs from the predicted %r; keying the graph by the former",
                           parser.cache_key(), key_str)
            key = GraphKey.for_corpus(path, splits, parser.cache_key(), format=format, max_words=max_words,
                                      prune=prune)
            directory = root / key.digest()
    if n_process is None:
        n_process = (os.cpu_count() or 1) if corpus.num_captions > 20_000 and parser_name == "spacy" else 1
    logger.info("building the graph of %s (splits %s, %d captions) into %s", path, splits,
                corpus.num_captions, directory)
    with ParseCache(parse_cache_path or default_cache_path()) as cache:
        graph, _ = build_crg(corpus, parser, cache=cache, n_process=n_process,
                             parser_spec=(parser_name, parser_model, {}), progress=progress,
                             max_words=max_words, prune_probability=prune_probability, prune_seed=prune_seed)
    graph.meta["graph_key"] = asdict(key)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key.digest()}.", dir=root))
    try:
        graph.save(tmp)
        (tmp / "key.json").write_text(json.dumps(asdict(key), indent=2) + "\n")
        try:
            os.rename(tmp, directory)
        except OSError:  # another process saved the same graph first: keep theirs
            logger.info("graph %s appeared while building; keeping the existing one", directory)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return graph, False
