"""Accuracy of any model on a compositionality benchmark's records, from its (image, text) scores.

The records come from :mod:`crg.benchmarks` (SugarCrepe, ARO, Winoground, CREPE, VL-CheckList); the
scores from any model's ``score_pairs`` (``composer/cli/evaluate_benchmark.py`` does the scoring).
Pure Python: no torch, no dataset.

* A record is **right** when every positive text scores strictly above every negative one: a tie
  is a failure (as in :mod:`composer.models.common.retrieval`), and so is a non-finite score.
* A record whose image the feature store lacks, or one of whose texts could not be parsed into a
  program, is **not scored and counted** (``missing_image``, ``unscorable_text``), never dropped silently.
* Per subset: accuracy over the scored records; where records carry a category (VG-Relation's
  relation, Winoground's tag), per-category accuracy and their macro-average (ARO's headline figure).
* The benchmark's own averages (:attr:`crg.benchmarks.Benchmark.averages`): the plain mean of the
  subsets' accuracies; None when a subset in it has no scored record.
* Records tied by ``group`` (Winoground: image_0 with caption_0, image_1 with caption_1) also give the
  text, image and group scores of Thrush et al. (2022).

>>> from crg.benchmarks import Benchmark, BenchmarkRecord
>>> b = Benchmark("toy", [BenchmarkRecord("1", ("a dog",), ("a cat",), "s", where="r0"),
...                       BenchmarkRecord("1", ("a cat",), ("a dog",), "s", where="r1"),
...                       BenchmarkRecord("9", ("a cow",), ("a hen",), "s", where="r2")], {"all": ("s",)})
>>> scores = {("1", "a dog"): 2.0, ("1", "a cat"): 1.0}
>>> res = evaluate_benchmark(b, scores, missing_images={"9"})
>>> res["subsets"]["s"]["acc"], res["subsets"]["s"]["scored"], res["subsets"]["s"]["missing_image"]
(50.0, 2, 1)
>>> clip_benchmark_metrics(res)
{'acc': 50.0, 's_acc': 50.0, 'all_avg': 50.0}
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

__all__ = ["CLIP_BENCHMARK_KEYS", "benchmark_pairs", "clip_benchmark_filename", "clip_benchmark_metrics",
           "clip_benchmark_results", "evaluate_benchmark", "record_correct", "winoground_scores",
           "write_clip_benchmark_results"]


def _identity(image_id: str) -> str:
    return image_id


def benchmark_pairs(records: Sequence, image_key: Callable[[str], str] = _identity) -> list[tuple[str, str]]:
    """The distinct ``(image, text)`` pairs the records need, in first-use order (image through ``image_key``).

    >>> from crg.benchmarks import BenchmarkRecord
    >>> benchmark_pairs([BenchmarkRecord("a.jpg", ("x",), ("y",), "s"), BenchmarkRecord("a.jpg", ("y",), ("x",), "s")])
    [('a.jpg', 'x'), ('a.jpg', 'y')]
    """
    out = {}
    for r in records:
        image = image_key(r.image_id)
        for t in r.texts:
            out[image, t] = None
    return list(out)


def record_correct(positive_scores: Sequence[float], negative_scores: Sequence[float]) -> bool:
    """Every positive strictly above every negative, all finite.

    >>> record_correct([2.0], [1.0, 1.5]), record_correct([1.0], [1.0]), record_correct([float("nan")], [0.0])
    (True, False, False)
    """
    values = [*positive_scores, *negative_scores]
    if not all(math.isfinite(v) for v in values):
        return False
    return min(positive_scores) > max(negative_scores)


def _pct(num: int, den: int) -> float | None:
    return round(100.0 * num / den, 2) if den else None


def winoground_scores(groups: Mapping[str, Sequence], score: Callable[[str, str], float]) -> dict:
    """Text, image and group scores (%) of two-record groups (record k: image_k with caption_k vs the other).

    Text: each image prefers its caption; image: each caption prefers its image; group: both.
    """
    text = image = group = n = 0
    for members in groups.values():
        if len(members) != 2:
            raise ValueError(f"group of {len(members)} records ({[m.where for m in members]}); a Winoground "
                             f"example has two")
        (i0, c0), (i1, c1) = ((m.image_id, m.positives[0]) for m in members)
        s = {(i, c): score(i, c) for i in (i0, i1) for c in (c0, c1)}
        finite = all(math.isfinite(v) for v in s.values())
        t_ok = finite and s[i0, c0] > s[i0, c1] and s[i1, c1] > s[i1, c0]
        i_ok = finite and s[i0, c0] > s[i1, c0] and s[i1, c1] > s[i0, c1]
        text, image, group, n = text + t_ok, image + i_ok, group + (t_ok and i_ok), n + 1
    return {"text": _pct(text, n), "image": _pct(image, n), "group": _pct(group, n), "groups": n}


def evaluate_benchmark(benchmark, scores: Mapping[tuple[str, str], float], *,
                       image_key: Callable[[str], str] = _identity, missing_images: set[str] = frozenset(),
                       unscorable_texts: set[str] = frozenset()) -> dict:
    """Per-subset accuracy, per-category accuracy, the benchmark's averages and the counts.

    Args:
        benchmark: a :class:`crg.benchmarks.Benchmark`.
        scores: ``(image, text) -> score`` for every pair of every scorable record (image through
            ``image_key``, e.g. a feature store's id).
        missing_images: store ids the feature store lacks; their records are counted, not scored.
        unscorable_texts: texts without a program; their records are counted, not scored.

    Returns ``{"subsets": {subset: {acc, scored, records, missing_image, unscorable_text, correct,
    categories?, macro_acc?}}, "averages": {name: acc}, "overall": {acc, scored, records, ...},
    "winoground"?: {text, image, group, groups}}``; accuracies in percent, None where nothing was scored.
    A pair of a scorable record absent from ``scores`` is an error (the caller did not score it).
    """
    per: dict = defaultdict(lambda: {"records": 0, "scored": 0, "correct": 0, "missing_image": 0,
                                     "unscorable_text": 0, "cats": defaultdict(lambda: [0, 0])})
    groups: dict = defaultdict(list)
    unscored_groups: set = set()
    for r in benchmark.records:
        s = per[r.subset]
        s["records"] += 1
        image = image_key(r.image_id)
        if image in missing_images:
            s["missing_image"] += 1
            unscored_groups.add((r.subset, r.group))
            continue
        if any(t in unscorable_texts for t in r.texts):
            s["unscorable_text"] += 1
            unscored_groups.add((r.subset, r.group))
            continue
        try:
            pos = [scores[image, t] for t in r.positives]
            neg = [scores[image, t] for t in r.negatives]
        except KeyError as err:
            raise KeyError(f"{r.where}: no score for the pair {err.args[0]!r}; score every pair of "
                           f"benchmark_pairs(records) or list its image / text as missing") from None
        ok = record_correct(pos, neg)
        s["scored"] += 1
        s["correct"] += ok
        if r.category is not None:
            c = s["cats"][r.category]
            c[0] += ok
            c[1] += 1
        if r.group is not None:
            groups[r.subset, r.group].append(r)
    subsets = {}
    for name, s in per.items():
        out = {"acc": _pct(s["correct"], s["scored"]),
               **{k: s[k] for k in ("scored", "records", "correct", "missing_image", "unscorable_text")}}
        if s["cats"]:
            cats = {c: {"acc": _pct(k, n), "n": n} for c, (k, n) in sorted(s["cats"].items())}
            out["categories"] = cats
            out["macro_acc"] = round(sum(v["acc"] for v in cats.values()) / len(cats), 2)
        subsets[name] = out
    averages = {}
    for name, members in benchmark.averages.items():
        accs = [subsets.get(m, {}).get("acc") for m in members]
        averages[name] = None if not accs or any(a is None for a in accs) else round(sum(accs) / len(accs), 2)
    totals = {k: sum(s[k] for s in subsets.values())
              for k in ("scored", "records", "correct", "missing_image", "unscorable_text")}
    result = {"subsets": subsets, "averages": averages, "overall": {"acc": _pct(totals["correct"], totals["scored"]),
                                                                    **totals}}
    if groups:
        complete = {k: v for k, v in groups.items() if k not in unscored_groups}
        result["winoground"] = winoground_scores(complete, lambda i, c: scores[image_key(i), c])
        result["winoground"]["groups_not_scored"] = len({k for k in unscored_groups if k[1] is not None})
    return result


def clip_benchmark_metrics(result: Mapping) -> dict[str, float | None]:
    """The flat ``metrics`` of a CLIP_benchmark result JSON: ``acc`` (all scored records),
    ``<subset>_acc``, ``<subset>_macro_acc`` where there are categories, ``<average>_avg``, and
    Winoground's ``text_score`` / ``image_score`` / ``group_score``."""
    out: dict[str, float | None] = {"acc": result["overall"]["acc"]}
    for name, s in result["subsets"].items():
        out[f"{name}_acc"] = s["acc"]
        if "macro_acc" in s:
            out[f"{name}_macro_acc"] = s["macro_acc"]
    for name, acc in result["averages"].items():
        out[f"{name}_avg"] = acc
    if "winoground" in result:
        for k in ("text", "image", "group"):
            out[f"{k}_score"] = result["winoground"][k]
    return out


#: The keys of a CLIP_benchmark result file (its ``eval`` command writes one per dataset and language);
#: its ``build`` command merges such files into one CSV row each, ``metrics`` flattened into columns.
CLIP_BENCHMARK_KEYS = ("dataset", "model", "pretrained", "task", "metrics", "language")
#: CLIP_benchmark's dataset name of a benchmark whose subsets it also evaluates ("sugar_crepe/swap_att").
_CLIP_BENCHMARK_DATASET = {"sugarcrepe": "sugar_crepe"}


def clip_benchmark_results(result: Mapping, *, benchmark: str, model: str, pretrained: str,
                           language: str = "en") -> list[dict]:
    """One CLIP_benchmark result per scored subset, as its ``eval`` command writes them: the dataset
    named ``<benchmark>/<subset>`` (``sugar_crepe/swap_att``), task ``image_caption_selection``, and
    ``metrics: {"acc": fraction}`` (0-1, from the counts, not the rounded percentage). Subsets with no
    scored record are left out (CLIP_benchmark has no result for a dataset it did not evaluate).

    >>> res = {"subsets": {"swap_att": {"acc": 66.67, "correct": 2, "scored": 3}}}
    >>> clip_benchmark_results(res, benchmark="sugarcrepe", model="composer", pretrained="runs/m")
    [{'dataset': 'sugar_crepe/swap_att', 'model': 'composer', 'pretrained': 'runs/m', 'task': 'image_caption_selection', 'metrics': {'acc': 0.6666666666666666}, 'language': 'en'}]
    """
    prefix = _CLIP_BENCHMARK_DATASET.get(benchmark, benchmark)
    out = []
    for name, s in result["subsets"].items():
        if not s.get("scored"):
            continue
        out.append({"dataset": f"{prefix}/{name}", "model": model, "pretrained": pretrained,
                    "task": "image_caption_selection", "metrics": {"acc": s["correct"] / s["scored"]},
                    "language": language})
    return out


def clip_benchmark_filename(res: Mapping) -> str:
    """The file name CLIP_benchmark's usual ``--output`` template gives a result:
    ``benchmark_{dataset}_{pretrained}_{model}_{language}_{task}.json``, "/" in the dataset as "_" and
    the pretrained weights by their file or folder name.

    >>> clip_benchmark_filename({"dataset": "sugar_crepe/add_att", "pretrained": "runs/a/model", "model": "composer",
    ...                          "language": "en", "task": "image_caption_selection"})
    'benchmark_sugar_crepe_add_att_model_composer_en_image_caption_selection.json'
    """
    pretrained = str(res["pretrained"]).rstrip("/").rsplit("/", 1)[-1]
    return (f"benchmark_{res['dataset'].replace('/', '_')}_{pretrained}_{res['model']}_{res['language']}_"
            f"{res['task']}.json")


def write_clip_benchmark_results(folder, results: Sequence[Mapping]) -> list:
    """Write each result to ``folder`` (:func:`clip_benchmark_filename`), atomically; the paths."""
    from pathlib import Path

    from crg.outputs import write_json_atomic

    paths = []
    for res in results:
        path = Path(folder) / clip_benchmark_filename(res)
        write_json_atomic(path, {k: res[k] for k in CLIP_BENCHMARK_KEYS})
        paths.append(path)
    return paths
