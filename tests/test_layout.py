"""The layout's rules, checked on the source (every import statement, also those inside functions):
``crg`` never imports torch (but for the optional benepar adapter), ``features`` never imports ``composer``, only ``composer.training``, each model's
LightningModule (``composer/models/*/module.py``) and the study and command-line programs that train import Lightning, generic evaluation imports no dataset,
nothing edits ``sys.path`` and no script imports another."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offenders(package: str, forbidden: tuple[str, ...], allowed_dirs: tuple[str, ...] = ()) -> dict[str, list[str]]:
    out = {}
    for path in sources(package):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(d) for d in allowed_dirs):
            continue
        bad = sorted(m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden))
        if bad:
            out[rel] = bad
    return out


def test_imported_modules_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\ndef g():\n    from lightning.pytorch import Trainer\n    import torch.nn as nn\n")
    assert imported_modules(f) == {"os", "lightning.pytorch", "torch.nn"}


def test_crg_never_imports_torch_or_the_other_packages():
    # the paper's parser (the optional [benepar] extra) is a torch model: its adapter is the one exception
    assert offenders("crg", ("torch", "lightning", "composer"), ("crg/benepar_parser.py",)) == {}


def test_features_never_imports_composer_or_lightning():
    assert offenders("features", ("composer", "lightning")) == {}


def test_only_training_code_imports_lightning():
    # each model's LightningModule sits in its folder (composer/models/<model>/module.py), over the shared base
    modules = tuple(p.relative_to(ROOT).as_posix() for p in (ROOT / "composer" / "models").glob("*/module.py"))
    allowed = ("composer/training/", "composer/study/runner.py", "composer/cli/",
               "composer/models/common/retrieval_module.py", *modules)
    assert offenders("composer", ("lightning",), allowed) == {}


def test_generic_evaluation_imports_no_dataset_and_no_training():
    assert offenders("composer/evaluation", ("features.world", "composer.training", "composer.study")) == {}


@pytest.mark.parametrize("folder", ["composer", "crg", "features", "experiments", "tests", "benchmarks"])
def test_nothing_edits_sys_path_and_no_script_imports_another(folder):
    for path in sources(folder):
        text = path.read_text(encoding="utf-8")
        if path.name == "test_layout.py":
            continue
        assert "sys.path.insert" not in text and "sys.path.append" not in text, path
        assert not any(m == "experiments" or m.startswith("experiments.") for m in imported_modules(path)), path


def test_experiments_are_thin():
    for path in sources("experiments"):
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 120, f"{path.name}: move its logic to the library"
