"""Write a benchmark's figures into its own section of docs/benchmarks.md, leaving the others alone."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def update_section(section: str, text: str, docs: Path = DOCS) -> None:
    """Replace the section that starts with the heading ``section`` by ``text`` (or append it)."""
    docs.parent.mkdir(parents=True, exist_ok=True)
    old = docs.read_text(encoding="utf-8") if docs.exists() else "# Benchmarks\n"
    if section in old:
        head, rest = old.split(section, 1)
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1:] if nxt >= 0 else ""
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    docs.write_text(new, encoding="utf-8")
