"""The log levels of a program that trains many runs (the study, in its process and in its Ray workers): one line
per run and each run's progress, not the libraries' INFO chatter repeated for every run."""

from __future__ import annotations

import logging

__all__ = ["QUIET_LOGGERS", "quiet_library_logging", "worker_logging"]

# the libraries' loggers a study keeps at WARNING (Lightning's seed and model-summary lines, once per run), in
# gc-study's process (unless --verbose) and in its Ray workers alike
QUIET_LOGGERS = ("lightning.pytorch", "lightning.fabric", "crg", "features", "composer")


def quiet_library_logging(*info: str) -> None:
    """:data:`QUIET_LOGGERS` at WARNING; the study's own lines (``composer.study``) and ``info``'s at INFO."""
    import composer.training.fit  # noqa: F401  (imports Lightning, which sets its loggers' levels: first)

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("composer.study", *info):
        logging.getLogger(name).setLevel(logging.INFO)


def worker_logging() -> None:
    """Logging of a Ray worker that trains study runs: the driver's levels plus each plateau run's progress
    line (step, loss, steps/s, ETA, once a minute). Why: a worker starts with Python's defaults, where
    Lightning's INFO lines reach the study's log (``log_to_driver``) for every run and the runs' own progress
    lines do not, so a study's log showed model summaries and no step rate."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_library_logging("composer.training.fit")
