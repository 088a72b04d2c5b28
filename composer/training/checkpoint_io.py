"""Checkpoints that a full disk or a kill never leave half-written, and the checkpoint ``--resume`` continues.

:class:`AtomicCheckpointIO` is the Lightning checkpoint writer of every trainer the library builds
(:func:`composer.training.fit.fit_and_report`): a checkpoint is written to a temporary file in its own
folder, flushed to disk, and renamed over the old one, so ``last.ckpt`` is always either the previous
checkpoint or the new one, never a truncated file. Lightning's own writer (2.6) goes through an fsspec
"transaction" whose temporary file lies in the system's temporary folder (``tempfile.mkstemp()``) and is then
``shutil.move``-d: where that folder is on another file system than the run (a tmpfs ``/tmp``, a scratch
disk), the move copies into ``last.ckpt`` in place, and a full disk truncates it; nothing is synced.

:func:`resume_checkpoint` picks what ``--resume`` continues from: ``last.ckpt`` when it loads, else (a
checkpoint damaged by something other than this writer: a copy, an older version of the library) the
latest intact checkpoint beside it, with a warning; with none intact, a one-line error naming the files.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from crg.outputs import OutputDirError

__all__ = ["AtomicCheckpointIO", "UnusableCheckpoint", "checkpoint_problem", "remove_temp_checkpoints",
           "resume_checkpoint"]

logger = logging.getLogger(__name__)

# what an interrupted write of NAME.ckpt leaves: .NAME.ckpt.PID.tmp (crg.outputs' pattern for temporary files)
_TEMP = re.compile(r"\..+\.ckpt\.\d+\.tmp")


class UnusableCheckpoint(OutputDirError):
    """``--resume`` found no checkpoint it can load in the run folder (an :class:`OutputDirError`: the
    programs print it as a one-line error, as they do a folder they cannot use)."""


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class AtomicCheckpointIO(TorchCheckpointIO):
    """:class:`TorchCheckpointIO` writing through a synced temporary file and a rename in the same folder.

    A failed write (``ENOSPC``, a kill) leaves the old checkpoint in place and at most a temporary
    ``.NAME.PID.tmp`` file, which this writer removes on failure and :func:`remove_temp_checkpoints`
    (called on ``--resume``) after a kill. Remote paths (``s3://`` ...) keep Lightning's writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


def _inspect(path: Path) -> tuple[int | None, str | None]:
    """``(global_step, None)`` for a checkpoint ``--resume`` can load (weights only, on the CPU, as it
    does), else ``(None, why not)``."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError ...
        first = str(err).splitlines()[0] if str(err) else ""
        return None, f"{type(err).__name__}: {first}" if first else type(err).__name__
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        return None, "not a Lightning checkpoint (no state_dict / global_step)"
    return int(ckpt["global_step"]), None


def checkpoint_problem(path: Path) -> str | None:
    """Why ``path`` cannot be resumed from (unreadable, truncated, not a Lightning checkpoint), else None."""
    return _inspect(path)[1]


def remove_temp_checkpoints(folder: Path) -> list[Path]:
    """Remove the temporary files interrupted checkpoint writes left in ``folder``; returns them."""
    if not folder.is_dir():
        return []
    gone = sorted(p for p in folder.iterdir() if p.is_file() and _TEMP.fullmatch(p.name))
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def resume_checkpoint(folder: Path, last: str = "last.ckpt") -> Path | None:
    """The checkpoint in ``folder`` that ``--resume`` continues from.

    ``folder/last`` when it loads. When it is missing or damaged, the intact checkpoint beside it with
    the highest ``global_step`` (Lightning's ``epoch=E-step=S.ckpt``, ``best.ckpt``), with a warning: the
    run repeats the steps after it, and as training resumes exactly, ends as the uninterrupted run
    would. None when the folder holds no checkpoint at all (the run stopped before its first one).

    Raises:
        UnusableCheckpoint: checkpoints are there but none loads (naming each and why).
    """
    removed = remove_temp_checkpoints(folder)
    if removed:
        logger.info("--resume: removed %d temporary file(s) of interrupted checkpoint writes in %s",
                    len(removed), folder)
    primary = folder / last
    problems: dict[Path, str] = {}
    if primary.is_file():
        problem = checkpoint_problem(primary)
        if problem is None:
            return primary
        problems[primary] = problem
    others = sorted(p for p in folder.glob("*.ckpt") if p != primary and p.is_file()) if folder.is_dir() else []
    intact = []
    for p in others:
        step, problem = _inspect(p)
        if problem is None:
            intact.append((step, p.stat().st_mtime, p))
        else:
            problems[p] = problem
    if intact:
        step, _, chosen = max(intact)
        logger.warning("--resume: %s %s; resuming from %s (step %d) instead, the latest intact checkpoint beside "
                       "it", primary, f"cannot be loaded ({problems[primary]})" if primary in problems
                       else "is missing", chosen, step)
        return chosen
    if not problems:
        return None
    listed = "; ".join(f"{p}: {why}" for p, why in problems.items())
    raise UnusableCheckpoint(f"--resume: no checkpoint in {folder} can be loaded ({listed}); pass --overwrite "
                             f"to train again from the start")
