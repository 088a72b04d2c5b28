"""One output-folder policy for every command that writes a folder, and atomic result files.

A command that writes ``OUT/`` records what it is and the settings it ran with in ``OUT/run.json``
(:data:`MANIFEST`). Run again on the same folder it then:

* refuses (``mode="new"``, the default) when the folder holds anything but the manifest of a run that
  failed before writing a file: results of another run are
  never mixed with or silently replaced by a new one; the message names ``--resume`` and ``--overwrite``;
* continues (``mode="resume"``) only a run of the same command whose settings equal the given ones,
  else refuses and lists the settings that differ; resuming a folder with nothing to resume is refused;
* starts over (``mode="overwrite"``), deleting what the earlier run recorded that it wrote (the manifest's
  ``written`` names, only among the command's ``owned`` ones) and nothing else: a file with an owned name that
  no run wrote (a user's corpus called ``captions.jsonl``) is never deleted, and is never written over either:
  the run is refused, naming it.

Before any of this, an input of the command that is (or lies inside) a file the command writes in ``OUT`` is
refused (``inputs``, resolved paths): ``--captions d/captions.jsonl --out d --dump`` would replace the corpus
it reads. Temporary files a killed or failed atomic write left beside an owned name (``NAME.tmp``,
``NAME.tmp.*``, ``.NAME.*.tmp``) are removed by a resumed or overwriting run, so a full disk is not full again.

One run at a time: a run holds an exclusive lock on its folder (:func:`lock_output_dir`, a ``flock`` on
``.NAME.lock`` beside ``OUT``, so the folder's listing is untouched) until its process ends; a second run
into the same folder is refused, naming the holder's PID and command. The kernel drops the lock when the
holder dies, however it dies, so a lock is never stale.

Result files are written through a temporary file and a rename (:func:`write_text_atomic`), so a killed
command leaves the old file or the new one, never half of one. This module lives in ``crg`` because
``crg`` is the package every other one may import.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
>>> prepare_output_dir(out, command="demo", settings={"seed": 0}, mode="new", owned=["a.txt"]) == out
True
>>> write_text_atomic(out / "a.txt", "done\\n")
>>> prepare_output_dir(out, command="demo", settings={"seed": 0}, mode="new", owned=["a.txt"])
Traceback (most recent call last):
...
crg.outputs.OutputDirError: ... holds a previous run of demo (a.txt, run.json): pass --resume to continue it or --overwrite to replace it, or choose another --out
>>> prepare_output_dir(out, command="demo", settings={"seed": 1}, mode="resume", owned=["a.txt"])
Traceback (most recent call last):
...
crg.outputs.OutputDirError: ... cannot resume: the run there has other settings (seed: 0 there, 1 now); pass --overwrite to replace it, or choose another --out
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST", "MODES", "WALL_FILE", "InvocationClock", "OutputDirError", "lock_output_dir",
           "prepare_output_dir", "read_manifest", "release_output_dir", "settings_diff", "write_bytes_atomic",
           "write_json_atomic", "write_text_atomic"]

MANIFEST = "run.json"
MODES = ("new", "resume", "overwrite")


class OutputDirError(ValueError):
    """An output folder that cannot be used as asked; the message says what to pass instead."""


logger = logging.getLogger(__name__)

#: folders this process holds the lock of -> the lock file's descriptor, oldest first
_HELD: dict[Path, int] = {}
#: a process holds at most this many: older ones are released (a process prepares folders one after another)
MAX_HELD = 64


def lock_output_dir(out: str | Path, command: str) -> None:
    """Hold ``out``'s lock until this process ends, or refuse: another live process holds it.

    The lock is ``.NAME.lock`` beside ``out`` (it holds the holder's PID and command, for the message). A
    process may lock a folder again (a no-op). Where the parent folder cannot take the lock file (read-only),
    the run goes on unlocked, with a warning.
    """
    out = Path(out).resolve()
    if out in _HELD:
        return
    path = out.parent / f".{out.name}.lock"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        logger.warning("cannot lock %s (%s): nothing stops a second run from writing there at once", out, err)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 500, 0).decode("utf-8", "replace").strip() or "unknown"
        os.close(fd)
        raise OutputDirError(f"{out} is in use by another run (pid {holder}): two runs would mix their files; "
                             f"wait for it to end, or choose another --out") from None
    except OSError as err:  # a file system without locks
        os.close(fd)
        logger.warning("cannot lock %s (%s): nothing stops a second run from writing there at once", out, err)
        return
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}: {command}\n".encode("utf-8"), 0)
    _HELD[out] = fd
    while len(_HELD) > MAX_HELD:
        os.close(_HELD.pop(next(iter(_HELD))))


def release_output_dir(out: str | Path) -> None:
    """Let other processes use ``out`` again before this one ends (a library caller that runs on, e.g. a
    notebook or a study driver, calls it when the run in ``out`` is done); a no-op for a folder not held."""
    fd = _HELD.pop(Path(out).resolve(), None)
    if fd is not None:
        os.close(fd)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (:func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """``obj`` as indented JSON, atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")


def read_manifest(out: str | Path) -> dict | None:
    """The folder's ``run.json`` (``{"command": ..., "settings": {...}}``), or None."""
    path = Path(out) / MANIFEST
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise OutputDirError(f"{path}: unreadable run manifest ({err}); pass --overwrite to start over") from None


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))  # tuples -> lists, paths -> strings: compares as stored


