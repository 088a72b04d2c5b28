"""Build the Concept & Relation Graph of a caption corpus.

    gc-build-crg --captions ../shared/data/flickr30k/captions.jsonl --split train --out runs/crg_f30k --dump

Writes ``OUT/graph.npz`` + ``OUT/graph_strings.json.gz`` (load with ``crg.load_graph``),
``OUT/stats.json`` (Table 1's columns and what was skipped) and, with ``--dump``,
``OUT/captions.jsonl``. Parses are cached (``--cache``), so a rerun does not parse again.

    gc-build-crg --data world --out runs/crg_world

``--data NAME`` (a named dataset, the world generated on first use) is an option of ``gc-build-crg``, which
brings the dataset catalog; ``python -m crg.cli.build_crg`` reads corpus files only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from crg.build import build_crg
from crg.cli.arguments import positive_int
from crg.corpus import CORPUS_FORMATS, CorpusFormatError, parse_splits, read_corpus
from crg.corpus_ranges import check_range_corpus
from crg.outputs import OutputDirError, prepare_output_dir, write_json_atomic
from crg.parse import add_parser_arguments, make_parser
from crg.parse_cache import ParseCache, default_cache_path


def build_argparser(named_datasets: bool = False) -> argparse.ArgumentParser:
    """The options; ``named_datasets``: also ``--data NAME`` (when a dataset catalog is given to :func:`main`)."""
    ap = argparse.ArgumentParser(prog="gc-build-crg", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--captions", help="caption corpus (JSONL, Karpathy JSON, TSV, SCAN caps)")
    if named_datasets:
        src.add_argument("--data", help="a named dataset: world (generated offline), f30k, coco")
        ap.add_argument("--world-images", type=positive_int, default=4000,
                        help="--data world: images of the world (default 4000)")
        ap.add_argument("--world-seed", type=int, default=0, help="--data world: the world's seed (default 0)")
    ap.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    ap.add_argument("--split", default=None,
                    help="comma-separated splits to use, e.g. train or val,test (default: all images)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dump", action="store_true", help="also write OUT/captions.jsonl, one line per caption")
    add_parser_arguments(ap, default=None, default_help="the dataset's with --data (world: its gold trees), "
                                                        "else spacy")
    ap.add_argument("--cache", default=None,
                    help=f"parse cache file (default: {default_cache_path()}; env GC_CACHE_DIR moves it)")
    ap.add_argument("--no-cache", action="store_true", help="parse everything, cache nothing")
    ap.add_argument("--workers", type=positive_int, default=None,
                    help="parser processes (default: all cores when more than 20,000 captions need parsing); "
                         "--engine ray: parser actors (default: every CPU of the Ray cluster)")
    ap.add_argument("--engine", choices=("single", "ray"), default="single",
                    help="single (default): this machine's processes; ray: a Ray Data pipeline over corpus shards, "
                         "shard files in OUT/shards (needs the [distributed] extra; docs/scale.md)")
    ap.add_argument("--address", default=None,
                    help="--engine ray: join the Ray cluster at auto or HOST:PORT (default: start a local Ray on "
                         "this machine's cores)")
    ap.add_argument("--shards", type=positive_int, default=None,
                    help="--engine ray: cut the corpus into N shards (default: about 1,000 captions each)")
    ap.add_argument("--merge", choices=("driver", "partitioned"), default="driver",
                    help="--engine ray: driver (default) merges the shards in the driver and saves graph.npz; "
                         "partitioned: workers read byte ranges of an uncompressed JSONL or TSV corpus themselves, Ray "
                         "actors merge hash partitions of the tables, the graph is saved columnar (graph.json + "
                         "graph/, memory-mapped by load_graph); the same graph (docs/scale.md)")
    ap.add_argument("--partitions", type=positive_int, default=None,
                    help="--merge partitioned: merge partitions (default: the workers)")
    ap.add_argument("--max-words", type=int, default=100, help="skip captions longer than this")
    ap.add_argument("--show", type=int, default=0, metavar="N",
                    help="print the concept trees of the first N captions")
    ap.add_argument("--scan-ids", help="SCAN format: the image id list (default: <prefix>_ids.txt beside the captions)")
    ap.add_argument("--resume", action="store_true",
                    help="rebuild into an OUT made by the same command and settings (parses come from the cache)")
    ap.add_argument("--overwrite", action="store_true", help="replace the graph in OUT instead of refusing")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


OWNED = ("graph.npz", "graph_strings.json.gz", "graph.json", "graph", "graph.tmp", "stats.json", "captions.jsonl",
         "shards")


def format_caption_tree(graph, caption: int) -> str:
    """A caption's composition as an indented tree: each concept with the predicate that builds it."""
    image = graph.image_ids[graph.caption_image[caption]]
    derivs = {d.parent: d for d in graph.caption_derivations(caption)}
    lines = [f"image {image}: {graph.caption_texts[caption]}"]

    def show(cid: int, depth: int) -> None:
        c = graph.concept(cid)
        d = derivs.get(cid)
        rule = f"  =  {d.predicate.template}" if d else ""
        lines.append(f"{'  ' * (depth + 1)}{c.label:<5} {c.text!r}{rule}")
        for child in (d.children if d else ()):
            show(child, depth + 1)

    show(int(graph.caption_root[caption]), 0)
    return "\n".join(lines)


