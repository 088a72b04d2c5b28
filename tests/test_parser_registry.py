"""Parser backends by name without ``crg`` importing the layers above it, and what importing ``crg`` loads.

The world's gold-tree parser lives in ``features`` and registers itself with ``crg.parse`` when imported; a
process that has not imported it finds it through the ``crg.parsers`` entry point that ``setup.py`` declares.
Each check runs in a fresh interpreter, so that nothing imported by other tests hides a missing import.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from crg.parse import make_parser, parser_factory, parser_names, register_parser

ROOT = Path(__file__).resolve().parents[1]


def fresh_python(code: str, *extra_path: Path) -> str:
    """Run ``code`` in a new interpreter with this checkout (and ``extra_path``) first on ``sys.path``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, extra_path),
                                                         os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    return set(fresh_python(code).split())


@pytest.mark.parametrize("statement, allowed", [
    ("import crg", set()),
    ("from crg import load_graph", {"numpy"}),           # a graph is numpy arrays; no tree is built
    ("import crg.build, crg.extract, crg.corpus", {"numpy", "tqdm"}),
    ("import features.world.generate", {"numpy", "tqdm", "PIL", "threadpoolctl", "h5py"}),
])
def test_importing_crg_loads_no_tree_or_model_library(statement, allowed):
    """nltk (about 1 s, with scipy and sklearn behind it) comes only where a tree is built; torch never."""
    heavy = {"nltk", "numpy", "scipy", "sklearn", "torch", "spacy", "lightning", "transformers", "tqdm", "PIL",
             "h5py", "threadpoolctl", "matplotlib"}
    assert loaded_after(statement) & heavy <= allowed


def test_nltk_comes_with_the_first_tree():
    out = fresh_python("import sys\nfrom crg.extract import extract_concepts, prune_tree\n"
                       "before = 'nltk' in sys.modules\nfrom crg.parse import make_parser\n"
                       "from nltk import Tree\nimport random\n"
                       "t = prune_tree(Tree.fromstring('(TOP (S (NP (DT a) (NN dog)) (VP (VBZ runs))))'), 0.5, "
                       "random.Random(0))\nprint(before, extract_concepts(t).text)")
    assert out == "False a dog runs"


def test_the_world_parser_registers_itself_and_crg_names_no_upper_layer():
    code = ("import sys, crg.parse\nnames = crg.parse.parser_names()\n"
            "import features.world.gold_trees\n"
            "print(json.dumps([names, crg.parse.parser_names(), crg.parse.make_parser('world').parse_texts(['a red "
            "cube'])[0].pformat(margin=200)]))")
    before, after, tree = json.loads(fresh_python("import json\n" + code))
    assert {"spacy", "benepar", "preparsed"} <= set(before) and "world" in after
    assert tree == "(TOP (NP (DT a) (JJ red) (NN cube)))"
    crg_text = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "crg").rglob("*.py"))
    assert not any(s in crg_text for s in ("import features", "from features", "features.world.gold"))


def _declared_entry_points(group: str) -> list[str]:
    """The ``entry_points[group]`` list of ``setup.py``, read from its source."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            return ast.literal_eval(node.value)[group]
    raise AssertionError("setup.py declares no entry_points")


def test_the_entry_point_setup_py_declares_finds_the_world_parser_in_a_process_that_never_imported_it(tmp_path):
    """As an installed distribution: a ``dist-info`` with setup.py's ``crg.parsers`` lines on ``sys.path``."""
    lines = _declared_entry_points("crg.parsers")
    assert lines == ["world = features.world.gold_trees:make_world_parser"]
    dist = tmp_path / "gc_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gc-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[crg.parsers]\n" + "\n".join(lines) + "\n")
    out = fresh_python("import sys\nfrom crg.parse import make_parser, parser_names\n"
                       "print('world' in parser_names(), 'features' in sys.modules)\n"
                       "print(make_parser('world').parse_texts(['a cube'])[0].pformat(margin=99))", tmp_path)
    assert out.splitlines() == ["True False", "(TOP (NP (DT a) (NN cube)))"]


def test_a_spawned_worker_gets_the_factory_itself(tmp_path):
    """What crg.build hands a spawned worker (and Ray a parser actor): the factory pickles by reference, so the
    worker imports the module that defines it, although it was never told that module's name."""
    import features.world.gold_trees  # noqa: F401  registers "world" in this process
    from crg.build import _portable_spec

    spec = _portable_spec(("world", None, {}))
    blob = (tmp_path / "spec.pkl")
    blob.write_bytes(pickle.dumps(spec))
    out = fresh_python(f"import pickle, sys\nfactory, model, options = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
                       "print(factory(model, **options).cache_key().split(':')[0], 'crg.parse' in sys.modules)")
    assert out == "world True"


def test_unknown_names_and_clashes_are_refused():
    with pytest.raises(ValueError, match="unknown parser 'nope'; choose one of .*spacy"):
        make_parser("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_parser("spacy", lambda model=None: None)
    register_parser("spacy", parser_factory("spacy"))  # the same factory again: a no-op
    assert "spacy" in parser_names()
    import features.world.gold_trees  # noqa: F401
    with pytest.raises(ValueError, match="takes no --parser-model"):
        make_parser("world", "some/model")
