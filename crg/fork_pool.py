"""Process pools whose workers a ``terminate()`` stops, whatever the parent process does with SIGTERM.

A forked worker inherits its parent's signal handlers. Lightning's trainer (its signal connector) and Ray's
driver install a Python SIGTERM handler that only records the signal; a pool worker that inherits such a
handler survives ``Pool.terminate()``: it is blocked on the task queue's lock, which ``terminate()`` holds
for good, the handler runs and returns, and the worker waits again, so ``terminate()``'s join never returns.
That hung the test suite (a graph built after a training test in the same process, 2026-12-01) and would hang a
user who builds a CRG inside a training script. Each worker here puts SIGTERM back to its default first.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.pool
import signal
from collections.abc import Callable

__all__ = ["fork_pool"]


def _start_worker(initializer: Callable | None, initargs: tuple) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # terminate() must end this process (module docstring)
    if initializer is not None:
        initializer(*initargs)


def fork_pool(processes: int, initializer: Callable | None = None, initargs: tuple = ()) -> mp.pool.Pool:
    """A pool of ``processes`` workers, forked where the platform can (they inherit the parent's modules and
    objects), else the platform's default start method; ``initializer(*initargs)`` runs in each worker after
    its SIGTERM handler is reset."""
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    return ctx.Pool(processes, initializer=_start_worker, initargs=(initializer, initargs))
