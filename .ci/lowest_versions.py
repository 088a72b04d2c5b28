"""Print a pip constraints file that pins every requirement of setup.py to its lowest declared version.

    python .ci/lowest_versions.py test > lowest.txt   # install_requires and the [test] extra
    pip install -c lowest.txt -e ".[test]"

Why: a lower bound nobody installs is a guess. CI installs exactly these versions in a fresh virtual environment
and runs the fast tests (.ci/run), so that a bound below what the code needs fails there, not at a user's.
Requirements without a lower bound (``psutil``) and exact pins (``==``) are left as they are.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

SETUP = Path(__file__).resolve().parents[1] / "setup.py"


def declared(extras: list[str]) -> list[str]:
    """``install_requires`` plus the named extras, read from setup.py's source (nothing is executed)."""
    call = next(n for n in ast.walk(ast.parse(SETUP.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "setup")
    kw = {k.arg: k.value for k in call.keywords}
    reqs = list(ast.literal_eval(kw["install_requires"]))
    extra_map = ast.literal_eval(kw["extras_require"]) if "extras_require" in kw else {}
    for name in extras:
        reqs += extra_map[name]
    return reqs


def lowest(requirement: str) -> str | None:
    """``"spacy>=3.7.5,<3.9"`` -> ``"spacy==3.7.5"``; ``"ray[data]>=2.40"`` -> ``"ray==2.40"``; else ``None``."""
    m = re.match(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$", requirement)
    name, spec = m.group(1), m.group(3)
    floor = re.search(r">=\s*([0-9][^,;\s]*)", spec)
    return f"{name}=={floor.group(1)}" if floor else None


def main(argv: list[str]) -> int:
    pins = {}
    for req in declared(argv):
        pin = lowest(req)
        if pin:
            pins.setdefault(pin.split("==")[0].lower(), pin)
    print("\n".join(sorted(pins.values(), key=str.lower)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
