"""Processes a program starts end with it, even when it is killed with SIGKILL (the study's local Ray: beside
:mod:`crg.ray_engine`, which starts one too).

A local Ray started by the study's driver shares most of its fate (the raylet and the workers training runs
end when the driver dies), but not all of it: after ``kill -9`` of a driver, Ray's dashboard agent and
runtime-env agent were still running a minute later (tests/test_kill_resume.py). Nothing in a process killed
by SIGKILL runs, so :func:`watch` starts a small separate process that keeps a list of the driver's
descendants (refreshed every second, each with its start time so that a reused PID is never touched) and,
once the driver is gone, kills those still running, then exits. After a normal exit Ray has stopped them
already and the watcher finds none.

Run as ``python -m crg.fate PID`` by :func:`watch`; not a command for users.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

__all__ = ["reap_after", "watch"]

_WATCHED: set[int] = set()


def watch(pid: int | None = None) -> subprocess.Popen | None:
    """Start the watcher of ``pid`` (default: this process), once per process; returns it (None when
    already watched). It runs in its own session, so a terminal's Ctrl-C or hang-up reaches the driver
    (which then stops Ray itself), not the watcher."""
    pid = os.getpid() if pid is None else pid
    if pid in _WATCHED:
        return None
    _WATCHED.add(pid)
    return subprocess.Popen([sys.executable, "-m", "crg.fate", str(pid)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            close_fds=True)


def reap_after(pid: int, *, every_s: float = 1.0) -> list[int]:
    """Wait for ``pid`` to end, then SIGKILL the descendants it had (as last seen) that still run; returns
    their PIDs."""
    import psutil

    try:
        driver = psutil.Process(pid)
        born = driver.create_time()
    except psutil.NoSuchProcess:
        return []
    me = os.getpid()
    seen: dict[int, float] = {}
    while True:
        try:
            if driver.create_time() != born or driver.status() == psutil.STATUS_ZOMBIE:
                break
            for child in driver.children(recursive=True):
                if child.pid != me:
                    try:
                        seen[child.pid] = child.create_time()
                    except psutil.NoSuchProcess:
                        pass
        except psutil.NoSuchProcess:
            break
        time.sleep(every_s)
    killed = []
    for child_pid, created in seen.items():
        try:
            if psutil.Process(child_pid).create_time() == created:
                os.kill(child_pid, signal.SIGKILL)
                killed.append(child_pid)
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            pass
    return killed


if __name__ == "__main__":
    reap_after(int(sys.argv[1]))
