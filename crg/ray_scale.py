"""The partitioned Ray build: workers read their own byte ranges, a distributed merge, a columnar graph.

    gc-build-crg --captions CORPUS.jsonl|.tsv --out OUT --engine ray --merge partitioned [--address auto] [--workers N]

Why: in the driver-merge build (:mod:`crg.ray_engine`) the driver reads the corpus, writes every shard's
captions, merges every part serially and holds the graph as Python objects -- all in proportion to the corpus.
Here the driver only plans byte ranges of the JSONL or TSV file (:mod:`crg.corpus_ranges`), hands them to a Ray Data
pool of parser actors (each writes a columnar part, :mod:`crg.shard_parts`), and runs the merge as Ray actors
(one per hash partition of the keys), which also run the per-shard and per-concept-range steps
(:mod:`crg.partitioned_merge`); the graph is written straight into the columnar layout
(:mod:`crg.graph_store`) and opened memory-mapped. What the driver holds is a few numbers per shard.

The graph is the default engine's (every array and string table; ``tests/test_crg_scale.py``). A rerun with the
same ``shards`` folder keeps every shard whose part is complete and was made from the same file, range,
splits and settings. Ray is imported only when this runs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from crg.build import BuildReport, graph_meta
from crg.corpus import Corpus
from crg.corpus_ranges import ByteRange, check_range_corpus, estimate_captions, plan_byte_ranges
from crg.graph import ConceptGraph, load_graph
from crg.parse_cache import ParseCache
from crg.partitioned_merge import LocalExecutor, merge_parts
from crg.ray_engine import EngineReport, ParserSpec, RayConfig, _start_ray
from crg.shard_parts import PartSummary, analyze_range, part_paths, range_key, read_summary
from crg.shards import peak_rss_mb

__all__ = ["PartitionedBuild", "RayExecutor", "build_crg_partitioned", "merged_report"]

logger = logging.getLogger(__name__)
_MAX_EXAMPLES = 20  # as crg.build.BuildReport keeps


@dataclass
class PartitionedBuild:
    graph: ConceptGraph       # memory-mapped from the output folder
    report: BuildReport
    engine: EngineReport


class _RangeWorker:
    """A Ray Data actor: builds the parser once, then analyses range after range (writes its part files)."""

    def __init__(self, parser: ParserSpec, cache_path: str | None, settings: dict, crash_once_in_shard: int | None):
        self.parser = parser.make()
        self.cache_path = cache_path  # opened per shard: Ray Data calls the actor from threads
        self.settings = settings
        self.crash_once_in_shard = crash_once_in_shard

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        out = []
        for row in batch["range"]:
            item = json.loads(str(row))
            rng = ByteRange(**item["range"])
            cache = ParseCache(self.cache_path) if self.cache_path else None
            try:
                summary = analyze_range(rng, item["splits"], self.parser, item["directory"], key=item["key"],
                                        cache=cache, max_words=self.settings["max_words"], dump=self.settings["dump"],
                                        prune_probability=self.settings["prune_probability"],
                                        prune_seed=self.settings["prune_seed"],
                                        num_partitions=self.settings["num_partitions"],
                                        before_summary=self._crash_hook(rng, item))
            finally:
                if cache is not None:
                    cache.close()
            out.append(json.dumps(asdict(summary)))
        return {"summary": out}

    def _crash_hook(self, rng: ByteRange, item: dict):
        """Fault injection: die after writing the chosen shard's part but before its summary, the first time."""
        if self.crash_once_in_shard != rng.index:
            return None
        marker = Path(item["directory"]) / f"{rng.index:05d}.crashed-once"

        def hook() -> None:
            if not marker.exists():
                marker.touch()
                logger.warning("fault injection: killing this worker before shard %d's summary", rng.index)
                os._exit(17)
        return hook


