"""Maximum-compound-divergence (MCD) evaluation splits from CRG predicates (Zhang et al. 2021, Appendix B).

The procedure, for a training corpus and a pool of candidate images (another corpus, or other
splits of the same one, or the same images: see *held-out candidates* below):

1. **Counts.** Per image, *compounds* are the CRG predicates of its captions, counted over all of
   them (one per composition step, duplicates kept); *atoms* are its primitives, counted once per
   caption that contains them. Both go into sparse image-by-vocabulary matrices over a vocabulary
   shared by train and candidates (templates and primitive texts matched as strings)
   (:func:`build_problem`).
2. **Filter.** Candidates holding a primitive unseen in training are dropped, and so are images
   with no compound at all (no usable caption) (:func:`eligible_candidates`).
3. **Score.** ``Delta_i = CD_i - CD_ALL`` for every remaining candidate at once, in O(nnz)
   (:func:`crg.divergence.leave_one_out_deltas`), with ``CD`` the compound divergence of the pool
   from the full training distribution.
4. **Rank and select.** Candidates are sorted by ``Delta_i`` and the first ``K`` images form the
   split. *Direction*: ``Delta_i < 0`` means removing image ``i`` lowers the pool's divergence, i.e.
   the image is one of those that make the pool diverge, so an MCD split takes the **most negative**
   deltas first (ascending order). The paper's "largest differences" reads as the largest
   ``CD_ALL - CD_i``. When the pool *is* the training corpus (``CD_ALL = 0``), every ``Delta_i >= 0``
   and the first-order argument vanishes; there the second-order term makes the *largest* deltas
   (images with rare compounds) the divergent ones. ``direction="auto"`` (default) therefore
   evaluates both ends exactly and keeps the one with the higher divergence; the report says which.
5. **Windows.** Sliding a ``K``-image window down the ranking gives splits of decreasing divergence;
   for each requested target the window closest to it is taken (Figure 4's 16 splits).
6. **Bound and optimise** (beyond the paper, default): Keysers et al. require a small atom divergence, the
   paper's ranking does not bound it. With ``max_atom_divergence`` set (default ``"auto"``,
   :func:`resolve_atom_bound`), an annealed swap optimiser (:mod:`crg.mcd_optimize`) maximises the
   compound divergence within the bound, restarting from the top-K and from random sets, and greedy
   best-first swaps (:func:`refine_split`) polish the result. ``max_atom_divergence=None`` is the paper's
   procedure (``refine`` adds the greedy swaps alone; ``anneal`` the optimiser without a bound).

**Compound definitions.** ``build_problem(compounds=...)`` counts CRG templates (the paper's), templates with
their arguments' head nouns, or a generated world's logical-form compounds (:mod:`crg.compounds`); the
problem also carries the counts under other definitions (``report``), so every split's divergence is
reported under each.

**Held-out candidates.** A candidate that is also a training image (``in_train``, e.g. a
within-corpus split of all of Flickr30K) leaves training when it is selected: every divergence of a
split is computed against *training minus the split*, and the unseen-primitive rule is checked
against that too (an image is skipped during selection when taking it would leave one of its
primitives with no training occurrence). Scoring (step 3) uses the full training distribution, as
the paper does.

Everything is deterministic for a given input and seed (stable sorts, ``numpy.random.default_rng``), unless
the optimiser's wall-clock limit cuts it short.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from crg.compounds import (
    TEMPLATE, ImageCounts, SemanticAnnotations, check_definition, count_matrices, image_count_matrices,
)
from crg.divergence import (
    ATOM_ALPHA, COMPOUND_ALPHA, chernoff_divergence, leave_one_out_deltas, row_update_coefficients,
)
from crg.graph import ConceptGraph
from crg.mcd_optimize import AnnealConfig, AnnealStats, _SplitState, _Tracker, anneal_split  # noqa: F401 (re-export)

__all__ = [
    "RefineConfig", "MCDConfig", "MCDProblem", "TargetSplit", "RefineStats", "MCDResult", "SplitDivergences",
    "AnnealConfig", "AnnealStats", "image_count_matrices", "build_problem", "eligible_candidates",
    "split_divergences", "divergences_by_definition", "fill_split", "window_curve", "refine_split", "make_mcd_split",
    "parse_target_cds", "resolve_atom_bound", "DIRECTIONS", "AUTO_ATOM_BOUND", "KEYSERS_ATOM_BOUND",
]

logger = logging.getLogger(__name__)

DIRECTIONS = ("auto", "ascending", "descending")
AUTO_ATOM_BOUND = "auto"
KEYSERS_ATOM_BOUND = 0.02  # Keysers et al. 2020 keep the atom divergence of their MCD splits below 0.02


def resolve_atom_bound(bound: float | str | None, random_atom: np.ndarray) -> float | None:
    """The bound a split's atom divergence must meet.

    ``"auto"``: Keysers et al.'s 0.02, unless random same-size sets of the pool (``random_atom``, ``(R,)``)
    already diverge more on average, as when train and candidates are different corpora: then that mean,
    so that the split's atoms differ from training no more than a random selection's do. A number is taken
    as given; ``None`` means no bound.

    >>> resolve_atom_bound("auto", np.array([0.004, 0.006])), resolve_atom_bound("auto", np.array([0.1, 0.12]))
    (0.02, 0.11)
    >>> resolve_atom_bound(0.05, np.array([0.1])), resolve_atom_bound(None, np.array([0.1]))
    (0.05, None)
    """
    if bound is None:
        return None
    if bound == AUTO_ATOM_BOUND:
        if len(random_atom) == 0:
            raise ValueError("the 'auto' atom bound needs random sets to compare with")
        return max(KEYSERS_ATOM_BOUND, round(float(np.mean(random_atom)), 6))
    return float(bound)


# ---------------------------------------------------------------------------------------- configs
@dataclass
class RefineConfig:
    """The optional swap refinement (beyond the paper)."""

    max_rounds: int = 200            # each round recomputes all single-image gains (one O(nnz) pass)
    swaps_per_round: int = 128       # best-removal / best-addition pairs tried per round (most are kept)
    tries_per_removal: int = 4       # additions tried (best first) before a removal is given up
    max_atom_divergence: float | None = None  # reject swaps that push atom divergence above this
    min_gain: float = 1e-9           # a swap must raise the compound divergence by more than this

    def __post_init__(self):
        if self.max_rounds < 0 or self.swaps_per_round < 1 or self.tries_per_removal < 1:
            raise ValueError(f"RefineConfig needs max_rounds >= 0, swaps_per_round >= 1 and tries_per_removal >= 1, "
                             f"got {self.max_rounds}, {self.swaps_per_round} and {self.tries_per_removal}")


@dataclass
class MCDConfig:
    """How to build an MCD split. Sizes and alphas are the paper's (1,000 images, alpha 0.1 / 0.5); the atom
    divergence is bounded as Keysers et al. require (``max_atom_divergence=None`` is the paper's procedure)."""

    num_images: int = 1000           # K: images in the split (the paper: 1,000 images, 5,000 captions)
    direction: str = "auto"          # ranking direction, see the module docstring
    compound_alpha: float = COMPOUND_ALPHA
    atom_alpha: float = ATOM_ALPHA
    num_random: int = 20             # random same-size sets for the baseline
    seed: int = 0                    # seeds the random baseline and the optimiser's draws
    target_cds: tuple[float, ...] = ()  # compound divergences wanted from the sliding window
    window_stride: int = 1           # window step along the ranking (all windows cost one pass anyway)
    refine: RefineConfig | None = None  # greedy swaps alone (the unbounded paper split + refinement)
    progress: bool = False           # tqdm bars for the optimiser
    # the split's atom divergence at most this: a number, AUTO_ATOM_BOUND (Keysers et al.'s 0.02, or a random
    # set's atom divergence when even those exceed it: see resolve_atom_bound) or None (unbounded, the paper)
    max_atom_divergence: float | str | None = "auto"
    # the annealed optimiser; None = AnnealConfig(seed=seed) whenever there is a bound. Given, it runs unbounded too
    anneal: AnnealConfig | None = None

    def __post_init__(self):
        if self.num_images < 1:
            raise ValueError(f"num_images must be >= 1, got {self.num_images}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.num_random < 0 or self.window_stride < 1:
            raise ValueError(f"need num_random >= 0 and window_stride >= 1, got {self.num_random}, "
                             f"{self.window_stride}")
        bad = [t for t in self.target_cds if not 0.0 <= t <= 1.0]
        if bad:
            raise ValueError(f"target compound divergences must lie in [0, 1], got {bad}")
        bound = self.max_atom_divergence
        if bound is not None and bound != AUTO_ATOM_BOUND and not (
                isinstance(bound, (int, float)) and 0.0 <= float(bound) <= 1.0):
            raise ValueError(f"max_atom_divergence must be a number in [0, 1], {AUTO_ATOM_BOUND!r} or None "
                             f"(unbounded), got {bound!r}")

    @property
    def bounded(self) -> bool:
        return self.max_atom_divergence is not None


# ---------------------------------------------------------------------------------------- counts
@dataclass
class MCDProblem:
    """Count matrices of one split problem: the training distributions and the candidate pool.

    Shapes: ``V`` compounds, ``A`` atoms, ``N`` candidates.
    """

    compound_vocab: list[str]            # (V,) predicate templates
    atom_vocab: list[str]                # (A,) primitive texts
    train_compounds: np.ndarray          # (V,) float64 compound counts of all training images
    train_atoms: np.ndarray              # (A,) float64 atom counts of all training images
    candidate_ids: list[str]             # (N,) image ids
    candidate_compounds: sp.csr_matrix   # (N, V) compound counts per candidate image
    candidate_atoms: sp.csr_matrix       # (N, A) atom counts per candidate image
    in_train: np.ndarray                 # (N,) bool: also counted in train_*; leaves training when selected
    definition: str = TEMPLATE           # what a compound is (crg.compounds.COMPOUND_DEFINITIONS)
    # the same candidates counted under other definitions: divergences reported for every split, never optimised
    reported: dict[str, "MCDProblem"] = field(default_factory=dict)

    def __post_init__(self):
        n = len(self.candidate_ids)
        v, a = len(self.compound_vocab), len(self.atom_vocab)
        shapes = {"train_compounds": (self.train_compounds.shape, (v,)), "train_atoms": (self.train_atoms.shape, (a,)),
                  "candidate_compounds": (self.candidate_compounds.shape, (n, v)),
                  "candidate_atoms": (self.candidate_atoms.shape, (n, a)), "in_train": (self.in_train.shape, (n,))}
        bad = {k: s for k, s in shapes.items() if s[0] != s[1]}
        if bad:
            raise ValueError(f"MCDProblem shapes disagree (got, expected): {bad}")
        check_definition(self.definition)
        for name, other in self.reported.items():
            if other.candidate_ids != self.candidate_ids or not np.array_equal(other.in_train, self.in_train):
                raise ValueError(f"the {name!r} counts must cover the same candidates as the {self.definition!r} ones")

    @property
    def num_candidates(self) -> int:
        return len(self.candidate_ids)

    def subset(self, rows: np.ndarray) -> "MCDProblem":
        """The same problem restricted to candidate ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        return MCDProblem(self.compound_vocab, self.atom_vocab, self.train_compounds, self.train_atoms,
                          [self.candidate_ids[i] for i in rows], self.candidate_compounds[rows],
                          self.candidate_atoms[rows], self.in_train[rows], self.definition,
                          {name: other.subset(rows) for name, other in self.reported.items()})

    @property
    def definitions(self) -> list[str]:
        """The definition optimised, then the reported ones."""
        return [self.definition, *self.reported]

    def counts(self, definition: str) -> "MCDProblem":
        """This problem's counts under ``definition`` (itself, or one of :attr:`reported`)."""
        if definition == self.definition:
            return self
        if definition not in self.reported:
            raise ValueError(f"no {definition!r} counts: this problem has {self.definitions}")
        return self.reported[definition]


def _pad(m: sp.csr_matrix, width: int) -> sp.csr_matrix:
    m = sp.csr_matrix(m)
    if m.shape[1] == width:
        return m
    return sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], width))


