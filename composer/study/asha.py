"""Asynchronous successive halving (Ray Tune's ASHA) that a killed recipe search can resume.

Tune restores a search's scheduler as it was created, with empty rungs: each resumed trial's next report
was then judged at a rung it had passed before the restart, against the reports since (an IL-CLIP trial of
the converge study was cut at 64K positives on the chance-level validation right after a new agent's spawn,
at the 48K rung it had passed at 43.2). :class:`ResumableASHA` rebuilds the rungs from every
configuration's learning curve (each validation its run reported, ``curve.json``) when the first trial is
added. Imported only when a search runs (it imports Ray).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ray.tune.schedulers import ASHAScheduler

from composer.report.search import curve_reports
from composer.training.tune_search import rung_records

__all__ = ["ResumableASHA"]

logger = logging.getLogger(__name__)


class ResumableASHA(ASHAScheduler):
    """Ray Tune's ASHA whose rungs are rebuilt from the search's learning curves when its first trial is
    added (a new search finds none; a restored one finds what its trials reported before the kill); each
    trial's rebuilt records follow it under its Tune id. ``points``: the configurations (a trial's
    ``config["point"]``), whose runs lie in ``search_dir`` (``OUT/search``) at seed ``seed``."""

    def __init__(self, *, search_dir: str, points: list[str], seed: int = 0, **asha):
        super().__init__(**asha)
        if len(self._brackets) != 1:
            raise ValueError("ResumableASHA rebuilds one bracket (ASHAScheduler's default brackets=1)")
        self.search_dir, self.points, self.seed, self._rebuilt = search_dir, list(points), seed, False

    def __setstate__(self, state: dict) -> None:
        """Unpickled (Tune restores the scheduler it pickled with the search): rebuild again."""
        self.__dict__.update(state)
        self._rebuilt = False

    def on_trial_add(self, tune_controller, trial) -> None:
        super().on_trial_add(tune_controller, trial)
        if not self._rebuilt:
            self._rebuild_rungs()
        point = (trial.config or {}).get("point")
        for _, recorded in self._brackets[0]._rungs:
            if point in recorded:  # the point's rebuilt record, keyed as Tune keys its trial
                recorded.setdefault(trial.trial_id, recorded.pop(point))

    def _rebuild_rungs(self) -> None:
        self._rebuilt = True
        rungs = self._brackets[0]._rungs  # [(milestone, {trial: metric_op * value})], highest milestone first
        records = rung_records(curve_reports(Path(self.search_dir), self.points, self.seed), [m for m, _ in rungs])
        for milestone, recorded in rungs:
            recorded.update({point: self._metric_op * value for point, value in records[milestone].items()})
        if any(records.values()):
            logger.info("ASHA's rungs rebuilt from the learning curves: %s", records)