class RayExecutor:
    """The merge's steps on Ray: partitions as actors (no CPU reserved: they work only after the parsing actors
    are done, and the scheduler spreads them over the nodes), which also run the per-shard and per-range steps
    round robin."""

    def __init__(self):
        import ray

        self.ray = ray

    def actors(self, cls, args_list: list[tuple]) -> list:
        remote = self.ray.remote(num_cpus=0, scheduling_strategy="SPREAD")(cls)
        return [remote.remote(*args) for args in args_list]

    def call(self, actors: list, method: str, *args) -> list:
        return self.ray.get([getattr(a, method).remote(*args) for a in actors])

    def map(self, fn, args_list: list[tuple]) -> list:
        remote = self.ray.remote(num_cpus=1)(fn)
        return self.ray.get([remote.remote(*args) for args in args_list])

    def map_on(self, actors: list, fn, args_list: list[tuple]) -> list:
        """Round robin over the (warm) partition actors: starting task workers costs seconds each."""
        return self.ray.get([actors[k % len(actors)].run.remote(fn, *args) for k, args in enumerate(args_list)])


def merged_report(summaries: Sequence[PartSummary]) -> BuildReport:
    """The build's report from the shards' (what :func:`crg.build.build_crg` reports for the whole corpus).

    The default engine counts the caption checks' skips for the whole corpus before any parse failure, so the
    examples are the shards' check skips in order, then their parse failures, 20 in all.
    """
    report = BuildReport()
    checks, failures = [], []
    for s in summaries:
        report.num_captions += s.num_captions
        report.num_used += s.num_used
        report.num_parsed += s.num_parsed
        report.num_from_cache += s.num_from_cache
        for reason, n in s.skipped.items():
            if reason != "parse_failed":
                report.skipped[reason] = report.skipped.get(reason, 0) + n
        for example in s.skipped_examples:
            (failures if example["reason"] == "parse_failed" else checks).append(example)
    failed = sum(s.skipped.get("parse_failed", 0) for s in summaries)
    if failed:
        report.skipped["parse_failed"] = failed
    report.skipped_examples = (checks + failures)[:_MAX_EXAMPLES]
    return report


def _check_splits(path: str, splits: Sequence[str] | None, summaries: Sequence[PartSummary]) -> None:
    """As :meth:`crg.corpus.Corpus.select`: a wanted split that no image has is an error naming the ones there."""
    if splits is None:
        return
    seen: dict[str, int] = {}
    for s in summaries:
        for name, n in s.split_counts.items():
            seen[name] = seen.get(name, 0) + n
    unknown = set(splits) - set(seen)
    if unknown:
        raise ValueError(f"{path}: no images in split(s) {sorted(unknown)}; the corpus has {seen}")


