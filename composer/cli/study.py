"""The study: train COMPOSER, every baseline and the papers' ablations on one split of the generated world,
evaluate them all with the same code, and write the papers' tables and figures.

    gc-study --data world --out runs/study_smoke --profile smoke     # seconds a run
    gc-study --data world --out runs/study_cpu --profile cpu          # <= 1 h, 2 cores
    gc-study --data world --out runs/study_gpu --profile gpu           # paper-like sizes

(``python experiments/run_study.py ...`` runs the same program.) Profiles and runs are data
(composer/study/config.py): each run is the world's named training recipe plus the ablation's typed
overrides, trained for the profile's number of steps; evaluation (composer/evaluation/suite.py) scores
every model through its ``score_pairs``: in-domain test R@K, the MCD split, the compound-divergence
windows, phrase retrieval, and world hard negatives (I2T / T2I / group accuracy, recursive average).

Writes ``OUT/results.json`` (every result of every seed, with the profile, seeds, hardware, git SHA
and timings), ``OUT/tables.md`` and ``OUT/tables/*.md`` (mean ± std over seeds), ``OUT/plots/*.png``,
the split files under ``OUT/data/`` and one directory per run and seed under ``OUT/runs/``. A rerun
skips finished runs, so a killed study resumes where it stopped (``--seeds`` and ``--runs`` may grow
between invocations; other profile settings may not). Each run is trained by the training commands'
``train()`` into its folder; ``--jobs N`` trains N at a time as Ray tasks on this machine, ``--address``
on a Ray cluster. ``--report-only`` rebuilds the report from the runs' results; ``--export DIR`` copies
the study's record (its settings and the runs' results, no weights) where it outlives the machine. The
study's configuration (profile, seeds, runs, execution options) is saved to ``OUT/config.yaml``; ``--config
FILE`` runs it again (flags beside it override it), ``--print-config`` shows it. See docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings

from composer.cli.config_file import add_config_arguments
from crg.cli.arguments import int_list, positive_int

__all__ = ["build_argparser", "main"]

logger = logging.getLogger(__name__)

def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gc-study", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="world", help="the dataset; only the generated world (its scene graphs give "
                                                     "the hard negatives and exact phrase truth)")
    ap.add_argument("--out", help="study directory (results, tables, plots, runs, config.yaml); required unless "
                                  "--print-config")
    ap.add_argument("--profile", default="cpu", help="sizes and runs: smoke, cpu, gpu, cpu_il, ... (the names of "
                                                     "PROFILES in composer/study/config.py; default cpu)")
    ap.add_argument("--seeds", type=int_list,
                    help="comma-separated seeds (default: the profile's, 0,1,2 for cpu and gpu)")
    ap.add_argument("--runs", help="comma-separated run names, a subset of the profile's (default: all of them)")
    ap.add_argument("--jobs", type=positive_int,
                    help="runs trained at a time, as Ray tasks of cores / jobs threads each (default: the "
                         "profile's; cpu: 2; 1 = in this process)")
    ap.add_argument("--address", help="a Ray cluster's address (ray start --head; the study directory must be "
                                      "on a file system every node shares); default: this machine")
    ap.add_argument("--accelerator", default="auto", help="Lightning accelerator (default: GPU when available)")
    ap.add_argument("--precision", default=None, help="Lightning precision (default: bf16-mixed on GPU, 32 on CPU)")
    ap.add_argument("--search", action="store_true",
                    help="first the equal-budget recipe search (each model: 6 runs on seed 0, scored on val; "
                         "composer/study/search.py) into OUT/search, then the study from the chosen recipes")
    ap.add_argument("--search-only", action="store_true", help="the recipe search alone (OUT/search, tables/search.md)")
    ap.add_argument("--recipes-from", metavar="STUDY",
                    help="train from the recipes another study's search chose (STUDY/search/chosen.json, or such a "
                         "file itself, e.g. docs/studies/converge/chosen.json; copied to OUT/search with where it came "
                         "from), e.g. a longer budget from a finished search; not with --search")
    ap.add_argument("--keep-weights", action="store_true",
                    help="keep each run's model (OUT/runs/RUN/seedS/model, a save_pretrained folder gc-evaluate loads)")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild results.json, tables and plots from the finished runs; train nothing")
    ap.add_argument("--export", metavar="DIR",
                    help="copy the study's record (study.json, config.yaml, the adopted recipes, the wall time and "
                         "each finished run's study_result.json; no weights) into DIR and exit; train nothing. Copied "
                         "back into an empty --out, the same command goes on where the study stood "
                         "(composer/study/record.py)")
    ap.add_argument("--verbose", action="store_true", help="the libraries' INFO logs too (graph cache, IL spawns)")
    add_config_arguments(ap, saved="OUT/config.yaml")
    return ap


def study_config(ap: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace):
    """The study's configuration: ``--config``'s file (if given) with the flags given beside it written over
    it; the profile's seeds, runs and jobs filled in (:class:`composer.cli.study_config.StudyConfig`)."""
    from dataclasses import replace

    from composer.cli.config_file import given_dests, merge, plain, read_config, typed
    from composer.cli.study_config import PATHS, StudyConfig
    from composer.study.config import PROFILES, get_profile, study_runs
    from composer.study.execute import StudyOptions

    cli = StudyConfig(data=args.data, profile=args.profile,
                      seeds=args.seeds,
                      runs=[r.strip() for r in args.runs.split(",") if r.strip()] if args.runs else None,
                      search=args.search, search_only=args.search_only, recipes_from=args.recipes_from,
                      options=StudyOptions(args.accelerator, args.precision, args.keep_weights,
                                           jobs=args.jobs if args.jobs is not None else 0, address=args.address))
    if args.config:
        given = given_dests(ap, argv)
        merged = merge(read_config(args.config), plain(cli), given=given, paths=PATHS)
        if "jobs" not in given and (merged.get("options") or {}).get("jobs") is None:
            merged.setdefault("options", {})["jobs"] = 0
        cli = typed(StudyConfig, merged, source=f"--config {args.config}")
    if cli.recipes_from and (cli.search or cli.search_only):
        ap.error("--recipes-from and --search / --search-only exclude each other: the recipes come from one")
    if cli.profile not in PROFILES:
        ap.error(f"--profile {cli.profile!r}: choose one of {', '.join(sorted(PROFILES))}")
    profile = get_profile(cli.profile)
    jobs = cli.options.jobs or profile.jobs  # 0: the profile's
    if jobs < 1:
        ap.error(f"--jobs must be >= 1, got {jobs}")
    try:
        runs = [r.name for r in study_runs(profile, cli.runs)]
    except (KeyError, ValueError) as err:
        ap.error(str(err))
    return replace(cli, seeds=list(cli.seeds or profile.seeds), runs=runs, options=replace(cli.options, jobs=jobs))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_argparser()
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.export:  # a copy of files: before the configuration, whose imports cost seconds
        if not args.out:
            ap.error("--export needs --out (the study's folder)")
        return export(args.out, args.export)
    config = study_config(ap, argv, args)
    from composer.cli.config_file import config_yaml
    from composer.cli.study_config import CONFIG_FILE

    text = config_yaml(config, header="gc-study configuration (composer.cli.study_config.StudyConfig); run it again "
                                      "with\n  gc-study --config THIS_FILE --out STUDY_FOLDER")
    if args.print_config:
        print(text, end="")
        return 0
    if not args.out:
        ap.error("--out is required (the study's folder)")
    if not args.verbose:  # one line per run; the libraries' chatter only with --verbose
        from composer.training.log_levels import quiet_library_logging

        quiet_library_logging()
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*number of training batches.*")
    warnings.filterwarnings("ignore", message=".*treespec.*")  # a deprecation inside Lightning
    if config.data != "world":
        raise SystemExit("error: the study supports --data world only: its hard negatives and exact phrase truth "
                         "need the generated world's scene graphs")
    from pathlib import Path

    from composer.provenance import WorkerCodeMismatch
    from composer.study.config import get_profile, study_runs
    from composer.study.runner import run_study
    from composer.training.tune_search import SearchInterrupted
    from crg.outputs import write_text_atomic
    from crg.ray_engine import RayConnectError, check_address

    profile = get_profile(config.profile)
    try:
        check_address(config.options.address)  # before any work: nothing listening there is one error in 10 s
        results = run_study(args.out, profile, seeds=config.seeds, runs=study_runs(profile, config.runs),
                            report_only=args.report_only, data=config.data, search=config.search,
                            search_only=config.search_only, recipes_from=config.recipes_from,
                            options=config.options)
    except (RayConnectError, SearchInterrupted, WorkerCodeMismatch) as err:
        raise SystemExit(f"error: {err}") from None
    if not args.report_only:  # the configuration this invocation ran (seeds and runs may grow later); after the
        write_text_atomic(Path(args.out) / CONFIG_FILE, text)  # study accepted its folder, so a refusal keeps it
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


def export(study: str, dest: str) -> int:
    """``--export``: the study's record into ``dest``; safe to call while the study runs."""
    from composer.study.record import export_record

    try:
        done = export_record(study, dest)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    logger.info("exported %s to %s: %d files written, %d unchanged; %d finished runs", study, dest,
                len(done.written), len(done.unchanged), done.finished_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
