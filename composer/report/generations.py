"""Did each IL-CLIP generation have enough steps? The spawned agent's recovery, read off the training curve.

IL-CLIP's argument (Zheng et al. 2024, §4.4 and Fig. 3) needs every new language agent to *reach the
alignment of the last generation and start to improve further* within its generation: a cycle too short
for that (their Table 4, "3k steps") only restarts the text tower, and the final model is simply a younger
CLIP. So the study reports, for each generation g >= 1 and seed, the predecessor's final contrastive loss,
how many interaction steps the new agent took to get back to it (None: it never did), and the loss the
generation ended on. A profile's IL schedule tests the paper's claim only where the agents recover well
inside ``t_interact``.

Pure functions over a run's logged ``train_curve`` (``step``, ``contrastive``, ``generation``, ``phase``;
phase 1 = distillation, which trains another loss and is left out), no torch.

>>> curve = {"step": list(range(8)), "contrastive": [4.0, 3.0, 2.0, 0.0, 4.0, 2.5, 1.5, 1.0],
...          "generation": [0, 0, 0, 1, 1, 1, 1, 1], "phase": [0, 0, 0, 1, 2, 2, 2, 2]}
>>> generation_recovery(curve, window=1)
[GenerationRecovery(generation=1, reference=2.0, recovered_after=3, final=1.0, interact_steps=4)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from composer.report.tables import MISSING, Row, format_cell, seed_values, summarize

__all__ = ["GENERATION_ROWS", "GenerationRecovery", "generation_recovery", "loss_at", "render_generation_table"]

DISTILL_PHASE = 1  # composer.models.clip.iterated_learning.PHASES.index("distill"), as the curve logs it

GENERATION_ROWS = (Row("IL-CLIP", "il_clip"), Row("IL-CLIP, cycle x0.5", "il_cycle_short"),
                   Row("IL-CLIP, cycle x2", "il_cycle_long"))


@dataclass(frozen=True)
class GenerationRecovery:
    """One generation's recovery after its spawn (losses: contrastive, mean of the last ``window`` points).

    Attributes:
        generation: >= 1 (generation 0 is the warm-up stage, every later one starts with a spawn).
        reference: the previous generation's final loss (the alignment the new agent has to reach again).
        recovered_after: interaction steps until the new agent's trailing mean loss first reached
            ``reference``; None = not within the generation.
        final: the loss this generation ended on (the last generation's includes the extension).
        interact_steps: the generation's logged interaction steps (the last one's include the extension).
    """

    generation: int
    reference: float
    recovered_after: int | None
    final: float
    interact_steps: int


def generation_recovery(curve: Mapping, window: int = 10) -> list[GenerationRecovery]:
    """Each spawned generation's recovery on one seed's curve (empty for a curve without generations).

    The trailing mean over ``window`` logged points smooths the batch noise; recovery needs a full window,
    so a single lucky batch right after the spawn does not count.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    steps, losses = curve.get("step") or [], curve.get("contrastive") or []
    generations, phases = curve.get("generation") or [], curve.get("phase") or []
    if not generations:  # a run without generations (CLIP, codebook-CLIP)
        return []
    if not (len(steps) == len(losses) == len(generations) == len(phases)):
        raise ValueError(f"train_curve: step, contrastive, generation and phase differ in length "
                         f"({len(steps)}, {len(losses)}, {len(generations)}, {len(phases)})")
    by_gen: dict[int, list[tuple[int, float]]] = {}
    for step, loss, gen, phase in zip(steps, losses, generations, phases):
        if int(phase) != DISTILL_PHASE and loss is not None:
            by_gen.setdefault(int(gen), []).append((int(step), float(loss)))
    out = []
    for g in sorted(by_gen):
        if g == 0 or g - 1 not in by_gen:
            continue
        reference = fmean([v for _, v in by_gen[g - 1][-window:]])
        points = by_gen[g]
        values = [v for _, v in points]
        recovered = None
        for i in range(window - 1, len(points)):
            if fmean(values[i - window + 1:i + 1]) <= reference:
                recovered = points[i][0] - points[0][0] + 1
                break
        out.append(GenerationRecovery(g, reference, recovered, fmean(values[-window:]),
                                      points[-1][0] - points[0][0] + 1))
    return out


