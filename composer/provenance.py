"""Where a timing or a result was computed: the code's commit and the hardware, for reports and benchmarks."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LIBRARY_PACKAGES", "CodeIdentity", "WorkerCodeMismatch", "check_worker_code", "code_identity", "cpu_model",
           "git_sha", "hardware_description"]


def cpu_model() -> str:
    """The CPU's marketing name from ``/proc/cpuinfo`` (Linux), else what :mod:`platform` knows."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return model


LIBRARY_PACKAGES = ("composer", "features", "crg")


@dataclass(frozen=True)
class CodeIdentity:
    """Which code a process imports: the digest of the library's Python sources and where they were found."""

    digest: str
    location: str


def code_identity() -> CodeIdentity:
    """A digest of every ``.py`` file of the library's packages as this interpreter imports them.

    Why: a study's Ray workers put the driver's working directory first on ``sys.path``, so a study started
    in a checkout other than the installed one ran the installed code in the driver and the other checkout's
    in the workers (seen on the converge study); comparing digests catches that, and any cluster node with
    other code, before the first run.
    """
    sha = hashlib.sha256()
    roots = []
    for name in LIBRARY_PACKAGES:
        root = Path(importlib.import_module(name).__file__).resolve().parent
        roots.append(str(root))
        for path in sorted(root.rglob("*.py")):
            sha.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            sha.update(path.read_bytes())
    return CodeIdentity(sha.hexdigest()[:16], str(Path(roots[0]).parent))



class WorkerCodeMismatch(RuntimeError):
    """Ray's workers import other library code than this process (a one-line error before any run)."""


def check_worker_code() -> None:
    """Raise :class:`WorkerCodeMismatch` unless a Ray worker imports the same library sources as this driver
    (:func:`code_identity`): runs trained by other code than the study records, or
    trials whose function the workers cannot find, would otherwise surface hours later."""
    import ray

    mine = code_identity()
    try:
        theirs = ray.get(ray.remote(code_identity).options(num_cpus=0).remote())
    except Exception as err:  # a worker whose code lacks even this function
        theirs = None
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    if theirs is None or theirs.digest != mine.digest:
        where = f"from {theirs.location}" if theirs else f"(they failed: {detail})"
        raise WorkerCodeMismatch(
            f"Ray's workers import other library code {where} than this process ({mine.location}): a local "
            f"Ray's workers put the working directory first on sys.path, so start the study from the checkout "
            f"the package is installed from (or set PYTHONPATH to the checkout you run from) and, on a cluster, "
            f"install the same code on every node")

def git_sha() -> str:
    """The short commit of the library's checkout, or ``unknown`` (an installed wheel has none)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def hardware_description() -> str:
    """The GPU's name, else the CPU's model, its core count and torch's thread count."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU {cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"
