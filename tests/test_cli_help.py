"""Every ``gc-*`` console script answers ``--help`` without importing torch, Lightning or the NLP libraries:
their parsers import only what the flags need, the library comes after parsing (the time it takes is
benchmarks/bench_cli_help.py's; this checks what is imported, which does not depend on the machine)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what a parser must not import: seconds each (torch and Lightning alone are ~4 s on the 2-core machine)
HEAVY = ("torch", "lightning", "transformers", "spacy", "nltk", "lemminflect", "ray", "matplotlib", "sklearn")


def console_scripts() -> dict[str, str]:
    call = next(n for n in ast.walk(ast.parse((ROOT / "setup.py").read_text(encoding="utf-8")))
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    entry_points = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "entry_points"))
    return dict(line.replace(" ", "").split("=", 1) for line in entry_points["console_scripts"])


@pytest.mark.parametrize("name, target", sorted(console_scripts().items()))
def test_help_imports_no_heavy_library(name, target):
    module, function = target.split(":")
    probe = (f"import contextlib, io, json, sys\nfrom {module} import {function} as main\nout = io.StringIO()\n"
             f"with contextlib.redirect_stdout(out):\n    try:\n        main(['--help'])\n    except SystemExit:\n"
             f"        pass\nprint(json.dumps({{'help': out.getvalue(), 'heavy': [m for m in {HEAVY!r} "
             f"if m in sys.modules]}}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT,
                          check=True)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "usage:" in report["help"]
    assert report["heavy"] == [], f"{name} --help imported {report['heavy']}"


def test_the_hard_negative_command_offers_the_library_s_types():
    from crg.cli.hard_negatives import DEFAULT_TYPES, TYPES
    from crg.hard_negatives import HN_ATOM, HN_SWAP, HN_TYPES

    assert TYPES == HN_TYPES and DEFAULT_TYPES == (HN_ATOM, HN_SWAP)
