"""Two finished studies side by side: each run's R@1 (mean ± sample std over its seeds) in both, and the
difference of the means, e.g. the cpu profile with random-init text sides against the same profile with
MiniLM's (docs/results.md, "Pretrained against random-init text").

    python benchmarks/compare_studies.py runs/study_cpu2 runs/study_cpu3 --labels "random-init text" "MiniLM text"
    python benchmarks/compare_studies.py A B --runs composer,flat,vse --metrics test,systematic,mcd

Reads each study's ``results.json`` only (``run_study.py --report-only`` rewrites it from the runs). A
difference is printed only where both studies have the run on the same seeds; the seeds and each study's
commits are printed with the table, so a reader sees what was compared.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from composer.report.tables import format_cell, seed_values, summarize

MAIN = ("composer", "flat", "vse", "clip", "codebook_clip", "il_clip")
METRICS = {"test": ("test", "R@1"), "systematic": ("systematic", "R@1"), "productivity": ("productivity", "R@1"),
           "mcd": ("mcd", "R@1"), "val": ("val", "R@1")}


def load(study: Path) -> dict:
    path = study / "results.json"
    if not path.is_file():
        raise SystemExit(f"error: {path} not found; is {study} a study directory (run_study.py --out)?")
    return json.loads(path.read_text())


def seeds_of(results: dict, run: str) -> list[str]:
    return sorted(((results.get("runs") or {}).get(run) or {}).get("seeds") or {}, key=int)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("studies", nargs=2, type=Path, help="two study directories")
    ap.add_argument("--labels", nargs=2, default=None, help="how the table names them (default: the paths)")
    ap.add_argument("--runs", default=",".join(MAIN))
    ap.add_argument("--metrics", default="test,systematic,mcd", help=f"of {sorted(METRICS)}")
    args = ap.parse_args(argv)
    metrics = args.metrics.split(",")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise SystemExit(f"error: unknown metrics {unknown}; choose among {sorted(METRICS)}")
    a, b = (load(s) for s in args.studies)
    labels = args.labels or [str(s) for s in args.studies]
    for label, study, res in zip(labels, args.studies, (a, b)):
        gits = res["study"].get("run_gits")
        where = (f"runs trained at {', '.join(gits)}" if gits else
                 f"the runs' commits not recorded; report written at {res['study'].get('git')}")
        print(f"{label}: {study} ({where})")
    print()
    header = ["run", "seeds"] + [f"{m} R@1, {lab}" for m in metrics for lab in labels] + [f"{m} Δ" for m in metrics]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for run in args.runs.split(","):
        sa, sb = seeds_of(a, run), seeds_of(b, run)
        cells_a = {m: summarize(seed_values(a, run, METRICS[m])) for m in metrics}
        cells_b = {m: summarize(seed_values(b, run, METRICS[m])) for m in metrics}
        row = [run, ",".join(sa) if sa == sb else f"{','.join(sa) or '–'} / {','.join(sb) or '–'}"]
        row += [format_cell(c[m]) for m in metrics for c in (cells_a, cells_b)]
        for m in metrics:
            comparable = sa == sb and cells_a[m].mean is not None and cells_b[m].mean is not None
            row.append(f"{cells_b[m].mean - cells_a[m].mean:+.1f}" if comparable else "–")
        print("| " + " | ".join(row) + " |")
    print("\nMean ± sample std over the seeds; Δ = second minus first, where both have the run on the same seeds.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