def build_problem(train_graph: ConceptGraph, candidate_graph: ConceptGraph, *,
                  train_images: Sequence[int] | None = None,
                  candidate_images: Sequence[int] | None = None, compounds: str = TEMPLATE,
                  report: Sequence[str] = (), annotations: SemanticAnnotations | None = None,
                  saved_counts: tuple = (None, None)) -> MCDProblem:
    """Count matrices for training images ``train_images`` and candidates ``candidate_images``.

    Args:
        train_graph: graph holding the training images.
        candidate_graph: graph holding the candidates; pass the *same object* as ``train_graph`` when
            both come from one corpus: a candidate that is also a training image is then marked
            ``in_train`` and held out of training when selected.
        train_images, candidate_images: image indices into the graphs (``None`` = all images).
        compounds: the compound definition the split is made for (:mod:`crg.compounds`; default: the CRG's
            templates, the paper's).
        report: further definitions counted for the report only (``MCDProblem.reported``).
        annotations: the captions' logical-form compounds and atoms, needed for ``semantic``
            (:func:`crg.compounds.semantic_annotations`).
        saved_counts: ``(train, candidate)`` :class:`crg.mcd_counts.GraphCounts` saved with the graphs (or
            ``None``): the ``template`` counts are read from them instead of the graphs' caption arrays (the same
            matrices).
    """
    check_definition(compounds)
    problem = _build_counts(train_graph, candidate_graph, train_images, candidate_images, compounds, annotations,
                            saved_counts)
    for name in report:
        if check_definition(name) != compounds and name not in problem.reported:
            problem.reported[name] = _build_counts(train_graph, candidate_graph, train_images, candidate_images,
                                                   name, annotations, saved_counts)
    return problem


