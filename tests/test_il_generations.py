"""IL-CLIP's generation recovery (composer/report/generations.py) on hand-made training curves, checked
against a direct reading of the curve."""

from __future__ import annotations

import pytest

from composer.report.generations import generation_recovery, loss_at, render_generation_table
from composer.report.tables import Row, render_all


def _curve(segments: list[tuple[int, int, list[float]]], seed: int = 0) -> dict:
    """(generation, phase, losses) segments -> a logged curve, one point per step."""
    curve = {"step": [], "contrastive": [], "generation": [], "phase": [], "seed": seed}
    for gen, phase, losses in segments:
        for v in losses:
            curve["step"].append(len(curve["step"]))
            curve["contrastive"].append(v)
            curve["generation"].append(gen)
            curve["phase"].append(phase)
    return curve


def test_recovery_counts_interaction_steps_until_the_trailing_mean_reaches_the_predecessor():
    warm = [4.0, 3.5, 3.0, 2.0, 2.0]                  # generation 0 ends at mean(2.0, 2.0) = 2.0 (window 2)
    distill = [0.0, 0.0]                             # phase 1: another loss, left out
    gen1 = [4.0, 3.0, 2.5, 1.5, 2.0, 1.0, 1.0]       # trailing pairs: 3.5, 2.75, 2.0 -> reached at its 4th step
    gen2 = [4.0, 3.9, 3.8]                           # never gets back to 1.0
    curve = _curve([(0, 0, warm), (1, 1, distill), (1, 2, gen1), (2, 1, distill), (2, 2, gen2)])
    recs = generation_recovery(curve, window=2)
    assert [r.generation for r in recs] == [1, 2]
    assert recs[0].reference == pytest.approx(2.0)
    assert recs[0].recovered_after == 4
    assert recs[0].final == pytest.approx(1.0)
    assert recs[0].interact_steps == len(gen1)
    assert recs[1].reference == pytest.approx(1.0)
    assert recs[1].recovered_after is None
    assert recs[1].final == pytest.approx((3.9 + 3.8) / 2)


def test_one_lucky_batch_right_after_the_spawn_is_not_a_recovery():
    curve = _curve([(0, 0, [3.0, 2.0, 2.0, 2.0]), (1, 2, [1.0, 4.0, 4.0, 4.0, 1.5, 1.5, 1.5])])
    assert generation_recovery(curve, window=3)[0].recovered_after == 7  # first full window at or below 2.0
    assert generation_recovery(curve, window=1)[0].recovered_after == 1


def test_plain_clip_curves_have_no_generations_and_bad_curves_are_refused():
    clip = {"step": [0, 1, 2], "contrastive": [4.0, 3.0, 2.0]}
    assert generation_recovery(clip) == []
    with pytest.raises(ValueError, match="differ in length"):
        generation_recovery({"step": [0, 1], "contrastive": [1.0], "generation": [0, 0], "phase": [0, 0]})
    with pytest.raises(ValueError, match="window"):
        generation_recovery(clip, window=0)
    assert loss_at(clip, 1, window=5) == pytest.approx(3.5)
    assert loss_at(clip, -1) is None


def test_generation_table_reads_every_seed_and_the_baseline_at_the_same_step():
    def res(seed, reached):
        gen1 = [4.0, 1.0, 1.0] if reached else [4.0, 3.9, 3.9]
        return {"config": {"il": {"t_interact": 3}},
                "train_curve": _curve([(0, 0, [3.0, 2.0]), (1, 2, gen1)], seed=seed)}
    clip = {s: {"train_curve": {"step": list(range(5)), "contrastive": [3.0, 2.0, 1.5, 0.5, 0.5 + s],
                                "seed": s}} for s in (0, 1)}
    results = {"runs": {"il_clip": {"seeds": {"0": res(0, True), "1": res(1, False)}},
                        "clip": {"seeds": {str(s): r for s, r in clip.items()}}}}
    text = render_generation_table(results, rows=(Row("IL-CLIP", "il_clip"),), window=1)
    line = next(ln for ln in text.splitlines() if ln.startswith("| IL-CLIP | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # predecessor 2.0 both seeds; seed 0 reaches it after 2 steps, seed 1 never; final 1.0 / 3.9;
    # CLIP at step 4: 0.5 (seed 0), 1.5 (seed 1)
    assert cells == ["IL-CLIP", "1", "2.00 ± 0.00", "2", "1 / 2", "2.45 ± 2.05", "1.00 ± 0.71"]
    assert "il_generations" in render_all(results)
    empty = render_generation_table({"runs": {}})
    assert "| – |" in empty


def test_the_probe_learning_rate_is_one_setting_of_the_profile_for_every_model():
    from dataclasses import replace

    from composer.study.config import PROFILES

    assert {p.probe_lr for p in PROFILES.values()} == {5e-4}  # not each model's searched rate
    with pytest.raises(ValueError, match="probe_lr"):
        replace(PROFILES["cpu"], probe_lr=0.0)


def test_tables_of_runs_the_study_does_not_plan_are_left_out():
    clip_only = {"study": {"runs": ["clip", "il_clip"]}, "runs": {}}
    keys = set(render_all(clip_only))
    assert {"il_table1", "il_table4", "composer_table2", "il_generations"} <= keys  # each has a CLIP-family row
    assert "composer_table3" not in keys and "composer_table7" not in keys
    assert "composer_table3" in render_all({"runs": {}})  # no plan recorded: every table