def _build_partitioned(args, parser_key: str):
    from crg.ray_engine import ParserSpec, RayConfig
    from crg.ray_scale import build_crg_partitioned

    config = RayConfig(address=args.address, workers=args.workers, shards=args.shards)
    out = Path(args.out)
    try:
        build = build_crg_partitioned(args.captions, ParserSpec(args.parser, args.parser_model), out,
                                      splits=parse_splits(args.split), config=config, num_partitions=args.partitions,
                                      cache_path=None if args.no_cache else (args.cache or default_cache_path()),
                                      dump_path=out / "captions.jsonl" if args.dump else None,
                                      progress=not args.quiet, max_words=args.max_words, parser_key=parser_key)
    except (ValueError, CorpusFormatError) as err:
        raise SystemExit(f"error: {err}") from None
    return build.graph, build.report, build.engine


def _build_with_ray(args, corpus, parser_key: str):
    try:
        from crg.ray_engine import ParserSpec, RayConfig, RayConnectError, build_crg_ray, check_address
        import ray  # noqa: F401  (only to fail here, with the fix, when the extra is missing)
    except ImportError as err:
        raise SystemExit(f"error: --engine ray needs Ray ({err}); install it with pip install -e \".[distributed]\"")
    try:
        config = RayConfig(address=args.address, workers=args.workers, shards=args.shards)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    try:
        check_address(config.address)  # again: the cluster may have gone since main() looked
    except RayConnectError as err:
        raise SystemExit(f"error: {err}") from None
    out = Path(args.out)
    build = build_crg_ray(corpus, ParserSpec(args.parser, args.parser_model), out / "shards", config=config,
                          cache_path=None if args.no_cache else (args.cache or default_cache_path()),
                          dump_path=out / "captions.jsonl" if args.dump else None, progress=not args.quiet,
                          max_words=args.max_words, parser_key=parser_key)
    for problem in build.engine.bad_shard_files:
        print(f"warning: {problem}", file=sys.stderr)
    return build.graph, build.report, build.engine


