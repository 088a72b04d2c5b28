"""The annealed swap optimiser (crg/mcd_optimize.py): incremental state against recomputation, cached single-move
coefficients against crg.divergence's reference, the bounded optimum against brute force, determinism."""

import itertools

import numpy as np
import pytest

from crg.divergence import row_update_coefficients
from crg.mcd import MCDConfig, make_mcd_split, split_divergences
from crg.mcd_optimize import AnnealConfig, _SplitState, anneal_split, penalized_objective
from test_mcd import random_problem


@pytest.mark.parametrize("held_out", [False, True])
def test_moves_and_undos_track_the_exact_divergences_and_undo_restores_every_array(held_out):
    problem = random_problem(21, n=24, v=11, a=6, held_out=held_out)
    state = _SplitState(problem, 0.1, 0.5)
    rng = np.random.default_rng(3)
    for _ in range(300):
        i = int(rng.integers(0, 24))
        before = [x.copy() for tr in (state.comp, state.atom) for x in (tr.t, tr.c, tr.ta, tr.term)]
        scalars = [(tr.u, tr.sum_t, tr.sum_c) for tr in (state.comp, state.atom)]
        saved = state.remove(i) if state.member[i] else state.add(i)
        if rng.random() < 0.4:  # a rejected move: everything back, bit for bit
            state.undo(saved)
            after = [x for tr in (state.comp, state.atom) for x in (tr.t, tr.c, tr.ta, tr.term)]
            assert all(np.array_equal(a, b) for a, b in zip(before, after))
            assert [(tr.u, tr.sum_t, tr.sum_c) for tr in (state.comp, state.atom)] == scalars
        if state.member.any():
            exact = split_divergences(problem, np.flatnonzero(state.member))
            assert (state.comp.divergence(), state.atom.divergence()) == pytest.approx(exact, abs=1e-10)


@pytest.mark.parametrize("held_out", [False, True])
def test_cached_single_move_coefficients_equal_the_reference(held_out):
    problem = random_problem(8, n=30, v=13, a=7, held_out=held_out)
    state = _SplitState(problem, 0.1, 0.5)
    for i in (0, 3, 4, 9, 17, 22):
        state.add(i)
    sign = np.where(state.member, -1.0, 1.0)
    for tracker, rows, alpha in ((state.comp, problem.candidate_compounds, 0.1),
                                 (state.atom, problem.candidate_atoms, 0.5)):
        fast = tracker.single_move_coefficients(sign)
        reference = row_update_coefficients(tracker.t, tracker.c, rows, alpha, eval_sign=sign,
                                            train_sign=-sign * problem.in_train)
        np.testing.assert_allclose(fast, reference, rtol=1e-12, atol=1e-14)
    # and each one is the divergence of the split with that candidate moved, recomputed
    for i in range(30):
        moved = np.flatnonzero(state.member ^ (np.arange(30) == i))
        coef = state.comp.single_move_coefficients(sign)[i]
        assert 1.0 - coef == pytest.approx(split_divergences(problem, moved)[0], abs=1e-10)


def _brute_force(problem, k, bound):
    best = (-1.0, None)
    for members in itertools.combinations(range(problem.num_candidates), k):
        cd, ad = split_divergences(problem, list(members))
        if (bound is None or ad <= bound) and cd > best[0]:
            best = (cd, members)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_annealing_finds_the_bounded_optimum_of_small_problems(seed):
    problem = random_problem(seed, n=12, v=9, a=5)
    k = 4
    rng = np.random.default_rng(seed)
    starts = [("random", rng.permutation(12)[:k]) for _ in range(2)]
    _, unbounded_ad = split_divergences(problem, list(_brute_force(problem, k, None)[1]))
    bound = round(unbounded_ad * 0.7, 6)  # the unbounded optimum is out of bounds
    best_cd, _ = _brute_force(problem, k, bound)
    members, stats = anneal_split(problem, starts, AnnealConfig(steps_per_image=150, restarts=2, seed=seed),
                                  max_atom_divergence=bound, compound_alpha=0.1, atom_alpha=0.5)
    cd, ad = split_divergences(problem, members)
    assert len(set(members.tolist())) == k and stats.feasible and ad <= bound
    assert cd == pytest.approx(best_cd, abs=1e-12)
    assert (stats.compound_after, stats.atom_after) == pytest.approx((cd, ad), abs=1e-12)


def test_an_unreachable_bound_returns_the_closest_split_and_says_so():
    problem = random_problem(5, n=12, v=9, a=5)
    members, stats = anneal_split(problem, [("random", np.arange(4))], AnnealConfig(steps_per_image=100),
                                  max_atom_divergence=0.0, compound_alpha=0.1, atom_alpha=0.5)
    lowest = min(split_divergences(problem, list(m))[1] for m in itertools.combinations(range(12), 4))
    assert not stats.feasible and stats.atom_after == pytest.approx(lowest, abs=1e-12)
    assert penalized_objective(0.3, 0.2, None, 10.0) == 0.3


def test_the_default_split_meets_its_bound_and_is_reproducible():
    problem = random_problem(6, n=40, v=15, a=8, held_out=True)
    config = MCDConfig(num_images=8, seed=2, num_random=10)
    a, b = make_mcd_split(problem, config), make_mcd_split(problem, config)
    assert a.selected.tolist() == b.selected.tolist() and a.compound_divergence == b.compound_divergence
    assert a.max_atom_divergence == max(0.02, round(float(a.random_atom.mean()), 6))
    assert a.atom_divergence <= a.max_atom_divergence and a.anneal.feasible
    exact = split_divergences(problem, a.selected)
    assert (a.compound_divergence, a.atom_divergence) == pytest.approx(exact, abs=1e-12)
    paper = make_mcd_split(problem, MCDConfig(num_images=8, seed=2, num_random=10, max_atom_divergence=None))
    assert paper.anneal is None and paper.unrefined_compound_divergence is None
    assert a.unrefined_compound_divergence == paper.compound_divergence
    # a split of held-out images keeps every primitive of the split seen in the remaining training images
    held = a.selected[problem.in_train[a.selected]]
    left = problem.train_atoms - np.asarray(problem.candidate_atoms[held].sum(0)).ravel()
    used = np.asarray(problem.candidate_atoms[a.selected].sum(0)).ravel() > 0
    assert (left[used] > 0).all()
    # a given number replaces auto; the unbounded optimiser runs when asked for
    fixed = make_mcd_split(problem, MCDConfig(num_images=8, seed=2, num_random=0, max_atom_divergence=0.3))
    assert fixed.max_atom_divergence == 0.3 and fixed.atom_divergence <= 0.3
    free = make_mcd_split(problem, MCDConfig(num_images=8, seed=2, num_random=0, max_atom_divergence=None,
                                             anneal=AnnealConfig(seed=2)))
    assert free.compound_divergence >= max(paper.compound_divergence, a.compound_divergence) - 1e-12
