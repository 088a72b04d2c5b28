"""Was a run the study's budget ended still rising? Continue it past the budget and see (issue 31 item 3).

    python benchmarks/plateau_continuation.py --study runs/study_converge --run flat --seeds 0,1,2 \\
        --rising-only --checkpoint 'keep/{run}_seed{seed}' --from-start --out runs/converge_continued

A study trains every model under one budget of positives (the converge profile's 160K), so that no model
gets more data than another; a run the budget stops while its validation still rises (the table's
"plateau: no") reports an under-trained model. This command measures how far from its plateau such a run
was: it resumes the run from its final checkpoint (weights, Adam state, data order, learning curve,
patience counter) and trains ``--extra-positives`` more at the learning rate the schedule ended on (the
schedule in steps is kept: warm-up and /10 points where they were, constant after its end), starting a new
pass over the training captions (Lightning resumes a checkpoint written at the end of training at the next
epoch's start, so the rest of the epoch the budget cut is not seen first), validating
at the study's cadence, stopping by the same patience, then evaluates the best weights with the study's
own evaluation. Everything else is the study's run: recipe (the search's choice), data, validation set.

The result is a supplement, beside and never in the study's tables: the continued model has seen more
data than the others. ``OUT/continuation_RUN.md`` gives each run's best validation within the budget and after
the continuation, the gain over the whole curve's last quarter, how the continuation stopped, and the test
figures before and after; ``OUT/runs/RUN/seedS/`` are ordinary study run folders.

The study deletes a finished run's checkpoints (``checkpoints/``) after its evaluation; pass the run's
final ``checkpoints`` folder kept aside (``--checkpoint``, ``{seed}`` filled in), or run this while the
run's folder still holds it.
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import replace
from pathlib import Path

from crg.outputs import write_text_atomic

logger = logging.getLogger("plateau_continuation")


def longer_budget(profile, model: str, extra_positives: int):
    """``profile`` with a budget ``extra_positives`` larger (whole steps of ``model``'s batch), and the
    extra steps. Its schedules are lengthened by those steps only so that the profile stays valid (every
    schedule spans the budget); training fits the study's own, longer (:func:`longer_schedule`)."""
    from composer.models import registry

    batch = profile.schedules[registry.get(model).schedule_group].batch_size
    if batch is None:
        raise SystemExit(f"error: {profile.name}'s schedule for {model} has no fixed batch size")
    extra_steps = profile.plateau.steps(extra_positives, batch)  # whole steps, as the budget's are counted
    plateau = replace(profile.plateau, max_positives=profile.plateau.max_positives + extra_steps * batch)
    schedules = {group: replace(s, steps=s.steps + extra_steps) if s.steps is not None else s
                 for group, s in profile.schedules.items()}
    il = {**profile.il, "t_extend": profile.il["t_extend"] + extra_steps} if profile.il else profile.il
    return replace(profile, plateau=plateau, schedules=schedules, il=il), extra_steps


def longer_schedule(run, profile, extra_steps: int):
    """``train()``'s ``fit_schedule`` for ``run``: the study's (:func:`composer.study.execute.study_schedule` of
    ``profile``, so the warm-up and /10 steps are bit for bit the study's), running ``extra_steps`` past its
    end at the rate it ended on (the schedule is constant after its last /10)."""
    from composer.study.execute import study_schedule

    fit = study_schedule(run, profile)

    def fit_longer(recipe, steps_per_epoch: int):
        if recipe.il is not None:
            raise SystemExit("error: the CLIP family's schedule has phases: continuing it is not defined here")
        recipe, _, steps = fit(recipe, steps_per_epoch)
        steps += extra_steps
        epochs = -(-steps // steps_per_epoch)  # steps, not epochs, end it: a resumed end-of-training checkpoint
        # is at the next epoch's start (Lightning counts the epoch the budget cut as done)
        return replace(recipe, optim=replace(recipe.optim, epochs=epochs)), -1, steps

    return fit_longer


def moved_checkpoint(src: Path, dst: Path, old_dir: Path, new_dir: Path) -> None:
    """Copy a Lightning checkpoint, pointing its checkpoint callbacks' saved folders at ``new_dir``.

    Why: Lightning's ModelCheckpoint restores its best score only when its folder is the one it saved in;
    from a copy elsewhere the first validation of the continuation would become ``best.ckpt`` even when
    it is below the best within the budget.
    """
    import torch

    from composer.training.checkpoint_io import AtomicCheckpointIO

    ckpt = torch.load(src, map_location="cpu", weights_only=True)

    def moved(value):
        if isinstance(value, str) and value.startswith(str(old_dir)):
            return str(new_dir) + value[len(str(old_dir)):]
        if isinstance(value, dict):
            return {moved(k): moved(v) for k, v in value.items()}
        return value

    ckpt["callbacks"] = {name: moved(state) if name.startswith(("ModelCheckpoint", "StepCheckpoint")) else state
                         for name, state in ckpt.get("callbacks", {}).items()}
    AtomicCheckpointIO().save_checkpoint(ckpt, dst)  # the trainer's own atomic writer


def continue_run(study: Path, out: Path, run_name: str, seed: int, checkpoints: Path | None,
                 extra_positives: int, profile=None) -> dict:
    """Resume ``run_name`` seed ``seed`` of ``study`` from ``checkpoints`` into ``out/runs/...`` with the
    budget ``extra_positives`` larger; returns the study result of the continued run. ``checkpoints``
    None: train the run again from its start (on CPU, Lightning's deterministic training repeats the
    budget's curve; :func:`render` shows whether it did). ``profile``: the study's (None: the named profile
    its ``study.json`` records)."""
    from composer.report.results import ERROR, RESULT, run_folder
    from composer.study.config import get_profile, study_runs
    from composer.study.data import prepare_data
    from composer.study.execute import StudyOptions, execute, run_recipe
    from composer.study.search import read_chosen, with_chosen_recipe
    from composer.training.fit import TrainerOptions, run_settings
    from crg.outputs import prepare_output_dir, release_output_dir

    profile = profile or get_profile(json.loads((study / "study.json").read_text())["profile"]["name"])
    run = with_chosen_recipe(study_runs(profile, [run_name])[0], read_chosen(study))
    longer, extra_steps = longer_budget(profile, run.model, extra_positives)
    directory = run_folder(out, run.name, seed)
    result_path = directory / RESULT
    if result_path.exists():
        return json.loads(result_path.read_text())
    if checkpoints is not None and not (directory / "checkpoints" / "last.ckpt").exists():  # from the checkpoint
        for name in ("last.ckpt", "best.ckpt"):
            if not (checkpoints / name).exists():
                raise SystemExit(f"error: {checkpoints / name} does not exist (the run's final checkpoints)")
        recipe = run_recipe(run, seed, longer)
        prepare_output_dir(directory, command=f"train {run.model}", mode="new",
                           settings=run_settings(recipe, TrainerOptions()))
        release_output_dir(directory)
        (directory / "checkpoints").mkdir(exist_ok=True)
        old_dir = run_folder(study, run.name, seed) / "checkpoints"
        for name in ("best.ckpt", "last.ckpt"):  # last.ckpt last: its presence means the copy is complete
            moved_checkpoint(checkpoints / name, directory / "checkpoints" / name, old_dir,
                             directory / "checkpoints")
    data = prepare_data(profile, study)  # the study's data as it is (nothing is written there)
    # the study's own execute (train, evaluate, record, clean up) with the longer schedule
    logger.info(execute(run, seed, longer, data, out, StudyOptions(),
                        fit_schedule=longer_schedule(run, profile, extra_steps)))
    if not result_path.exists():
        raise SystemExit(f"error: {run.name} seed {seed} failed: its traceback is in {directory / ERROR}")
    return json.loads(result_path.read_text())


def _best_within(curve: list[dict], positives: int) -> float:
    return max(p["metrics"]["R@1"] for p in curve if p["positives"] <= positives)


def same_curve_within(budget_curve: list[dict], continued_curve: list[dict], positives: int) -> bool:
    """Whether the continued run's validations up to ``positives`` are the budget run's (a resumed run
    carries them over; a run trained again from its start repeats them only if training is deterministic)."""
    def within(curve):
        return [(p["positives"], round(p["metrics"]["R@1"], 6)) for p in curve if p["positives"] <= positives]

    return within(budget_curve) == within(continued_curve)


def render(rows: list[dict], budget: int, extra: int) -> str:
    lines = [f"# Continuing runs past the study's budget ({budget:,} + {extra:,} positives)", "",
             "Supplementary: the continued models saw more data than every other run of the study; the study's "
             "tables keep the budget's figures.", "",
             "| run | seed | best val R@1 within the budget | best val R@1 continued (at positives) | "
             "last-quarter gain of the continued curve | continuation stopped by | positives | curve within the "
             "budget as the study's | test R@1 budget -> continued | systematic | MCD |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, b = r["continued"], r["budget"]
        best = c["plateau"]["best"]
        lines.append(
            f"| {r['run']} | {r['seed']} | {_best_within(c['curve'], budget):.1f} | {best['val']['R@1']:.1f} "
            f"({best['positives']:,}) | {c['plateau']['last_quarter_gain']:+.1f} | {c['plateau']['stopped']} | "
            f"{c['plateau']['positives']:,} | "
            f"{'yes' if same_curve_within(b['curve'], c['curve'], budget) else '**no**'} | "
            + " | ".join(f"{b[k]['R@1']:.1f} -> {c[k]['R@1']:.1f}" for k in ("test", "systematic", "mcd")) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", type=Path, required=True, help="the study folder (run_study.py --out)")
    ap.add_argument("--run", required=True, help="the study run to continue (e.g. flat)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--checkpoint", default=None,
                    help="folder with the run's final last.ckpt and best.ckpt, {run} and {seed} filled in "
                         "(default: the run's own checkpoints folder in the study)")
    ap.add_argument("--from-start", action="store_true",
                    help="where that folder does not exist, train the run again from its start to the longer "
                         "budget (the table says whether the curve within the budget repeated)")
    ap.add_argument("--extra-positives", type=int, default=40_000, help="positives past the study's budget")
    ap.add_argument("--rising-only", action="store_true",
                    help="skip the seeds whose study run reached its plateau (stopped by its patience, or "
                         "gaining under 1 point of val R@1 over its last quarter)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from composer.report.convergence import reached_plateau  # the study's plateau table's test

    study, out = args.study.resolve(), args.out.resolve()
    if args.extra_positives < 1:
        raise SystemExit("error: --extra-positives must be >= 1")
    if not (study / "study.json").exists():
        raise SystemExit(f"error: {study} is not a study folder (no study.json)")
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        budget_path = study / "runs" / args.run / f"seed{seed}" / "study_result.json"
        if not budget_path.exists():
            raise SystemExit(f"error: {budget_path} does not exist: the run has not finished in the study")
        budget_run = json.loads(budget_path.read_text())
        if args.rising_only and reached_plateau(budget_run["plateau"]["stopped"],
                                                budget_run["plateau"].get("last_quarter_gain")):
            logger.info("%s seed %d reached its plateau in the study (%s, last-quarter gain %+.1f): skipped",
                        args.run, seed, budget_run["plateau"]["stopped"], budget_run["plateau"]["last_quarter_gain"])
            continue
        ckpts = (Path(args.checkpoint.format(seed=seed, run=args.run)) if args.checkpoint
                 else budget_path.parent / "checkpoints")
        if not ckpts.exists() and not args.from_start:
            raise SystemExit(f"error: {ckpts} does not exist (the run's final checkpoints); --from-start trains "
                             f"the run again from its start")
        ckpts = ckpts.resolve() if ckpts.exists() else None
        continued = continue_run(study, out, args.run, seed, ckpts, args.extra_positives)
        rows.append({"run": args.run, "seed": seed, "budget": budget_run, "continued": continued})
        logger.info("%s seed %d continued: %s", args.run, seed, continued["plateau"]["stopped"])
    if not rows:
        print(f"{args.run}: every seed reached its plateau in the study; nothing to continue")
        return
    budget = rows[0]["budget"]["plateau"]["max_positives"]
    text = render(rows, budget, args.extra_positives)
    write_text_atomic(out / f"continuation_{args.run}.md", text)
    print(text)


if __name__ == "__main__":
    main()
