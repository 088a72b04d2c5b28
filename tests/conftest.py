"""Shared fixtures. Tests never write outside tmp dirs: the parse cache is redirected per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nltk import Tree

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SHARED = ROOT.parent / "shared" / "data"


def pytest_configure(config):
    # `pytest -m paper_size` selects them; they also run in the default suite
    config.addinivalue_line("markers", "paper_size: the paper's model sizes on CPU (BERT-base PT, 100 regions x "
                                       "2048-d; tests/test_paper_size.py, about 3 minutes on 2 cores)")
    # `pytest -m "not slow"` skips them; they also run in the default suite
    config.addinivalue_line("markers", "slow: a kill of a real multi-process run (a local Ray, a study; "
                                       "tests/test_kill_resume.py), minutes on 2 cores")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    os.environ["GC_CACHE_DIR"] = str(tmp_path_factory.mktemp("gc_cache"))
    yield


@pytest.fixture(scope="session")
def spacy_parser():
    from crg.spacy_parser import SpacyParser

    return SpacyParser()


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> Path:
    """A 36-image generated world (captions, scenes, feature store): the training tests' data. Tests
    must not write into it."""
    from features.world.generate import GenerateConfig, generate_world

    out = tmp_path_factory.mktemp("tiny_world")
    generate_world(out, GenerateConfig(num_images=36, seed=5, render=0, workers=1), progress=False)
    return out


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.exists():
        pytest.skip(f"shared corpora not found at {SHARED} (tests that need real captions skip without ../shared)")
    return SHARED


def read_gold(path: Path) -> list[tuple[str, Tree]]:
    """``(id, tree)`` pairs of a gold .mrg file (``# id:`` comment lines name the trees)."""
    out, current = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("# id:"):
            current = line.split(":", 1)[1].strip()
        elif line and not line.startswith("#"):
            out.append((current, Tree.fromstring(line)))
    return out
