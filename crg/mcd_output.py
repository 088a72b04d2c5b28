"""An MCD split of caption corpora, written to a folder: the library side of ``make_mcd_split``.

:func:`write_mcd_split` takes the corpora (:class:`MCDCorpora`), finds or builds their graphs
(:class:`GraphOptions`), makes the split (:func:`crg.mcd.make_mcd_split`) and writes, under ``OUT/``:

* ``eval.jsonl`` -- the selected images, records as in the candidate corpus and in its order;
* ``eval_ids.txt`` -- their ids, one a line;
* ``train_ids.txt`` -- only when selected images were training images (a within-corpus split): the
  training images left once the split is held out;
* ``targets/cd_X/`` -- the same three files for each window taken for a target compound divergence;
* ``divergence_along_ranking.png`` -- the divergence of each window along the ranking;
* ``report.json`` -- :func:`crg.mcd.result_summary` plus the inputs, the graph-cache hits and the run time.

Graphs come from the graph cache (:func:`crg.graph_cache.get_or_build_graph`), so a rerun takes seconds.
Within one corpus (the candidates are the training file, in the same format) one graph of the union
of the splits is built and candidates that are training images leave training when selected.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from crg.compounds import COMPOUND_DEFINITIONS, SEMANTIC, TEMPLATE, SemanticAnnotations, check_definition, \
    semantic_annotations
from crg.corpus import Corpus, detect_format, read_corpus, write_jsonl
from crg.graph import ConceptGraph
from crg.graph_cache import get_or_build_graph
from crg.graph_store import CodedStrings
from crg.mcd import MCDConfig, MCDResult, build_problem, make_mcd_split, plot_ranking, result_summary
from crg.outputs import write_json_atomic, write_text_atomic

__all__ = ["MCDCorpora", "GraphOptions", "MCDSplitOutput", "write_mcd_split"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MCDCorpora:
    """The training corpus and the candidate pool an MCD split is chosen from.

    Attributes:
        train: training caption corpus (JSONL, Karpathy JSON, TSV, SCAN caps); recorded in the report as given.
        train_splits: training splits (``None``: all images).
        train_format: corpus format (``None``: detect).
        candidates: corpus the split's images are chosen from (``None``: ``train``, a within-corpus split).
        candidate_splits: candidate splits, e.g. ``("test", "val")`` (``None``: all images).
        candidate_format: its format (``None``: detect; with ``candidates=None``, ``train_format``).
    """

    train: str | Path
    train_splits: Sequence[str] | None = None
    train_format: str | None = None
    candidates: str | Path | None = None
    candidate_splits: Sequence[str] | None = None
    candidate_format: str | None = None

    @property
    def candidate_path(self) -> str | Path:
        return self.candidates or self.train

    @property
    def candidate_corpus_format(self) -> str | None:
        return self.candidate_format if self.candidates else (self.candidate_format or self.train_format)

    @property
    def within_corpus(self) -> bool:
        """Candidates and training images come from one file read alike (one graph, held-out candidates).

        Formats are compared as read (an unnamed format is detected), so ``--train-format jsonl`` and a
        detected JSONL file are one corpus. A copy of the training file at another path is a second corpus:
        its images that are training images are then excluded from the candidates by id
        (:func:`write_mcd_split`), never used as evaluation images.
        """
        if Path(self.candidate_path).resolve() != Path(self.train).resolve():
            return False
        detected = detect_format(Path(self.train))
        return (self.candidate_corpus_format or detected) == (self.train_format or detected)


@dataclass(frozen=True)
class GraphOptions:
    """How the corpora's graphs are found in the graph cache, or built when missing."""

    parser_name: str = "spacy"
    parser_model: str | None = None           # spaCy package, benepar model directory or file of trees
    max_words: int = 100                      # captions longer than this are skipped by the build
    cache_root: str | Path | None = None      # graph cache directory (None: $GC_CACHE_DIR/graphs)
    parse_cache_path: str | Path | None = None  # parse cache file (None: $GC_CACHE_DIR/parse_cache.sqlite)
    n_process: int | None = None              # parser processes when a graph must be built
    progress: bool = True                     # progress bars while building
    # graphs already built (gc-build-crg --out DIR, e.g. by the partitioned Ray build) instead of the cache:
    # memory-mapped when columnar, their saved per-image counts read instead of their caption arrays
    train_graph: str | Path | None = None     # the training images' graph (within one corpus: of every image used)
    candidate_graph: str | Path | None = None  # the candidates' graph (another corpus)


