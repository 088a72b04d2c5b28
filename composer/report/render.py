"""A study's tables and plots, made from its ``results.json`` alone (:mod:`composer.report.results`), so they
are remade without training anything: ``gc-study --report-only``, or :func:`render_report` on a study folder.

Writes ``tables.md`` (a header, every table, the plateau and recipe-search tables when there are), each table
as ``tables/KEY.md`` (:mod:`composer.report.tables`) and the figures as ``plots/*.png``
(:mod:`composer.report.plots`).
"""

from __future__ import annotations

import json
from pathlib import Path

from composer.models import registry
from crg.outputs import write_text_atomic

__all__ = ["PLOT_FILES", "render_report"]

TABLES_DIR, PLOTS_DIR = "tables", "plots"
PLOT_FILES = ("composer_figure4_r1_vs_cd.png", "il_clip_loss_generations.png", "il_clip_easy_to_learn.png")


def render_report(out: str | Path, results: dict | None = None) -> None:
    """The tables and plots of the study in ``out`` from ``results`` (default: ``out/results.json``)."""
    from composer.report.convergence import CURVES_PLOT, plot_main_curves, render_plateau_table
    from composer.report.plots import loss_curves, plot_il_loss, plot_probe, plot_r1_vs_cd, probe_curves
    from composer.report.tables import FIGURE4_ROWS, Row, mcd_compounds, render_all

    out = Path(out)
    results = json.loads((out / "results.json").read_text()) if results is None else results
    study, found = results["study"], results["runs"]
    tables = render_all(results)
    for key, text in tables.items():
        write_text_atomic(out / TABLES_DIR / f"{key}.md", text)
    mcd = study["data"]["mcd"]
    head = (f"# Study results ({study['profile_name']} profile)\n\nSeeds {study['seeds']}; {len(found)} runs; "
            f"git {study['git']} (runs trained at {', '.join(study['run_gits']) or '-'}); "
            f"{study['hardware']}. MCD split: {mcd['num_images']} images, "
            f"{mcd_compounds(results)} compound divergence {mcd['compound_divergence']} "
            f"(random sets {mcd['random_compound_divergence']}; under every definition: "
            f"{mcd.get('compound_divergences', {})}).\n"
            + (f"\nMissing: {', '.join(study['missing'])}.\n" if study["missing"] else "")
            + "".join(f"\nFailed: {k}: {v}\n" for k, v in study["failed"].items()) + "\n")
    search_table = out / TABLES_DIR / "search.md"  # written by the recipe search, when there was one
    extra = [search_table.read_text()] if search_table.exists() else []
    plateau_table = render_plateau_table(found)  # a plateau profile: how each run ended
    if plateau_table:
        write_text_atomic(out / TABLES_DIR / "plateau.md", plateau_table)
        extra.insert(0, plateau_table)
    write_text_atomic(out / "tables.md", head + "\n".join([*tables.values(), *extra]))
    plots = out / PLOTS_DIR
    plots.mkdir(parents=True, exist_ok=True)
    plot_r1_vs_cd(results, FIGURE4_ROWS, plots / PLOT_FILES[0])
    plot_il_loss(loss_curves(results, "il_clip"), plots / PLOT_FILES[1])
    plot_probe(probe_curves(results, [Row("IL-CLIP", "il_clip"), Row("Codebook-CLIP", "codebook_clip"),
                                      Row("CLIP", "clip")]), plots / PLOT_FILES[2])
    if plateau_table:
        plot_main_curves(found, [m for m in registry.names() if m in found], plots / CURVES_PLOT)
