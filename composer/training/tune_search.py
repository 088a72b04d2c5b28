"""What a hyperparameter search over training runs on Ray Tune needs beyond Tune itself: telling a search a stop
signal interrupted from one whose scheduler decided every trial, the signal handlers Tune's ``fit`` leaves
behind put back, and what asynchronous ASHA's rungs hold after given reports (to rebuild them on a restore:
:class:`composer.study.asha.ResumableASHA`). The study's recipe search
(:func:`composer.study.search.run_asha_search`) uses them; each trial reports through
:class:`composer.training.plateau.ValidationReporter`. Imports no Ray.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SearchInterrupted", "check_search_complete", "rung_records", "tune_signal_handlers_restored"]


class SearchInterrupted(RuntimeError):
    """A model's search ended with trials still pending or running (Tune's answer to a stop signal)."""


def check_search_complete(model: str, grid, finished: set[str], path: Path) -> None:
    """Raise :class:`SearchInterrupted` unless every trial of ``grid`` (Tune's ``ResultGrid`` of ``model``'s
    search, each trial's ``config["point"]`` naming its configuration) finished its run (its point is in
    ``finished``: the run wrote its result), was stopped by ASHA or errored. Why: on SIGINT
    ``Tuner.fit()`` saves its state, stops the running trials and *returns*; their status then reads TERMINATED
    like ASHA's cuts, and only the last result's ``done`` flag, which Tune sets when its scheduler stops a trial,
    tells a cut from an interruption (a run that ended by itself is known by its result file: a restored Tuner
    does not keep its ``done``). A study that went on would choose this model's configuration from half-trained
    trials and start the next model's search. A trial that never reported has no config (Tune's
    ``Result.config`` is None): a stop before its first validation leaves it unfinished too."""
    unfinished = sum(1 for result in grid if (result.config or {}).get("point") not in finished
                     and result.error is None and not (result.metrics or {}).get("done"))
    if unfinished:
        raise SearchInterrupted(f"the recipe search of {model} stopped with {unfinished} of {len(grid)} trials "
                                f"unfinished (a stop signal?); its state is saved in {path}: rerun the same "
                                f"command to resume it")


@contextlib.contextmanager
def tune_signal_handlers_restored():
    """Tune's fit installs its own SIGINT (and SIGUSR1) handler and puts the previous one back only when a
    signal arrives: after a search, Ctrl-C during the study's runs printed Tune's "ending Ray Tune run" and
    the study went on (one more Ctrl-C per model searched). The handlers are put back after the fit."""
    names = [n for n in ("SIGINT", "SIGUSR1") if hasattr(signal, n)]
    before = {n: signal.getsignal(getattr(signal, n)) for n in names}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for n, handler in before.items():
                if handler is not None:  # None: a handler not installed from Python, which cannot be put back
                    signal.signal(getattr(signal, n), handler)


def rung_records(reports: Mapping[str, list[tuple[int, float]]], milestones: list[int]) -> dict[int, dict[str, float]]:
    """What asynchronous ASHA holds at each rung after these reports: ``{milestone: {trial: value}}``, each
    trial's reports being ``(positives, val R@1)`` in order. The rule is Ray Tune's (``_Bracket.on_result``):
    a report records its trial at the highest milestone it has reached and is not yet recorded at, with the
    value it reports there. Records do not depend on the order of the trials; ASHA's decisions do.

    >>> rung_records({"a": [(8, 1.0), (16, 2.0), (24, 3.0), (48, 4.0)], "b": [(8, 5.0), (56, 6.0)]}, [16, 48])
    {16: {'a': 2.0}, 48: {'a': 4.0, 'b': 6.0}}
    """
    records: dict[int, dict[str, float]] = {m: {} for m in milestones}
    for trial, trial_reports in reports.items():
        for positives, value in trial_reports:
            for milestone in sorted(milestones, reverse=True):
                if positives >= milestone and trial not in records[milestone]:
                    records[milestone][trial] = value
                    break
    return records
