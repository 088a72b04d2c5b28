"""The distributed CRG engine: parsing and extraction as a Ray Data pipeline over corpus shards.

    gc-build-crg --captions CORPUS --out OUT --engine ray [--address auto|HOST:PORT] [--workers N] [--shards N]

The driver reads the corpus, drops the captions every engine drops (:func:`crg.build.usable_captions`)
and cuts the rest into contiguous shards, one input file each under ``OUT/shards/``
(:mod:`crg.shards`). A Ray Data pipeline maps the shards over a pool of actors; each actor loads the
parser **once** (in its constructor) and, per shard, parses what the parse cache lacks, extracts the
concept trees and writes the shard's output file. Ray restarts an actor that dies and runs its shard
again; the output is written through a rename, so a shard is never half there, never lost and never
counted twice. The driver merges finished shards in shard order while later ones still run, one file at
a time (:meth:`crg.graph.GraphBuilder.add_part`): it never holds every caption's parse, and the graph it
writes is the one the single-machine engine (:func:`crg.build.build_crg`) writes.

Without an address a local Ray is started on this machine's cores (and shut down at the end); with
``auto`` or ``HOST:PORT`` the build joins a running cluster, whose nodes need this package installed and
``OUT`` on a file system they all see (docs/scale.md). A rerun with ``--resume`` keeps every shard whose
output is complete and made from the same captions and settings.

Ray is imported only here, and only when the engine runs: ``pip install -e ".[distributed]"``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from crg.build import BuildReport, graph_meta, usable_captions
from crg.corpus import Corpus
from crg.graph import ConceptGraph, GraphBuilder
from crg.parse_cache import ParseCache
from crg.shards import (
    ShardCaption, ShardSpec, ShardSummary, analyze_shard, check_shard_output, merge_shard, output_key,
    output_path, peak_rss_mb, plan_shards, write_shard_input,
)

__all__ = ["RayConfig", "ParserSpec", "EngineReport", "RayBuild", "RayConnectError", "build_crg_ray",
           "check_address", "join_ray", "start_local_ray", "task_resources"]

logger = logging.getLogger(__name__)


@dataclass
class RayConfig:
    """Where and how wide the pipeline runs."""

    address: str | None = None   # None: start a local Ray on this machine; "auto" or "HOST:PORT": join a cluster
    workers: int | None = None   # parser actors (one CPU each); None: every CPU of the cluster
    shards: int | None = None    # None: about shard_size captions per shard
    shard_size: int = 1000       # small: work for every actor on small corpora and little to redo on a retry;
    # large enough that a shard's fixed costs (two files, one task, one cache transaction) stay small
    object_store_mb: int = 256   # a local Ray's object store: only shard numbers and summaries travel through it
    crash_once_in_shard: int | None = None  # fault injection (tests): the actor on this shard dies halfway, once

    def __post_init__(self):
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.shards is not None and self.shards < 1:
            raise ValueError(f"shards must be at least 1, got {self.shards}")


@dataclass
class ParserSpec:
    """How an actor builds its parser (:func:`crg.parse.make_parser` arguments): a parser object itself
    would be pickled to every task, a spec is built once per actor. The backend's factory is looked up here,
    in the driver (an unknown name fails before Ray starts), and travels with the spec by reference, so an
    actor imports the module of a plugged-in backend (:func:`crg.parse.register_parser`) by itself."""

    name: str = "spacy"
    model: str | None = None
    options: dict = field(default_factory=dict)
    factory: Callable | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.factory is None:
            from crg.parse import parser_factory

            self.factory = parser_factory(self.name)

    def make(self):
        return self.factory(self.model, **self.options)


@dataclass
class EngineReport:
    """How the distributed build went (``stats.json``'s ``engine``); the graph's own report is the same as the
    single-machine engine's."""

    engine: str = "ray"
    address: str = "local"
    workers: int = 0
    num_shards: int = 0
    shards_reused: int = 0          # complete outputs of an earlier run, kept
    shards_run: int = 0
    bad_shard_files: list[str] = field(default_factory=list)   # FILE:LINE: ... of every bad shard file or line met
    pipeline_seconds: float = 0.0   # from starting (or joining) Ray to merging the last shard: Ray's and the
    # actors' start-up included
    merge_seconds: float = 0.0      # of which the driver spent reading and merging shard files
    captions_per_second: float = 0.0
    driver_peak_rss_mb: float = 0.0
    driver_cpu_seconds: float = 0.0  # the driver process's CPU time, user + system (what a head node spends)
    worker_peak_rss_mb: float = 0.0  # the largest actor's peak
    merge_steps: dict = field(default_factory=dict)  # --merge partitioned: seconds of each merge step
    merge_peak_rss_mb: float = 0.0  # --merge partitioned: the largest merge partition actor's peak


@dataclass
class RayBuild:
    graph: ConceptGraph
    report: BuildReport
    engine: EngineReport


class _ShardWorker:
    """A Ray Data actor: builds the parser and opens the parse cache once, then analyses shard after shard."""

    def __init__(self, parser: ParserSpec, cache_path: str | None, settings: dict, crash_once_in_shard: int | None):
        self.parser = parser.make()
        self.cache_path = cache_path  # opened per shard: Ray Data calls the actor from threads, SQLite objects
        # must stay in the thread that made them
        self.settings = settings
        self.crash_once_in_shard = crash_once_in_shard

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        summaries = []
        for index, path, n, digest, key in zip(batch["shard"], batch["path"], batch["num_captions"],
                                                batch["digest"], batch["key"]):
            spec = ShardSpec(int(index), Path(str(path)), int(n), str(digest))
            cache = ParseCache(self.cache_path) if self.cache_path else None
            try:
                summary = analyze_shard(spec, self.parser, output_path(spec.path.parent, spec.index), key=str(key),
                                        cache=cache, dump=self.settings["dump"],
                                        prune_probability=self.settings["prune_probability"],
                                        prune_seed=self.settings["prune_seed"], on_caption=self._crash_hook(spec))
            finally:
                if cache is not None:
                    cache.close()
            summaries.append(json.dumps(asdict(summary)))
        return {"summary": summaries}

    def _crash_hook(self, spec: ShardSpec):
        """Fault injection: die halfway through the chosen shard, the first time only (a marker file remembers)."""
        if self.crash_once_in_shard != spec.index:
            return None
        marker = spec.path.with_name(f"{spec.index:05d}.crashed-once")

        def hook(n: int) -> None:
            if n == spec.num_captions // 2 and not marker.exists():
                marker.touch()
                logger.warning("fault injection: killing this worker halfway through shard %d", spec.index)
                os._exit(17)
        return hook


class RayConnectError(RuntimeError):
    """No Ray cluster answers at the given address; the message names it."""


def check_address(address: str | None, timeout_s: float = 10.0) -> None:
    """Fail fast when nothing listens at ``--address HOST:PORT``: ``ray.init`` would retry it for ever.

    ``None`` (a local Ray) and ``auto`` (Ray finds its own cluster) are not probed.

    >>> check_address("127.0.0.1:1", timeout_s=2)
    Traceback (most recent call last):
    ...
    crg.ray_engine.RayConnectError: --address 127.0.0.1:1: no Ray cluster answers there (...)...
    """
    if not address or address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise RayConnectError(f"--address {address}: expected auto or HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise RayConnectError(f"--address {address}: no Ray cluster answers there ({err}); start one with "
                              f"`ray start --head`, or leave --address out to start a local Ray") from None


def _start_ray(config: RayConfig, progress: bool) -> bool:
    """Connect to Ray; ``True`` when this call started it (and so should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    if config.address:
        check_address(config.address)
        ray.init(address=config.address, include_dashboard=False, log_to_driver=progress)
        return True
    start_local_ray(os.cpu_count() or 1, object_store_mb=config.object_store_mb, log_to_driver=progress)
    return True


def start_local_ray(num_cpus: int, *, object_store_mb: int = 256, log_to_driver: bool = False,
                    attempts: int = 4) -> None:
    """``ray.init`` of a local Ray, tried again when its raylet does not register in time: Ray waits 30 s,
    a fixed limit, which a busy machine can miss (seen on 2 cores at load 12). Some helper processes of a
    failed start (dashboard, log monitor) outlive ``ray.shutdown``; they are this process' children."""
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(num_cpus=num_cpus, object_store_memory=object_store_mb * 2**20, include_dashboard=False,
                     log_to_driver=log_to_driver)
            return
        except Exception as err:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(err) or attempt == attempts:
                raise
            logger.warning("local Ray did not start in time (attempt %d of %d); trying again", attempt, attempts)
            ray.shutdown()



def join_ray(address: str | None, env_vars: dict[str, str]) -> None:
    """``ray.init`` of the cluster at ``address``, or of a local Ray on every core whose processes end with this
    one even after a SIGKILL (:func:`crg.fate.watch`: Ray's agents outlive a driver killed so), its workers given
    ``env_vars``. Nothing listening at ``address`` is one error in 10 s, not ``ray.init``'s retries for ever; a
    start that fails is one :class:`RayConnectError` naming where (Ray raises a bare Exception when its raylet does
    not start in time)."""
    import ray

    check_address(address)
    try:  # a local Ray started here is this process's: its raylet and workers end when it does
        ray.init(address=address, num_cpus=None if address else os.cpu_count(), runtime_env={"env_vars": env_vars},
                 include_dashboard=False, log_to_driver=True)
    except Exception as err:
        where = f"the Ray cluster at --address {address}" if address else "a local Ray"
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RayConnectError(f"cannot start or join {where}: {first}") from err
    if not address:
        from crg.fate import watch

        watch()


def task_resources(jobs: int) -> tuple[int, int]:
    """The CPUs and GPUs of one of ``jobs`` tasks at a time on the running Ray: its CPUs shared among them, none
    larger than the smallest machine, a GPU each where there is one."""
    import ray

    node_cpus = min(int(n["Resources"].get("CPU", 1)) for n in ray.nodes() if n["Alive"])
    cpus = max(1, min(node_cpus, int(ray.cluster_resources().get("CPU", 1)) // jobs))
    return cpus, 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0

def build_crg_ray(corpus: Corpus, parser: ParserSpec, shard_dir: str | Path, *, config: RayConfig | None = None,
                  cache_path: str | Path | None = None, dump_path: str | Path | None = None, progress: bool = True,
                  max_words: int = 100, prune_probability: float = 0.0, prune_seed: int = 0,
                  parser_key: str | None = None) -> RayBuild:
    """Build the CRG of ``corpus`` through Ray; the same graph as :func:`crg.build.build_crg`.

    ``shard_dir`` holds the shard files (a rerun keeps the finished ones); ``cache_path`` is the SQLite parse
    cache each actor reads and extends (``None``: no cache); ``dump_path`` writes ``captions.jsonl``;
    ``parser_key`` is the parser's :meth:`cache_key` (default: build the parser here once to read it).
    """
    import ray

    config = config or RayConfig()
    started = time.perf_counter()
    shard_dir = Path(shard_dir)
    report = BuildReport()
    todo = usable_captions(corpus, report, max_words=max_words)
    images = corpus.images
    specs = []
    for k, (a, b) in enumerate(plan_shards(len(todo), shards=config.shards, shard_size=config.shard_size)):
        specs.append(write_shard_input(shard_dir, k, [ShardCaption(i, j, images[i].image_id, t)
                                                      for i, j, t in todo[a:b]]))
    del todo
    parser_key = parser_key or parser.make().cache_key()  # a caller that has the parser passes its key
    settings = {"parser": parser_key, "dump": dump_path is not None, "prune_probability": float(prune_probability),
                "prune_seed": int(prune_seed)}
    keys = [output_key(s, settings) for s in specs]
    engine = EngineReport(address=config.address or "local", num_shards=len(specs))
    to_run = []
    for spec, key in zip(specs, keys):
        why = check_shard_output(output_path(shard_dir, spec.index), shard=spec.index, key=key)
        if why is None:
            engine.shards_reused += 1
            continue
        if why:
            logger.warning("running shard %d again: %s", spec.index, why)
            engine.bad_shard_files.append(why)
        to_run.append((spec, key))
    engine.shards_run = len(to_run)

    builder = GraphBuilder([im.image_id for im in images], [im.split for im in images])
    dump = open(Path(dump_path).with_name(Path(dump_path).name + ".tmp"), "w", encoding="utf-8") if dump_path else None
    finished = {s.index for s in specs} - {s.index for s, _ in to_run}
    merged = 0
    worker_peak = 0.0
    bar = tqdm(total=len(specs), desc="shards (parse + extract, merge)", unit="shard", disable=not progress)

    def merge_ready() -> None:
        nonlocal merged, worker_peak
        while merged < len(specs) and specs[merged].index in finished:
            merge_started = time.perf_counter()
            summary = merge_shard(specs[merged], keys[merged], builder, report, dump=dump,
                                  problems=engine.bad_shard_files)
            engine.merge_seconds += time.perf_counter() - merge_started
            if summary is not None:
                worker_peak = max(worker_peak, summary.peak_rss_mb)
            merged += 1
            bar.update(1)

    owns_ray = False
    pipeline_started = time.perf_counter()
    try:
        merge_ready()
        if to_run:
            owns_ray = _start_ray(config, progress)
            workers = config.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            engine.workers = min(workers, len(to_run))
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.preserve_order = False
            items = [{"shard": s.index, "path": str(s.path), "num_captions": s.num_captions, "digest": s.digest,
                      "key": key} for s, key in to_run]
            ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
                _ShardWorker, batch_size=1, num_cpus=1,
                compute=ray.data.ActorPoolStrategy(size=engine.workers),
                fn_constructor_kwargs={"parser": parser, "cache_path": str(cache_path) if cache_path else None,
                                       "settings": settings, "crash_once_in_shard": config.crash_once_in_shard})
            # Ray Data's actor pool restarts a dead actor and retries its shard by default (max_restarts and
            # max_task_retries -1): tests/test_crg_ray.py kills one mid-shard and checks the graph
            for row in ds.iter_rows():
                summary = ShardSummary(**json.loads(row["summary"]))
                finished.add(summary.shard)
                merge_ready()
        merge_ready()
    finally:
        bar.close()
        if dump is not None:
            dump.close()
        if owns_ray:
            ray.shutdown()
    if merged != len(specs):
        missing = sorted({s.index for s in specs} - finished)
        raise RuntimeError(f"the pipeline ended with shards {missing[:20]} unfinished; rerun with --resume")
    if dump is not None:
        os.replace(dump.name, dump_path)
    report.parse_seconds = time.perf_counter() - pipeline_started
    if report.skipped:
        logger.warning("skipped %d of %d captions: %s (first examples in the report)",
                       sum(report.skipped.values()), report.num_captions, report.skipped)
    build_started = time.perf_counter()
    graph = builder.build(meta=graph_meta(corpus, parser_key, report, prune_probability, prune_seed))
    report.extract_seconds = time.perf_counter() - build_started
    engine.pipeline_seconds = round(report.parse_seconds, 2)
    engine.merge_seconds = round(engine.merge_seconds, 2)
    engine.captions_per_second = round(report.num_captions / max(time.perf_counter() - started, 1e-9), 1)
    engine.driver_peak_rss_mb = peak_rss_mb()
    engine.driver_cpu_seconds = round(time.process_time(), 2)
    engine.worker_peak_rss_mb = worker_peak
    return RayBuild(graph, report, engine)
