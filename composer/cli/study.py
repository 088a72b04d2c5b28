"""The study: train COMPOSER, every baseline and the papers' ablations on one split of the generated world,
evaluate them all with the same code, and write the papers' tables and figures.

    gc-study --data world --out runs/study_smoke --profile smoke     # seconds a run
    gc-study --data world --out runs/study_cpu --profile cpu          # <= 1 h, 2 cores
    gc-study --data world --out runs/study_gpu --profile gpu           # paper-like sizes

(``python experiments/run_study.py ...`` runs the same program.) Profiles and runs are data
(composer/study/config.py): each run is the world's named training recipe plus the ablation's typed
overrides, trained for the profile's number of steps; evaluation (composer/study/evaluation.py) scores
every model through its ``score_pairs``: in-domain test R@K, the MCD split, the compound-divergence
windows, phrase retrieval, and world hard negatives (I2T / T2I / group accuracy, recursive average).

Writes ``OUT/results.json`` (every result of every seed, with the profile, seeds, hardware, git SHA
and timings), ``OUT/tables.md`` and ``OUT/tables/*.md`` (mean ± std over seeds), ``OUT/plots/*.png``,
the split files under ``OUT/data/`` and one directory per run and seed under ``OUT/runs/``. A rerun
skips finished runs, so a killed study resumes where it stopped (``--seeds`` and ``--runs`` may grow
between invocations; other profile settings may not). Each run is trained by the training commands'
``train()`` into its folder; ``--jobs N`` trains N at a time as Ray tasks on this machine, ``--address``
on a Ray cluster. ``--report-only`` rebuilds the report from the runs' results. See docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings

from composer.study.config import PROFILES, get_profile, study_runs

__all__ = ["build_argparser", "main"]

logger = logging.getLogger(__name__)

QUIET_LOGGERS = ("lightning.pytorch", "lightning.fabric", "crg", "composer", "features")


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gc-study", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="world", help="the dataset; only the generated world (its scene graphs give "
                                                     "the hard negatives and exact phrase truth)")
    ap.add_argument("--out", required=True, help="study directory (results, tables, plots, runs)")
    ap.add_argument("--profile", default="cpu", choices=sorted(PROFILES), help="sizes (composer/study/config.py)")
    ap.add_argument("--seeds", help="comma-separated seeds (default: the profile's, 0,1,2 for cpu and gpu)")
    ap.add_argument("--runs", help="comma-separated run names, a subset of the profile's (default: all of them)")
    ap.add_argument("--jobs", type=int, help="runs trained at a time, as Ray tasks of cores / jobs threads each "
                                             "(default: the profile's; cpu: 2; 1 = in this process)")
    ap.add_argument("--address", help="a Ray cluster's address (ray start --head; the study directory must be "
                                      "on a file system every node shares); default: this machine")
    ap.add_argument("--accelerator", default="auto", help="Lightning accelerator (default: GPU when available)")
    ap.add_argument("--precision", default=None, help="Lightning precision (default: bf16-mixed on GPU, 32 on CPU)")
    ap.add_argument("--search", action="store_true",
                    help="first the equal-budget recipe search (each model: 6 runs on seed 0, scored on val; "
                         "composer/study/search.py) into OUT/search, then the study from the chosen recipes")
    ap.add_argument("--search-only", action="store_true", help="the recipe search alone (OUT/search, tables/search.md)")
    ap.add_argument("--keep-weights", action="store_true",
                    help="keep each run's model (OUT/runs/RUN/seedS/model, a save_pretrained folder gc-evaluate loads)")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild results.json, tables and plots from the finished runs; train nothing")
    ap.add_argument("--verbose", action="store_true", help="the libraries' INFO logs too (graph cache, IL spawns)")
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_argparser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # one line per run; the libraries' chatter only with --verbose
        import lightning  # noqa: F401  (it sets its loggers' levels when imported: import it first)

        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        logging.getLogger("composer.study").setLevel(logging.INFO)  # the study's own progress lines
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*number of training batches.*")
    warnings.filterwarnings("ignore", message=".*treespec.*")  # a deprecation inside Lightning
    if args.data != "world":
        raise SystemExit("error: the study supports --data world only: its hard negatives and exact phrase truth "
                         "need the generated world's scene graphs")
    from composer.study.execute import StudyOptions
    from composer.study.runner import run_study

    profile = get_profile(args.profile)
    jobs = profile.jobs if args.jobs is None else args.jobs
    if jobs < 1:
        raise SystemExit(f"error: --jobs must be >= 1, got {jobs}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(profile.seeds)
    runs = study_runs(profile, [r.strip() for r in args.runs.split(",") if r.strip()] if args.runs else None)
    results = run_study(args.out, profile, seeds=seeds, runs=runs, report_only=args.report_only, data=args.data,
                        search=args.search, search_only=args.search_only,
                        options=StudyOptions(args.accelerator, args.precision, args.keep_weights, jobs=jobs,
                                             address=args.address))
    if "search" in results:  # --search-only
        logger.info("wrote %s/search/chosen.json and tables/search.md", args.out)
        return 0
    st = results["study"]
    logger.info("wrote %s/results.json: %d runs, %s; training %.0f s, evaluation %.0f s in all", args.out,
                len(results["runs"]), "complete" if st["complete"] else f"{len(st['missing'])} missing",
                st["train_seconds_total"], st["eval_seconds_total"])
    if st["failed"]:
        logger.error("%d runs failed (rerun to retry): %s", len(st["failed"]), st["failed"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
