"""Evaluate a trained COMPOSER checkpoint on any dataset and split: sentence-to-image retrieval (full
cross-scoring, and optionally shortlist-and-rerank), phrase-to-image retrieval (single- and
multi-positive); JSON out. See docs/evaluation.md.

    # in-domain: the test split of the data it was trained on
    gc-evaluate --checkpoint runs/w/checkpoints/last.ckpt --data world \
        --out runs/w/eval.json
    # cross-dataset (Table 2, F30K -> COCO): a model trained on Flickr30K, COCO's test images
    gc-evaluate --checkpoint runs/f30k/checkpoints/last.ckpt --data coco \\
        --features coco_butd.h5 --out runs/f30k/eval_coco.json
    # compositional generalisation (F30K -> COCO-MCD): every image of an MCD split file
    gc-evaluate --checkpoint runs/f30k/checkpoints/last.ckpt \\
        --data runs/coco_mcd/eval.jsonl --split all --features coco_butd.h5 --out runs/f30k/eval_coco_mcd.json
    # shortlist-and-rerank: a first stage's (captions, images) scores, in the order --save-scores writes
    gc-evaluate ... --first-stage-scores vse_scores.npy --rerank-k 50
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crg.cli.arguments import positive_int
from crg.outputs import write_bytes_atomic, write_text_atomic
from crg.parse import PARSERS
from features.catalog import WORLD_SPLITS

logger = logging.getLogger(__name__)


def add_data_arguments(ap: argparse.ArgumentParser) -> None:
    """The checkpoint and data options shared with experiments/interpret.py."""
    ap.add_argument("--checkpoint", "--model", dest="checkpoint", required=True,
                    help="any trained model of the library: a saved model directory (config.json + "
                         "model.safetensors, e.g. RUN/model), a run directory (its model/: the weights the run "
                         "reports, its best validation's when it trained to the plateau; else its checkpoints), or "
                         "a Lightning .ckpt file")
    ap.add_argument("--data", default="world", help="world | f30k | coco | a caption file (e.g. an MCD eval.jsonl)")
    ap.add_argument("--captions", help="caption corpus (overrides the dataset's)")
    ap.add_argument("--features", help="feature store .h5 (required for f30k / coco / files outside the world)")
    ap.add_argument("--split", default="test",
                    help="train | val | test (the dataset's labels for that role) | systematic | productivity (the "
                         "compositional world's further test sets) | all | comma-separated labels (default test; "
                         "'all' for an MCD split file)")
    ap.add_argument("--eval-images", type=positive_int, default=1000,
                    help="candidate images (default 1000, as the paper)")
    ap.add_argument("--max-regions", type=positive_int,
                    help="regions per image (default: the run's, from its results.json; else 100)")
    ap.add_argument("--world-images", type=positive_int,
                    help="size of the generated world for --data world (default: the run's, from its "
                         "results.json; else 4000)")
    ap.add_argument("--world-split", choices=WORLD_SPLITS, help="--data world: compositional or random (default: "
                                                                "the run's, from its results.json; else compositional)")
    ap.add_argument("--world-held-out", type=int, nargs=3, metavar=("SEED", "PAIRS", "FACTS"),
                    help="--data world: the held-out compounds' seed, colour-shape pairs and relation facts "
                         "(default: the run's, from its results.json; else 0 8 6)")
    ap.add_argument("--world-dir", help="a generated world's directory, for exact truth when --data is a file of it")
    ap.add_argument("--allow-other-world", action="store_true",
                    help="--data world: evaluate on a world of other settings (size, split, held-out compounds) "
                         "than the model's training world, whose test images may then be its training images")
    ap.add_argument("--parser", choices=PARSERS, help="constituency parser for the CRG (default: the run's, from its "
                                                      "results.json; else the dataset's: the world's gold trees, spacy)")
    ap.add_argument("--parser-model", help="parser model name or path (with --parser)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--max-pairs", type=int, default=4096, help="(image, caption) pairs per model call")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gc-evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(ap)
    ap.add_argument("--out", help="write the results JSON here (default: print only)")
    ap.add_argument("--no-sentences", action="store_true", help="skip sentence retrieval by full cross-scoring")
    ap.add_argument("--no-phrases", action="store_true", help="skip phrase retrieval")
    ap.add_argument("--phrases-per-caption", type=int, default=5, help="phrases sampled per caption (paper: 5)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the phrase sampling")
    ap.add_argument("--first-stage-scores", help=".npy (captions, images) first-stage scores for shortlist-and-rerank")
    ap.add_argument("--rerank-k", type=int, default=50, help="shortlist size per caption (default 50)")
    ap.add_argument("--save-scores", help="directory: write the sentence score matrix (scores.npy) and its row / "
                                          "column order (order.json)")
    return ap


@dataclass
class ModelToEvaluate:
    """A trained model, wherever it was saved, with what its run recorded.

    Attributes:
        model: in eval mode; tokenizer: its tokenizer; config: its config dataclass; kind: its name in
            :mod:`composer.models.registry`; path: what was loaded.
        epoch, global_step: where training was (None when unknown).
        run_data: the run's ``DataConfig`` as a dict (from the run's results.json), else None.
    """

    model: object
    tokenizer: object
    config: object
    kind: str
    path: Path
    epoch: int | None
    global_step: int | None
    run_data: dict | None


def _run_results(directory: Path) -> dict:
    for candidate in (directory / "results.json", directory.parent / "results.json"):
        if candidate.is_file():
            return json.loads(candidate.read_text())
    return {}


def load_model(path: str | Path, *, map_location: str = "cpu") -> ModelToEvaluate:
    """Any model of the library: a saved directory (``save_pretrained``), a run directory, or a .ckpt."""
    from composer.models.common.pretrained import CONFIG_NAME
    from composer.models.registry import load_pretrained
    from composer.training.checkpoint import load_checkpoint

    path = Path(path)
    saved = path if (path / CONFIG_NAME).is_file() else path / "model" if (path / "model" / CONFIG_NAME).is_file() \
        else None
    if saved is not None:
        loaded = load_pretrained(saved)
        results = _run_results(saved)
        # a run trained to its plateau saved its best validation's weights, not its last step's
        best = (results.get("plateau") or {}).get("best") or {}
        return ModelToEvaluate(loaded.model.to(map_location), loaded.tokenizer, loaded.config,
                               (results.get("model") or loaded.name), saved, None,
                               best.get("step", results.get("global_step")), (results.get("config") or {}).get("data"))
    ck = load_checkpoint(path, map_location=map_location)
    return ModelToEvaluate(ck.model, ck.model.make_tokenizer(), ck.config, ck.kind, ck.path, ck.epoch,
                           ck.global_step, ck.run_data)


def region_dim_of(loaded: ModelToEvaluate) -> int:
    """The region feature size a loaded model's config expects (its registry entry says where it is)."""
    from composer.models import registry

    return registry.get(loaded.kind).region_dim(loaded.config)