def settings_diff(before: Mapping, now: Mapping, prefix: str = "") -> list[str]:
    """``key: old there, new now`` for every (nested) setting that differs. A setting absent on one side and
    None on the other is the same: a setting added later whose None means "as before" (``val_images``)
    does not stop an older run from resuming.

    >>> settings_diff({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 4, "e": None})
    ['b.c: 2 there, 3 now', 'd: absent there, 4 now']
    """
    out = []
    for key in sorted(set(before) | set(now)):
        a, b = before.get(key, "absent"), now.get(key, "absent")
        if a in ("absent", None) and b in ("absent", None):
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += settings_diff(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a} there, {b} now")
    return out


def _temp_leftovers(out: Path, names: Iterable[str]) -> list[Path]:
    """Temporary files an interrupted atomic write of one of ``names`` left in ``out``."""
    if not out.is_dir():
        return []
    pats = [re.compile(rf"{re.escape(n)}\.tmp(\..*)?|\.{re.escape(n)}\..*\.tmp") for n in names]
    return sorted(p for p in out.iterdir() if p.is_file() and any(pat.fullmatch(p.name) for pat in pats))


def _holding_input(out: Path, name: str, inputs: Mapping[str, Any]) -> str | None:
    """The flag of an input that ``out/name`` is or holds, else None."""
    target = (out / name).resolve()
    for flag, path in inputs.items():
        if path is not None:
            src = Path(path).resolve()
            if src == target or target in src.parents:
                return flag
    return None


def _check_inputs(out: Path, names: Iterable[str], inputs: Mapping[str, Any]) -> None:
    """Refuse an input of the command that a file the command writes in ``out`` would replace."""
    for name in names:
        flag = _holding_input(out, name, inputs)
        if flag is not None:
            path = inputs[flag]
            raise OutputDirError(f"{flag} {path} is {out / name}, which this command writes in --out {out}: "
                                     f"it would replace or delete its own input; choose another --out")


