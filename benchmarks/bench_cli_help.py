"""How long each ``gc-*`` console script takes to answer ``--help``: fresh processes, wall time.

    python benchmarks/bench_cli_help.py                            # 5 fresh processes per command, interleaved
    python benchmarks/bench_cli_help.py --runs 9 --json help_times.json
    python benchmarks/bench_cli_help.py --root /tmp/old_checkout --root .   # before / after, interleaved

Every console script of setup.py is run as its entry point (``from MODULE import main; main(["--help"])``)
in a fresh interpreter with the checkout first on ``PYTHONPATH``, so the figure is what a user waits for:
interpreter start, the imports the parser needs, the help text. Median and max over the runs, and which
heavy libraries the process imported (none should: the parsers import torch, Lightning and the NLP
libraries only after the flags are parsed). The target (issue 32): under 1 s each. Commands run
round-robin, so machine load hits each alike.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "transformers", "spacy", "nltk", "lemminflect", "scipy", "ray", "matplotlib")
TARGET_S = 1.0


def console_scripts(setup: Path) -> dict[str, str]:
    """``{name: "module:function"}`` of setup.py's console scripts, read from its source (nothing is run)."""
    call = next(n for n in ast.walk(ast.parse(setup.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "setup")
    entry_points = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "entry_points"))
    return dict(line.replace(" ", "").split("=", 1) for line in entry_points["console_scripts"])


def help_probe(target: str) -> str:
    """Python source that runs ``target``'s ``--help`` and prints the heavy modules it imported."""
    module, function = target.split(":")
    return (f"import sys\nfrom {module} import {function} as main\ntry:\n    main(['--help'])\nexcept SystemExit:\n"
            f"    pass\nprint('\\nHEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))")


def run(target: str, env: dict, cwd: Path) -> tuple[float, list[str]]:
    """``(wall seconds, heavy modules loaded)`` of one fresh process answering ``--help``."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", help_probe(target)], capture_output=True, text=True, env=env,
                          cwd=cwd, check=True)
    wall = time.perf_counter() - started
    heavy = proc.stdout.rsplit("HEAVY=", 1)[1].strip()
    if "usage:" not in proc.stdout:
        raise SystemExit(f"{target}: --help printed no usage:\n{proc.stdout}{proc.stderr}")
    return wall, [m for m in heavy.split(",") if m]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per command (default 5)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--root", action="append", default=None,
                    help="a checkout to measure (default: this one); repeat it for a before/after (e.g. a worktree "
                         "of an older commit): the checkouts' runs interleave")
    args = ap.parse_args(argv)
    roots = [Path(r).resolve() for r in (args.root or [ROOT])]
    envs = {root: {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")} for root in roots}
    scripts = {root: console_scripts(root / "setup.py") for root in roots}
    names = list(dict.fromkeys(n for s in scripts.values() for n in s))
    samples: dict = {(root, n): [] for root in roots for n in names}
    heavy: dict = {}
    empty = []
    for _ in range(args.runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        empty.append(time.perf_counter() - started)
        for name in names:
            for root in roots:
                if name in scripts[root]:
                    wall, loaded = run(scripts[root][name], envs[root], root)
                    samples[(root, name)].append(wall)
                    heavy[(root, name)] = loaded
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores; {args.runs} fresh "
          f"processes per command; `python -c pass` takes {statistics.median(empty):.3f} s (median)")
    out = {"runs": args.runs, "python": platform.python_version(), "cores": os.cpu_count(),
           "empty_process_s": statistics.median(empty), "target_s": TARGET_S, "checkouts": {}}
    slow = []
    for root in roots:
        print(f"\n{root}")
        print(f"{'command':<24}{'--help wall s (median)':>24}{'max':>8}  heavy modules loaded")
        figures = out["checkouts"][str(root)] = {}
        for name in names:
            values = samples[(root, name)]
            if not values:
                continue
            median = statistics.median(values)
            print(f"{name:<24}{median:>24.3f}{max(values):>8.3f}  {', '.join(heavy[(root, name)]) or '-'}")
            figures[name] = {"wall_s_median": median, "wall_s_max": max(values), "heavy": heavy[(root, name)]}
            if median >= TARGET_S:
                slow.append(f"{root.name}: {name}")
    print(f"\nover the {TARGET_S:.0f} s target (median): {', '.join(slow) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
