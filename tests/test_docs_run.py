"""Docs that run: every code block of README.md and docs/*.md is executed or checked here, so an example
cannot go stale unnoticed.

* **Python blocks** (```` ```python ````) are executed, each in a fresh namespace, in a folder holding tiny
  inputs: the paths the examples read (``runs/crg_f30k``, ``../shared/data/flickr30k/captions.jsonl``, ...)
  are files made here from a few captions and a 36-image generated world (:data:`INPUTS`), and a preamble
  (:data:`PREAMBLES`, keyed by the block) defines the names the example takes as given (``graph``,
  ``regions``, ...). An example that reads the shared benchmarks runs where ../shared holds them.
* **Command lines** (``bash`` / ``sh`` / unmarked blocks): every line that runs one of this library's
  programs (``gc-*``, ``python experiments/*.py``, ``python benchmarks/*.py``, ``python -m <its module>``)
  is *parse-checked*: the line's own arguments are parsed by the program's real parser, in this process,
  and nothing else runs (a renamed or removed flag, a value outside its choices, a missing program fails).
  Every such program also answers ``--help``. The lines in :data:`EXECUTED` run for real on tiny inputs, and
  their output is compared with the one the doc shows. Lines of other programs (pip, ray, unzip, ...;
  :data:`EXTERNAL`) are not run; any line that is neither fails here, so a new kind of line gets classified.
  The usage examples in the programs' own docstrings (what their ``--help`` prints) are parse-checked too.

Training, evaluation, the study and the benchmarks are parse-checked only (minutes to hours each); the
training commands' ``--config`` round trip is run by tests/test_run_config.py.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import itertools
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHARED = ROOT.parent / "shared"

#: programs of other projects: the line is shown, not run (the install line's extras are checked)
EXTERNAL = {"pip", "ray", "unzip", "head", "echo", "export", "set", "cd", "mkdir", "tee", "ray", "nvidia-smi"}
#: placeholders of shell variables in the docs' command lines
SHELL_VARS = {"$NODE_RANK": "0", "$MASTER": "localhost", "$OUT": "/tmp/gc_out", "$PWD": str(ROOT),
              "$(nproc)": "2", "$GC_DATA_DIR": "/tmp/gc_data"}
COMMAND_LANGS = {"bash", "sh", "shell", "console", ""}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```([\w-]*)[^\n]*\n(.*?)^```", text, re.S | re.M):
            out.append(Block(path, text[:m.start()].count("\n") + 1, m.group(1).lower(), m.group(2)))
    return out


# ---------------------------------------------------------------------------- command lines
@dataclass(frozen=True)
class Command:
    block: Block
    line: int  # in the doc
    text: str  # the logical line (continuations joined, comment dropped)


def commands(block: Block) -> list[Command]:
    """The command lines of a shell block: continuations joined; comments, shown output and (in unmarked
    blocks) diagram lines left out."""
    out: list[Command] = []
    pending, start = "", 0
    for i, raw in enumerate(block.text.splitlines()):
        line = raw.rstrip()
        if not pending:
            start = block.line + 1 + i
            if block.lang == "" or raw.startswith("$ "):
                if not raw.startswith("$ ") and not _looks_like_command(raw):
                    continue  # a diagram or shown output in an unmarked block
                line = line.removeprefix("$ ")
            stripped = line.strip()
            if not stripped or stripped.startswith("#") or stripped.startswith(("(", "{", "[")):
                continue  # a comment, or output shown after the command
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(Command(block, start, _drop_comment(pending + line).strip()))
        pending = ""
    return [c for c in out if c.text]


def _looks_like_command(line: str) -> bool:
    first = line.split(maxsplit=1)[0] if line.split() else ""
    return first in ("python", "python3", "srun", "torchrun") or first.startswith("gc-") or first in EXTERNAL


def _unquoted(line: str):
    """``(index, char)`` of the characters of ``line`` outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        else:
            yield i, ch