@dataclass
class MCDSplitOutput:
    """What :func:`write_mcd_split` wrote: the folder, the report (``report.json``'s body) and the split.

    ``target_dirs[i]`` holds the files of ``result.targets[i]``.
    """

    out: Path
    report: dict
    result: MCDResult
    target_dirs: list[Path]

    def to_dict(self) -> dict:
        return self.report


def _rows(graph: ConceptGraph, splits: Sequence[str] | None) -> np.ndarray:
    """Row indices of ``graph``'s images in ``splits`` (``None``: every image)."""
    if splits is None:
        return np.arange(len(graph.image_ids))
    if isinstance(graph.image_splits, CodedStrings):  # a memory-mapped graph: compare codes, not strings
        wanted = [k for k, name in enumerate(graph.image_splits.names) if name in set(splits)]
        return np.flatnonzero(np.isin(np.asarray(graph.image_splits.codes), wanted))
    return np.flatnonzero(np.isin(np.asarray(graph.image_splits, dtype=object), list(splits)))


def _prebuilt(directory: str | Path, corpus: str | Path, splits: Sequence[str] | None, flag: str):
    """A graph built beforehand for ``corpus`` (its images of ``splits``) and its saved counts; an error naming
    ``flag`` when it was built from another corpus or holds other splits."""
    from crg.graph import load_graph
    from crg.mcd_counts import read_graph_counts

    graph = load_graph(directory)
    built_from = graph.meta.get("corpus")
    if built_from is None or Path(built_from).resolve() != Path(corpus).resolve():
        raise ValueError(f"{flag} {directory}: the graph was built from {built_from}, not from {corpus}")
    if splits is not None:
        names = graph.image_splits.names if isinstance(graph.image_splits, CodedStrings) else \
            sorted({str(s) for s in graph.image_splits})
        other = sorted(set(map(str, names)) - set(splits))
        if other:
            raise ValueError(f"{flag} {directory}: the graph holds images of split(s) {other}, not only of {list(splits)}; "
                             f"build it with --split {','.join(splits)}")
    return graph, read_graph_counts(directory, graph)


def _label(path: str | Path, splits: Sequence[str] | None) -> str:
    """``folder/file [split,split]`` for the plot's title."""
    return f"{Path(path).parent.name}/{Path(path).name}" + (f" [{','.join(splits)}]" if splits else "")


def _annotations(compounds: str, train: Corpus, candidates: Corpus) -> SemanticAnnotations | None:
    """The captions' logical-form annotations when ``compounds`` needs them (an error without them), or when the
    corpora have them (then the semantic divergences are reported too); else ``None``."""
    has = all(bool(c.images) and "compounds" in c.images[0].raw for c in (train, candidates))
    if compounds != SEMANTIC and not has:
        return None
    found = semantic_annotations(train.images, str(train.path))
    if candidates is not train:  # a training image's own annotations win (such candidates are excluded)
        more = semantic_annotations(candidates.images, str(candidates.path))
        for image_id in more.compounds:
            found.compounds.setdefault(image_id, more.compounds[image_id])
            found.atoms.setdefault(image_id, more.atoms[image_id])
    return found