def prepare_output_dir(out: str | Path, *, command: str, settings: Mapping[str, Any], mode: str = "new",
                       owned: Iterable[str] = (), can_resume: bool = True, writes: Iterable[str] | None = None,
                       inputs: Mapping[str, Any] | None = None) -> Path:
    """Apply the policy above to ``out`` and record ``command`` and ``settings`` in its manifest.

    Args:
        out: the output folder (created if missing).
        command: the command's name, e.g. ``train_composer``.
        settings: what decides the results (JSON-able); a resumed run must have the same.
        mode: ``new``, ``resume`` or ``overwrite`` (:data:`MODES`).
        owned: names (relative to ``out``; folders included) that the command may write, and so delete.
        can_resume: False for commands that always start over (then ``resume`` is refused).
        writes: the owned names this run writes (default: all of ``owned``), recorded in the manifest as
            ``written``: what a later ``overwrite`` deletes.
        inputs: ``{flag: path}`` of the command's input files, refused when a written name would replace them.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"--out {out} is a file, not a folder")
    owned = list(owned)
    writes = sorted(set(owned if writes is None else writes))
    inputs = dict(inputs or {})
    _check_inputs(out, {*writes, MANIFEST}, inputs)
    lock_output_dir(out, command)
    settings = _plain(dict(settings))
    present = sorted(p.name for p in out.iterdir()) if out.exists() else []
    try:
        manifest = read_manifest(out) if present else None
    except OutputDirError:
        if mode != "overwrite":
            raise
        manifest = None  # a damaged manifest: nothing is known to be ours, so only unowned-name checks apply
    if mode == "resume":
        if not can_resume:
            raise OutputDirError(f"{command} cannot resume a run; pass --overwrite to replace {out}")
        if manifest is None:
            raise OutputDirError(f"--resume: {out} holds no run of {command} to resume"
                                 + (f" (it holds {', '.join(present[:5])})" if present else "")
                                 + "; drop --resume to start one")
        if manifest.get("command") != command:
            raise OutputDirError(f"--resume: {out} holds a run of {manifest.get('command')}, not of {command}")
        diff = settings_diff(manifest.get("settings", {}), settings)
        if diff:
            raise OutputDirError(f"{out} cannot resume: the run there has other settings ({'; '.join(diff)}); "
                                 f"pass --overwrite to replace it, or choose another --out")
        for tmp in _temp_leftovers(out, owned):
            tmp.unlink(missing_ok=True)
        manifest = dict(manifest)
        manifest["written"] = sorted({*_written(manifest, owned), *writes})
        write_json_atomic(out / MANIFEST, manifest)
        return out
    if present == [MANIFEST] and manifest is not None and mode == "new":
        present = []  # a run that failed before writing anything: nothing to keep, no --resume needed
    if present and mode == "new":
        what = f"a previous run of {manifest.get('command')}" if manifest else "files"
        hint = "pass --resume to continue it or --overwrite to replace it" if can_resume and manifest \
            else "pass --overwrite to replace them"
        raise OutputDirError(f"{out} holds {what} ({', '.join(present[:6])}{', ...' if len(present) > 6 else ''}): "
                             f"{hint}, or choose another --out")
    if present and mode == "overwrite":
        recorded = {n for n in (_written(manifest, owned) if manifest else ()) if n in owned
                    and _holding_input(out, n, inputs) is None}  # an input is never deleted, recorded or not
        foreign = [name for name in writes if name not in recorded and (out / name).exists()]
        if foreign:
            raise OutputDirError(f"--overwrite: {', '.join(str(out / n) for n in foreign)} "
                                 f"{'was' if len(foreign) == 1 else 'were'} not written by a run of this library "
                                 f"(not in {out / MANIFEST}) and would be replaced: move "
                                 f"{'it' if len(foreign) == 1 else 'them'} away or choose another --out")
        for name in sorted(recorded):
            target = out / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        for tmp in _temp_leftovers(out, owned):
            tmp.unlink(missing_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / MANIFEST, {"command": command, "settings": settings, "written": writes})
    return out


def _written(manifest: Mapping, owned: Iterable[str]) -> list[str]:
    """What the run of ``manifest`` wrote: its ``written`` list; a manifest from before the list was
    recorded counts as having written every owned name (the old rule; inputs are still protected)."""
    return list(manifest["written"]) if "written" in manifest else list(owned)


WALL_FILE = "wall_seconds.json"  # OUT/wall_seconds.json: {start of each invocation: its wall seconds}


class InvocationClock:
    """Writes this invocation's wall seconds into ``OUT/wall_seconds.json`` every ``every_s`` while the program
    (the study) runs and when it ends, beside those of earlier invocations. Why: a study resumed after kills
    spans many invocations, and one killed never reaches the report; the report's wall time is the sum of them
    all."""

    def __init__(self, out: Path, every_s: float = 60.0):
        self.path, self.every_s = Path(out) / WALL_FILE, every_s
        self.started = time.perf_counter()
        self.key = datetime.now().isoformat(timespec="milliseconds")  # two invocations never share a key
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="study-wall-clock", daemon=True)

    def segments(self) -> dict[str, float]:
        """Every invocation's wall seconds so far, this one's up to now."""
        found = json.loads(self.path.read_text()) if self.path.exists() else {}
        found[self.key] = round(time.perf_counter() - self.started, 1)
        write_json_atomic(self.path, found)
        return found

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            self.segments()

    def __enter__(self) -> InvocationClock:
        self.segments()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.segments()
