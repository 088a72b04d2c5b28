"""Evaluate any saved model of the library on a compositionality benchmark (SugarCrepe, ARO, Winoground,
CREPE, VL-CheckList): accuracy per subset and the benchmark's own averages, as CLIP_benchmark writes them.

    gc-evaluate-benchmark --benchmark sugarcrepe --data-root ../shared/benchmarks/sugarcrepe \\
        --features coco2017_butd.h5 --model runs/composer_coco/model --out runs/eval/sugarcrepe.json \\
        --csv runs/eval/benchmarks.csv
    gc-evaluate-benchmark --benchmark coco_order --data-root ../shared/data/coco/captions.jsonl.gz \\
        --features coco_butd.h5 --model runs/composer_coco --limit 5000

Each text is parsed into its composition program as the CRG builder parses captions, and every
(image, text) pair is scored by the model's ``score_pairs``. A record is right when its true text
scores strictly above every false one (a tie is a failure). Records whose image the feature store
lacks, or with a text that has no parse, are counted in the output (``missing_image``,
``unscorable_text``) and left out of the accuracies; the command says how many. The JSON is
``{dataset, model, pretrained, task, metrics, details, ...}``; ``--csv`` appends one row per metric.
See docs/benchmarks_compositional.md.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["CSV_COLUMNS", "append_csv", "build_argparser", "main"]

logger = logging.getLogger(__name__)

CSV_COLUMNS = ("time", "dataset", "model", "pretrained", "task", "metric", "value", "scored", "records", "limit",
               "features", "git")


def build_argparser() -> argparse.ArgumentParser:
    from crg.benchmarks import BENCHMARKS
    from features.ids import ID_FORMATS

    ap = argparse.ArgumentParser(prog="gc-evaluate-benchmark", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", required=True, choices=BENCHMARKS, help="which benchmark")
    ap.add_argument("--data-root", required=True,
                    help="the benchmark's files: a folder (sugarcrepe, aro, winoground, crepe, vl_checklist) or a "
                         "caption corpus (coco_order, flickr30k_order: its Karpathy test captions)")
    ap.add_argument("--features", required=True, help="feature store .h5 holding the benchmark's images")
    ap.add_argument("--model", required=True, help="any saved model of the library: a model directory (config.json + "
                                                   "model.safetensors), a run directory or a .ckpt")
    ap.add_argument("--id-format", choices=ID_FORMATS,
                    help="how the benchmark's image names map to the store's ids (default: the benchmark's: int for "
                         "COCO / VG numbers, stem for file names, verbatim for the order sets)")
    ap.add_argument("--limit", type=int, help="only the first N records of each subset (a quick run)")
    ap.add_argument("--max-regions", type=int, help="regions per image (default: the model's run's, else 100)")
    ap.add_argument("--parser", default="spacy", help="constituency parser for the texts (default spacy)")
    ap.add_argument("--parser-model", help="parser model name or path")
    ap.add_argument("--seed", type=int, default=0, help="seed of the order sets' shuffles (coco_order, flickr30k_order)")
    ap.add_argument("--device", help="default: cuda when available, else cpu")
    ap.add_argument("--max-pairs", type=int, default=4096, help="(image, text) pairs per model call")
    ap.add_argument("--out", help="write the result JSON here (default: print only)")
    ap.add_argument("--csv", help="append one row per metric to this CSV (created with a header if missing)")
    ap.add_argument("--clip-benchmark-dir",
                    help="also write one CLIP_benchmark result file per subset here (dataset sugar_crepe/<subset>, "
                         "accuracy as a fraction, language set), for its result-merging tools")
    ap.add_argument("--language", default="en", help="the texts' language, recorded in --clip-benchmark-dir files")
    return ap


def append_csv(path: str | Path, rows: list[dict]) -> None:
    """Append ``rows`` (keys :data:`CSV_COLUMNS`) to the CSV at ``path``, rewriting it atomically; a file
    with another header is refused (naming it), so runs of different layouts are never mixed."""
    from crg.outputs import write_text_atomic

    path = Path(path)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if old:
        header = next(csv.reader(io.StringIO(old)))
        if tuple(header) != CSV_COLUMNS:
            raise SystemExit(f"error: --csv {path} has the columns {header}, not {list(CSV_COLUMNS)}: "
                             f"choose another file")
        if not old.endswith("\n"):
            old += "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    if not old:
        writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, old + buffer.getvalue())


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.limit is not None and args.limit < 1:
        raise SystemExit(f"error: --limit must be >= 1, got {args.limit}")
    if args.clip_benchmark_dir and Path(args.clip_benchmark_dir).exists() and not Path(args.clip_benchmark_dir).is_dir():
        raise SystemExit(f"error: --clip-benchmark-dir {args.clip_benchmark_dir} is a file, not a folder")
    import torch

    from composer.cli.evaluate import load_model, region_dim_of
    from composer.evaluation.benchmark import benchmark_pairs, clip_benchmark_metrics, evaluate_benchmark
    from composer.evaluation.text_pairs import programs_for_texts, score_text_image_pairs
    from composer.provenance import git_sha
    from crg.benchmarks import BenchmarkFormatError, read_benchmark
    from crg.outputs import write_json_atomic
    from features.ids import normalize_image_id, suggest_id_format
    from features.store import FeatureStore, FeatureStoreError

    started = time.perf_counter()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    options = {"seed": args.seed} if args.benchmark in ("coco_order", "flickr30k_order") else {}
    try:
        bench = read_benchmark(args.benchmark, args.data_root, limit=args.limit, **options)
        store = FeatureStore(args.features)
        store_ids = set(store.image_ids)
        loaded = load_model(args.model, map_location=device)
    except (FileNotFoundError, BenchmarkFormatError, FeatureStoreError) as err:
        raise SystemExit(f"error: {err}") from None
    region_dim = region_dim_of(loaded)
    if store.feature_dim != region_dim:
        raise SystemExit(f"error: the model takes {region_dim}-d region features, {args.features} holds "
                         f"{store.feature_dim}-d: use the feature store it was trained with")
    id_format = args.id_format or bench.id_format

    def image_key(raw: str) -> str:
        return normalize_image_id(raw, id_format)

    images = {image_key(r.image_id) for r in bench.records}
    missing = images - store_ids
    if missing == images:
        hint = suggest_id_format([r.image_id for r in bench.records[:200]], store_ids)
        raise SystemExit(f"error: none of the {len(images)} images of {args.benchmark} (e.g. "
                         f"{sorted(images)[:3]}) is in {args.features} (e.g. {sorted(store_ids)[:3]})"
                         + (f"; try --id-format {hint}" if hint and hint != id_format else
                            "; extract or convert the benchmark's images into the store (docs/benchmarks_compositional.md)"))
    if missing:
        logger.warning("%d of %d images of %s are not in %s (e.g. %s): their records are counted as "
                       "missing_image, not scored", len(missing), len(images), args.benchmark, args.features,
                       sorted(missing)[:3])
    present = [r for r in bench.records if image_key(r.image_id) not in missing]
    programs = programs_for_texts(list(dict.fromkeys(t for r in present for t in r.texts)),
                                  parser_name=args.parser, parser_model=args.parser_model)
    unscorable = {t for t, p in programs.items() if p is None}
    scorable = [r for r in present if not any(t in unscorable for t in r.texts)]
    pairs = benchmark_pairs(scorable, image_key)
    run = loaded.run_data or {}
    max_regions = args.max_regions or run.get("max_regions") or 100
    logger.info("%s: %d records, %d scorable, %d pairs to score", args.benchmark, len(bench), len(scorable), len(pairs))
    loaded.model.to(device).eval()
    values = score_text_image_pairs(loaded.model, loaded.tokenizer, pairs, programs, store, max_regions=max_regions,
                                    device=device, max_pairs=args.max_pairs) if pairs else []
    result = evaluate_benchmark(bench, dict(zip(pairs, (float(v) for v in values))), image_key=image_key,
                                missing_images=missing, unscorable_texts=unscorable)
    metrics = clip_benchmark_metrics(result)
    out = {"dataset": args.benchmark, "model": loaded.kind, "pretrained": str(loaded.path),
           "task": "image_caption_selection", "metrics": metrics, "details": result,
           "benchmark": {"data_root": str(args.data_root), "files": bench.source, "records": len(bench),
                         "subsets": bench.subsets, "skipped_when_read": bench.skipped, "limit": args.limit,
                         "id_format": id_format},
           "features": str(args.features), "max_regions": max_regions, "parser": args.parser,
           "missing_images": {"count": len(missing), "of": len(images), "first": sorted(missing)[:10]},
           "unscorable_texts": {"count": len(unscorable), "first": sorted(unscorable)[:10]},
           "git": git_sha(), "device": device, "seconds": round(time.perf_counter() - started, 2)}
    text = json.dumps(out, indent=2)
    if args.out:
        write_json_atomic(args.out, out)
    if args.clip_benchmark_dir:
        from composer.evaluation.benchmark import clip_benchmark_results, write_clip_benchmark_results

        written = write_clip_benchmark_results(args.clip_benchmark_dir, clip_benchmark_results(
            result, benchmark=args.benchmark, model=loaded.kind, pretrained=str(loaded.path), language=args.language))
        logger.info("%d CLIP_benchmark result files in %s", len(written), args.clip_benchmark_dir)
    if args.csv:
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        overall = result["overall"]
        append_csv(args.csv, [{"time": stamp, "dataset": args.benchmark, "model": loaded.kind,
                               "pretrained": str(loaded.path), "task": out["task"], "metric": k, "value": v,
                               "scored": overall["scored"], "records": overall["records"], "limit": args.limit,
                               "features": str(args.features), "git": out["git"]} for k, v in metrics.items()])
    print(text)
    overall = result["overall"]
    logger.info("%s: accuracy %s over %d of %d records (%d missing image, %d unscorable text)", args.benchmark,
                overall["acc"], overall["scored"], overall["records"], overall["missing_image"],
                overall["unscorable_text"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