def write_mcd_split(corpora: MCDCorpora, out: str | Path, config: MCDConfig | None = None, *,
                    target_spec: str | None = None, graphs: GraphOptions = GraphOptions(),
                    compounds: str = TEMPLATE) -> MCDSplitOutput:
    """Make the MCD split of ``corpora`` and write every file of it under ``out`` (module docstring).

    Args:
        corpora: training corpus and candidate pool.
        out: output folder (created; files already there are replaced).
        config: split size, direction, seed, random baseline, explicit ``target_cds``, refinement.
        target_spec: targets as ``LOW:max:COUNT`` (:func:`crg.mcd.parse_target_cds`), resolved after the
            scan; overrides ``config.target_cds``.
        graphs: parser and caches for the graphs.
        compounds: the compound definition the split is made for (:mod:`crg.compounds`: ``template``, the
            paper's; ``template-heads``; ``semantic``, the generated world only). The split's divergences are
            reported under every definition the corpora allow (``semantic`` needs logical forms).

    Returns:
        The folder, the report written to ``report.json`` and the :class:`crg.mcd.MCDResult`.
    """
    started = time.perf_counter()
    config = config or MCDConfig()
    check_definition(compounds)
    train_splits = None if corpora.train_splits is None else list(corpora.train_splits)
    cand_splits = None if corpora.candidate_splits is None else list(corpora.candidate_splits)
    cand_path, cand_format = corpora.candidate_path, corpora.candidate_corpus_format
    graph_opts = dict(parser_name=graphs.parser_name, parser_model=graphs.parser_model, max_words=graphs.max_words,
                      cache_root=graphs.cache_root, parse_cache_path=graphs.parse_cache_path,
                      n_process=graphs.n_process, progress=graphs.progress)
    same = corpora.within_corpus
    corpus: Corpus | None = None
    saved = (None, None)
    if same and graphs.candidate_graph is not None:
        raise ValueError("--candidate-graph is for candidates from another corpus; within one corpus give "
                         "--train-graph only (the graph of every image used)")
    if not same and (graphs.train_graph is None) != (graphs.candidate_graph is None):
        raise ValueError("give both --train-graph and --candidate-graph (or neither)")
    if same and graphs.train_graph is not None:
        union = None if train_splits is None or cand_splits is None else sorted(set(train_splits) | set(cand_splits))
        graph, counts = _prebuilt(graphs.train_graph, corpora.train, union, "--train-graph")
        train_graph = cand_graph = graph
        saved, hits = (counts, counts), ["prebuilt"]
    elif graphs.train_graph is not None:
        train_graph, counts_t = _prebuilt(graphs.train_graph, corpora.train, train_splits, "--train-graph")
        cand_graph, counts_c = _prebuilt(graphs.candidate_graph, cand_path, cand_splits, "--candidate-graph")
        saved, hits = (counts_t, counts_c), ["prebuilt", "prebuilt"]
    elif same:  # one graph of the union of splits; candidates that are training images are held out
        corpus = read_corpus(corpora.train, corpora.train_format)
        union = None if train_splits is None or cand_splits is None else sorted(set(train_splits) | set(cand_splits))
        if union is not None and set(corpus.splits) <= set(union):
            union = None  # all splits: share the whole-corpus graph
        graph, hit = get_or_build_graph(corpora.train, union, format=corpora.train_format, **graph_opts)
        train_graph = cand_graph = graph
        hits = [hit]
    else:
        train_graph, hit_t = get_or_build_graph(corpora.train, train_splits, format=corpora.train_format,
                                                **graph_opts)
        cand_graph, hit_c = get_or_build_graph(cand_path, cand_splits, format=cand_format, **graph_opts)
        hits = [hit_t, hit_c]
    train_rows = _rows(train_graph, train_splits if same else None)
    cand_rows = _rows(cand_graph, cand_splits if same else None)
    excluded = 0
    if not same:  # another corpus may still hold training images (a copy, a superset): never evaluate on them
        train_ids = {train_graph.image_ids[i] for i in train_rows}
        keep = np.asarray([cand_graph.image_ids[i] not in train_ids for i in cand_rows], dtype=bool)
        excluded = int((~keep).sum())
        if excluded:
            logger.warning("%d of %d candidate images of %s are training images of %s (same image ids): excluded "
                           "from the candidates", excluded, len(cand_rows), cand_path, corpora.train)
            cand_rows = np.asarray(cand_rows)[keep]
        if len(cand_rows) == 0:
            raise ValueError(f"every candidate image of {cand_path} is a training image of {corpora.train} (same "
                             f"image ids): no image is left to evaluate on; choose other --candidate-splits or "
                             f"give --train-split so that training leaves them out")
    corpus = corpus or read_corpus(cand_path, cand_format)
    annotations = None
    if compounds == SEMANTIC or (corpus.images and "compounds" in corpus.images[0].raw):  # logical forms
        train_corpus = corpus if same else read_corpus(corpora.train, corpora.train_format)
        annotations = _annotations(compounds, train_corpus, corpus)
    report_as = [d for d in COMPOUND_DEFINITIONS if d != SEMANTIC or annotations is not None]
    problem = build_problem(train_graph, cand_graph, train_images=train_rows, candidate_images=cand_rows,
                            compounds=compounds, report=report_as, annotations=annotations, saved_counts=saved)
    result = make_mcd_split(problem, config, target_spec=target_spec)

    records = {im.image_id: im for im in corpus.images}
    caps = [len(records[i].captions) for i in problem.candidate_ids]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "targets").is_dir():  # windows of an earlier split would sit beside this one's
        import shutil

        shutil.rmtree(out / "targets")

    def write(directory: Path, members: np.ndarray) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        chosen = {problem.candidate_ids[i] for i in members}
        images = [im for im in corpus.images if im.image_id in chosen]  # corpus order
        write_jsonl(images, directory / "eval.jsonl")
        write_text_atomic(directory / "eval_ids.txt", "".join(im.image_id + "\n" for im in images))
        if problem.in_train[members].any():  # the training images left after holding the split out
            train_ids = [train_graph.image_ids[i] for i in train_rows]
            write_text_atomic(directory / "train_ids.txt", "".join(i + "\n" for i in train_ids if i not in chosen))
        else:  # an earlier split's list would say other images were held out
            (directory / "train_ids.txt").unlink(missing_ok=True)

    write(out, result.selected)
    target_dirs = [out / "targets" / f"cd_{t.target:.3f}" for t in result.targets]
    for directory, t in zip(target_dirs, result.targets):
        write(directory, t.members)
    report = result_summary(result, problem, caps)
    report.update({
        "train": str(corpora.train), "train_split": train_splits, "candidates": str(cand_path),
        "candidate_splits": cand_splits, "within_corpus": same, "seed": config.seed,
        "candidates_excluded_as_training_images": excluded,
        "num_images_requested": config.num_images, "parser": train_graph.meta.get("parser"),
        "graph_cache_hits": hits,
        "run_seconds": round(time.perf_counter() - started, 3),  # from this call on: no start-up or imports
    })
    plot_ranking(result, out / "divergence_along_ranking.png",
                 title=f"{_label(corpora.train, train_splits)} -> {_label(cand_path, cand_splits)}, "
                       f"{len(result.selected)} images")
    report["run_seconds"] = round(time.perf_counter() - started, 3)
    write_json_atomic(out / "report.json", report)
    logger.info("compound divergence %.4f (random sets %.4f), atom divergence %.4f, %d images, %d captions -> %s",
                report["compound_divergence"], report["random_compound_divergence"] or float("nan"),
                report["atom_divergence"], report["num_images"], report["num_captions"], out)
    for name, value in report["compound_divergences"].items():
        logger.info("  %s compounds: divergence %.4f, atoms %.4f", name, value, report["atom_divergences"][name])
    return MCDSplitOutput(out, report, result, target_dirs)
