"""The MCD split as an optimisation: swaps of one image in and one out at fixed size, annealed, restarted.

The paper's procedure ranks candidates once by their leave-one-out change of the pool's divergence and
takes the top ``K``; nothing bounds the atom divergence. Keysers et al. build MCD splits the other way:
maximise the compound divergence *subject to* a small atom divergence. :func:`anneal_split` does that on
any :class:`crg.mcd.MCDProblem`:

* **objective** ``f = CD - penalty * max(0, AD - bound)`` (``CD``, ``AD``: compound and atom divergence of
  the split against training minus its held-out images); the result is the best split seen that meets
  the bound (``AD <= bound``), or, when none did, the one that came closest;
* **moves**: remove a member, add a non-member (keeping every primitive of a held-out split seen in
  training). Proposals are drawn, most of the time, among the best single removals and additions (their
  exact effect on ``f``, for all candidates at once in one O(nnz) pass,
  :func:`crg.divergence.row_update_coefficients`, refreshed every ``refresh_every`` proposals), else
  uniformly;
* **exact incremental evaluation**: a swap changes ``U = sum t^a c^(1-a)`` only on the two rows' nonzeros
  (:class:`_Tracker`, O(row)); a rejected swap is undone by restoring the saved values, so only accepted
  swaps accumulate rounding, which every refresh removes (``U`` recomputed);
* **annealing**: Metropolis acceptance at a temperature falling geometrically from ``temp_start`` to
  ``temp_end`` times the median ``|delta f|`` of the first proposals, so the schedule does not depend on the
  split's size; **restarts** from the paper's top-``K`` and from random sets;
* **budget**: ``steps_per_image * K`` proposals per restart (deterministic for a seed), optionally cut
  by a wall-clock ``time_limit_s`` (then no longer reproducible).

The greedy best-first swaps of :func:`crg.mcd.refine_split` then polish the result to a local optimum.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from crg.mcd import MCDProblem

__all__ = ["AnnealConfig", "AnnealStats", "RestartStats", "anneal_split", "penalized_objective"]

logger = logging.getLogger(__name__)


@dataclass
class AnnealConfig:
    """The annealed swap optimiser (beyond the paper; module docstring)."""

    steps_per_image: int = 10        # proposals per restart = this * K (K = 1,000: 10,000, ~4 s of CPU)
    restarts: int = 3                # the first from the paper's top-K, the others from random sets
    temp_start: float = 1.0          # in units of the median |delta f| of the first proposals: accepts ~1/3 of
    temp_end: float = 0.01           # typical worsening swaps at first, almost none at the end
    penalty: float = 10.0            # f = CD - penalty * (AD - bound)^+: far steeper than CD's trade-off (< 2)
    greedy_fraction: float = 0.8     # share of proposals drawn among the best single moves (the rest uniform)
    pool: int = 32                   # how many of the best removals / additions those draws choose among
    refresh_every: int = 256         # proposals between two O(nnz) refreshes of the single-move gains
    seed: int = 0
    time_limit_s: float | None = None  # wall-clock cap on all restarts (breaks reproducibility when it bites)

    def __post_init__(self):
        if self.steps_per_image < 0 or self.restarts < 1 or self.pool < 1 or self.refresh_every < 1:
            raise ValueError(f"AnnealConfig needs steps_per_image >= 0, restarts >= 1, pool >= 1 and refresh_every "
                             f">= 1, got {self.steps_per_image}, {self.restarts}, {self.pool}, {self.refresh_every}")
        if not 0 < self.temp_end <= self.temp_start:
            raise ValueError(f"need 0 < temp_end <= temp_start, got {self.temp_end} and {self.temp_start}")
        if not 0.0 <= self.greedy_fraction <= 1.0 or self.penalty < 0:
            raise ValueError(f"need greedy_fraction in [0, 1] and penalty >= 0, got {self.greedy_fraction} and "
                             f"{self.penalty}")


@dataclass
class RestartStats:
    """One restart: where it began and the best split it found."""

    start: str                       # "top-k" or "random" (the starting split)
    compound_start: float
    atom_start: float
    compound_best: float
    atom_best: float
    feasible: bool                   # its best split meets the atom bound
    accepted: int                    # swaps accepted
    proposals: int


@dataclass
class AnnealStats:
    """What :func:`anneal_split` did. Divergences are exact (recomputed from the final counts)."""

    compound_before: float           # of the first start (the top-K)
    atom_before: float
    compound_after: float
    atom_after: float
    max_atom_divergence: float | None
    feasible: bool                   # the returned split meets the bound (always, without one)
    best_restart: int
    restarts: list[RestartStats] = field(default_factory=list)
    seconds: float = 0.0


def penalized_objective(compound: float, atom: float, bound: float | None, penalty: float) -> float:
    """``compound - penalty * max(0, atom - bound)`` (just ``compound`` without a bound).

    >>> round(penalized_objective(0.3, 0.12, 0.1, 10.0), 6), penalized_objective(0.3, 0.05, 0.1, 10.0)
    (0.1, 0.3)
    """
    if bound is None:
        return compound
    return compound - penalty * max(0.0, atom - bound)


# ---------------------------------------------------------------------------------------- state
class _Tracker:
    """Train counts ``t`` and eval counts ``c`` of one vocabulary, with ``U = sum t^a c^(1-a)``, updated
    in O(row nonzeros) when an image enters or leaves the split.

    ``term = t^a c^(1-a)`` and ``t^a`` are kept per column, so a move raises only the changed eval counts to
    a power (and the training counts too for a held-out image)."""

    def __init__(self, train: np.ndarray, rows: sp.csr_matrix, in_train: np.ndarray, alpha: float):
        self.rows, self.in_train, self.a = rows, in_train, alpha
        self.t = train.astype(np.float64).copy()
        self.c = np.zeros_like(self.t)
        self.sum_t, self.sum_c = float(self.t.sum()), 0.0
        self.row_of = np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))   # (nnz,) row of each nonzero
        self.row_sums = np.asarray(rows.sum(axis=1)).ravel()                       # (N,)
        self.resync()

    def resync(self) -> None:
        """Recompute ``U`` and the cached powers exactly (removes the rounding accumulated by updates)."""
        self.ta = np.maximum(self.t, 0.0) ** self.a                      # (V,)
        self.term = self.ta * np.maximum(self.c, 0.0) ** (1.0 - self.a)  # (V,)
        self.u = float(np.sum(self.term))

    def move(self, i: int, sign: float) -> tuple:
        """``sign=+1``: image ``i`` enters the split; ``-1``: it leaves. Returns what :meth:`undo` restores."""
        lo, hi = self.rows.indptr[i], self.rows.indptr[i + 1]
        idx, val = self.rows.indices[lo:hi], self.rows.data[lo:hi]
        held = self.in_train[i]
        saved = (idx, self.t[idx] if held else None, self.ta[idx] if held else None, self.c[idx], self.term[idx],
                 self.u, self.sum_t, self.sum_c)
        c_new = saved[3] + sign * val
        s = float(val.sum())
        if held:  # a held-out image leaves training as it enters the split
            t_new = saved[1] - sign * val
            self.t[idx] = t_new
            self.ta[idx] = np.maximum(t_new, 0.0) ** self.a
            self.sum_t -= sign * s
        term = self.ta[idx] * np.maximum(c_new, 0.0) ** (1.0 - self.a)
        self.u += float(np.sum(term - saved[4]))
        self.c[idx] = c_new
        self.term[idx] = term
        self.sum_c += sign * s
        return saved

    def undo(self, saved: tuple) -> None:
        """Put back exactly what :meth:`move` changed (moves are undone in reverse order)."""
        idx, t_old, ta_old, c_old, term_old, self.u, self.sum_t, self.sum_c = saved
        if t_old is not None:
            self.t[idx], self.ta[idx] = t_old, ta_old
        self.c[idx], self.term[idx] = c_old, term_old

    def divergence(self) -> float:
        if self.sum_t <= 0 or self.sum_c <= 0 or self.u <= 0:
            return 1.0
        return 1.0 - self.u / (self.sum_t ** self.a * self.sum_c ** (1.0 - self.a))

    def single_move_coefficients(self, sign: np.ndarray) -> np.ndarray:
        """Chernoff coefficient after each candidate alone moves by ``sign`` (``(N,)`` of -1 / +1), from the
        cached powers: :func:`crg.divergence.row_update_coefficients` with ``train_sign = -sign * in_train``."""
        rows, row_of, sums = self.rows, self.row_of, self.row_sums
        n = rows.shape[0]
        col, val = rows.indices, rows.data
        s = sign[row_of]
        ta = self.ta[col]
        held = self.in_train[row_of]
        if held.any():
            ta = ta.copy()
            ta[held] = np.maximum(self.t[col[held]] - s[held] * val[held], 0.0) ** self.a
        c_new = np.maximum(self.c[col] + s * val, 0.0)
        delta = ta * c_new ** (1.0 - self.a) - self.term[col]                     # (nnz,)
        u = self.u + np.bincount(row_of, weights=delta, minlength=n)              # (N,)
        big_t = self.sum_t - sign * self.in_train * sums
        big_s = self.sum_c + sign * sums
        ok = (big_t > 1e-9) & (big_s > 1e-9) & (u > 0)
        out = np.zeros(n)
        out[ok] = u[ok] / (big_t[ok] ** self.a * big_s[ok] ** (1.0 - self.a))
        return out


class _SplitState:
    """A split under construction: compound and atom trackers and the member mask."""

    def __init__(self, problem: "MCDProblem", compound_alpha: float, atom_alpha: float):
        self.problem = problem
        self.comp = _Tracker(problem.train_compounds, problem.candidate_compounds, problem.in_train, compound_alpha)
        self.atom = _Tracker(problem.train_atoms, problem.candidate_atoms, problem.in_train, atom_alpha)
        self.member = np.zeros(problem.num_candidates, dtype=bool)

    def can_add(self, i: int) -> bool:
        """Adding ``i`` leaves every one of its primitives with a training occurrence."""
        rows = self.problem.candidate_atoms
        lo, hi = rows.indptr[i], rows.indptr[i + 1]
        left = self.atom.t[rows.indices[lo:hi]]
        if self.problem.in_train[i]:
            left = left - rows.data[lo:hi]
        return bool(np.all(left > 0))

    def add(self, i: int) -> tuple:
        saved = (i, self.comp.move(i, +1.0), self.atom.move(i, +1.0))
        self.member[i] = True
        return saved

    def remove(self, i: int) -> tuple:
        saved = (i, self.comp.move(i, -1.0), self.atom.move(i, -1.0))
        self.member[i] = False
        return saved

    def undo(self, saved: tuple) -> None:
        """Reverse one :meth:`add` or :meth:`remove` exactly (the latest first)."""
        i, comp, atom = saved
        self.atom.undo(atom)
        self.comp.undo(comp)
        self.member[i] = not self.member[i]

    def resync(self) -> None:
        self.comp.resync()
        self.atom.resync()


# ---------------------------------------------------------------------------------------- optimiser
def _single_move_gains(state: _SplitState, bound: float | None, penalty: float, f_now: float) -> np.ndarray:
    """Exact change of the objective when each candidate alone leaves (members) or enters (others): ``(N,)``."""
    sign = np.where(state.member, -1.0, 1.0)                                          # (N,)
    cd = 1.0 - state.comp.single_move_coefficients(sign)
    if bound is None:
        return cd - f_now
    ad = 1.0 - state.atom.single_move_coefficients(sign)
    return cd - penalty * np.maximum(0.0, ad - bound) - f_now


def _blocked_additions(state: _SplitState) -> np.ndarray:
    """``(N,)`` True where adding the candidate would leave one of its primitives without training occurrence."""
    problem = state.problem
    atoms = problem.candidate_atoms
    if not problem.in_train.any():
        return np.zeros(problem.num_candidates, dtype=bool)
    row_of = np.repeat(np.arange(atoms.shape[0]), np.diff(atoms.indptr))
    left = state.atom.t[atoms.indices] - (problem.in_train & ~state.member)[row_of] * atoms.data
    return np.bincount(row_of, weights=(left <= 0), minlength=atoms.shape[0]) > 0


def anneal_split(problem: "MCDProblem", starts: Sequence[tuple[str, np.ndarray]], config: AnnealConfig, *,
                 max_atom_divergence: float | None, compound_alpha: float, atom_alpha: float,
                 progress: bool = False) -> tuple[np.ndarray, AnnealStats]:
    """Maximise the compound divergence of a ``K``-image split with its atom divergence bounded.

    Args:
        problem: the count matrices (:class:`crg.mcd.MCDProblem`); every candidate is allowed.
        starts: ``(name, members)`` per restart, each ``(K,)`` candidate indices (the first: the top-K);
            the first ``config.restarts`` are used.
        config: schedule, budget, seed.
        max_atom_divergence: the bound (``None``: maximise the compound divergence alone).
        compound_alpha, atom_alpha: the Chernoff alphas.
        progress: a tqdm bar per restart.

    Returns:
        ``(members, stats)``: the best split's sorted candidate indices (meeting the bound when any split
        seen did) and what happened.
    """
    started = time.perf_counter()
    deadline = None if config.time_limit_s is None else started + config.time_limit_s
    rng = np.random.default_rng(config.seed)
    runs: list[RestartStats] = []
    best_key, best_members, best_restart = None, None, 0
    for r, (name, members) in enumerate(starts[:config.restarts]):
        members = np.asarray(members, dtype=np.int64)
        chosen, run = _anneal_once(problem, members, config, rng, max_atom_divergence, compound_alpha, atom_alpha,
                                   deadline, desc=f"annealing {r + 1}/{min(len(starts), config.restarts)}",
                                   progress=progress)
        run.start = name
        runs.append(run)
        logger.info("annealing restart %d (%s): compound divergence %.4f -> %.4f, atom divergence %.4f -> %.4f "
                    "(%d of %d swaps accepted)", r + 1, name, run.compound_start, run.compound_best, run.atom_start,
                    run.atom_best, run.accepted, run.proposals)
        key = _key(run.compound_best, run.atom_best, max_atom_divergence)
        if best_key is None or key > best_key:
            best_key, best_members, best_restart = key, chosen, r
    if best_members is None:
        raise ValueError("anneal_split needs at least one start")
    cd, ad = _measure(problem, best_members, compound_alpha, atom_alpha)
    feasible = max_atom_divergence is None or ad <= max_atom_divergence
    stats = AnnealStats(runs[0].compound_start, runs[0].atom_start, cd, ad, max_atom_divergence, feasible,
                        best_restart, runs, time.perf_counter() - started)
    return best_members, stats


def _anneal_once(problem: "MCDProblem", members: np.ndarray, config: AnnealConfig, rng: np.random.Generator,
                 bound: float | None, compound_alpha: float, atom_alpha: float, deadline: float | None, *,
                 desc: str, progress: bool) -> tuple[np.ndarray, RestartStats]:
    """One annealing run from ``members``: its best split (sorted indices) and statistics."""
    penalty = config.penalty
    steps = config.steps_per_image * len(members)
    state = _SplitState(problem, compound_alpha, atom_alpha)
    for i in members:
        state.add(int(i))
    state.resync()
    cd, ad = state.comp.divergence(), state.atom.divergence()
    run = RestartStats("", cd, ad, cd, ad, bound is None or ad <= bound, 0, 0)
    best_key, best_member = _key(cd, ad, bound), state.member.copy()
    f = penalized_objective(cd, ad, bound, penalty)
    scale = _Scale()
    top_out: list[int] = []
    top_in: list[int] = []
    outside = np.zeros(0, dtype=np.int64)
    since_refresh = config.refresh_every
    for step in tqdm(range(steps), desc=desc, disable=not progress, mininterval=1.0):
        if since_refresh >= config.refresh_every or not top_out or not top_in:
            if deadline is not None and time.perf_counter() > deadline:
                logger.warning("annealing stopped by its time limit after %d of %d proposals: the split is no "
                               "longer determined by the seed alone", step, steps)
                break
            state.resync()  # drops the rounding of the accepted swaps
            f = penalized_objective(state.comp.divergence(), state.atom.divergence(), bound, penalty)
            gain = _single_move_gains(state, bound, penalty, f)                               # (N,)
            inside = np.flatnonzero(state.member)
            outside = np.flatnonzero(~state.member & ~_blocked_additions(state))
            top_out = inside[np.argsort(-gain[inside], kind="stable")[:config.pool]].tolist()
            top_in = outside[np.argsort(-gain[outside], kind="stable")[:config.pool]].tolist()
            since_refresh = 0
            if not top_in:
                break
        since_refresh += 1
        greedy = rng.random() < config.greedy_fraction
        if greedy:
            i, j = top_out[rng.integers(len(top_out))], top_in[rng.integers(len(top_in))]
        else:
            i, j = int(rng.choice(np.flatnonzero(state.member))), int(outside[rng.integers(len(outside))])
            if state.member[j]:  # entered since the last refresh
                continue
        run.proposals += 1
        out_saved = state.remove(i)
        if not state.can_add(j):
            state.undo(out_saved)
            continue
        in_saved = state.add(j)
        cd, ad = state.comp.divergence(), state.atom.divergence()
        f_new = penalized_objective(cd, ad, bound, penalty)
        scale.observe(abs(f_new - f))
        temp = scale.value * config.temp_start * (config.temp_end / config.temp_start) ** (step / steps)
        if f_new >= f or (temp > 0 and rng.random() < math.exp((f_new - f) / temp)):
            f = f_new
            run.accepted += 1
            for pool, x in ((top_out, i), (top_in, j)):  # the lists hold only members / non-members
                if x in pool:
                    pool.remove(x)
            key = _key(cd, ad, bound)
            if key > best_key:
                best_key, best_member = key, state.member.copy()
        else:
            state.undo(in_saved)
            state.undo(out_saved)
    chosen = np.flatnonzero(best_member)
    run.compound_best, run.atom_best = _measure(problem, chosen, compound_alpha, atom_alpha)
    run.feasible = bound is None or run.atom_best <= bound
    return chosen, run


class _Scale:
    """Median ``|delta f|`` of the first 64 nonzero proposal outcomes (the temperature's unit)."""

    def __init__(self, count: int = 64):
        self.seen: list[float] = []
        self.count = count
        self.value = 0.0

    @property
    def ready(self) -> bool:
        return len(self.seen) >= self.count

    def observe(self, x: float) -> None:
        if x > 0 and not self.ready:
            self.seen.append(x)
            self.value = float(np.median(self.seen))


def _key(cd: float, ad: float, bound: float | None) -> tuple[int, float]:
    """Order of splits: meeting the bound first, then higher CD; among splits missing it, lower AD."""
    if bound is None or ad <= bound:
        return (1, cd)
    return (0, -ad)


def _measure(problem: "MCDProblem", members: np.ndarray, compound_alpha: float, atom_alpha: float
             ) -> tuple[float, float]:
    """``(CD, AD)`` of ``members`` from freshly summed counts (no accumulated rounding)."""
    state = _SplitState(problem, compound_alpha, atom_alpha)
    for i in members:
        state.add(int(i))
    state.resync()
    return state.comp.divergence(), state.atom.divergence()
