"""A simulated kill for resume tests: a callback that aborts the run at the start of a given step."""

from __future__ import annotations

import lightning as L


class Killed(RuntimeError):
    """Raised by :class:`KillAt` in place of a SIGKILL."""


class KillAt(L.Callback):
    """Stops the run at the start of the batch after step ``step`` (its checkpoint is written by then),
    as a kill would; Lightning runs checkpoint callbacks after the others at a batch's end."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step == self.step:
            raise Killed(f"killed after step {self.step}")
