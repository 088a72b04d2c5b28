"""The layout's rules, checked on the import graph of the source: every ``import`` and ``from ... import`` of every
module (also those inside functions, and relative ones), read with ``ast``, nothing imported.

The layers, top first. A module belongs to the longest prefix listed; it may import its own layer and the
layers below it, never one above. Layers on one line are siblings: neither imports the other.

    experiments | benchmarks             scripts: thin wrappers of the programs, measurements
    composer.cli                         the console programs of the models
    composer.study                       many runs, each an ordinary train() run
    composer.report                      a study's tables and plots, from its runs' results alone
    composer.training | composer.evaluation
    composer                             the models (composer.models: one folder per model, the registry)
                                         and what they share (retrieval scores, negative sampling, ...)
    features                             feature stores, the generated world, the dataset catalog (and its CLI)
    crg                                  graphs, parsers, MCD splits

So ``crg`` never imports ``features`` or ``composer``; ``features`` never imports ``composer``; a model's folder
never imports training, evaluation, the study or a program; no library module imports ``experiments`` or
``benchmarks``. Where today's code breaks a rule, the edge is in :data:`KNOWN_VIOLATIONS` with the issue that
removes it; an entry that no longer matches anything fails too, so the list only shrinks.

Beside the layers: ``crg`` never imports torch (but for the optional benepar adapter), only training code and each
model's LightningModule (``composer/models/*/module.py`` and their shared base) import Lightning, nothing edits ``sys.path``, and the experiment scripts stay thin.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the layers, top first (see the module docstring); siblings share a tuple. The rest of a package belongs to
#: its own line: ``composer.modeling`` to ``composer``, ``features.cli`` to ``features``.
LAYERS: list[tuple[str, ...]] = [
    ("experiments", "benchmarks"),
    ("composer.cli",),
    ("composer.study",),
    ("composer.report",),
    ("composer.training", "composer.evaluation"),
    ("composer",),
    ("features",),
    ("crg",),
]
#: where the modules are read from; ``experiments`` and ``benchmarks`` are folders of scripts (no package)
SOURCE_FOLDERS = ("crg", "features", "composer", "experiments", "benchmarks")
SCRIPT_FOLDERS = ("experiments", "benchmarks")

#: edges forbidden although they point down: ``(importer prefix, imported prefix) -> why``
FORBIDDEN: dict[tuple[str, str], str] = {
    ("composer", "features.world"): "models, training and evaluation reach a dataset through features.catalog "
                                    "(its DatasetSpec, exact_truth), never the world's generator directly",
}

#: ``(importer prefix, imported prefix) -> why it is still there``: edges that break a rule today. Remove an
#: entry with the edge; an entry matching no edge fails the test.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
    # issue 32 item 1 (one folder per model, in progress on another branch) moves program.py, config.py and
    # losses.py into COMPOSER's model folder and ends these:
    ("composer.training", "composer.evaluation"): "issue 32 item 1/2: training imports evaluation "
                                                  "(the modules' validation retrieval, data.py's evaluation "
                                                  "sets, fit.py's text pairs)",
}


#: sub-packages / modules that import each other (at run time): ``(unit, unit) -> why it is still there``
KNOWN_CYCLES: dict[tuple[str, str], str] = {}


# ----------------------------------------------------------------------------------------- the import graph
@dataclass(frozen=True)
class Edge:
    importer: str   # dotted module name
    imported: str   # dotted module name (a submodule where ``from package import submodule`` names one)
    where: str      # FILE:LINE


def module_name(path: Path, root: Path) -> str:
    """``crg/cli/build_crg.py`` -> ``crg.cli.build_crg``; ``crg/__init__.py`` -> ``crg``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path, folders=SOURCE_FOLDERS) -> dict[str, Path]:
    return {module_name(p, root): p for folder in folders for p in sorted((root / folder).rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def _import_nodes(tree: ast.AST, type_only: bool):
    """Every Import / ImportFrom node; those under ``if TYPE_CHECKING:`` only with ``type_only``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if _is_type_checking(node) and not type_only:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported_modules(path: Path, module: str = "", known: frozenset[str] = frozenset(),
                     type_only: bool = True) -> list[tuple[str, int]]:
    """``(module, line)`` of every import in ``path``, wherever it stands (module level, function, ``if``);
    ``type_only=False`` leaves out those under ``if TYPE_CHECKING:``, which never run.

    Relative imports are resolved against ``module``'s package; ``from P import name`` gives ``P.name`` when
    that is a module in ``known`` (a submodule), else ``P``.
    """
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), type_only):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                out.append((sub if sub in known else base, node.lineno))
    return sorted(set(out), key=lambda x: (x[1], x[0]))


def import_graph(root: Path = ROOT, folders=SOURCE_FOLDERS, script_folders=SCRIPT_FOLDERS,
                 type_only: bool = True) -> list[Edge]:
    """Every import between the modules under ``root``'s ``folders``. A script of ``script_folders`` is also
    importable by its bare name (``bench_crg``) when its folder is on ``sys.path``; that counts as the folder's."""
    modules = source_modules(root, folders)
    scripts = {name.rpartition(".")[2]: name for name in modules if name.split(".")[0] in script_folders}
    known = frozenset(modules)
    edges = []
    for name, path in modules.items():
        for imported, line in imported_modules(path, name, known, type_only):
            imported = scripts.get(imported, imported) if name.split(".")[0] not in script_folders else imported
            if imported.split(".")[0] in folders and imported != name:
                edges.append(Edge(name, imported, f"{path.relative_to(root).as_posix()}:{line}"))
    return edges


def layer_of(module: str, layers=LAYERS) -> tuple[int, str] | None:
    """``(rank, prefix)``: the rank counts from the top (0); the prefix is the longest one ``module`` is under."""
    best = None
    for rank, siblings in enumerate(layers):
        for prefix in siblings:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    return best


def upward_imports(edges: list[Edge], layers=LAYERS) -> list[tuple[Edge, str, str]]:
    """``(edge, importer's layer, imported layer)`` of each import of a layer above, or of a sibling layer."""
    out = []
    for edge in edges:
        src, dst = layer_of(edge.importer, layers), layer_of(edge.imported, layers)
        if src is None or dst is None or src[1] == dst[1]:
            continue
        if dst[0] <= src[0]:  # above, or a sibling (same rank, another prefix)
            out.append((edge, src[1], dst[1]))
    return out


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(edges: list[Edge], layers=LAYERS, forbidden: dict | None = None) -> list[tuple[Edge, str]]:
    """``(edge, what is wrong)`` for each import of a layer above or a sibling, and each forbidden edge."""
    forbidden = FORBIDDEN if forbidden is None else forbidden
    rank = {prefix: r for r, siblings in enumerate(layers) for prefix in siblings}
    out = [(edge, f"{edge.importer} ({src}) imports {edge.imported} ({dst}), "
                  + ("a sibling layer" if rank[src] == rank[dst] else "a layer above it"))
           for edge, src, dst in upward_imports(edges, layers)]
    for edge in edges:
        for (a, b), why in forbidden.items():
            if _matches(edge.importer, a) and _matches(edge.imported, b):
                out.append((edge, f"{edge.importer} imports {edge.imported}: {why}"))
    return out


def check_layers(edges: list[Edge], layers=LAYERS, known: dict | None = None,
                 forbidden: dict | None = None) -> tuple[list[str], list]:
    """``(new violations as FILE:LINE: message lines, known entries that matched nothing)``."""
    known = KNOWN_VIOLATIONS if known is None else known
    used, new = set(), []
    for edge, message in violations(edges, layers, forbidden):
        entry = next((k for k in known if _matches(edge.importer, k[0]) and _matches(edge.imported, k[1])), None)
        if entry is not None:
            used.add(entry)
        else:
            new.append(f"{edge.where}: {message}")
    return new, [k for k in known if k not in used]


def unit_of(module: str) -> str:
    """What a cycle is counted between: a sub-package as a whole (``composer.modeling.composer`` ->
    ``composer.modeling``), a top-level module of a package by itself (``composer.program``)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def unit_cycles(edges: list[Edge]) -> list[list[Edge]]:
    """For each pair of units that import each other (at run time), the edges of both directions."""
    between: dict[tuple[str, str], list[Edge]] = {}
    for edge in edges:
        a, b = unit_of(edge.importer), unit_of(edge.imported)
        if a != b:
            between.setdefault((a, b), []).append(edge)
    return [between[(a, b)] + between[(b, a)] for (a, b) in sorted(between) if a < b and (b, a) in between]


def check_cycles(edges: list[Edge], known: dict | None = None) -> tuple[list[str], list]:
    """``(new cycles as readable lines, known entries that matched nothing)``; an entry ``(a, b)`` names the
    two units of a cycle (in either order)."""
    known = KNOWN_CYCLES if known is None else known
    used, new = set(), []
    for cycle in unit_cycles(edges):
        pair = {unit_of(cycle[0].importer), unit_of(cycle[0].imported)}
        entry = next((k for k in known if set(k) == pair), None)
        if entry is not None:
            used.add(entry)
        else:
            new.append(" <-> ".join(sorted(pair)) + ": " + ", ".join(f"{e.where} imports {e.imported}" for e in cycle))
    return new, [k for k in known if k not in used]


# ----------------------------------------------------------------------------------------- the checker's own tests
def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_reports_an_upward_import_planted_in_a_temporary_package(tmp_path):
    """A tree shaped like the project's, clean but for an import of ``features`` inside a ``crg`` function and a
    relative import from the model folder into training: the checker names both, with file and line."""
    _plant(tmp_path, {
        "crg/__init__.py": "",
        "crg/graph.py": "import numpy\n",
        "crg/parse.py": "from crg.graph import x\n\ndef make():\n    from features.world import gold_trees\n",
        "features/__init__.py": "",
        "features/world/__init__.py": "",
        "features/world/gold_trees.py": "from crg.parse import register\nfrom ..catalog import y\n",
        "features/catalog.py": "",
        "composer/__init__.py": "",
        "composer/modeling/__init__.py": "from ..training import fit\nfrom . import attention\n",
        "composer/modeling/attention.py": "import torch\nfrom crg import graph\n",
        "composer/training/__init__.py": "",
        "composer/training/fit.py": "from composer.modeling import attention\n",
        "experiments/train.py": "from composer.training.fit import main\n",
    })
    edges = import_graph(tmp_path)
    assert Edge("features.world.gold_trees", "features.catalog", "features/world/gold_trees.py:2") in edges
    assert Edge("composer.modeling.attention", "crg.graph", "composer/modeling/attention.py:2") in edges
    new, unused = check_layers(edges, known={})
    assert sorted(new) == [
        "composer/modeling/__init__.py:1: composer.modeling (composer) imports composer.training.fit "
        "(composer.training), a layer above it",
        "crg/parse.py:4: crg.parse (crg) imports features.world.gold_trees (features), a layer above it",
    ]
    # an allow-list entry silences its edge; one that matches nothing is reported as stale
    new, unused = check_layers(edges, known={("crg", "features"): "planted", ("crg", "composer"): "stale"})
    assert len(new) == 1 and "composer.modeling" in new[0] and unused == [("crg", "composer")]
    # without the planted imports the same tree is clean
    _plant(tmp_path, {"crg/parse.py": "from crg.graph import x\n",
                      "composer/modeling/__init__.py": "from . import attention\n"})
    assert check_layers(import_graph(tmp_path), known={}) == ([], [])


def test_sibling_layers_and_scripts_by_bare_name(tmp_path):
    _plant(tmp_path, {
        "composer/__init__.py": "",
        "composer/training/__init__.py": "",
        "composer/training/fit.py": "def test():\n    import composer.evaluation.metrics\n",
        "composer/evaluation/__init__.py": "",
        "composer/evaluation/metrics.py": "from composer import losses\n",
        "composer/losses.py": "",
        "crg/__init__.py": "",
        "crg/mcd.py": "def f():\n    import bench_crg\n",
        "benchmarks/bench_crg.py": "import crg.mcd\n",
    })
    new, _ = check_layers(import_graph(tmp_path), known={})
    assert sorted(line.split(": ", 1)[0] for line in new) == ["composer/training/fit.py:2", "crg/mcd.py:2"]


def test_imported_modules_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\ndef g():\n    from lightning.pytorch import Trainer\n    import torch.nn as nn\n")
    assert {m for m, _ in imported_modules(f)} == {"os", "lightning.pytorch", "torch.nn"}


# ----------------------------------------------------------------------------------------- the rules, on the source
def test_every_import_points_down_the_layers():
    new, stale = check_layers(import_graph())
    assert not new, "imports of a layer above (move the code down, or pass the upper layer's object in):\n" + \
        "\n".join(new)
    assert not stale, f"KNOWN_VIOLATIONS entries that no longer happen, delete them: {stale}"


def test_no_package_imports_one_that_imports_it():
    new, stale = check_cycles(import_graph(type_only=False))
    assert not new, "import cycles between sub-packages / modules:\n" + "\n".join(new)
    assert not stale, f"KNOWN_CYCLES entries that no longer happen, delete them: {stale}"


def test_the_cycle_check_reports_a_planted_cycle_but_not_a_type_only_import(tmp_path):
    _plant(tmp_path, {
        "composer/__init__.py": "",
        "composer/program.py": "from composer.modeling.attention import Attention\n",
        "composer/modeling/__init__.py": "",
        "composer/modeling/attention.py": "def f():\n    from composer.program import Program\n",
        "crg/__init__.py": "",
        "crg/mcd.py": "from crg.optimize import anneal\n",
        "crg/optimize.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from crg.mcd import Problem\n",
    })
    new, _ = check_cycles(import_graph(tmp_path, type_only=False), known={})
    assert new == ["composer.modeling <-> composer.program: composer/modeling/attention.py:2 imports composer.program, "
                   "composer/program.py:1 imports composer.modeling.attention"]


def test_the_layer_table_covers_every_library_module():
    assert all(layer_of(m) is not None for m in source_modules(ROOT))


def _third_party(folder: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> dict[str, list[str]]:
    out = {}
    for name, path in source_modules(ROOT, (folder,)).items():
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(a) for a in allowed):
            continue
        bad = sorted({m for m, _ in imported_modules(path, name) if any(_matches(m, f) for f in forbidden)})
        if bad:
            out[rel] = bad
    return out


def test_crg_never_imports_torch():
    # the paper's parser (the optional [benepar] extra) is a torch model: its adapter is the one exception
    assert _third_party("crg", ("torch", "lightning", "transformers"), ("crg/benepar_parser.py",)) == {}


def test_features_never_imports_lightning():
    assert _third_party("features", ("lightning",)) == {}


def test_only_training_code_imports_lightning():
    # each model's LightningModule sits in its folder (composer/models/<model>/module.py), over the shared base
    modules = tuple(p.relative_to(ROOT).as_posix() for p in (ROOT / "composer" / "models").glob("*/module.py"))
    allowed = ("composer/training/", "composer/cli/",
               "composer/models/common/retrieval_module.py", *modules)
    assert _third_party("composer", ("lightning",), allowed) == {}


def test_a_forbidden_edge_is_reported_although_it_points_down(tmp_path):
    _plant(tmp_path, {"composer/__init__.py": "", "composer/score.py": "from features.world.scene import Scene\n",
                      "features/__init__.py": "", "features/world/__init__.py": "", "features/world/scene.py": ""})
    new, _ = check_layers(import_graph(tmp_path), known={})
    assert len(new) == 1 and new[0].startswith("composer/score.py:1: composer.score imports features.world.scene")


@pytest.mark.parametrize("folder", ["composer", "crg", "features", "experiments", "tests", "benchmarks"])
def test_nothing_edits_sys_path(folder):
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path.name == "test_layout.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "sys.path.insert" not in text and "sys.path.append" not in text, path


def test_no_script_imports_another_and_tests_import_no_script():
    for path in sorted((ROOT / "tests").rglob("*.py")):
        assert not any(_matches(m, "experiments") for m, _ in imported_modules(path)), path


def test_experiments_are_thin():
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 120, f"{path.name}: move its logic to the library"