def _graph_counts(graph: ConceptGraph, definition: str, compound_index: dict[str, int], atom_index: dict[str, int],
                  annotations: SemanticAnnotations | None, saved) -> ImageCounts:
    if definition == TEMPLATE and saved is not None:
        from crg.mcd_counts import template_matrices

        return ImageCounts(*template_matrices(saved, graph.predicate_templates, graph.concept_texts,
                                              graph.concept_kinds, compound_index, atom_index))
    return count_matrices(graph, definition, compound_index, atom_index, annotations)


def _build_counts(train_graph: ConceptGraph, candidate_graph: ConceptGraph, train_images, candidate_images,
                  definition: str, annotations: SemanticAnnotations | None, saved_counts=(None, None)) -> MCDProblem:
    compound_index: dict[str, int] = {}
    atom_index: dict[str, int] = {}
    train = _graph_counts(train_graph, definition, compound_index, atom_index, annotations, saved_counts[0])
    shared = candidate_graph is train_graph
    cand = train if shared else _graph_counts(candidate_graph, definition, compound_index, atom_index, annotations,
                                              saved_counts[1])
    t_comp, t_atom, c_comp, c_atom = train.compounds, train.atoms, cand.compounds, cand.atoms
    v, a = len(compound_index), len(atom_index)
    t_rows = np.arange(len(train_graph.image_ids)) if train_images is None else np.asarray(train_images, np.int64)
    c_rows = (np.arange(len(candidate_graph.image_ids)) if candidate_images is None
              else np.asarray(candidate_images, np.int64))
    in_train = np.isin(c_rows, t_rows) if shared else np.zeros(len(c_rows), dtype=bool)
    return MCDProblem(
        compound_vocab=list(compound_index), atom_vocab=list(atom_index),
        train_compounds=np.asarray(_pad(t_comp, v)[t_rows].sum(axis=0), dtype=np.float64).ravel(),
        train_atoms=np.asarray(_pad(t_atom, a)[t_rows].sum(axis=0), dtype=np.float64).ravel(),
        candidate_ids=[candidate_graph.image_ids[i] for i in c_rows],
        candidate_compounds=_pad(c_comp, v)[c_rows], candidate_atoms=_pad(c_atom, a)[c_rows],
        in_train=in_train, definition=definition)