def _t_interact(results: Mapping, run: str) -> int | None:
    values = seed_values(results, run, ("config", "il", "t_interact"))
    return values[0] if values else None


def loss_at(curve: Mapping, step: int, window: int = 10) -> float | None:
    """Mean contrastive loss of the last ``window`` logged points at or before ``step`` (None: none logged).

    >>> loss_at({"step": [0, 1, 2, 3], "contrastive": [4.0, 3.0, 2.0, 1.0]}, 2, window=2)
    2.5
    """
    values = [float(v) for s, v in zip(curve.get("step") or [], curve.get("contrastive") or [])
              if s <= step and v is not None]
    return fmean(values[-window:]) if values else None


def _final_steps(curve: Mapping) -> dict[int, int]:
    """generation -> its last logged step."""
    return {int(g): int(s) for s, g in zip(curve.get("step") or [], curve.get("generation") or [])}


def render_generation_table(results: Mapping, rows: Sequence[Row] = GENERATION_ROWS, window: int = 10,
                            baseline: Row | None = Row("CLIP", "clip")) -> str:
    """One line per (run, generation): mean ± std over seeds of the recovery, how many seeds recovered, and
    ``baseline``'s loss (same seed) at the generation's last step: what an agent never reset reached by then."""
    header = ["Run", "generation", "predecessor's final loss", "steps to reach it", "recovered / seeds",
              "final loss"] + ([f"{baseline.label} at that step"] if baseline else [])
    base_curves = {c.get("seed"): c for c in seed_values(results, baseline.run, ("train_curve",))} if baseline else {}
    lines = ["### IL-CLIP generations: does each spawned language agent recover within its cycle?", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    found = False
    for row in rows:
        recovered = [(c, generation_recovery(c, window)) for c in seed_values(results, row.run, ("train_curve",))]
        recovered = [(c, rs) for c, rs in recovered if rs]
        if not recovered:
            continue
        curves, per_seed = [c for c, _ in recovered], [rs for _, rs in recovered]
        ends = [_final_steps(c) for c in curves]  # per seed: generation -> its last logged step
        found = True
        t_interact = _t_interact(results, row.run)
        for g in sorted({r.generation for rs in per_seed for r in rs}):
            recs = [r for rs in per_seed for r in rs if r.generation == g]
            within = [r.recovered_after for r in recs
                      if r.recovered_after is not None and (t_interact is None or r.recovered_after <= t_interact)]
            steps = format_cell(summarize(within), digits=0) if within else MISSING
            cells = [row.label, str(g), format_cell(summarize([r.reference for r in recs]), digits=2), steps,
                     f"{len(within)} / {len(recs)}", format_cell(summarize([r.final for r in recs]), digits=2)]
            if baseline:
                base = [loss_at(base_curves[c.get("seed")], end[g], window) for c, end in zip(curves, ends)
                        if c.get("seed") in base_curves and g in end]
                cells.append(format_cell(summarize([b for b in base if b is not None]), digits=2))
            lines.append("| " + " | ".join(cells) + " |")
    if not found:
        lines.append("| " + " | ".join([MISSING] * len(header)) + " |")
    cycle = "" if not found else f" (t_interact = {_t_interact(results, rows[0].run)} for cycle x1)"
    lines += ["", f"Losses: the contrastive loss, mean of a generation's last {window} logged steps (distillation "
                  f"steps left out). Steps to reach it: interaction steps until the spawned agent's trailing "
                  f"{window}-step mean first reaches its predecessor's final loss, over the seeds that reached it "
                  f"within the generation's t_interact{cycle}; the last generation's final loss includes the "
                  "extension. The last column: the never-reset baseline's loss at the generation's last step "
                  "(same seed). IL-CLIP's claim needs every generation to recover well inside its cycle and to "
                  "learn beyond its predecessor (Zheng et al. 2024, Fig. 3 and Table 4)."]
    return "\n".join(lines) + "\n"

