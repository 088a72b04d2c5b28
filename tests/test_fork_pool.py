"""crg.fork_pool: a pool's workers die of SIGTERM even when the parent catches it with a handler that records and
returns (Lightning's signal connector does during a fit): a worker inheriting such a handler, blocked on the task
queue's lock, survives Pool.terminate() and its join never returns (the test suite hung so in build_crg's
Pool.__exit__, 2026-12-01)."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from crg.fork_pool import _start_worker, fork_pool


def _square(x: int) -> int:
    return x * x


def _sigterm_handler_in_worker(_) -> str:
    return str(signal.getsignal(signal.SIGTERM))


@pytest.fixture
def recording_sigterm_handler():
    """A SIGTERM handler that records and returns (as Lightning's signal connector does during a fit)."""
    received = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    yield received
    signal.signal(signal.SIGTERM, before)


def _wait_on(lock, reset: bool) -> None:
    if reset:
        _start_worker(None, ())  # what each fork_pool worker runs first
    lock.acquire()  # blocked for good, as a pool worker on the task queue's lock that terminate() holds


@pytest.mark.parametrize("reset", [True, False])
def test_a_blocked_worker_dies_of_sigterm_only_with_the_reset(recording_sigterm_handler, reset):
    """The hang's mechanism, deterministic: a forked process blocked on a lock, sent SIGTERM, dies only when its
    inherited recording handler was put back to the default (without: it lives on, the hang)."""
    ctx = multiprocessing.get_context("fork")
    lock = ctx.Lock()
    lock.acquire()
    proc = ctx.Process(target=_wait_on, args=(lock, reset), daemon=True)
    proc.start()
    time.sleep(0.5)                                                              # blocked on the lock by now
    os.kill(proc.pid, signal.SIGTERM)
    proc.join(timeout=10)
    try:
        assert (proc.exitcode == -signal.SIGTERM) if reset else (proc.exitcode is None)
    finally:
        if proc.exitcode is None:
            proc.kill()
            proc.join()
    assert recording_sigterm_handler == []                                      # the parent's handler never ran


def test_each_worker_starts_with_the_default_sigterm_handler(recording_sigterm_handler):
    with fork_pool(2) as pool:
        assert pool.map(_square, range(6)) == [0, 1, 4, 9, 16, 25]
        assert pool.map(_sigterm_handler_in_worker, range(4)) == [str(signal.SIG_DFL)] * 4
        pool.close()
        pool.join()


def test_terminate_returns_under_a_recording_sigterm_handler(recording_sigterm_handler):
    pool = fork_pool(2)
    assert pool.map(_square, range(6)) == [0, 1, 4, 9, 16, 25]
    workers = list(pool._pool)
    time.sleep(0.2)  # both idle, blocked on the task queue as in Pool.__exit__ after an imap
    done = threading.Thread(target=pool.terminate, daemon=True)
    done.start()
    done.join(timeout=60)
    assert not done.is_alive(), "terminate() did not return: a worker survived SIGTERM"
    assert all(w.exitcode is not None for w in workers)


def test_initializer_runs_in_each_worker_after_the_reset():
    with fork_pool(2, _set_flag, ("ready",)) as pool:
        assert pool.map(_read_flag, range(4)) == ["ready"] * 4
        pool.close()
        pool.join()


_FLAG = None


def _set_flag(value: str) -> None:
    global _FLAG
    _FLAG = value


def _read_flag(_) -> str:
    return _FLAG
