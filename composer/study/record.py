"""A study's record: the part of a study folder small enough to keep with the code.

A long study outlives the machines it runs on only through what is copied off them. Its weights and
checkpoints (hundreds of MB a run) are not worth keeping; what makes a finished run count as finished, and every
figure the report draws, is its ``study_result.json`` (metrics, learning curve, configuration, timings). So the
record is: the study's settings (``study.json``, and ``config.yaml``, which ``--config`` runs again), the
recipes it trained from (``search/chosen.json``), the wall time of every invocation (``wall_seconds.json``) and
each finished run's result. Copied back into an empty study
folder, it lets the same command go on where the study stood: finished runs are skipped, the data are generated
again byte-identical, and ``--report-only`` rebuilds the tables and plots from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from composer.report.results import RESULT
from crg.outputs import WALL_FILE, write_bytes_atomic

__all__ = ["RECORD_FILES", "RecordExport", "record_files", "export_record"]

# written by composer/study/data.py, composer/cli/study.py (CONFIG_FILE) and composer/study/search.py, whose
# constants would cost this seconds-fast copy their imports
RECORD_FILES = ("study.json", "config.yaml", "search/chosen.json", WALL_FILE)
RUN_RESULT = f"runs/*/seed*/{RESULT}"  # composer.report.results.run_folder's layout


@dataclass
class RecordExport:
    """What one export did, as paths relative to the study folder."""

    written: list[str] = field(default_factory=list)  # new, or changed since the last export
    unchanged: list[str] = field(default_factory=list)

    @property
    def finished_runs(self) -> int:
        return sum(p.endswith(RESULT) for p in self.written + self.unchanged)


def record_files(study: str | Path) -> list[str]:
    """The record's files present in ``study``, relative to it, in a stable order."""
    study = Path(study)
    files = [name for name in RECORD_FILES if (study / name).is_file()]
    files += sorted(p.relative_to(study).as_posix() for p in study.glob(RUN_RESULT) if p.is_file())
    return files


def export_record(study: str | Path, dest: str | Path) -> RecordExport:
    """Copy ``study``'s record into ``dest`` (created if absent), each file atomically and only when its bytes
    changed, so that a loop may call it while the study runs (the study writes its files atomically too).
    Nothing in ``dest`` is deleted. ``dest`` may not be the study folder or lie inside it."""
    study, dest = Path(study).resolve(), Path(dest).resolve()
    if not (study / "study.json").is_file():
        raise FileNotFoundError(f"{study}: not a study folder (no study.json); nothing to export")
    if dest == study or study in dest.parents:
        raise ValueError(f"export destination {dest} lies inside the study folder {study}")
    done = RecordExport()
    for rel in record_files(study):
        data = (study / rel).read_bytes()
        target = dest / rel
        if target.is_file() and target.read_bytes() == data:
            done.unchanged.append(rel)
            continue
        write_bytes_atomic(target, data)  # (makes the folder)
        done.written.append(rel)
    return done
