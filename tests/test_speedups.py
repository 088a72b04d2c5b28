"""The Cython-compiled copy of the converter (crg.speedups) against the pure-Python module, its reference.

The copy is compiled here into a temporary directory (about a minute on 2 cores), whatever is built in
``crg/``, so the test checks the code as it is; it skips where Cython or a C compiler is missing.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import sysconfig
from pathlib import Path

import pytest

from crg import speedups
from crg.dep_to_constituency import FALLBACKS, python_dependency_to_constituency

# A random parse (tests/test_dep_to_constituency.py's fuzz) that defeats the projection: the flat fallback
DEFEATING = ([",", "not", "the", "$", "not", "w5", "which6"], ["VBD", "PRP$", "CD", "CC", "RP", "EX", ","],
             [1, 6, 1, 6, 5, 6, 6], ["pcomp", "appos", "conj", "relcl", "npadvmod", "aux", "parataxis"])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The converter's compiled copy, built now from the current source and loaded from the temporary build."""
    pytest.importorskip("Cython")
    if shutil.which(sysconfig.get_config_var("CC").split()[0]) is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("speedups")
    [path] = speedups.build(out)
    spec = importlib.util.spec_from_file_location(speedups.COMPILED["crg.dep_to_constituency"], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = Path(importlib.util.find_spec("crg.dep_to_constituency").origin)
    assert module.SOURCE_DIGEST == speedups.source_digest(source)
    assert type(module.dependency_to_constituency).__name__ == "cython_function_or_method"  # compiled, not Python
    return module


def random_parses(count: int, seed: int) -> list[tuple]:
    from test_dep_to_constituency import DEPS, TAGS, random_heads

    rng = random.Random(seed)
    words_pool = ["the", "a", '"', "(", ")", "--", "that", "which", "?", "not", "n't", "&", "$", ",", ";", "who"]
    out = []
    for _ in range(count):
        n = rng.randint(1, 14)
        heads = random_heads(rng, n)
        words = [rng.choice(words_pool) + (str(i) if rng.random() < 0.5 else "") for i in range(n)]
        out.append((words, [rng.choice(TAGS) for _ in words], heads, [rng.choice(DEPS) for _ in words]))
    return out


@pytest.mark.slow  # compiles the copy: about a minute
def test_compiled_copy_gives_the_pure_python_trees_on_random_parses(compiled):
    """Odd structures (non-projective arcs, several roots, cycles, brackets and quotes as words), where every
    branch of the converter runs; the flat fallback included."""
    parses = random_parses(4000, seed=7) + [DEFEATING]
    for args in parses:
        assert compiled.dependency_to_constituency(*args) == python_dependency_to_constituency(*args), args


@pytest.mark.slow  # compiles the copy: about a minute
def test_compiled_copy_gives_the_pure_python_trees_on_real_parses(compiled, spacy_parser, shared_data):
    """spaCy's parses of the WSJ dev set, the gold trees and 2,000 Flickr30K captions."""
    from test_dep_to_constituency_reference import converter_inputs

    inputs = converter_inputs(spacy_parser, shared_data)
    assert sum(len(v) for v in inputs.values()) > 4000
    for parses in inputs.values():
        for args in parses:
            assert compiled.dependency_to_constituency(*args) == python_dependency_to_constituency(*args), args


@pytest.mark.slow  # compiles the copy: about a minute
def test_the_module_runs_a_current_copy_only_and_shares_its_fallback_counter(compiled, monkeypatch):
    import sys

    import crg.dep_to_constituency as module

    source = Path(module.__file__)
    monkeypatch.setattr(speedups, "COMPILED", {"crg.dep_to_constituency": "test_speedups_copy"})
    monkeypatch.setitem(sys.modules, "test_speedups_copy", compiled)
    monkeypatch.setattr(compiled, "FALLBACKS", [0])
    monkeypatch.setattr(module, "dependency_to_constituency", module.dependency_to_constituency)  # undone after
    assert speedups.load_compiled("crg.dep_to_constituency", source) is compiled
    module._use_compiled_copy()
    assert module.dependency_to_constituency is compiled.dependency_to_constituency
    before = FALLBACKS[0]
    tree = module.dependency_to_constituency(*DEFEATING)  # a fallback in the copy counts where callers read it
    assert compiled.FALLBACKS is FALLBACKS and FALLBACKS[0] == before + 1 and tree.leaves() == DEFEATING[0]

    monkeypatch.setenv("GC_PURE_PYTHON", "1")
    assert speedups.load_compiled("crg.dep_to_constituency", source) is None
    monkeypatch.delenv("GC_PURE_PYTHON")
    monkeypatch.setattr(compiled, "SOURCE_DIGEST", "0" * 64)  # built from another version of the source
    assert speedups.load_compiled("crg.dep_to_constituency", source) is None
    assert speedups.load_compiled("crg.extract", Path(speedups.__file__).with_name("extract.py")) is None  # none


def test_status_says_what_runs(monkeypatch):
    monkeypatch.setattr(speedups, "COMPILED", {"crg.dep_to_constituency": "crg._no_such_copy"})
    assert speedups.compiled_status() == {"crg.dep_to_constituency": "not built"}
    assert speedups.load_compiled("crg.dep_to_constituency", speedups.__file__) is None
    monkeypatch.setenv("GC_PURE_PYTHON", "1")
    assert speedups.compiled_status() == {"crg.dep_to_constituency": "not built (off: GC_PURE_PYTHON)"}
