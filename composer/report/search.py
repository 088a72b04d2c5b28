"""The recipe search's table (``tables/search.md``): each model's configurations and their validation R@1, from
the search's results (:mod:`composer.study.search` reads them and writes the table)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["render_search_table"]


def render_search_table(val_r1: Mapping[str, float | None], points: Sequence, chosen: Mapping[str, dict],
                        chance: float | None = None, stopped: Mapping[str, int | None] | None = None, *,
                        columns: int) -> str:
    """The search as Markdown: one line per model, ``columns`` columns of configurations (``points``: each with a
    ``name``, ``model`` and ``setting``, as :class:`composer.study.search.SearchPoint`), the chosen one in bold
    (a configuration ASHA stopped: its best val R@1 and where it was stopped)."""
    stopped = stopped or {}
    lines = ["### Recipe search: validation sentence R@1 of each configuration (seed 0)", ""]
    by_model: dict[str, list] = {}
    for p in points:
        by_model.setdefault(p.model, []).append(p)
    lines += ["| model | " + " | ".join(f"config {k + 1}" for k in range(columns)) + " | chosen |",
              "|---|" + "---|" * (columns + 1)]
    for model, pts in by_model.items():
        cells = []
        for p in pts:
            r1 = val_r1.get(p.name)
            text = f"{p.setting}: " + ("failed" if r1 is None else f"{r1:.1f}")
            if stopped.get(p.name):
                text += f" (stopped at {stopped[p.name] / 1000:.0f}K)"
            cells.append(f"**{text}**" if chosen.get(model, {}).get("run") == p.name else text)
        cells += [""] * (columns - len(cells))
        pick = chosen.get(model)
        setting = next((p.setting for p in pts if pick and p.name == pick["run"]), "–")
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {setting} |")
    lines += ["", "Each model: the same number of runs at the profile's steps and batch; lr = learning rate, init = "
              "the std of every randomly initialised weight (BERT-style models; the CLIP family uses CLIP's "
              "width-scaled init, and no random weight of a VSE with a pretrained text side reads it: six learning "
              "rates instead). Scored on the val split only." + (f" Chance R@1: {chance:.1f}." if chance else "")
              + (" Stopped at N: ASHA ended the configuration after N positive pairs; its best validation "
                 "is shown." if any(stopped.values()) else "")]
    return "\n".join(lines) + "\n"
