"""What importing the packages costs: each statement in fresh interpreters, ``python -X importtime``.

    python benchmarks/bench_import.py                 # 7 fresh processes per statement, interleaved
    python benchmarks/bench_import.py --runs 15 --json import_times.json
    python benchmarks/bench_import.py --root /tmp/old_checkout --root .   # before / after, interleaved

For every statement the figure is the sum of ``-X importtime``'s cumulative times of the modules the statement
imports itself (the interpreter's own start-up, ``site`` and ``encodings``, is left out: it is measured by
``python -c pass``), median and max over the runs; the wall time of the whole process is printed beside it.
The target (issue 32): ``import crg`` under 0.3 s, nltk imported only where a tree is built.
Statements run round-robin, so machine load hits each alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STATEMENTS = (
    "import crg",
    "from crg import load_graph",        # reading a saved graph
    "import crg.build",                  # building one (nltk comes with the first tree)
    "import features.world.generate",    # the world generator
    "import features",
    "import composer",
)
HEAVY = ("nltk", "numpy", "scipy", "sklearn", "torch", "spacy", "lightning", "transformers")


def import_seconds(stderr: str, skip: set[str]) -> float:
    """Sum of the cumulative times of the top-level imports in an ``-X importtime`` report, less ``skip``."""
    total = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        if name.startswith(" ") and not name.startswith("  ") and name.strip() not in skip:  # depth 0
            total += int(cumulative)
    return total / 1e6


def run(statement: str, env: dict, startup: set[str], cwd: Path) -> tuple[float, float, list[str]]:
    """``(import seconds, process wall seconds, heavy modules loaded)`` of one fresh interpreter."""
    probe = f"{statement}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True,
                          env=env, cwd=cwd, check=True)
    wall = time.perf_counter() - started
    return import_seconds(proc.stderr, startup), wall, [m for m in proc.stdout.strip().split(",") if m]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7, help="fresh processes per statement (default 7)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--root", action="append", default=None,
                    help="a checkout whose packages are imported (default: this one); repeat it for a before/after "
                         "(e.g. a worktree of an older commit): the checkouts' runs interleave")
    args = ap.parse_args(argv)
    roots = [Path(r).resolve() for r in (args.root or [ROOT])]
    envs = {root: {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            for root in roots}
    baseline = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True,
                              env=envs[roots[0]], check=True).stderr
    startup = {line.split("|")[2].strip() for line in baseline.splitlines()  # site, encodings, ...
               if line.startswith("import time:") and "cumulative" not in line}
    empty_wall = []
    samples = {(root, s): [] for root in roots for s in STATEMENTS}
    heavy = {}
    for _ in range(args.runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        empty_wall.append(time.perf_counter() - started)
        for statement in STATEMENTS:
            for root in roots:
                seconds, wall, loaded = run(statement, envs[root], startup, root)
                samples[(root, statement)].append((seconds, wall))
                heavy[(root, statement)] = loaded
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores; {args.runs} fresh "
          f"processes per statement; `python -c pass` takes {statistics.median(empty_wall):.3f} s (median)")
    out = {"runs": args.runs, "python": platform.python_version(), "cores": os.cpu_count(),
           "empty_process_s": statistics.median(empty_wall), "checkouts": {}}
    for root in roots:
        print(f"\n{root}")
        print(f"{'statement':<34}{'import ms (median)':>19}{'max':>8}{'process wall s':>16}  heavy modules loaded")
        figures = out["checkouts"][str(root)] = {}
        for statement in STATEMENTS:
            values = samples[(root, statement)]
            imports, walls = [v[0] for v in values], [v[1] for v in values]
            print(f"{statement:<34}{1e3 * statistics.median(imports):>19.1f}{1e3 * max(imports):>8.1f}"
                  f"{statistics.median(walls):>16.3f}  {', '.join(heavy[(root, statement)]) or '-'}")
            figures[statement] = {"import_s_median": statistics.median(imports), "import_s_max": max(imports),
                                  "wall_s_median": statistics.median(walls), "heavy": heavy[(root, statement)]}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