def _drop_comment(line: str) -> str:
    """The line without its trailing ``# ...`` comment (a ``#`` inside quotes stays)."""
    for i, ch in _unquoted(line):
        if ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _segments(line: str) -> list[str]:
    """The simple commands of a line: split at ``&&``, ``;`` and a spaced ``|`` outside quotes."""
    cuts, i = [], 0
    positions = dict(_unquoted(line))
    while i < len(line):
        if i in positions:
            for sep in (" && ", "; ", " | "):
                if line.startswith(sep, i) and all(j in positions for j in range(i, i + len(sep))):
                    cuts.append((i, i + len(sep)))
                    break
        i += 1
    out, last = [], 0
    for a, b in cuts:
        out.append(line[last:a])
        last = b
    return [*out, line[last:]]


def _expand(text: str, assigned: dict[str, str]) -> str:
    for name, value in {**{f"${k}": v for k, v in assigned.items()}, **SHELL_VARS}.items():
        text = text.replace(name, value)
    return text


def _unbracket(token: str) -> str:
    """``[--flag`` / ``VALUE]]`` (the docs' optional parts, given here) without their brackets; ``.[test]``
    and code (a token with a space: ``python -c "..."``) unchanged."""
    if " " in token:
        return token
    token = token.lstrip("[")
    while token.endswith("]") and token.count("]") > token.count("["):
        token = token[:-1]
    return token


def pipeline_parts(command: Command, assigned: dict[str, str]) -> list[list[str]]:
    """The simple commands of a line (``&&``, ``;`` and ``|`` split), each as its argv variants: a token
    ``a|b|c`` (the docs' "one of") gives one variant per alternative; ``[--flag]`` is given."""
    text = _expand(command.text, assigned)
    parts = []
    for segment in _segments(text):
        tokens = shlex.split(segment)
        tokens = [t for t in tokens if t not in ("2>&1",)]
        if ">" in tokens:  # a redirection: the command is what comes before it
            tokens = tokens[:tokens.index(">")]
        tokens = [_unbracket(t) for t in tokens]
        tokens = [t for t in tokens if t]
        choices = [t.split("|") if "|" in t and " " not in t and not t.startswith("-") else [t] for t in tokens]
        parts.append([list(v) for v in itertools.product(*choices)])
    return parts


