"""The study's tables: mean +- std over seeds of each run's results, laid out as the papers' tables.

Pure functions over the study's ``results.json`` (no torch). The layout of each table is data
(:data:`TABLES`: rows are runs, columns are paths into a run's per-seed results), so a table is
checked, changed or added without touching the code that renders it.

Results layout (written by ``experiments/run_study.py``)::

    {"study": {...},
     "runs": {"composer": {"label": "COMPOSER", "model": "composer",
                           "seeds": {"0": {"test": {"R@1": 54.0, ...}, "mcd": {...}, "windows": [...],
                                           "phrase": {...}, "hard_negatives": {...}, "config": {...},
                                           "num_parameters": ..., "train_seconds": ...}, "1": {...}}}}}

A cell is the mean and sample standard deviation (ddof = 1) over the seeds that have the value;
a run or value that is missing shows as "–", so a partial study still renders.

>>> res = {"runs": {"a": {"seeds": {"0": {"test": {"R@1": 50.0}}, "1": {"test": {"R@1": 54.0}}}}}}
>>> format_cell(summarize(seed_values(res, "a", ("test", "R@1"))))
'52.0 ± 2.8'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from composer.evaluation.caption_subsets import length_bucket_labels

__all__ = [
    "COLUMN_KINDS",
    "FIGURE4_ROWS",
    "TABLES",
    "Cell",
    "Column",
    "Row",
    "TableSpec",
    "WindowPoint",
    "format_cell",
    "mcd_compounds",
    "render_all",
    "render_table",
    "render_timing_table",
    "render_window_table",
    "seed_values",
    "summarize",
    "table_cells",
    "window_series",
]

COLUMN_KINDS = ("metric", "value", "millions")
MISSING = "–"


@dataclass(frozen=True)
class Cell:
    """Mean and sample std of a value over ``n`` seeds (std None for fewer than 2; mean None for none)."""

    mean: float | None
    std: float | None
    n: int
    values: tuple = ()


@dataclass(frozen=True)
class Column:
    """A table column: ``path`` into a seed's result; ``kind`` ``metric`` (mean +- std), ``value`` (a
    setting, shown once: e.g. the CT depth), ``millions`` (a count in millions, e.g. parameters)."""

    header: str
    path: tuple[str, ...]
    kind: str = "metric"
    digits: int = 1

    def __post_init__(self):
        if self.kind not in COLUMN_KINDS:
            raise ValueError(f"column {self.header!r}: kind {self.kind!r} is not one of {COLUMN_KINDS}")


@dataclass(frozen=True)
class Row:
    """A table row: the run ``run`` shown as ``label``; ``group`` heads a block of rows (IL-CLIP Table 4)."""

    label: str
    run: str
    group: str = ""


@dataclass(frozen=True)
class TableSpec:
    """One table: ``key`` names its file (``tables/{key}.md``)."""

    key: str
    title: str
    rows: tuple[Row, ...]
    columns: tuple[Column, ...]
    note: str = ""


# ---------------------------------------------------------------------------- values
def _get(result: Mapping, path: Sequence[str]):
    node = result
    for key in path:
        found = (isinstance(node, Mapping) and key in node) or \
            (isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node))
        if not found:
            return None
        node = node[key]
    return node


def _seeds(results: Mapping, run: str) -> list[tuple[str, Mapping]]:
    seeds = ((results.get("runs") or {}).get(run) or {}).get("seeds") or {}
    return sorted(seeds.items(), key=lambda kv: (len(kv[0]), kv[0]))


def seed_values(results: Mapping, run: str, path: Sequence[str]) -> list:
    """The value at ``path`` of each seed's result of ``run`` (seeds without it left out), seed order.

    >>> seed_values({"runs": {"a": {"seeds": {"1": {"x": 2}, "0": {"x": 1}, "2": {}}}}}, "a", ("x",))
    [1, 2]
    """
    out = []
    for _, result in _seeds(results, run):
        v = _get(result, path)
        if v is not None:
            out.append(v)
    return out


def summarize(values: Sequence) -> Cell:
    """Mean and sample standard deviation (ddof = 1) of finite numbers; non-numbers are kept as values.

    >>> summarize([1.0, 3.0])
    Cell(mean=2.0, std=1.4142135623730951, n=2, values=(1.0, 3.0))
    >>> summarize([5.0]).std is None, summarize([]).mean is None
    (True, True)
    """
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(float(v))]
    if not nums:
        return Cell(None, None, 0, tuple(values))
    n = len(nums)
    mean = sum(nums) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in nums) / (n - 1)) if n >= 2 else None
    return Cell(mean, std, n, tuple(values))


def format_cell(cell: Cell, kind: str = "metric", digits: int = 1) -> str:
    """``"52.0 ± 2.8"``; ``"52.0"`` for one seed; ``"–"`` when missing. ``value`` cells show the setting
    (``"3"``, or ``"1/3"`` if seeds disagree); ``millions`` cells the mean count in millions.

    >>> format_cell(Cell(2.0, None, 1), digits=2), format_cell(Cell(None, None, 0))
    ('2.00', '–')
    >>> format_cell(summarize([3, 3]), "value"), format_cell(summarize([4_300_000]), "millions")
    ('3', '4.3M')
    """
    if kind == "value":
        distinct = list(dict.fromkeys(str(v) for v in cell.values))
        return "/".join(distinct) if distinct else MISSING
    if cell.mean is None:
        return MISSING
    if kind == "millions":
        return f"{cell.mean / 1e6:.{digits}f}M"
    text = f"{cell.mean:.{digits}f}"
    if cell.std is not None:
        text += f" ± {cell.std:.{digits}f}"
    return text


def table_cells(spec: TableSpec, results: Mapping) -> list[list[Cell]]:
    """(rows, columns) cells of ``spec`` over ``results``."""
    return [[summarize(seed_values(results, row.run, col.path)) for col in spec.columns] for row in spec.rows]


def _seed_count(results: Mapping, run: str) -> int:
    return len(_seeds(results, run))


def render_table(spec: TableSpec, results: Mapping) -> str:
    """The table as Markdown: a title, a header, one line per row, and a note with the seed counts."""
    cells = table_cells(spec, results)
    grouped = any(r.group for r in spec.rows)
    header = (["", "Method"] if grouped else ["Method"]) + [c.header for c in spec.columns] + ["seeds"]
    lines = [f"### {spec.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    previous = None
    partial = False
    for row, row_cells in zip(spec.rows, cells):
        seeds = _seed_count(results, row.run)
        texts = []
        for cell, col in zip(row_cells, spec.columns):
            text = format_cell(cell, col.kind, col.digits)
            if col.kind == "metric" and 0 < cell.n < seeds:  # e.g. a figure older runs' evaluations lack
                text += f" (n={cell.n})"
                partial = True
            texts.append(text)
        lead = [row.label]
        if grouped:
            lead = [row.group if row.group != previous else "", row.label]
            previous = row.group
        lines.append("| " + " | ".join(lead + texts + [str(seeds)]) + " |")
    lines.append("")
    note = "Mean ± sample standard deviation over the seeds that finished (\"seeds\"); – = not run or not evaluated."
    if partial:
        note += " (n=k): over the k of those seeds whose evaluation has the figure."
    lines.append(f"{spec.note} {note}".strip())
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- Figure 4's windows
@dataclass(frozen=True)
class WindowPoint:
    """One compound-divergence window: its divergence and a metric over seeds."""

    compound_divergence: float
    cell: Cell


def window_series(results: Mapping, run: str, metric: str = "R@1") -> list[WindowPoint]:
    """``run``'s ``metric`` on each window, over seeds, by increasing compound divergence.

    Windows are matched across seeds by their compound divergence (rounded to 1e-6): every seed is
    evaluated on the same split files, so they agree; a window only some seeds have keeps fewer values.

    >>> res = {"runs": {"m": {"seeds": {
    ...     "0": {"windows": [{"compound_divergence": 0.3, "R@1": 10.0}, {"compound_divergence": 0.1, "R@1": 30.0}]},
    ...     "1": {"windows": [{"compound_divergence": 0.3, "R@1": 14.0}, {"compound_divergence": 0.1, "R@1": 20.0}]}}}}}
    >>> [(p.compound_divergence, p.cell.mean) for p in window_series(res, "m")]
    [(0.1, 25.0), (0.3, 12.0)]
    """
    by_cd: dict[float, list] = {}
    for _, result in _seeds(results, run):
        for w in result.get("windows") or []:
            cd = w.get("compound_divergence")
            if cd is None or w.get(metric) is None:
                continue
            by_cd.setdefault(round(float(cd), 6), []).append(w[metric])
    return [WindowPoint(cd, summarize(v)) for cd, v in sorted(by_cd.items())]


def mcd_compounds(results: Mapping) -> str:
    """The compound definition the study's MCD split and windows were made for (``template`` when unrecorded).

    >>> mcd_compounds({"study": {"data": {"mcd": {"compounds": "semantic"}}}}), mcd_compounds({})
    ('semantic', 'template')
    """
    return (((results.get("study") or {}).get("data") or {}).get("mcd") or {}).get("compounds", "template")


def render_window_table(results: Mapping, rows: Sequence[Row], metric: str = "R@1") -> str:
    """Figure 4 as a table: one line per window (its compound divergence), one column per model."""
    series = {row.run: {p.compound_divergence: p.cell for p in window_series(results, row.run, metric)}
              for row in rows}
    cds = sorted({cd for s in series.values() for cd in s})
    header = [f"compound divergence ({mcd_compounds(results)})"] + [row.label for row in rows]
    lines = [f"### COMPOSER Figure 4: sentence {metric} against the compound divergence of the split", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cd in cds:
        cells = [format_cell(series[row.run].get(cd, Cell(None, None, 0))) for row in rows]
        lines.append("| " + " | ".join([f"{cd:.3f}"] + cells) + " |")
    if not cds:
        lines.append("| " + " | ".join([MISSING] * len(header)) + " |")
    lines += ["", ("Each window is a split of the MCD ranking (same images for every model and seed); mean ± "
                   "sample std over seeds.")]
    return "\n".join(lines) + "\n"


def render_timing_table(results: Mapping) -> str:
    """Per run: seeds finished, mean training and evaluation seconds, training steps."""
    lines = ["### Runs and timings", "", "| run | model | seeds | steps | train s | eval s |", "|---|---|---|---|---|---|"]
    for run, entry in (results.get("runs") or {}).items():
        cells = [summarize(seed_values(results, run, (k,))) for k in ("steps", "train_seconds", "eval_seconds")]
        lines.append(f"| {run} | {entry.get('model', '')} | {_seed_count(results, run)} | "
                     f"{format_cell(cells[0], digits=0)} | {format_cell(cells[1], digits=0)} | "
                     f"{format_cell(cells[2], digits=0)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- the papers' tables
def _recall(prefix: str, key: str, ks=(1, 5)) -> tuple[Column, ...]:
    return tuple(Column(f"{prefix} R@{k}", (key, f"R@{k}")) for k in ks)


_IN_MCD = _recall("in-domain", "test") + (Column("systematic R@1", ("systematic", "R@1")),) + _recall("MCD", "mcd")
_MAIN_ROWS = (Row("VSE", "vse"), Row("Flat cross-modal (ViLBERT-style)", "flat"), Row("COMPOSER", "composer"),
              Row("CLIP", "clip"), Row("Codebook-CLIP", "codebook_clip"), Row("IL-CLIP", "il_clip"))
# issue 36: NegCLIP (it encodes twice the text of the others per step: each caption and its word swap) and the
# models trained with structural negatives (verified-false captions of the image as extra caption negatives)
_NEGCLIP_ROWS = (Row("NegCLIP (2x text)", "negclip"), Row("IL-NegCLIP (2x text)", "il_negclip"))
_STRUCTURAL_ROWS = (Row("COMPOSER + structural", "composer_structneg"), Row("Flat + structural", "flat_structneg"),
                    Row("VSE + structural", "vse_structneg"), Row("CLIP + structural", "clip_structneg"),
                    Row("NegCLIP (2x text) + structural", "negclip_structneg"))
_SWAP_ONLY_ROWS = (Row("COMPOSER + HN-SWAP only", "composer_structneg_swap_only"),
                   Row("Flat + HN-SWAP only", "flat_structneg_swap_only"),
                   Row("CLIP + HN-SWAP only", "clip_structneg_swap_only"))
_KINDS = ("HN-ATOM", "HN-SWAP", "HN-NEG", "HN-COMP")
#: the world's negatives by type and edit (features/world/hard_negatives.py's change ops), in a reading order
_EDITS = ("HN-ATOM/replace_attribute", "HN-ATOM/replace_shape", "HN-ATOM/replace_relation", "HN-SWAP/swap_arguments",
          "HN-NEG/negate_attribute", "HN-NEG/negate_caption", "HN-COMP/move_attribute", "HN-COMP/swap_attributes",
          "HN-COMP/split_compound")
_LOKO_ROWS = tuple(Row(f"{label}, all but {kind}", f"{run}_structneg_no_{kind[3:].lower()}", label)
                   for run, label in (("composer", "COMPOSER"), ("clip", "CLIP")) for kind in _KINDS)


def _ceiling(role: str, oracle: str, k: int = 1) -> tuple[str, ...]:
    """Path of an oracle's single-positive R@k on a set (the report's ``ceilings``)."""
    return (role, "ceilings", oracle, "sentence", f"R@{k}")
_HN = ("hard_negatives",)
_LENGTH_BUCKETS = tuple(length_bucket_labels())  # caption lengths in words: 1-6, 7-9, ...

TABLES: tuple[TableSpec, ...] = (
    TableSpec("composer_table2",
              "COMPOSER Table 2: text-to-image retrieval, in-domain, systematic and on the MCD split",
              _MAIN_ROWS,
              _recall("in-domain", "test", (1, 5, 10)) + _recall("systematic", "systematic", (1, 5, 10))
              + _recall("MCD", "mcd", (1, 5)),
              note="In-domain: the world's test split (test_iid on the compositional world); systematic: captions "
                   "each holding a colour-shape or relation compound held out of every training image and caption; "
                   "MCD: the maximum-compound-divergence split of the val and test images against the training "
                   "split (the paper's F30K→COCO-MCD column)."),
    TableSpec("generalisation_gap", "Generalisation gap: in-domain minus systematic sentence R@1, per seed",
              _MAIN_ROWS,
              (Column("in-domain R@1", ("test", "R@1")), Column("systematic R@1", ("systematic", "R@1")),
               Column("productivity R@1", ("productivity", "R@1")), Column("gap R@1", ("gap", "R@1")),
               Column("gap, any-true R@1", ("gap", "any_true_R@1")),
               Column("in-domain exact-oracle R@1", _ceiling("test", "exact")),
               Column("systematic exact-oracle R@1", _ceiling("systematic", "exact")),
               Column("systematic bound-objects R@1", _ceiling("systematic", "bound_objects")),
               Column("systematic bag-of-words R@1", _ceiling("systematic", "bag_of_words"))),
              note="The gap is computed per seed (in-domain R@1 minus systematic R@1 of the same model), then "
                   "averaged; any-true counts every image a caption is true of (exact, from the scene graphs). "
                   "The oracle columns are what exact truth, a bag of bound objects (roles ignored) and a bag of "
                   "words reach on the same set (single-positive R@1, ties broken at random); they are the same "
                   "for every model and bound what structure can be worth on the set."),
    TableSpec("gap_by_length", "Generalisation gap within caption-length buckets: in-domain and systematic R@1",
              _MAIN_ROWS,
              tuple(Column(f"{label} {bucket}", (role, "sentence_by_length", bucket, "R@1"))
                    for bucket in _LENGTH_BUCKETS for role, label in (("test", "in-domain"), ("systematic", "syst."))),
              note="Words per caption; each cell is R@1 over the captions of that length in the set (a bucket with "
                   "few captions is noisy: their counts are in each run's results.json). Systematic captions tend "
                   "to be longer (docs/world.md), so a gap read within buckets compares like with like."),
    TableSpec("twin_groups", "Minimal-pair twin groups (Winoground scores), in-domain and systematic",
              _MAIN_ROWS,
              tuple(Column(f"{label} {score}", (role, "twins", score)) for role, label in
                    (("test", "in-domain"), ("systematic", "systematic")) for score in ("text", "image", "group"))
              + tuple(Column(f"{label} {kind} group", (role, "twins", kind, "group"))
                      for role, label in (("test", "in-domain"), ("systematic", "systematic"))
                      for kind in ("relation", "binding")),
              note="A twin group: two captions with the same words and different truths (relation direction, "
                   "attribute binding) and the two images each is true of (the counterfactual twin re-rendered). "
                   "Text: both captions prefer their own image's caption; image: both images their own caption; "
                   "group: both. Chance: 25 / 25 / 16.7; ties count as failures (001's conventions)."),
    TableSpec("twin_interaction",
              "Twin groups: does the caption preference depend on the image? (beside the Winoground scores)",
              _MAIN_ROWS + _NEGCLIP_ROWS + _STRUCTURAL_ROWS + _SWAP_ONLY_ROWS,
              tuple(Column(f"{label} {kind} {header}", (role, "twins", "interaction", kind, key), digits=digits)
                    for role, label in (("test", "in-domain"), ("systematic", "systematic"))
                    for kind in ("relation", "binding")
                    for header, key, digits in (("dependence", "image_dependence", 2), ("same caption %", "same_caption", 1),
                                                ("ties %", "tie", 1), ("wrong way %", "wrong_way", 1))),
              note="d(i) = score(caption 0, image i) - score(caption 1, image i). Dependence: sum |d(0) - d(1)| / "
                   "sum (|d(0)| + |d(1)|), in [0, 1]: 0 when the image moves both captions' scores alike (a score "
                   "f(caption) + g(image) gets 0, and the same caption wins on both images), 1 when the preference "
                   "flips with the image in every group. Same caption: one caption wins on both images (blind to "
                   "the difference); ties: d = 0 exactly on an image; wrong way: each image prefers the other "
                   "caption (reads the difference backwards); the rest is the text score. A group score of 0 with "
                   "dependence near 0 is a model that does not read the difference."),
    TableSpec("structural_negatives",
              "Structural negatives in training: twin group scores and retrieval, with and without (issue 36)",
              _MAIN_ROWS[:4] + _NEGCLIP_ROWS[:1] + _STRUCTURAL_ROWS,
              tuple(Column(f"{label} {kind} group", (role, "twins", kind, "group"))
                    for role, label in (("test", "in-domain"), ("systematic", "systematic"))
                    for kind in ("relation", "binding"))
              + (Column("in-domain R@1", ("test", "R@1")), Column("systematic R@1", ("systematic", "R@1")),
                 Column("I2T all (hard negatives)", _HN + ("i2t",))),
              note="Structural: each positive caption also gets a caption of the world verified false of its image "
                   "(CREPE's HN-ATOM / SWAP / NEG / COMP edits, checked against the scene graph), never one naming "
                   "a held-out compound or an evaluation caption: an extra caption negative of COMPOSER's and the "
                   "flat model's match loss, an extra text column of that image in VSE's and CLIP's contrastive "
                   "loss. NegCLIP encodes twice the text per step (each caption and its word swap), and compares "
                   "images with its pool's nearest neighbours. Group chance 16.7."),
    TableSpec("structural_leave_one_out",
              "Structural negatives, leave one kind out: does training on the other kinds transfer to it?",
              (Row("COMPOSER, all kinds", "composer_structneg", "COMPOSER"),) + _LOKO_ROWS[:4]
              + (Row("COMPOSER, HN-SWAP only", "composer_structneg_swap_only", "COMPOSER"),
                 Row("Flat, all kinds", "flat_structneg", "Flat cross-modal"),
                 Row("Flat, HN-SWAP only", "flat_structneg_swap_only", "Flat cross-modal"),
                 Row("CLIP, all kinds", "clip_structneg", "CLIP"),) + _LOKO_ROWS[4:]
              + (Row("CLIP, HN-SWAP only", "clip_structneg_swap_only", "CLIP"),),
              tuple(Column(f"I2T {t}", _HN + ("i2t_by_type", t)) for t in _KINDS)
              + (Column("systematic relation group", ("systematic", "twins", "relation", "group")),
                 Column("systematic binding group", ("systematic", "twins", "binding", "group")),
                 Column("in-domain R@1", ("test", "R@1"))),
              note="Each 'all but' row trains with the other three kinds only: its I2T on the left-out kind (the "
                   "hard-negative evaluation, on test images) is transfer; compare with the all-kinds row and with "
                   "the model without structural negatives (structural_negatives table). 'HN-SWAP only': every "
                   "structural negative exchanges a relation's two arguments (captions without a relation get "
                   "none), the strongest signal for a relation's direction these runs give."),
    TableSpec("composer_table3", "COMPOSER Table 3: primitive encoding with and without CrossAtt",
              (Row("✗ (mean of sub-words)", "composer_no_crossatt"), Row("✓ (CrossAtt)", "composer")), _IN_MCD),
    TableSpec("composer_table4", "COMPOSER Table 4: modulators",
              (Row("Replace", "composer_replace"), Row("MLP", "composer_mlp"), Row("FiLM", "composer")), _IN_MCD),
    TableSpec("composer_table5", "COMPOSER Table 5: MVSA supervision, sentence and phrase R@1",
              (Row("Flat cross-modal (ViLBERT-style)", "flat"), Row("+ MVSA", "flat_mvsa"),
               Row("COMPOSER", "composer_no_mvsa"), Row("+ MVSA", "composer")),
              (Column("in-domain sentence R@1", ("test", "R@1")),
               Column("in-domain phrase R@1", ("phrase", "single", "R@1")),
               Column("phrase R@1, all true images", ("phrase", "multi", "R@1")),
               Column("MCD sentence R@1", ("mcd", "R@1"))),
              note="Phrase: up to the profile's phrases per test caption, the caption's image the answer (the "
                   "paper's protocol); 'all true images' counts any image the phrase is true of (exact, from the "
                   "scene graphs)."),
    TableSpec("composer_table6", "COMPOSER Table 6: Predicate / Composition Transformer depth",
              (Row("COMPOSER", "composer_pt1"), Row("COMPOSER", "composer"), Row("COMPOSER", "composer_ct1"),
               Row("COMPOSER", "composer_ct5"), Row("Flat cross-modal (ViLBERT-style)", "flat")),
              (Column("PT", ("config", "model", "pt_layers"), "value"),
               Column("CT", ("config", "model", "ct_layers"), "value")) + _IN_MCD +
              (Column("# params", ("num_parameters",), "millions"),)),
    TableSpec("composer_table7", "COMPOSER Table 7: parses with branches pruned at random",
              (Row("Un-pruned", "composer"), Row("Probability=0.1", "composer_prune10"),
               Row("Probability=0.3", "composer_prune30"), Row("Probability=0.5", "composer_prune50")), _IN_MCD,
              note="Training and evaluation CRGs alike are built from the pruned parses (the MCD split's images "
                   "are those of the un-pruned parses)."),
    TableSpec("parsers_and_negatives", "Parses (gold vs spaCy) and the match loss's caption negatives",
              (Row("COMPOSER, gold trees, random caption negatives", "composer"),
               Row("COMPOSER, spaCy parses", "composer_spacy"),
               Row("COMPOSER, one hard caption negative", "composer_hardneg"),
               Row("Flat cross-modal, random caption negatives", "flat"),
               Row("Flat cross-modal, one hard caption negative", "flat_hardneg")),
              (Column("val R@1", ("val", "R@1")),) + _IN_MCD,
              note="spaCy: every CRG of the run (training and evaluation) from spaCy's parses of the world's "
                   "captions instead of its gold trees. Hard: one of the match loss's two caption negatives is "
                   "drawn from the positive's 100 nearest training captions by MiniLM embedding (ViLBERT's "
                   "sampler), the other at random; the default is chosen on val."),
    TableSpec("il_table1", "IL-CLIP Table 1: compositional hard negatives (world, verified false) and retrieval",
              (Row("CLIP", "clip"), Row("Codebook-CLIP", "codebook_clip"), Row("NegCLIP (2x text)", "negclip"),
               Row("IL-CLIP", "il_clip"), Row("IL-NegCLIP (2x text)", "il_negclip"), Row("VSE", "vse"), Row("Flat cross-modal (ViLBERT-style)", "flat"),
               Row("COMPOSER", "composer")) + _STRUCTURAL_ROWS,
              tuple(Column(f"I2T {t}", _HN + ("i2t_by_type", t)) for t in ("HN-ATOM", "HN-SWAP", "HN-NEG", "HN-COMP"))
              + (Column("I2T all", _HN + ("i2t",)), Column("T2I", _HN + ("t2i",)), Column("Group", _HN + ("group",)),
                 Column("Avg (recursive)", _HN + ("average",)), Column("in-domain R@1", ("test", "R@1"))),
              note="I2T: the true caption above all its negatives of the type (CREPE); T2I: the true image above "
                   "distractor images holding the caption's objects; Group: both; Avg: vl_compo's recursive "
                   "average of I2T (by type), T2I and Group. Accuracies in %, ties count as failures. "
                   "'+ structural': trained with the world's structural negatives (structural_negatives table), "
                   "the same kinds these columns score."),
    TableSpec("hard_negatives_by_edit",
              "Hard negatives by edit: which change of the caption each model detects (I2T, test images)",
              _MAIN_ROWS + _NEGCLIP_ROWS + _STRUCTURAL_ROWS
              + tuple(Row(f"{r.group} + structural, {r.label.split(', ')[1]}", r.run) for r in _LOKO_ROWS)
              + _SWAP_ONLY_ROWS,
              tuple(Column(edit.replace("/", " "), _HN + ("i2t_by_edit", edit)) for edit in _EDITS),
              note="Each CREPE type split by the edit that made the negative (crg.hard_negatives' change ops): "
                   "HN-ATOM replaces an attribute (replace_attribute: colour, size, material), a shape "
                   "(replace_shape) or a relation word (replace_relation, e.g. in front of -> behind: like HN-SWAP, "
                   "only the objects' positions "
                   "tell it false); HN-NEG negates an attribute or the caption; HN-COMP moves, exchanges or splits "
                   "attributes. Chance 50 for one negative. Text alone gives some away "
                   "(benchmarks/world_blind_negatives.py): HN-NEG (no true caption of the world is negated) and "
                   "compound splits (an added 'and') fully, relation-word replacements mostly; HN-SWAP and attribute "
                   "swaps keep every word."),
    TableSpec("il_table4", "IL-CLIP Table 4: ablations",
              (Row("cycle x0.5", "il_cycle_short", "Generation cycle"), Row("cycle x1", "il_clip", "Generation cycle"),
               Row("cycle x2", "il_cycle_long", "Generation cycle"),
               Row("Language agent", "il_clip", "Spawn target"), Row("Vision agent", "il_spawn_vision", "Spawn target"),
               Row("Alternately", "il_spawn_alternate", "Spawn target"),
               Row("w weight fixed", "il_clip", "Codebook continuity"),
               Row("w/o weight fixed", "il_no_freeze", "Codebook continuity"),
               Row("w codebook", "il_clip", "IL w/wo codebook"), Row("w/o codebook", "il_no_codebook", "IL w/wo codebook")),
              (Column("COMP", _HN + ("average",)), Column("CLS (in-domain R@1)", ("test", "R@1"))),
              note="COMP: the recursive hard-negative average (IL-CLIP Table 1's columns); CLS: the paper's zero-shot "
                   "classification has no counterpart on the world, in-domain retrieval R@1 stands in for recognition."),
)

FIGURE4_ROWS = (Row("COMPOSER", "composer"), Row("Flat (ViLBERT-style)", "flat"), Row("VSE", "vse"),
                Row("CLIP", "clip"), Row("Codebook-CLIP", "codebook_clip"), Row("IL-CLIP", "il_clip"))


def render_all(results: Mapping) -> dict[str, str]:
    """Every table as Markdown, keyed by file stem (``composer_table2`` ... ``composer_figure4``, ``timings``,
    ``il_generations``). A table none of whose runs the study plans (``study.runs``; a profile of the CLIP
    family alone has no COMPOSER ablation) is left out; a planned run not yet finished still shows as "–"."""
    planned = set((results.get("study") or {}).get("runs") or ())
    out = {spec.key: render_table(spec, results) for spec in TABLES
           if not planned or planned & {row.run for row in spec.rows}}
    out["composer_figure4"] = render_window_table(results, FIGURE4_ROWS)
    out["timings"] = render_timing_table(results)
    from composer.report.generations import render_generation_table  # built on this module's cells

    out["il_generations"] = render_generation_table(results)
    return out
