"""Optional compiled copies of pure-Python hot modules, used only when built from the exact source.

Why: the dependency -> PTB conversion is a fifth of a graph build's CPU time per caption, all of it
interpreted Python. Cython compiles the module's unchanged source to C and runs it about 1.7x faster
(docs/benchmarks.md, CRG building). The Python module stays the reference and the fallback: a copy runs only
when it was built from the very bytes of the source it replaces (a SHA-256 digest compiled into it), so an
edited converter can never be shadowed by a stale build; without a build (no Cython, no C compiler) the
pure-Python module runs, with the same output (``tests/test_speedups.py``).

    python -m crg.speedups build      # needs Cython (pip install cython) and a C compiler; about a minute
    python -m crg.speedups status     # which copies are built and current

``GC_PURE_PYTHON=1`` in the environment turns the compiled copies off.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "source_digest", "load_compiled", "build", "compiled_status"]

logger = logging.getLogger(__name__)

#: pure-Python module -> the name of its compiled copy (an extension module beside it in ``crg/``)
COMPILED = {"crg.dep_to_constituency": "crg._dep_to_constituency_c"}

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the directory holding crg/


def source_digest(path: str | Path) -> str:
    """SHA-256 of a source file's bytes: what a compiled copy must have been built from."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _source_file(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"{module} is not a pure-Python module here (found {spec and spec.origin})")
    return Path(spec.origin)


def load_compiled(module: str, source_file: str | Path) -> ModuleType | None:
    """The compiled copy of ``module`` if it is built and was built from ``source_file`` as it is now, else None.

    ``module`` calls this on itself (``load_compiled(__name__, __file__)``) and uses what it returns.
    """
    if module not in COMPILED or os.environ.get("GC_PURE_PYTHON", "") not in ("", "0"):
        return None  # (a compiled copy, importing itself, asks under its own name)
    name = COMPILED[module]
    try:
        compiled = importlib.import_module(name)
    except ImportError:
        return None
    if getattr(compiled, "SOURCE_DIGEST", None) != source_digest(source_file):
        logger.warning("%s was built from another version of %s: running the pure-Python module (rebuild with "
                       "`python -m crg.speedups build`)", name, source_file)
        return None
    return compiled


def build(out_root: str | Path | None = None, modules: list[str] | None = None, *, verbose: bool = False) -> list[Path]:
    """Compile each module of ``COMPILED`` (or ``modules``) with Cython into ``out_root/crg/`` (default: beside
    the sources). Returns the extension files written.

    The copy compiled is the source's text with its digest appended as ``SOURCE_DIGEST``; nothing else changes.
    """
    try:
        from Cython.Build import cythonize
    except ImportError as err:
        raise RuntimeError("building the compiled copies needs Cython: pip install cython") from err
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    out_root = Path(out_root) if out_root is not None else _PACKAGE_ROOT
    work = Path(tempfile.mkdtemp(prefix="gc-speedups-"))
    try:
        extensions = []
        for module in modules or list(COMPILED):
            source = _source_file(module)
            name = COMPILED[module]
            copy = work / "src" / (name.replace(".", "_") + ".py")
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(source.read_text(encoding="utf-8") +
                            f"\n\n#: the source this copy was compiled from (crg.speedups.load_compiled checks it)\n"
                            f'SOURCE_DIGEST = "{source_digest(source)}"\n', encoding="utf-8")
            extensions.append(Extension(name, [str(copy)]))
        # annotations are documentation here, not C types: the copy accepts every argument the module accepts
        extensions = cythonize(extensions, quiet=not verbose, build_dir=str(work / "c"),
                               compiler_directives={"language_level": 3, "annotation_typing": False})
        dist = Distribution({"name": "gc-speedups", "ext_modules": extensions})
        command = build_ext(dist)
        command.build_lib = str(out_root)
        command.build_temp = str(work / "tmp")
        command.ensure_finalized()
        command.run()
        return [out_root / Path(command.get_ext_filename(ext.name)) for ext in extensions]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compiled_status() -> dict[str, str]:
    """``{module: "current" | "stale" | "not built"}``, with ``" (off: GC_PURE_PYTHON)"`` added where turned off."""
    off = os.environ.get("GC_PURE_PYTHON", "") not in ("", "0")
    out = {}
    for module, name in COMPILED.items():
        spec = importlib.util.find_spec(name)
        if spec is None:
            state = "not built"
        else:
            compiled = importlib.import_module(name)
            current = getattr(compiled, "SOURCE_DIGEST", None) == source_digest(_source_file(module))
            state = "current" if current else "stale"
        out[module] = state + (" (off: GC_PURE_PYTHON)" if off else "")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "status"])
    ap.add_argument("--verbose", action="store_true", help="show Cython's and the compiler's output")
    args = ap.parse_args(argv)
    if args.command == "build":
        try:
            paths = build(verbose=args.verbose)
        except RuntimeError as err:  # no Cython: say so, without a traceback
            raise SystemExit(f"python -m crg.speedups build: {err}") from None
        for path in paths:
            print(f"built {path}")
    for module, state in compiled_status().items():
        print(f"{module}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