def load(args):
    """The model (on ``--device``, in eval mode), the evaluation set, its regions per image and the device,
    from the shared arguments; the run's own data settings are the defaults; a missing file exits with its
    message."""
    import torch

    from composer.evaluation.eval_sets import load_eval_data

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        loaded = load_model(args.checkpoint, map_location=device)
        run = loaded.run_data or {}
        max_regions = args.max_regions or run.get("max_regions") or 100
        world_images = args.world_images or run.get("world_images") or 4000
        _check_same_world(args, run)
        parser, parser_model = args.parser, args.parser_model
        if parser is None and args.data == run.get("data", args.data):  # the run's own parser on its own data
            parser, parser_model = run.get("parser"), run.get("parser_model")
        # a run without the field predates the compositional default: its world had the random split
        world_split = args.world_split or run.get("world_split") or ("random" if run else "compositional")
        held_out = tuple(args.world_held_out) if args.world_held_out else (
            run.get("world_held_out_seed", 0), run.get("world_held_out_pairs", 8), run.get("world_held_out_facts", 6))
        data = load_eval_data(args.data, split=args.split, captions=args.captions, features=args.features,
                              eval_images=args.eval_images, max_regions=max_regions, world_images=world_images,
                              world_split=world_split, world_held_out_seed=held_out[0],
                              world_held_out_pairs=held_out[1], world_held_out_facts=held_out[2],
                              world_dir=args.world_dir, parser=parser, parser_model=parser_model,
                              device=device, progress=not args.quiet)
    except FileNotFoundError as err:
        raise SystemExit(f"error: {err}") from None
    region_dim = region_dim_of(loaded)
    if data.regions.shape[-1] != region_dim:
        raise ValueError(f"the model takes {region_dim}-d region features, the store gives "
                         f"{data.regions.shape[-1]}-d: use the feature store it was trained with")
    loaded.model.to(device).eval()
    return loaded, data, max_regions, device