def main(argv=None, *, resolve_dataset: Callable | None = None) -> int:
    """Run the command. ``resolve_dataset(name, progress=...)`` (and, for the world, ``world_images=`` and
    ``world_seed=``) turns ``--data NAME`` into a spec with ``.captions`` and ``.parser_for(parser, parser_model)``:
    the dataset catalog, which lives in a layer above ``crg`` and is passed in by the console program
    (``gc-build-crg``); without it there is no ``--data``."""
    args = build_argparser(named_datasets=resolve_dataset is not None).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    if getattr(args, "data", None):
        if args.data != "world" and (args.world_images, args.world_seed) != (4000, 0):
            raise SystemExit("error: --world-images and --world-seed are options of --data world")
        spec = resolve_dataset(args.data, progress=not args.quiet, **(
            {"world_images": args.world_images, "world_seed": args.world_seed} if args.data == "world" else {}))
        args.captions = str(spec.captions)
        try:
            args.parser, args.parser_model = spec.parser_for(args.parser, args.parser_model)
        except ValueError as err:
            raise SystemExit(f"error: {err}") from None
    elif args.parser is None:
        if args.parser_model is not None:
            raise SystemExit("error: --parser-model needs --parser (spacy, benepar or preparsed)")
        args.parser = "spacy"
    if args.engine != "ray" and (args.address or args.shards or args.merge != "driver"):
        raise SystemExit("error: --address, --shards and --merge are options of --engine ray")
    if args.merge != "partitioned" and args.partitions:
        raise SystemExit("error: --partitions is an option of --merge partitioned")
    partitioned = args.engine == "ray" and args.merge == "partitioned"
    if args.resume and args.overwrite:
        raise SystemExit("error: --resume rebuilds the graph in --out, --overwrite replaces it: give one of them")
    if partitioned:  # the workers read the corpus: here only what it is is checked
        try:
            range_format = check_range_corpus(args.captions, args.format)
            import ray  # noqa: F401  (to fail here, with the fix, when the extra is missing)
        except (CorpusFormatError, FileNotFoundError) as err:
            raise SystemExit(f"error: {err}") from None
        except ImportError as err:
            raise SystemExit(f"error: --engine ray needs Ray ({err}); install it with pip install -e \".[distributed]\"")
        corpus = None
    else:
        try:
            corpus = read_corpus(args.captions, args.format, ids_path=args.scan_ids)
        except (CorpusFormatError, FileNotFoundError) as err:
            raise SystemExit(f"error: {err}") from None
    if args.split and corpus is not None:
        try:
            corpus = corpus.select(parse_splits(args.split))  # aliases too: trainval, all
        except ValueError as err:
            raise SystemExit(f"error: {err}") from None
    if corpus is not None and corpus.num_captions == 0:
        raise SystemExit(f"error: {args.captions} has no caption" + (f" in split(s) {args.split}" if args.split else "")
                         + "; nothing to build (check --split against the corpus' split labels)")
    settings = {"captions": str(Path(args.captions).resolve()), "format": range_format if partitioned else corpus.format,
                "split": args.split,
                "parser": args.parser, "parser_model": args.parser_model, "max_words": args.max_words,
                "dump": args.dump}
    if args.engine == "ray":
        settings["engine"] = "ray"  # only then: folders of the single engine resume as before
    if partitioned:
        settings["merge"] = "partitioned"
    if args.engine == "ray" and args.address:
        from crg.ray_engine import RayConnectError, check_address

        try:  # before run.json: ray.init would retry an address where nothing listens for ever
            check_address(args.address)
        except RayConnectError as err:
            raise SystemExit(f"error: {err}") from None
    try:  # the parser's files and the cache before run.json is written: a bad one fails a rerun-free way
        parser = make_parser(args.parser, args.parser_model)
        if not args.no_cache:
            ParseCache(args.cache or default_cache_path()).close()
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"error: {err}") from None
    try:
        graph_files = ["graph.json", "graph", "graph.tmp"] if partitioned else ["graph.npz", "graph_strings.json.gz"]
        writes = graph_files + ["stats.json"] + (["captions.jsonl"] if args.dump else []) \
            + (["shards"] if args.engine == "ray" else [])
        prepare_output_dir(args.out, command="build_crg", settings=settings,
                           mode="resume" if args.resume else "overwrite" if args.overwrite else "new", owned=OWNED,
                           writes=writes, inputs={"--captions": args.captions, "--scan-ids": args.scan_ids,
                                                  "--cache": None if args.no_cache else args.cache})
    except OutputDirError as err:
        raise SystemExit(f"error: {err}") from None
    out = Path(args.out)
    engine = None
    if partitioned:
        graph, report, engine = _build_partitioned(args, parser.cache_key())
    elif args.engine == "ray":
        graph, report, engine = _build_with_ray(args, corpus, parser.cache_key())
    else:
        workers = args.workers
        if workers is None:
            workers = (os.cpu_count() or 1) if corpus.num_captions > 20_000 and args.parser == "spacy" else 1
        cache = None if args.no_cache else ParseCache(args.cache or default_cache_path())
        try:
            graph, report = build_crg(
                corpus, parser, cache=cache, n_process=workers,
                parser_spec=(args.parser, args.parser_model, {}),
                dump_path=out / "captions.jsonl" if args.dump else None,
                progress=not args.quiet, max_words=args.max_words)
        finally:
            if cache is not None:
                cache.close()
    if graph.num_captions == 0:
        raise SystemExit(f"error: every caption of {args.captions} was skipped ({report.as_dict()}); no graph written")
    if not partitioned:  # the partitioned merge wrote the graph (columnar) itself
        graph.save(out)
    stats = graph.stats()
    stats.update({"corpus": str(args.captions), "splits": args.split, "parser": parser.cache_key(),
                  "wall_seconds": round(time.perf_counter() - started, 2), "report": report.as_dict()})
    if engine is not None:
        stats["engine"] = asdict(engine)
    write_json_atomic(out / "stats.json", stats)
    for cap in range(min(args.show, graph.num_captions)):
        print(format_caption_tree(graph, cap))
    print(json.dumps({k: stats[k] for k in ("num_concepts", "num_predicates", "num_primitives", "avg_height",
                                             "num_captions", "wall_seconds")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