def build_crg_partitioned(captions: str | Path, parser: ParserSpec, out_dir: str | Path, *,
                          splits: Sequence[str] | None = None, config: RayConfig | None = None,
                          num_partitions: int | None = None, cache_path: str | Path | None = None,
                          dump_path: str | Path | None = None, progress: bool = True, max_words: int = 100,
                          prune_probability: float = 0.0, prune_seed: int = 0, parser_key: str | None = None,
                          use_ray: bool = True) -> PartitionedBuild:
    """Build the CRG of the JSONL or TSV corpus ``captions`` (images of ``splits``) into ``out_dir`` (columnar).

    Shard files go to ``out_dir/shards``; ``num_partitions`` merge partitions (default: the workers);
    ``use_ray=False`` runs every step in this process (tests, and a reference for the Ray run).
    """
    config = config or RayConfig()
    started = time.perf_counter()
    fmt = check_range_corpus(captions, None)
    path = Path(captions)
    out_dir = Path(out_dir)
    shard_dir = out_dir / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    n_ranges = config.shards or max(1, -(-estimate_captions(path, fmt) // config.shard_size))
    ranges = plan_byte_ranges(path, n_ranges, fmt)
    parser_key = parser_key or parser.make().cache_key()
    owns_ray = False
    pipeline_started = time.perf_counter()
    bar = tqdm(total=0, desc="shards (read + parse + extract)", unit="shard", disable=not progress)
    try:
        if use_ray:  # first: the cluster's size decides the workers, and so the merge partitions the parts are cut for
            import ray

            owns_ray = _start_ray(config, progress)
            workers = config.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        else:
            workers = 1
        partitions = num_partitions or config.workers or workers
        settings = {"parser": parser_key, "dump": dump_path is not None, "prune_probability": float(prune_probability),
                    "prune_seed": int(prune_seed), "max_words": int(max_words), "num_partitions": int(partitions)}
        wanted = None if splits is None else sorted(set(splits))
        keys = [range_key(r, wanted, settings) for r in ranges]
        engine = EngineReport(engine="ray-partitioned" if use_ray else "partitioned-local",
                              address=config.address or "local", num_shards=len(ranges))
        summaries: dict[int, PartSummary] = {}
        for r, key in zip(ranges, keys):
            found = read_summary(shard_dir, r.index, key)
            if found is not None:
                summaries[r.index] = found
        engine.shards_reused = len(summaries)
        to_run = [(r, key) for r, key in zip(ranges, keys) if r.index not in summaries]
        engine.shards_run = len(to_run)
        bar.total = len(to_run)
        if to_run and use_ray:
            engine.workers = min(workers, len(to_run))
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.preserve_order = False
            items = [{"range": json.dumps({"range": asdict(r), "splits": wanted, "directory": str(shard_dir),
                                           "key": key})} for r, key in to_run]
            ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
                _RangeWorker, batch_size=1, num_cpus=1, compute=ray.data.ActorPoolStrategy(size=engine.workers),
                fn_constructor_kwargs={"parser": parser, "cache_path": str(cache_path) if cache_path else None,
                                       "settings": settings, "crash_once_in_shard": config.crash_once_in_shard})
            for row in ds.iter_rows():  # Ray Data restarts a dead actor and runs its shard again
                summary = PartSummary(**json.loads(row["summary"]))
                summaries[summary.shard] = summary
                bar.update(1)
        elif to_run:
            engine.workers = 1
            made = parser.make()
            cache = ParseCache(cache_path) if cache_path else None
            try:
                for r, key in to_run:
                    summaries[r.index] = analyze_range(r, wanted, made, shard_dir, key=key, cache=cache,
                                                       max_words=max_words, dump=dump_path is not None,
                                                       prune_probability=prune_probability, prune_seed=prune_seed,
                                                       num_partitions=partitions)
                    bar.update(1)
            finally:
                if cache is not None:
                    cache.close()
        bar.close()
        missing = [r.index for r in ranges if r.index not in summaries]
        if missing:
            raise RuntimeError(f"the pipeline ended with shards {missing[:20]} unfinished; run it again (finished "
                               f"shards are kept)")
        ordered = [summaries[r.index] for r in ranges]
        for k, s in enumerate(ordered):  # the merge numbers shards 0..S-1 (empty ranges were dropped)
            if s.shard != k:
                raise RuntimeError(f"shard {k}'s summary says shard {s.shard}")
        _check_splits(str(path), wanted, ordered)
        report = merged_report(ordered)
        report.parse_seconds = time.perf_counter() - pipeline_started
        if report.num_used == 0:
            raise ValueError(f"every caption of {path} was skipped ({report.as_dict()}); no graph written")
        merge_started = time.perf_counter()
        meta = graph_meta(Corpus(path, fmt, []), parser_key, report, prune_probability, prune_seed)
        executor = RayExecutor() if use_ray else LocalExecutor()
        stages = merge_parts(shard_dir, ordered, out_dir, meta, executor=executor, num_partitions=partitions,
                    sync=bool(config.address))  # joined a cluster: other nodes may read what a node wrote
        engine.merge_seconds = round(time.perf_counter() - merge_started, 2)
        engine.merge_steps = stages.seconds
        engine.merge_peak_rss_mb = stages.partition_peak_rss_mb
        report.extract_seconds = engine.merge_seconds
    finally:
        bar.close()
        if owns_ray:
            import ray

            ray.shutdown()
    if dump_path is not None:
        tmp = Path(dump_path).with_name(Path(dump_path).name + ".tmp")
        with open(tmp, "wb") as out:
            for r in ranges:
                with open(part_paths(shard_dir, r.index)["dump"], "rb") as f:
                    shutil.copyfileobj(f, out)
        os.replace(tmp, dump_path)
    graph = load_graph(out_dir)
    engine.pipeline_seconds = round(time.perf_counter() - pipeline_started, 2)
    engine.captions_per_second = round(report.num_captions / max(time.perf_counter() - started, 1e-9), 1)
    engine.driver_peak_rss_mb = peak_rss_mb()
    engine.driver_cpu_seconds = round(time.process_time(), 2)
    engine.worker_peak_rss_mb = max((s.peak_rss_mb for s in summaries.values()), default=0.0)
    return PartitionedBuild(graph, report, engine)