def _check_same_world(args, run: dict) -> None:
    """Refuse (unless ``--allow-other-world``) a world of other settings than the model's training world:
    the world's split depends on its size and held-out compounds, so its test images may be ones the model
    trained on."""
    if args.data != "world" or run.get("data") != "world" or args.allow_other_world:
        return
    asked = {"--world-images": (args.world_images, run.get("world_images")),
             "--world-split": (args.world_split, run.get("world_split")),
             "--world-held-out": (tuple(args.world_held_out) if args.world_held_out else None,
                                  (run.get("world_held_out_seed", 0), run.get("world_held_out_pairs", 8),
                                   run.get("world_held_out_facts", 6)))}
    differ = [f"{flag} {now if not isinstance(now, tuple) else ' '.join(map(str, now))} (trained on "
              f"{then if not isinstance(then, tuple) else ' '.join(map(str, then))})"
              for flag, (now, then) in asked.items() if now is not None and then is not None and now != then]
    if differ:
        raise SystemExit(f"error: {'; '.join(differ)}: not the world the model was trained on, whose test images "
                         f"may be its training images here; drop the flag, or pass --allow-other-world")


def _world_of(run: dict | None) -> dict | None:
    """The training world's settings a run recorded (None when it did not train on the world)."""
    if not run or run.get("data") != "world":
        return None
    return {k: run.get(k) for k in ("world_images", "world_split", "world_held_out_seed", "world_held_out_pairs",
                                    "world_held_out_facts")}


def check_outputs(args) -> None:
    """Refuse, before any scoring, an output the end of the run could not write."""
    if args.out and Path(args.out).is_dir():
        raise SystemExit(f"error: --out {args.out} is a folder; --out names the results JSON file")
    if args.out and Path(args.out).parent.exists() and not Path(args.out).parent.is_dir():
        raise SystemExit(f"error: --out {args.out}: {Path(args.out).parent} is a file, not a folder")
    if args.save_scores and Path(args.save_scores).exists() and not Path(args.save_scores).is_dir():
        raise SystemExit(f"error: --save-scores {args.save_scores} is a file; --save-scores names a folder "
                         f"(scores.npy and order.json are written into it)")


def read_first_stage(path: str, shape: tuple[int, int]) -> np.ndarray:
    """``--first-stage-scores``: a finite (captions, images) matrix, or a one-line error naming the file."""
    try:
        first = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise SystemExit(f"error: --first-stage-scores {path}: not a readable .npy array ({err})") from None
    if first.shape != shape:
        raise SystemExit(f"error: --first-stage-scores {path}: shape {first.shape}, but this evaluation has "
                         f"{shape[0]} captions x {shape[1]} images (write the rows and columns in the order "
                         f"--save-scores' order.json lists)")
    if not np.issubdtype(first.dtype, np.number):
        raise SystemExit(f"error: --first-stage-scores {path}: dtype {first.dtype}, not numbers")
    bad = ~np.isfinite(first)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise SystemExit(f"error: --first-stage-scores {path}: {int(bad.sum())} NaN or infinite score(s) in "
                         f"{rows.size} row(s), first row {int(rows[0])} (column {int(np.flatnonzero(bad[rows[0]])[0])})"
                         f"; a ranking with them is undefined")
    return first


