"""Process pools whose workers a ``terminate()`` stops, whatever the parent process does with SIGTERM.

A forked worker inherits its parent's signal dispositions. Where the parent catches SIGTERM with a handler that
records the signal and returns (Lightning's signal connector during a fit does), a pool worker survives
``Pool.terminate()``: blocked on the task queue's lock, which ``terminate()`` holds for good, it runs the
handler and waits again, and ``terminate()``'s join never returns. The README's test command hung that way in
``build_crg``'s ``Pool.__exit__`` (2026-12-01: the worker blocked on the queue's lock with SIGTERM caught, the
parent joining it; the process then held the SIGTERM handler Ray's driver installs, after a Tune test). Each
worker here puts SIGTERM back to its default first, and ``crg.build`` closes and joins its pool when every
result is read, so that ``terminate()`` is left for an abandoned or failed map.
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
