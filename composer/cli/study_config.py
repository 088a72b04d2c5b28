"""The study's configuration file (``OUT/config.yaml``): what ``gc-study --config`` reads and a study saves.

    gc-study --config runs/study_cpu/config.yaml --out runs/study_again

runs the same study (the same profile, seeds, runs and execution options; each run's recipe is the
profile's, composer/study/config.py). Flags beside ``--config`` override the file's values. This module
imports the study (and so torch); ``gc-study`` imports it after parsing its flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from composer.study.execute import StudyOptions

__all__ = ["CONFIG_FILE", "PATHS", "StudyConfig"]

CONFIG_FILE = "config.yaml"

#: gc-study's flags (argparse destinations) -> the fields of :class:`StudyConfig` they set
PATHS = {"data": ("data",), "profile": ("profile",), "seeds": ("seeds",), "runs": ("runs",), "search": ("search",),
         "search_only": ("search_only",), "recipes_from": ("recipes_from",),
         **{k: (f"options.{k}",) for k in ("accelerator", "precision", "keep_weights", "jobs", "address")}}


@dataclass
class StudyConfig:
    """A study as typed values.

    Attributes:
        data: the dataset (the generated world only).
        profile: a name in :data:`composer.study.config.PROFILES` (sizes, schedules, the runs).
        seeds: the seeds of every run (None: the profile's).
        runs: run names, a subset of the profile's (None: all of them).
        search, search_only: the equal-budget recipe search first, or alone.
        recipes_from: another study folder whose search's chosen recipes this study trains from, or that
            search's ``chosen.json`` itself (instead of a search of its own).
        options: how the runs execute (:class:`composer.study.execute.StudyOptions`; a file without
            ``jobs`` takes the profile's; the saved file holds the number used).
    """

    data: str = "world"
    profile: str = "cpu"
    seeds: list[int] | None = None
    runs: list[str] | None = None
    search: bool = False
    search_only: bool = False
    recipes_from: str | None = None
    options: StudyOptions = field(default_factory=StudyOptions)