def main(argv=None) -> int:
    ap = build_argparser()
    args = ap.parse_args(argv)
    # the models and evaluations (torch): imported once the flags are parsed, so --help answers at once
    from composer.evaluation.caption_subsets import unseen_in_training
    from composer.evaluation.phrase_retrieval import evaluate_phrase_retrieval
    from composer.evaluation.rerank import shortlist_and_rerank
    from composer.evaluation.sentence_retrieval import SentenceRetrievalSet, ceiling_reports
    from composer.models.common.retrieval import score_matrix
    from composer.models.composer.program import ConceptProgram
    from composer.provenance import git_sha

    if args.save_scores and args.no_sentences:
        ap.error("--save-scores writes the sentence scores: drop --no-sentences")
    check_outputs(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loaded, data, max_regions, device = load(args)
    model, tokenizer = loaded.model, loaded.tokenizer
    trained_on = (loaded.run_data or {}).get("data")
    results: dict = {
        "model": loaded.kind, "checkpoint": str(loaded.path), "epoch": loaded.epoch, "global_step": loaded.global_step,
        "trained_on": trained_on, "trained_world": _world_of(loaded.run_data), "evaluated_on": args.data,
        "split": args.split,
        "num_images": len(data.image_ids), "num_captions": len(data.captions), "max_regions": max_regions,
        "git": git_sha(), "device": device}
    programs = [ConceptProgram.from_graph(data.graph, c) for c in data.captions]
    first = None
    if args.first_stage_scores:  # read before the long scoring, so that a wrong file fails at once
        first = read_first_stage(args.first_stage_scores, (len(programs), len(data.image_ids)))

    if not args.no_sentences:
        res = score_matrix(model, data.regions, data.geometry, data.region_mask, programs, tokenizer,
                           max_pairs=args.max_pairs, progress=not args.quiet,
                           caption_labels=[data.graph.caption_texts[c] for c in data.captions],
                           image_labels=data.image_ids)
        texts = [data.graph.caption_texts[c] for c in data.captions]
        positives = data.truth.positives(texts, data.image_ids) if data.truth is not None else None
        oracles = data.truth.oracle_scores(texts, data.image_ids) if data.truth is not None else None
        unseen = None if data.training_texts is None else unseen_in_training(texts, data.training_texts)
        eval_set = SentenceRetrievalSet(args.split, data.image_ids, programs, data.caption_image, lambda: None,
                                        positives=positives, unseen_in_training=unseen,
                                        ceilings=None if oracles is None else ceiling_reports(
                                            oracles, data.caption_image, positives))
        report = eval_set.report(res.scores, seconds=res.seconds)
        results["sentence"] = {**report["sentence"], **{k: report[k] for k in ("chance_R@1", "seconds",
                                                                             "pairs_per_second")}}
        # the first two where the dataset knows its exact truth, the last where it has training captions
        for key in ("sentence_any_true", "ceilings", "sentence_by_length", "unseen_in_training"):
            if key in report:
                results[key] = report[key]
        if args.save_scores:
            out = Path(args.save_scores)
            out.mkdir(parents=True, exist_ok=True)
            buffer = io.BytesIO()
            np.save(buffer, res.scores)
            write_bytes_atomic(out / "scores.npy", buffer.getvalue())
            write_text_atomic(out / "order.json", json.dumps(
                {"rows": [data.graph.caption_texts[c] for c in data.captions], "row_caption_index": data.captions,
                 "columns": data.image_ids, "row_image": data.caption_image.tolist()}) + "\n")

    if data.twin_groups and not args.no_sentences:  # a compositional world's minimal pairs of the split
        from composer.evaluation.text_pairs import twin_group_scores

        results["twins"] = twin_group_scores(model, tokenizer, data.twin_groups, data.store,
                                             max_regions=max_regions, parser_name=data.parser[0],
                                             parser_model=data.parser[1], device=device, max_pairs=args.max_pairs)

    if first is not None:
        rr = shortlist_and_rerank(model, data.regions, data.geometry, data.region_mask, programs, tokenizer,
                                  data.caption_image, first_stage=first, k=args.rerank_k, max_pairs=args.max_pairs)
        results["rerank"] = rr.to_dict()

    if not args.no_phrases:
        results["phrase"] = evaluate_phrase_retrieval(
            model, data.regions, data.geometry, data.region_mask, tokenizer, data.graph, data.image_ids,
            truth=data.truth, captions=data.captions, per_caption=args.phrases_per_caption, seed=args.seed,
            max_pairs=args.max_pairs, progress=not args.quiet)

    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out, text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