# ---------------------------------------------------------------------------------------- filtering
def eligible_candidates(problem: MCDProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which candidates may enter a split.

    Returns ``(eligible, unseen_atom, no_compound)``, three ``(N,)`` bool masks: a candidate is dropped
    when one of its primitives has no training occurrence outside the candidate itself
    (``unseen_atom``), or when it has no compound at all (``no_compound``, e.g. every caption skipped).
    """
    atoms = problem.candidate_atoms
    row_of = np.repeat(np.arange(atoms.shape[0]), np.diff(atoms.indptr))          # (nnz,)
    left = problem.train_atoms[atoms.indices] - problem.in_train[row_of] * atoms.data
    unseen = np.bincount(row_of, weights=(left <= 0), minlength=atoms.shape[0]) > 0
    no_compound = np.diff(problem.candidate_compounds.indptr) == 0
    return ~unseen & ~no_compound, unseen, no_compound & ~unseen


# ---------------------------------------------------------------------------------------- evaluation
def split_divergences(problem: MCDProblem, members: Sequence[int], *, compound_alpha: float = COMPOUND_ALPHA,
                      atom_alpha: float = ATOM_ALPHA) -> tuple[float, float]:
    """Exact ``(compound, atom)`` divergence of the split ``members`` (candidate indices).

    The eval distribution sums the members' counts; the training distribution is all training
    counts minus the members that are training images (held out).
    """
    members = np.asarray(members, dtype=np.int64)
    held = members[problem.in_train[members]]
    out = []
    for train, rows, alpha in ((problem.train_compounds, problem.candidate_compounds, compound_alpha),
                               (problem.train_atoms, problem.candidate_atoms, atom_alpha)):
        eval_counts = np.asarray(rows[members].sum(axis=0)).ravel()
        train_counts = train - np.asarray(rows[held].sum(axis=0)).ravel() if len(held) else train
        out.append(chernoff_divergence(train_counts, eval_counts, alpha))
    return out[0], out[1]


@dataclass
class SplitDivergences:
    """A split's compound and atom divergence from training under one compound definition."""

    compound: float
    atom: float


def divergences_by_definition(problem: MCDProblem, members: Sequence[int], *, compound_alpha: float = COMPOUND_ALPHA,
                              atom_alpha: float = ATOM_ALPHA) -> dict[str, SplitDivergences]:
    """:func:`split_divergences` of ``members`` under every definition ``problem`` counts, the optimised one first."""
    return {name: SplitDivergences(*split_divergences(problem.counts(name), members, compound_alpha=compound_alpha,
                                                      atom_alpha=atom_alpha))
            for name in problem.definitions}


def fill_split(problem: MCDProblem, order: np.ndarray, start: int, k: int) -> np.ndarray:
    """The first ``k`` candidates of ``order[start:]`` that keep every selected primitive seen in training.

    Without held-out candidates nothing is skipped (eligibility already guarantees it), so this is
    ``order[start:start + k]``. Returns fewer than ``k`` indices only if ``order`` runs out.
    """
    order = np.asarray(order, dtype=np.int64)
    if not problem.in_train.any():
        return order[start:start + k].copy()
    t = problem.train_atoms.copy()
    rows = problem.candidate_atoms
    taken = []
    for i in order[start:]:
        lo, hi = rows.indptr[i], rows.indptr[i + 1]
        idx, val = rows.indices[lo:hi], rows.data[lo:hi]
        if problem.in_train[i]:
            if np.all(t[idx] - val > 0):
                t[idx] -= val
                taken.append(i)
        elif np.all(t[idx] > 0):
            taken.append(i)
        if len(taken) == k:
            break
    return np.asarray(taken, dtype=np.int64)


def _window_divergences(train: np.ndarray, rows: sp.csr_matrix, in_train: np.ndarray, order: np.ndarray,
                        k: int, alpha: float) -> np.ndarray:
    """Divergence of every window ``order[s:s+k]``, ``s = 0 .. n-k``, in O(nnz log nnz), no Python loop.

    Each nonzero ``(rank r, column j, count v)`` of the reordered rows is an *event*: it enters the
    window at ``s = max(r-k+1, 0)`` and leaves at ``s = r+1``. Sorting the events by (column, s), a
    per-column running sum gives the window count of that column just before and after each event, so
    each event's change of ``U = sum_j t_j^a c_j^(1-a)`` is known; ``U`` of window ``s`` is the running
    total of those changes up to ``s``. Held-out rows also leave the training counts ``t``.
    """
    n = len(order)
    n_win = n - k + 1
    r_rows = rows[order]                                                  # (n, V), rank order
    rank = np.repeat(np.arange(n), np.diff(r_rows.indptr))                # (nnz,)
    held = in_train[order][rank].astype(np.float64)                       # (nnz,) 1 = leaves training
    enter = np.maximum(rank - k + 1, 0)
    leave = rank + 1
    gone = leave < n_win                                                  # leaves before the last window
    s = np.concatenate([enter, leave[gone]])                              # (E,) window index of the event
    col = np.concatenate([r_rows.indices, r_rows.indices[gone]])
    v = np.concatenate([r_rows.data, -r_rows.data[gone]])                 # (E,) change of the eval count
    h = np.concatenate([held, held[gone]]) * v                            # (E,) change of the held-out count
    ev = np.lexsort((s, col))
    s, col, v, h = s[ev], col[ev], v[ev], h[ev]
    first = np.ones(len(col), dtype=bool)                                 # first event of each column
    first[1:] = col[1:] != col[:-1]
    group_start = np.flatnonzero(first)
    group_of = np.cumsum(first) - 1

    def running(x):  # per-column running sum, after each event
        cs = np.cumsum(x)
        base = (cs - x)[group_start]
        return cs - base[group_of]

    c_after, d_after = running(v), running(h)
    c_before, d_before = c_after - v, d_after - h
    t = train[col]
    a = alpha

    def term(c, d):
        return np.maximum(t - d, 0.0) ** a * np.maximum(c, 0.0) ** (1.0 - a)

    du = term(c_after, d_after) - term(c_before, d_before)              # (E,)
    u = np.cumsum(np.bincount(s, weights=du, minlength=n_win))            # (W,)
    big_s = np.cumsum(np.bincount(s, weights=v, minlength=n_win))
    big_t = train.sum() - np.cumsum(np.bincount(s, weights=h, minlength=n_win))
    ok = (big_s > 1e-9) & (big_t > 1e-9) & (u > 0)
    out = np.ones(n_win)
    out[ok] = 1.0 - u[ok] / (big_t[ok] ** a * big_s[ok] ** (1.0 - a))
    return out


def window_curve(problem: MCDProblem, order: np.ndarray, k: int, *, stride: int = 1,
                 compound_alpha: float = COMPOUND_ALPHA, atom_alpha: float = ATOM_ALPHA
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compound and atom divergence of the windows ``order[s:s+k]`` for ``s = 0, stride, ...``.

    All windows at once from the nonzeros (see :func:`_window_divergences`), so the scan costs
    O(nnz log nnz) rather than O(windows x k). Windows are contiguous (the held-out primitive check of
    :func:`fill_split` is not applied here); held-out candidates leave training as they enter a window.

    Returns:
        ``(starts, compound, atom)``, each ``(W,)``.
    """
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    if k > n:
        raise ValueError(f"window of {k} images is longer than the ranking ({n} images)")
    starts = np.arange(0, n - k + 1, stride)
    comp = _window_divergences(problem.train_compounds, problem.candidate_compounds, problem.in_train, order, k,
                               compound_alpha)
    atom = _window_divergences(problem.train_atoms, problem.candidate_atoms, problem.in_train, order, k, atom_alpha)
    return starts, comp[starts], atom[starts]


# ---------------------------------------------------------------------------------------- refinement
@dataclass
class RefineStats:
    """What the swap refinement did."""

    compound_before: float
    compound_after: float
    atom_before: float
    atom_after: float
    swaps: int
    rounds: int
    seconds: float


def refine_split(problem: MCDProblem, members: np.ndarray, config: RefineConfig, *,
                 compound_alpha: float = COMPOUND_ALPHA, atom_alpha: float = ATOM_ALPHA,
                 progress: bool = False) -> tuple[np.ndarray, RefineStats]:
    """Raise the compound divergence of ``members`` at fixed size by swapping images in and out.

    Each round computes, for every candidate at once (:func:`crg.divergence.row_update_coefficients`,
    one pass over the nonzeros), the exact divergence after removing it (members) or adding it
    (others); then, best removals first, it removes an image and tries the best remaining additions
    (up to ``tries_per_removal``) with O(row) incremental updates, keeping the first swap that raises
    the divergence by more than ``min_gain`` (with atom divergence within ``max_atom_divergence``).
    Stops when a round keeps no swap.

    Returns:
        ``(members, stats)``: the refined member indices (sorted) and what happened.
    """
    started = time.perf_counter()
    state = _SplitState(problem, compound_alpha, atom_alpha)
    for i in members:
        state.add(int(i))
    state.comp.resync()
    state.atom.resync()
    before_c, before_a = state.comp.divergence(), state.atom.divergence()
    rows = problem.candidate_compounds
    atoms = problem.candidate_atoms
    atom_row_of = np.repeat(np.arange(atoms.shape[0]), np.diff(atoms.indptr))
    swaps = rounds = 0
    for rounds in tqdm(range(1, config.max_rounds + 1), desc="refining", disable=not progress, mininterval=1.0):
        sign = np.where(state.member, -1.0, 1.0)                       # (N,) members leave, others enter
        coef = row_update_coefficients(state.comp.t, state.comp.c, rows, compound_alpha,
                                       eval_sign=sign, train_sign=-sign * problem.in_train)
        gain = (1.0 - coef) - state.comp.divergence()                  # (N,) divergence change of the move
        # additions must keep their primitives seen in training (held-out candidates)
        left = state.atom.t[atoms.indices] - (problem.in_train & ~state.member)[atom_row_of] * atoms.data
        blocked = np.bincount(atom_row_of, weights=(left <= 0), minlength=atoms.shape[0]) > 0
        m = config.swaps_per_round
        outs = np.flatnonzero(state.member)
        outs = outs[np.argsort(-gain[outs], kind="stable")][:m]
        ins = np.flatnonzero(~state.member & ~blocked)
        ins = ins[np.argsort(-gain[ins], kind="stable")][:m]
        kept = 0
        pending = [int(j) for j in ins]
        for i in outs:
            i = int(i)
            current = state.comp.divergence()
            state.remove(i)
            for j in pending[:config.tries_per_removal]:
                if not state.can_add(j):
                    continue
                state.add(j)
                ok = state.comp.divergence() > current + config.min_gain
                if ok and config.max_atom_divergence is not None:
                    ok = state.atom.divergence() <= config.max_atom_divergence
                if ok:
                    kept += 1
                    pending.remove(j)
                    break
                state.remove(j)
            else:
                state.add(i)  # no addition paid for this removal: put it back
        swaps += kept
        state.comp.resync()
        state.atom.resync()
        if kept == 0:
            break
    refined = np.flatnonzero(state.member)
    after_c, after_a = split_divergences(problem, refined, compound_alpha=compound_alpha, atom_alpha=atom_alpha)
    stats = RefineStats(before_c, after_c, before_a, after_a, swaps, rounds, time.perf_counter() - started)
    logger.info("refinement: compound divergence %.4f -> %.4f with %d swaps in %d rounds (%.1f s)",
                before_c, after_c, swaps, rounds, stats.seconds)
    return refined, stats


# ---------------------------------------------------------------------------------------- procedure
@dataclass
class TargetSplit:
    """The split closest to a requested compound divergence (a window of the ranking)."""

    target: float
    window_start: int                  # rank of the window's first image
    window_compound_divergence: float  # of the contiguous window (the scan's value)
    compound_divergence: float         # of the split actually taken (equal without held-out images)
    atom_divergence: float
    members: np.ndarray                # (K,) candidate indices
    reachable: bool                    # target within the range the scan covers
    divergences: dict[str, SplitDivergences] = field(default_factory=dict)  # per compound definition


@dataclass
class MCDResult:
    """Everything :func:`make_mcd_split` found. Candidate indices refer to ``problem``'s rows."""

    selected: np.ndarray               # (K,) candidate indices of the split, in ranking order
    compound_divergence: float
    atom_divergence: float
    direction: str                     # the ranking direction used (ascending = most negative Delta first)
    opposite_compound_divergence: float  # top-K of the other direction, for the record
    pool_compound_divergence: float    # CD_ALL: all eligible candidates vs training
    deltas: np.ndarray                 # (N,) Delta_i, NaN for dropped candidates
    eligible: np.ndarray               # (N,) bool
    num_dropped_unseen_atoms: int
    num_dropped_no_compounds: int
    order: np.ndarray                  # (M,) eligible candidate indices in ranking order
    curve_starts: np.ndarray           # (W,) window start ranks
    curve_compound: np.ndarray         # (W,) window compound divergences
    curve_atom: np.ndarray             # (W,) window atom divergences
    random_compound: np.ndarray        # (R,) compound divergences of random same-size sets
    random_atom: np.ndarray            # (R,)
    targets: list[TargetSplit] = field(default_factory=list)
    unrefined_compound_divergence: float | None = None  # the paper's top-K, before any optimiser
    refine: RefineStats | None = None
    seconds: dict = field(default_factory=dict)
    definition: str = "template"       # the compound definition optimised
    divergences: dict[str, SplitDivergences] = field(default_factory=dict)  # the split's, per definition
    random_divergences: dict[str, SplitDivergences] = field(default_factory=dict)  # mean of the random sets
    max_atom_divergence: float | None = None  # the bound in force (resolved), None = unbounded
    unrefined_atom_divergence: float | None = None
    anneal: AnnealStats | None = None


def parse_target_cds(spec: str | None) -> tuple[float, ...] | str:
    """``"0.15,0.17"`` -> ``(0.15, 0.17)``; ``"0.15:max:16"`` is kept as a spec resolved after the scan.

    >>> parse_target_cds("0.15, 0.2")
    (0.15, 0.2)
    >>> parse_target_cds("0.15:max:16")
    '0.15:max:16'
    >>> parse_target_cds(None)
    ()
    """
    if not spec:
        return ()
    spec = spec.strip()
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 3 or parts[1] != "max" or not parts[2].isdigit():
            raise ValueError(f"--target-cds {spec!r}: use a comma list (0.15,0.17) or LOW:max:COUNT (0.15:max:16)")
        float(parts[0])
        return spec
    try:
        return tuple(float(x) for x in spec.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--target-cds {spec!r}: expected numbers separated by commas, e.g. 0.15,0.17") from None


def _resolve_targets(spec, curve: np.ndarray) -> tuple[float, ...]:
    if isinstance(spec, str):
        low, _, count = spec.split(":")
        return tuple(float(x) for x in np.linspace(float(low), float(curve.max()), int(count)))
    return tuple(spec)


def make_mcd_split(problem: MCDProblem, config: MCDConfig | None = None, *,
                   target_spec: str | None = None) -> MCDResult:
    """Run the whole procedure (module docstring) on ``problem``.

    Args:
        problem: count matrices from :func:`build_problem`.
        config: sizes, direction, seed, targets, refinement.
        target_spec: a ``LOW:max:COUNT`` target list (see :func:`parse_target_cds`); overrides
            ``config.target_cds`` when given.
    """
    config = config or MCDConfig()
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    ca, aa = config.compound_alpha, config.atom_alpha
    eligible, unseen, no_comp = eligible_candidates(problem)
    keep = np.flatnonzero(eligible)
    k = config.num_images
    if len(keep) == 0:
        raise ValueError(f"no candidate image is eligible: of {problem.num_candidates}, {int(unseen.sum())} hold a "
                         f"primitive unseen in training and {int(no_comp.sum())} no compound; the candidates must "
                         f"share a vocabulary with the training corpus (check --candidates and the splits)")
    if len(keep) < k:
        raise ValueError(f"only {len(keep)} of {problem.num_candidates} candidates remain after dropping "
                         f"{int(unseen.sum())} with primitives unseen in training and {int(no_comp.sum())} "
                         f"without compounds; ask for --num-images <= {len(keep)}")
    sub = problem.subset(keep)
    logger.info("%d candidates: %d dropped for unseen primitives, %d without compounds, %d eligible",
                problem.num_candidates, int(unseen.sum()), int(no_comp.sum()), len(keep))

    deltas_sub = leave_one_out_deltas(problem.train_compounds, sub.candidate_compounds, ca)
    pool = np.asarray(sub.candidate_compounds.sum(axis=0)).ravel()
    pool_cd = chernoff_divergence(problem.train_compounds, pool, ca)
    seconds["score"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    asc = np.argsort(deltas_sub, kind="stable")          # most negative Delta first
    desc = np.argsort(-deltas_sub, kind="stable")        # largest Delta first
    ends = {}
    for name, order in (("ascending", asc), ("descending", desc)):
        members = fill_split(sub, order, 0, k)
        ends[name] = (order, members, *split_divergences(sub, members, compound_alpha=ca, atom_alpha=aa))
    if config.direction == "auto":
        direction = max(ends, key=lambda d: ends[d][2])
    else:
        direction = config.direction
    other = "descending" if direction == "ascending" else "ascending"
    order, selected, cd, ad = ends[direction]
    logger.info("pool CD_ALL %.4f; top-%d compound divergence %.4f (%s Delta), %.4f the other way",
                pool_cd, k, cd, direction, ends[other][2])
    seconds["select"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    starts, curve_c, curve_a = window_curve(sub, order, k, stride=config.window_stride, compound_alpha=ca,
                                            atom_alpha=aa)
    seconds["windows"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    targets = []
    spec = target_spec if target_spec else config.target_cds
    lo, hi = float(curve_c.min()), float(curve_c.max())
    for target in _resolve_targets(spec, curve_c):
        w = int(np.argmin(np.abs(curve_c - target)))
        members = fill_split(sub, order, int(starts[w]), k)
        tcd, tad = split_divergences(sub, members, compound_alpha=ca, atom_alpha=aa)
        reachable = lo - 5e-3 <= target <= hi + 5e-3
        if not reachable:
            logger.warning("target compound divergence %.3f is outside the range the ranking covers "
                           "[%.3f, %.3f]; taking the closest window", target, lo, hi)
        targets.append(TargetSplit(float(target), int(starts[w]), float(curve_c[w]), tcd, tad, members, reachable))
    seconds["targets"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    random_sets = [fill_split(sub, rng.permutation(len(keep)), 0, k) for _ in range(config.num_random)]
    random_div = [divergences_by_definition(sub, members, compound_alpha=ca, atom_alpha=aa) for members in random_sets]
    rand_c = np.array([d[sub.definition].compound for d in random_div])
    rand_a = np.array([d[sub.definition].atom for d in random_div])
    random_mean = {name: SplitDivergences(float(np.mean([d[name].compound for d in random_div])),
                                          float(np.mean([d[name].atom for d in random_div])))
                   for name in sub.definitions} if random_div else {}
    bound = None
    if config.bounded:
        reference = rand_a
        if len(reference) == 0 and config.max_atom_divergence == AUTO_ATOM_BOUND:  # no baseline asked for
            ref_rng = np.random.default_rng(config.seed)
            reference = np.array([split_divergences(sub, fill_split(sub, ref_rng.permutation(len(keep)), 0, k),
                                                    compound_alpha=ca, atom_alpha=aa)[1] for _ in range(20)])
        bound = resolve_atom_bound(config.max_atom_divergence, reference)
    seconds["random"] = time.perf_counter() - t4

    unrefined, unrefined_atom, refine_stats, anneal_stats = None, None, None, None
    anneal_config = config.anneal if config.anneal is not None else (AnnealConfig(seed=config.seed) if config.bounded
                                                                     else None)
    if anneal_config is not None or config.refine is not None:
        unrefined, unrefined_atom = cd, ad
        t5 = time.perf_counter()
        current = selected
        if anneal_config is not None:
            start_rng = np.random.default_rng([anneal_config.seed, 1])
            anneal_starts = [("top-k", selected)] + [
                ("random", fill_split(sub, start_rng.permutation(len(keep)), 0, k))
                for _ in range(anneal_config.restarts - 1)]
            current, anneal_stats = anneal_split(sub, anneal_starts, anneal_config, max_atom_divergence=bound,
                                                 compound_alpha=ca, atom_alpha=aa, progress=config.progress)
            seconds["anneal"] = anneal_stats.seconds
        polish = config.refine or RefineConfig()
        if bound is not None:
            polish = RefineConfig(polish.max_rounds, polish.swaps_per_round, polish.tries_per_removal, bound,
                                  polish.min_gain)
        refined, refine_stats = refine_split(sub, current, polish, compound_alpha=ca, atom_alpha=aa,
                                             progress=config.progress)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        selected = refined[np.argsort(rank[refined], kind="stable")]
        cd, ad = refine_stats.compound_after, refine_stats.atom_after
        seconds["refine"] = refine_stats.seconds
        seconds["optimise"] = time.perf_counter() - t5
        if bound is not None and ad > bound:
            logger.warning("no split found meets the atom bound %.4f: the closest has atom divergence %.4f "
                           "(compound %.4f); raise --max-atom-divergence or the optimiser's budget", bound, ad, cd)
    if bound is not None and anneal_config is None and ad > bound:
        logger.warning("the split's atom divergence %.4f exceeds the bound %.4f (no optimiser ran)", ad, bound)
    divergences = divergences_by_definition(sub, selected, compound_alpha=ca, atom_alpha=aa)
    for t in targets:
        t.divergences = divergences_by_definition(sub, t.members, compound_alpha=ca, atom_alpha=aa)
    seconds["total"] = time.perf_counter() - t0

    deltas = np.full(problem.num_candidates, np.nan)
    deltas[keep] = deltas_sub
    for t in targets:
        t.members = keep[t.members]
    return MCDResult(
        selected=keep[selected], compound_divergence=cd, atom_divergence=ad, direction=direction,
        opposite_compound_divergence=ends[other][2], pool_compound_divergence=pool_cd, deltas=deltas,
        eligible=eligible, num_dropped_unseen_atoms=int(unseen.sum()), num_dropped_no_compounds=int(no_comp.sum()),
        order=keep[order], curve_starts=starts, curve_compound=curve_c, curve_atom=curve_a,
        random_compound=rand_c, random_atom=rand_a, targets=targets, unrefined_compound_divergence=unrefined,
        refine=refine_stats, seconds=seconds, definition=sub.definition, divergences=divergences,
        random_divergences=random_mean, max_atom_divergence=bound, unrefined_atom_divergence=unrefined_atom,
        anneal=anneal_stats)


# ---------------------------------------------------------------------------------------- outputs
def result_summary(result: MCDResult, problem: MCDProblem, captions_per_candidate: Sequence[int]) -> dict:
    """The ``report.json`` body: the split's divergences and sizes, the baseline, targets and timings.

    ``captions_per_candidate`` (``(N,)``) counts each candidate's captions in the corpus (all of them,
    including any the CRG builder skipped), for ``num_captions``.
    """
    caps = np.asarray(captions_per_candidate, dtype=np.int64)

    def r(x):
        return None if x is None else round(float(x), 6)

    out = {
        "compound_divergence": r(result.compound_divergence),
        "atom_divergence": r(result.atom_divergence),
        "num_images": int(len(result.selected)),
        "num_captions": int(caps[result.selected].sum()),
        "num_dropped_unseen_atoms": result.num_dropped_unseen_atoms,
        "random_compound_divergence": r(result.random_compound.mean()) if len(result.random_compound) else None,
        "random_compound_divergence_std": r(result.random_compound.std()) if len(result.random_compound) else None,
        "random_atom_divergence": r(result.random_atom.mean()) if len(result.random_atom) else None,
        "num_random_sets": int(len(result.random_compound)),
        "num_candidates": problem.num_candidates,
        "num_dropped_no_compounds": result.num_dropped_no_compounds,
        "num_eligible": int(result.eligible.sum()),
        "num_held_out_from_train": int(problem.in_train[result.selected].sum()),
        "ranking_direction": result.direction,
        "ranking_note": ("ascending = most negative Delta_i = CD_i - CD_ALL first (images whose removal "
                         "lowers the divergence); descending = largest first"),
        "opposite_direction_compound_divergence": r(result.opposite_compound_divergence),
        "pool_compound_divergence": r(result.pool_compound_divergence),
        "max_window_compound_divergence": r(result.curve_compound.max()),
        "min_window_compound_divergence": r(result.curve_compound.min()),
        "num_compounds": len(problem.compound_vocab),
        "num_atoms": len(problem.atom_vocab),
        "targets": [{"target": r(t.target), "compound_divergence": r(t.compound_divergence),
                     "atom_divergence": r(t.atom_divergence), "window_start": t.window_start,
                     "window_compound_divergence": r(t.window_compound_divergence),
                     "num_images": int(len(t.members)), "num_captions": int(caps[t.members].sum()),
                     "reachable": t.reachable, **_by_definition(t.divergences, r),
                     **({} if result.max_atom_divergence is None else
                        {"meets_atom_bound": bool(t.atom_divergence <= result.max_atom_divergence)})}
                    for t in result.targets],
        "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
        "compounds": result.definition,
        **_by_definition(result.divergences, r),
        "random_compound_divergences": {k: r(d.compound) for k, d in result.random_divergences.items()},
        "random_atom_divergences": {k: r(d.atom) for k, d in result.random_divergences.items()},
        "max_atom_divergence": r(result.max_atom_divergence),
        "meets_atom_bound": (None if result.max_atom_divergence is None
                             else bool(result.atom_divergence <= result.max_atom_divergence)),
    }
    if result.unrefined_atom_divergence is not None:
        out["unrefined_atom_divergence"] = r(result.unrefined_atom_divergence)
    if result.anneal is not None:
        a = result.anneal
        out["anneal"] = {"compound_before": r(a.compound_before), "atom_before": r(a.atom_before),
                         "compound_after": r(a.compound_after), "atom_after": r(a.atom_after),
                         "feasible": a.feasible, "best_restart": a.best_restart, "seconds": round(a.seconds, 3),
                         "restarts": [{"start": x.start, "compound_start": r(x.compound_start),
                                       "atom_start": r(x.atom_start), "compound_best": r(x.compound_best),
                                       "atom_best": r(x.atom_best), "feasible": x.feasible, "accepted": x.accepted,
                                       "proposals": x.proposals} for x in a.restarts]}
    if result.refine is not None:
        out["unrefined_compound_divergence"] = r(result.unrefined_compound_divergence)
        out["refine"] = {"compound_before": r(result.refine.compound_before),
                         "compound_after": r(result.refine.compound_after),
                         "atom_before": r(result.refine.atom_before), "atom_after": r(result.refine.atom_after),
                         "swaps": result.refine.swaps, "rounds": result.refine.rounds,
                         "seconds": round(result.refine.seconds, 3)}
    return out


def _by_definition(divergences: dict[str, SplitDivergences], r) -> dict:
    """``compound_divergences`` / ``atom_divergences``: one value per compound definition."""
    return {"compound_divergences": {k: r(d.compound) for k, d in divergences.items()},
            "atom_divergences": {k: r(d.atom) for k, d in divergences.items()}}


def plot_ranking(result: MCDResult, path, *, title: str = "") -> None:
    """Compound (and atom) divergence of each K-image window along the ranking, targets marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.plot(result.curve_starts, result.curve_compound, lw=1.2, color="C0", label="compound divergence of window")
    ax.plot(result.curve_starts, result.curve_atom, lw=1.0, ls="--", color="C2", label="atom divergence of window")
    if len(result.random_compound):
        ax.axhline(result.random_compound.mean(), color="C7", lw=1, ls=":",
                   label=f"random sets (mean of {len(result.random_compound)})")
    ax.scatter([0], [result.compound_divergence], color="C3", zorder=3, marker="*", s=90,
               label=f"split: {result.compound_divergence:.3f}" + (" (refined)" if result.refine else ""))
    for t in result.targets:
        ax.axvline(t.window_start, color="C1", lw=0.6, alpha=0.6)
        ax.scatter([t.window_start], [t.window_compound_divergence], color="C1", s=14, zorder=3)
    if result.targets:
        ax.scatter([], [], color="C1", s=14, label=f"requested windows ({len(result.targets)})")
    k = len(result.selected)
    ax.set_xlabel(f"rank of the window's first image ({result.direction} Delta_i; window = {k} images)")
    ax.set_ylabel("divergence from training")
    ax.set_title(title or "Divergence along the MCD ranking")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