def console_scripts() -> dict[str, str]:
    call = next(n for n in ast.walk(ast.parse((ROOT / "setup.py").read_text(encoding="utf-8")))
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    kw = {k.arg: k.value for k in call.keywords}
    entry_points = ast.literal_eval(kw["entry_points"])
    return dict(line.replace(" ", "").split("=", 1) for line in entry_points["console_scripts"])


def extras() -> set[str]:
    call = next(n for n in ast.walk(ast.parse((ROOT / "setup.py").read_text(encoding="utf-8")))
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    return set(ast.literal_eval(next(k.value for k in call.keywords if k.arg == "extras_require")))


class _Parsed(Exception):
    """Raised by the patched ``parse_args``: the arguments parsed, the program stops there."""


@contextlib.contextmanager
def parse_only():
    """Every ``ArgumentParser.parse_args`` parses, then stops the program (:class:`_Parsed`)."""
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        namespace = original(self, args, namespace)
        raise _Parsed(namespace)

    argparse.ArgumentParser.parse_args = parse_args
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original


def program(argv: list[str]):
    """``(name, run)`` for a line of this library's programs: ``run(args)`` runs it in this process with
    ``args``; ``None`` for a program of another project; a failure for a program that does not exist."""
    head = argv[0]
    if head in EXTERNAL:
        return None
    if head == "srun":
        return program(argv[1:])
    if head in ("time", "/usr/bin/time"):  # timing wrappers (``/usr/bin/time -v``): the command after them
        rest = argv[1:]
        while rest and rest[0].startswith("-"):
            rest = rest[1:]
        return program(rest)
    if head == "torchrun":  # torchrun's own options, then the script and its arguments
        script = next(i for i, t in enumerate(argv) if t.endswith(".py"))
        return program(["python", *argv[script:]])
    if head.startswith("gc-"):
        scripts = console_scripts()
        assert head in scripts, f"{head} is not a console script of setup.py ({sorted(scripts)})"
        module, function = scripts[head].split(":")

        def run_entry(args):
            import importlib

            sys.argv = [head, *args]
            return getattr(importlib.import_module(module), function)(list(args))
        return head, run_entry, argv[1:]
    assert head in ("python", "python3"), f"unclassified command {head!r}: add it to EXTERNAL or check it here"
    if argv[1] == "-m":
        module = argv[2]
        if module == "pytest":  # the test files it names exist
            missing = [t for t in argv[3:] if t.startswith("tests") and not (ROOT / t.split("::")[0]).exists()]
            assert not missing, f"python -m pytest: no such test file {missing}"
            return None
        if module == "pip":
            return None
        assert module.split(".")[0] in ("crg", "composer", "features"), f"python -m {module}: not this library's"

        def run_module(args):
            sys.argv = [module, *args]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # "found in sys.modules": imported before
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        return f"python -m {module}", run_module, argv[3:]
    if argv[1] == "-c":
        return "python -c", None, argv[2:]
    script = argv[1]
    if script in DOCS_OWN_SCRIPTS:
        return None
    path = ROOT / script
    assert path.is_file(), f"{script}: no such script in the repository"

    def run_script(args):
        sys.argv = [str(path), *args]
        runpy.run_path(str(path), run_name="__main__")
    return script, run_script, argv[2:]


#: scripts the docs write themselves (their Python block is executed below)
DOCS_OWN_SCRIPTS = {"reencode_vilbert_lmdb.py"}


def parse_check(name: str, run, args: list[str]) -> None:
    """Parse ``args`` with the program's own parser and stop; fail with the parser's message."""
    err = io.StringIO()
    with parse_only(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            run(args)
        except _Parsed:
            return
        except SystemExit as exit_:
            pytest.fail(f"{name} {shlex.join(args)}: the parser refused it (exit {exit_.code}):\n{err.getvalue()}")
    pytest.fail(f"{name}: returned without parsing its arguments with argparse (cannot be checked safely)")


def help_check(name: str, run) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        with pytest.raises(SystemExit) as exit_:
            run(["--help"])
    assert exit_.value.code in (0, None) and "usage:" in out.getvalue(), f"{name} --help"
    return out.getvalue()


#: command lines run for real on tiny inputs (a part of the line that finds it -> what it shows); the
#: others are parse-checked only
EXECUTED = {
    "python -m crg.parse --pretokenized": "README: spaCy's tree of the README's caption, compared with the one shown",
    "--split train --out runs/crg_f30k --dump": "README: a CRG of the tiny corpus (the graph the examples load)",
    "python -m crg.bracket_score gold.mrg spacy.mrg": "world.md: bracket scores of spaCy against the tiny world's "
                                                      "gold trees (the three lines of the block)",
}


def executed_block(marker: str) -> Block:
    found = [b for b in blocks() if marker in b.text]
    assert found, f"no code block of the docs holds {marker!r} any more: update EXECUTED"
    return found[0]


COMMAND_BLOCKS = [b for b in blocks() if b.lang in COMMAND_LANGS and commands(b)]


#: blocks that are shown, not run: program output, JSON results, diagrams (unmarked blocks without commands)
SHOWN_LANGS = {"text", "json"}


def test_every_block_is_of_a_kind_this_test_runs_or_shows():
    kinds = {b.lang for b in blocks()}
    assert {"python", "bash"} <= kinds and len(COMMAND_BLOCKS) > 30
    unknown = {b.id: b.lang for b in blocks() if b.lang not in COMMAND_LANGS | SHOWN_LANGS | {"python"}}
    assert not unknown, f"code blocks of a kind tests/test_docs_run.py neither runs nor shows: {unknown}"


def check_commands(block: Block) -> int:
    """Parse-check every command line of ``block`` (and ``--help`` once per program); the number checked."""
    assigned: dict[str, str] = {}
    helped: set[str] = set()
    checked = 0
    for command in commands(block):
        m = re.fullmatch(r"([A-Z_]+)=(.*)", command.text, re.S)
        if m:  # COMMON="--data world ..." : used by the next lines
            assigned[m.group(1)] = shlex.split(m.group(2))[0] if m.group(2).startswith(("'", '"')) else m.group(2)
            continue
        for variants in pipeline_parts(command, assigned):
            for argv in variants:
                if argv[0] == "pip" and len(argv) > 1:
                    for extra in re.findall(r"\.\[([\w,-]+)\]", " ".join(argv)):
                        assert set(extra.split(",")) <= extras(), f"{block.id}: pip extra [{extra}] not in setup.py"
                if "..." in argv:  # "gc-evaluate ... --rerank-k 50": the other arguments elided
                    continue
                found = program(argv)
                if found is None:
                    continue
                name, run, args = found
                if run is None:  # python -c "...": the code compiles
                    compile(args[0], f"{block.id} python -c", "exec")
                    continue
                if name not in helped:
                    help_check(name, run)
                    helped.add(name)
                parse_check(f"{block.id} (line {command.line}): {name}", run, args)
                checked += 1
    return checked


@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=lambda b: b.id)
def test_every_command_line_names_a_real_program_and_flags_its_parser_accepts(block):
    check_commands(block)


#: the programs' own docstrings: their --help shows these examples
HELP_SOURCES = sorted([*(ROOT / "composer" / "cli").glob("*.py"), *(ROOT / "crg" / "cli").glob("*.py")])


@pytest.mark.parametrize("source", HELP_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_examples_in_each_program_s_help_parse(source):
    doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or ""
    check_commands(Block(source, 1, "", doc))


def _bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=cwd,
                          env=env, check=True)


def test_the_readme_parse_example_prints_the_tree_it_shows():
    block = executed_block("python -m crg.parse --pretokenized")
    lines = block.text.strip().splitlines()
    k = next(i for i, line in enumerate(lines) if "python -m crg.parse --pretokenized" in line)
    command, shown = lines[k], lines[k + 1]
    assert _bash(command, ROOT).stdout.strip() == shown.strip()


def test_the_bracket_score_pipeline_runs_on_a_world(docs_env):
    block = executed_block("python -m crg.bracket_score gold.mrg spacy.mrg")
    (docs_env / "runs").mkdir(exist_ok=True)
    world = docs_env / "runs" / "world4k"
    if not world.exists():
        world.symlink_to(docs_env / "world")
    script = "\n".join(c.text for c in commands(block))
    out = _bash(script, docs_env)
    assert (docs_env / "spacy.mrg").read_text().count("(TOP") == (docs_env / "gold.mrg").read_text().count("\n")
    assert re.search(r"\d", out.stdout), out.stdout  # the scores


# ---------------------------------------------------------------------------- Python blocks
#: a few captions standing in for the corpora the examples read (the README's "two dogs" among them)
TINY_CORPUS = [
    ("i1", "train", ["two dogs are running on the grass", "two dogs play with a red ball"]),
    ("i2", "train", ["a man is riding a brown horse", "a man in a blue shirt rides a horse"]),
    ("i3", "train", ["a woman in a red shirt is walking a dog", "a woman walks her dog on the beach"]),
    ("i4", "train", ["three dogs are sleeping on a couch", "dogs sleep on a green couch"]),
    ("i5", "test", ["a child throws a ball to two dogs", "a boy is playing with a small dog"]),
    ("i6", "test", ["a woman is sitting on a bench", "a man and a woman sit on a red bench"]),
]

#: the paths the examples read -> the tiny inputs made here (relative to the examples' folder)
INPUTS = {"../shared/data/flickr30k/captions.jsonl": "f30k_captions.jsonl"}
#: inputs only the shared data hold: an example reading one runs where ../shared has it
SHARED_INPUTS = ("../shared/benchmarks/",)

#: block (its first line) -> code run before it, defining the names the example takes as given
PREAMBLES = {
    "from composer.models.composer import config, model, program": """
import torch
from crg import load_graph
graph = load_graph("runs/crg_f30k")
captions = [0, 1]                                            # two captions of the graph
regions, geometry = torch.randn(2, 5, 2048), torch.rand(2, 5, 5)   # two images, 5 regions
region_mask = torch.ones(2, 5, dtype=torch.bool)
pair_image, pair_caption = torch.tensor([0, 1, 0, 1]), torch.tensor([0, 0, 1, 1])
""",
    "from composer.models.common.retrieval import score_matrix": """
import torch
from crg import load_graph
from composer.models.composer.config import composer_config
from composer.models.composer.model import Composer as _Composer
from composer.models.composer.program import ConceptProgram
model = _Composer.from_config(composer_config("tiny", visual={"region_dim": 8}), load_pretrained=False)
graph = load_graph("runs/crg_f30k")
programs = [ConceptProgram.from_graph(graph, c) for c in range(3)]
regions, geometry = torch.randn(2, 5, 8), torch.rand(2, 5, 5)
region_mask = torch.ones(2, 5, dtype=torch.bool)
""",
    "from composer.evaluation.rerank import shortlist_and_rerank": """
import numpy as np, torch
from crg import load_graph
from composer.models import registry
from composer.models.composer.config import composer_config
from composer.models.composer.model import Composer
from composer.models.composer.program import ConceptProgram
composer = Composer.from_config(composer_config("tiny", visual={"region_dim": 8}), load_pretrained=False).eval()
tokenizer = composer.make_tokenizer()
vse_spec = registry.get("vse")
vse_model = registry.resolve(vse_spec.model).from_config(registry.model_config("vse", "tiny", region_dim=8),
                                                         load_pretrained=False).eval()
graph = load_graph("runs/crg_f30k")
programs = [ConceptProgram.from_graph(graph, c) for c in range(4)]
target = np.array([0, 0, 1, 1])                              # each caption's image
regions, geometry = torch.randn(50, 5, 8), torch.rand(50, 5, 5)     # 50 candidate images: k=50
region_mask = torch.ones(50, 5, dtype=torch.bool)
""",
    "from torch.utils.data import DataLoader": """
from features.store import FeatureStore
with FeatureStore("data/coco_butd36.h5") as _store:
    image_ids = list(_store.image_ids)[:4]
""",
    "# reencode_vilbert_lmdb.py SRC DST -- pickle.loads runs code from SRC: use only on files you trust.": """
import base64, pickle, sys
import lmdb, numpy as np
_src = lmdb.open("vilbert.lmdb", map_size=1 << 24)
with _src.begin(write=True) as _w:
    for _i in range(3):
        _n = 2 + _i
        _w.put(str(1000 + _i).encode(), pickle.dumps({
            "image_id": 1000 + _i, "image_w": 640, "image_h": 480, "num_boxes": _n,
            "features": base64.b64encode(np.random.rand(_n, 16).astype(np.float32).tobytes()),
            "boxes": base64.b64encode(np.tile(np.array([0, 0, 10, 10], np.float32), (_n, 1)).tobytes())}))
    _w.put(b"keys", pickle.dumps([b"1000", b"1001", b"1002"]))
_src.close()
sys.argv = ["reencode_vilbert_lmdb.py", "vilbert.lmdb", "vilbert_safe.lmdb"]
""",
    "from crg.blind import TrigramLM": """
from crg.corpus import read_corpus as _read
from crg.hard_negatives import ParsedCaption as _Parsed
from crg.spacy_parser import SpacyParser as _Spacy
_items = [(im.image_id, c) for im in _read("f30k_captions.jsonl").images for c in im.captions]
parsed = [(i, _Parsed.from_tree(t, c)) for (i, c), t in zip(_items, _Spacy().parse_texts([c for _, c in _items]))]
""",
    "from crg.hard_negatives import ParsedCaption, corpus_hard_negatives, HardNegativeConfig": """
import json
from pathlib import Path
from crg.corpus import read_corpus as _read
items = [(im.image_id, c) for im in _read("f30k_captions.jsonl").images for c in im.captions]
world_dir = Path("world")
captions = [(im.image_id, c) for im in _read("world/captions.jsonl").select("test").images for c in im.captions]
""",
}

#: block (its first line) -> what must hold after it ran (the example did what its comments say)
CHECKS = {
    "from composer.models.composer import config, model, program": "assert out.root_scores.shape == (4,)",
    "from composer.evaluation.rerank import shortlist_and_rerank": "assert res.to_dict()",
    "from torch.utils.data import DataLoader": "assert batch.features.shape[0] == 4 and str(batch.mask.dtype) == 'torch.bool'",
    "# reencode_vilbert_lmdb.py SRC DST -- pickle.loads runs code from SRC: use only on files you trust.":
        "assert dst.stat()['entries'] == 3",  # the three images, re-encoded
    "from crg.mcd import MCDConfig": "assert 0 <= split.report['compound_divergence'] <= 1",
}

PYTHON_BLOCKS = [b for b in blocks() if b.lang == "python"]


def _first_line(block: Block) -> str:
    return block.text.strip().splitlines()[0].strip()


def _write_corpus(path: Path, records) -> None:
    import json

    path.write_text("".join(json.dumps({"image_id": i, "split": s, "captions": c}) + "\n" for i, s, c in records))


@pytest.fixture(scope="module")
def docs_env(tmp_path_factory):
    """The folder the examples run in: the tiny corpus, a CRG built from it by the README's own command
    (executed), a 36-image world and its feature store, and a caption file for the MCD example."""
    import json
    import shutil

    from features.world.generate import GenerateConfig, generate_world

    root = tmp_path_factory.mktemp("docs")
    _write_corpus(root / "f30k_captions.jsonl", TINY_CORPUS)
    generate_world(root / "world", GenerateConfig(num_images=36, seed=5, render=0, workers=1), progress=False)
    (root / "data").mkdir()
    shutil.copy(root / "world" / "features.h5", root / "data" / "coco_butd36.h5")
    # the MCD example's captions.jsonl: 120 candidate (test) images, 40 training ones, one caption each
    generate_world(root / "world_mcd", GenerateConfig(num_images=160, seed=6, render=0, workers=1), progress=False)
    records = [json.loads(line) for line in (root / "world_mcd" / "captions.jsonl").read_text().splitlines()]
    _write_corpus(root / "captions.jsonl", [(r["image_id"], "train" if k < 40 else "test", r["captions"][:1])
                                            for k, r in enumerate(records)])
    # the README's build command, run for real on the tiny corpus: the graph the README's and crg.md's examples load
    marker = "--split train --out runs/crg_f30k --dump"
    readme_build = next(c for c in commands(executed_block(marker)) if marker in c.text)
    argv = shlex.split(readme_build.text.replace("../shared/data/flickr30k/captions.jsonl",
                                                 str(root / "f30k_captions.jsonl")))
    cwd = os.getcwd()
    os.chdir(root)
    try:
        name, run, args = program(argv)
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                run(args)
            except SystemExit as exit_:
                assert exit_.code in (0, None), f"{name} {args} failed"
    finally:
        os.chdir(cwd)
    assert (root / "runs" / "crg_f30k").is_dir()
    return root


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.id)
def test_every_python_block_runs(block, docs_env, monkeypatch):
    code = block.text
    for doc_path, tiny in INPUTS.items():
        code = code.replace(doc_path, tiny)
    if any(p in code for p in SHARED_INPUTS):
        if not SHARED.is_dir():
            pytest.skip(f"{block.id} reads the shared benchmarks: not found at {SHARED}")
        code = code.replace("../shared/", f"{SHARED}/")
    if "import lmdb" in code:
        pytest.importorskip("lmdb")
    first = _first_line(block)
    monkeypatch.chdir(docs_env)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(PREAMBLES.get(first, ""), f"{block.id} (preamble)", "exec"), namespace)
    try:
        exec(compile(code, block.id, "exec"), namespace)
    except NameError as err:
        pytest.fail(f"{block.id}: {err}: the example takes it as given; define it in PREAMBLES[{first!r}]")
    if first in CHECKS:
        exec(compile(CHECKS[first], f"{block.id} (check)", "exec"), namespace)
