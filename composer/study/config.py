"""What the study runs, as data: the runs (models and the papers' ablations, :data:`RUNS`) and the profiles
(data sizes and training lengths, :data:`PROFILES`), read from ``study.toml`` beside this module into the typed,
checked :class:`StudyRun` and :class:`StudyProfile`. A run is the world's named training recipe
(:func:`composer.training.recipes.named_recipe`) plus the ablation's typed overrides, so a run of the study is
the model a user gets from the training command with those options. docs/evaluation.md ("Running the
study") lists which run fills which table of which paper, and what each profile trains.

>>> [r.name for r in study_runs(PROFILES["cpu"])][:3]
['composer', 'vse', 'flat']
>>> get_profile("smoke").seeds
(0,)
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from composer.models import registry
from composer.training.plateau_config import PlateauConfig
from composer.training.schedule import Schedule

MODELS = registry.names()  # the study's model names are the registry's
STUDY_FILE = Path(__file__).with_name("study.toml")

__all__ = ["EVALS", "MODELS", "PROFILES", "RUNS", "STUDY_FILE", "Schedule", "StudyPlateau", "StudyProfile", "StudyRun",
           "get_profile", "il_overrides", "schedule_for", "study_runs"]


# the evaluations a run may ask for (study.toml's header says what each one is)
EVALS = ("test", "productivity", "mcd", "windows", "phrase", "hard_negatives", "val")
_ALL = EVALS[:-1]
STUDY_PARSERS = ("world", "spacy")  # the world's gold trees (default); the parser real captions get


@dataclass(frozen=True)
class StudyRun:
    """One trained model of the study.

    Attributes:
        name: the run's key in results and tables (``composer_replace``).
        model: one of :data:`MODELS`.
        label: how tables name it.
        overrides: :class:`composer.training.recipes.RecipeOverrides` fields of the ablation
            (``{"model": {"modulator": "replace"}}``, ``{"use_mvsa": False}``).
        il: :class:`composer.models.clip.iterated_learning.ILConfig` overrides (the CLIP family's ablations).
        il_cycle_scale: IL-CLIP Table 4's generation cycle: distillation and interaction steps scaled by
            this, the number of generations by its inverse (same total steps).
        prune: probability of removing each parse branch when the CRGs are built (COMPOSER Table 7),
            for training and evaluation alike.
        parser: the constituency parser every CRG of the run is built with, training and evaluation alike:
            ``world`` (the generated world's gold trees, the study's default) or ``spacy`` (the parser a real
            corpus gets; COMPOSER Table 7's "how good must the parses be").
        evals: what the tables need of it (``productivity`` adds that set to ``test``'s); a profile with
            ``full_eval`` runs every evaluation anyway.
    """

    name: str
    model: str
    label: str
    overrides: dict[str, Any] = field(default_factory=dict)
    il: dict[str, Any] = field(default_factory=dict)
    il_cycle_scale: float = 1.0
    prune: float = 0.0
    parser: str = "world"
    evals: tuple[str, ...] = ("test", "mcd")

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"run {self.name!r}: model {self.model!r} is not one of {MODELS}")
        bad = [e for e in self.evals if e not in EVALS]
        if bad:
            raise ValueError(f"run {self.name!r}: unknown evaluations {bad}; choose among {EVALS}")
        if not 0.0 <= self.prune <= 1.0 or self.il_cycle_scale <= 0:
            raise ValueError(f"run {self.name!r}: prune must lie in [0, 1] and il_cycle_scale be > 0, got "
                             f"{self.prune}, {self.il_cycle_scale}")
        if self.parser not in STUDY_PARSERS:
            raise ValueError(f"run {self.name!r}: parser {self.parser!r} is not one of {STUDY_PARSERS}")
        from composer.training.recipes import RecipeOverrides

        known = {f.name for f in fields(RecipeOverrides)}
        unknown = sorted(set(self.overrides) - known)
        if unknown:
            raise ValueError(f"run {self.name!r}: {unknown} are not RecipeOverrides fields; fields: {sorted(known)}")
        if (self.il or self.il_cycle_scale != 1.0) and registry.get(self.model).step_schedule is None:
            raise ValueError(f"run {self.name!r}: IL settings apply to the CLIP family only, not {self.model!r}")


@dataclass(frozen=True)
class StudyPlateau(PlateauConfig):
    """Training to the plateau in a study (issue 31): every run validates on the same val set every
    ``val_every_positives`` positive pairs, keeps its best weights by val R@1, stops after ``patience``
    validations without a gain of more than ``min_delta`` (never before ``min_positives``) and never trains
    on more than ``max_positives`` -- the same budget for every model (the first three are required here).
    ``val_images``: the validation set's images (None: the profile's ``eval_images``); the search's
    criterion is the same set.

    The recipe search (``--search``) then runs at this budget with early termination: Ray Tune's ASHA
    compares a model's configurations at ``asha_grace_positives`` positives and every ``asha_reduction``
    times that, keeping the best ``1 / asha_reduction`` going (None: every configuration trains to its
    plateau).
    """

    val_images: int | None = None
    asha_grace_positives: int | None = None
    asha_reduction: int = 3

    def __post_init__(self):
        super().__post_init__()
        if None in (self.max_positives, self.val_every_positives, self.patience) or self.patience < 1 \
                or self.asha_reduction < 2:
            raise ValueError(f"StudyPlateau: max_positives, val_every_positives and patience >= 1 are required, "
                             f"asha_reduction >= 2: {self}")
        if self.asha_grace_positives is not None and not 0 < self.asha_grace_positives < self.max_positives:
            raise ValueError(f"StudyPlateau: asha_grace_positives must lie in (0, max_positives): {self}")

    def recipe_overrides(self) -> dict[str, Any]:
        """The :class:`composer.training.recipes.RecipeOverrides` fields every run of the study gets.

        >>> StudyPlateau(max_positives=1000, val_every_positives=100, patience=3).recipe_overrides()["max_positives"]
        1000
        """
        return {f.name: getattr(self, f.name) for f in fields(PlateauConfig)} | {"val_images": self.val_images}


@dataclass(frozen=True)
class StudyProfile:
    """Sizes of one study: data, training lengths, evaluation sets.

    Attributes:
        name: its key in :data:`PROFILES`.
        world_images: the generated world's size.
        world_split: ``compositional`` (the default world, with held-out compounds: docs/world.md) or
            ``random`` (the i.i.d. split the study's first results were measured on).
        world_held_out_seed, world_held_out_pairs, world_held_out_facts: which compounds the compositional
            world holds out (:class:`composer.training.data.DataConfig`; docs/world.md).
        max_regions: detector regions per image (plus the global one); None = the named config's (14).
        presets: model -> model-size preset (``--preset``); a model missing = the named configuration's.
        schedules: ``composer`` (also the flat model: the two cross-attention models compare like for
            like), ``vse``; the CLIP family trains on ``il``'s step schedule.
        il: :class:`composer.models.clip.iterated_learning.ILConfig` fields of the CLIP family (``il_config("small")``
            plus these); ``clip`` and ``codebook_clip`` use its total steps with one warm-up.
        clip_batch_size: the CLIP family's batch; None = the named configuration's (64).
        eval_images: in-domain test candidates (first images of the test split; all their captions).
        mcd_images: images of the MCD split and of each window (clamped to half the eligible candidates).
        mcd_compounds: the compound definition (:mod:`crg.compounds`) the MCD split and Figure 4's windows are
            made for: ``semantic`` (the world's logical-form compounds) or ``template`` (the CRG's templates,
            the paper's definition for real captions). Both divergences are reported.
        mcd_candidate_splits: where the MCD split's images come from (roles: ``val``; ``test`` = every test
            set of the world, in-domain, systematic and productivity); training is the train split.
        num_windows: Figure 4's splits, evenly spaced between the lowest and highest window divergence.
        phrases_per_caption: phrase queries per caption (paper: 5).
        hn_images: test images whose captions get hard negatives; hn_per_type: negatives per caption and
            type; hn_distractors: text-to-image distractor images per caption.
        probe_steps: updates of the easy-to-learn probe (IL-CLIP §4.4) on the CLIP family.
        probe_lr: the probe's learning rate, the same for every model (the CLIP family's named one,
            ``ILConfig.lr``): the probe compares vision agents, so it must not inherit each model's searched
            learning rate (a faster-learning probe at a higher rate would pass for an easier-to-learn agent).
        max_pairs: (image, text) pairs per scoring call.
        log_every_n_steps: training-curve resolution (the IL-CLIP loss figure).
        runs: run names (:data:`RUNS`) in the order they train.
        seeds: default seeds.
        ablation_seeds: the ablation runs (not in :data:`MODELS`) train on the first this many seeds; None =
            every seed. The main models always get every seed.
        full_eval: every evaluation for every run (else each run's ``evals``).
        num_workers: DataLoader workers.
        jobs: runs trained at a time (worker processes sharing the cores); ``--jobs`` overrides it.
        plateau: every run trained to its plateau under one budget of positives (:class:`StudyPlateau`);
            None: the fixed step budgets of ``schedules`` / ``il``. With it, every schedule must train
            exactly the budget (its steps x batch; the CLIP family's total steps x ``clip_batch_size``), so
            the learning-rate schedule's warm-up and /10 points are fractions of the budget.
    """

    name: str
    world_images: int
    schedules: dict[str, Schedule]
    il: dict[str, Any]
    eval_images: int
    mcd_images: int
    num_windows: int
    phrases_per_caption: int
    hn_images: int
    hn_per_type: int
    hn_distractors: int
    probe_steps: int
    runs: tuple[str, ...]
    world_split: str = "compositional"
    world_held_out_seed: int = 0
    world_held_out_pairs: int = 8
    world_held_out_facts: int = 6
    max_regions: int | None = None
    clip_batch_size: int | None = None
    presets: dict[str, str] = field(default_factory=dict)
    mcd_candidate_splits: tuple[str, ...] = ("val", "test")
    mcd_compounds: str = "semantic"
    max_pairs: int = 4096
    probe_lr: float = 5e-4
    log_every_n_steps: int = 1
    seeds: tuple[int, ...] = (0, 1, 2)
    ablation_seeds: int | None = None
    full_eval: bool = False
    num_workers: int = 0
    jobs: int = 1
    plateau: StudyPlateau | None = None

    def __post_init__(self):
        if self.world_split not in ("compositional", "random"):
            raise ValueError(f"profile {self.name!r}: world_split must be 'compositional' or 'random', "
                             f"got {self.world_split!r}")
        unknown = [r for r in self.runs if r not in _BY_NAME]
        if unknown:
            raise ValueError(f"profile {self.name!r}: unknown runs {unknown}; known: {sorted(_BY_NAME)}")
        missing = {"composer", "vse"} - set(self.schedules)
        if missing:
            raise ValueError(f"profile {self.name!r}: schedules for {sorted(missing)} are missing")
        sizes = {"world_images": self.world_images, "eval_images": self.eval_images, "mcd_images": self.mcd_images,
                 "num_windows": self.num_windows, "phrases_per_caption": self.phrases_per_caption,
                 "hn_images": self.hn_images, "hn_per_type": self.hn_per_type, "max_pairs": self.max_pairs}
        bad = {k: v for k, v in sizes.items() if v < 1}
        if bad or self.probe_steps < 0 or self.hn_distractors < 0 or self.probe_lr <= 0:
            raise ValueError(f"profile {self.name!r}: sizes must be >= 1 (probe_steps, hn_distractors >= 0, "
                             f"probe_lr > 0), got {bad or (self.probe_steps, self.hn_distractors, self.probe_lr)}")
        if self.plateau is not None:
            self._check_budget()

    def _check_budget(self) -> None:
        """Under a plateau every model's schedule spans the same budget of positives (one comparison): its
        steps are the budget's at its (explicit) batch size, ``ceil(max_positives / batch)``; IL's step
        schedule where the profile runs the CLIP family."""
        budget = self.plateau.max_positives
        spans = {f"schedules[{k!r}]": (s.steps, s.batch_size) for k, s in self.schedules.items()}
        il = self.il
        if any(registry.get(_BY_NAME[r].model).step_schedule is not None for r in self.runs):  # the CLIP family
            spans["il"] = (il["t_warm"] + il["generations"] * (il["t_distill"] + il["t_interact"]) + il["t_extend"],
                           self.clip_batch_size)
        wrong = {k: v for k, v in spans.items() if None in v or v[0] != math.ceil(budget / v[1])}
        if wrong:
            raise ValueError(f"profile {self.name!r}: under a plateau every schedule must span max_positives "
                             f"({budget}): steps = ceil(budget / batch) at an explicit batch; (steps, batch) "
                             f"given: {wrong}")

    def world_data(self) -> dict[str, Any]:
        """The world's settings as :class:`composer.training.data.DataConfig` fields (also
        :func:`features.catalog.resolve_dataset`'s and :func:`composer.evaluation.eval_sets.load_eval_data`'s
        keywords).

        >>> get_profile("cpu").world_data()["world_held_out_pairs"]
        8
        """
        return {"world_images": self.world_images, "world_split": self.world_split,
                "world_held_out_seed": self.world_held_out_seed, "world_held_out_pairs": self.world_held_out_pairs,
                "world_held_out_facts": self.world_held_out_facts}

    def evals_for(self, run: StudyRun) -> tuple[str, ...]:
        if not self.full_eval or run.evals == ("val",):  # a recipe-search run is scored on val only
            return run.evals
        return tuple(dict.fromkeys((*_ALL, *run.evals)))

    def seeds_for(self, run: StudyRun, seeds: list[int] | tuple[int, ...]) -> list[int]:
        """The seeds ``run`` trains on, of the study's ``seeds``.

        >>> p = get_profile("cpu", seeds=(0, 1, 2))
        >>> p.seeds_for(_BY_NAME["composer"], p.seeds), p.seeds_for(_BY_NAME["composer_ct1"], p.seeds)
        ([0, 1, 2], [0])
        """
        if run.name in MODELS or self.ablation_seeds is None:
            return list(seeds)
        return list(seeds)[:self.ablation_seeds]


def schedule_for(profile: StudyProfile, model: str) -> Schedule:
    """The schedule of ``model``'s group (``ModelSpec.schedule_group``: the flat model trains as COMPOSER does)."""
    return profile.schedules[registry.get(model).schedule_group]


def il_overrides(profile: StudyProfile, run: StudyRun) -> dict[str, Any]:
    """ILConfig fields of ``run``: the profile's schedule, the run's ablation, its cycle scale.

    >>> p = get_profile("cpu")
    >>> short = il_overrides(p, _BY_NAME["il_cycle_short"])
    >>> base = il_overrides(p, _BY_NAME["il_clip"])
    >>> short["generations"] == 2 * base["generations"], short["t_interact"] * 2 == base["t_interact"]
    (True, True)
    """
    from composer.models.clip.iterated_learning import scale_cycle

    out = {**profile.il, **run.il}
    return out if run.il_cycle_scale == 1.0 else scale_cycle(out, run.il_cycle_scale)


def study_runs(profile: StudyProfile, names: tuple[str, ...] | list[str] | None = None) -> list[StudyRun]:
    """The profile's runs (or ``names``, validated), in training order."""
    chosen = profile.runs if names is None else tuple(names)
    unknown = [n for n in chosen if n not in _BY_NAME]
    if unknown:
        raise ValueError(f"unknown runs {unknown}; known: {sorted(_BY_NAME)}")
    return [_BY_NAME[n] for n in chosen]


# ---------------------------------------------------------------------------- study.toml
def _tuples(value):
    """TOML's arrays as the tuples the frozen dataclasses hold (and the overrides always held)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return {k: _tuples(v) for k, v in value.items()} if isinstance(value, dict) else value


def _read(kind: str, make) -> dict:
    """``make(name, fields, made so far)`` of each ``[KIND.NAME]`` table of :data:`STUDY_FILE`, in the file's order;
    an error names the file and the entry."""
    made: dict = {}
    for name, entry in _STUDY[kind].items():
        try:
            made[name] = make(name, _tuples(entry), made)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{STUDY_FILE}: {kind} {name!r}: {err}") from err
    return made


def _profile(name: str, entry: dict, made: dict[str, StudyProfile]) -> StudyProfile:
    """A profile without ``runs`` trains every run; one with ``base`` starts from that profile's values (each key
    given replaces the base's whole value, as :func:`dataclasses.replace` does)."""
    if "schedules" in entry:
        entry["schedules"] = {k: Schedule(**v) for k, v in entry["schedules"].items()}
    if "plateau" in entry:
        entry["plateau"] = StudyPlateau(**entry["plateau"])
    if "base" in entry:
        return replace(made[entry.pop("base")], name=name, **entry)
    return StudyProfile(name, **{"runs": tuple(_BY_NAME), **entry})


def get_profile(name: str, **overrides: Any) -> StudyProfile:
    """A named profile, with fields replaced (``seeds=(0,)``, ``runs=(...)``)."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    return replace(PROFILES[name], **overrides) if overrides else PROFILES[name]


_STUDY = tomllib.loads(STUDY_FILE.read_text(encoding="utf-8"))
RUNS: tuple[StudyRun, ...] = tuple(_read("runs", lambda name, entry, _: StudyRun(name, **entry)).values())
_BY_NAME = {r.name: r for r in RUNS}
PROFILES: dict[str, StudyProfile] = _read("profiles", _profile)
