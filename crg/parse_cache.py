"""A persistent cache of parse trees, so that rebuilding a graph never parses a caption twice.

SQLite (standard library): one row per (parser, caption) with the bracketed tree. Writes are
committed in batches, so a run killed mid-corpus keeps everything parsed so far and the rerun
resumes where it stopped. Keys include the parser's :meth:`cache_key`, so a different model or
converter version never reuses stale trees.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Iterable

__all__ = ["ParseCache", "ParseCacheError", "default_cache_path"]

logger = logging.getLogger(__name__)


def default_cache_path() -> Path:
    """``$GC_CACHE_DIR/parse_cache.sqlite``, else ``~/.cache/grounded_composer/parse_cache.sqlite``."""
    root = os.environ.get("GC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "grounded_composer")
    return Path(root) / "parse_cache.sqlite"


def _key(parser_key: str, caption: str) -> bytes:
    return hashlib.blake2b(f"{parser_key}\x00{caption}".encode("utf-8"), digest_size=16).digest()


class ParseCacheError(ValueError):
    """A parse cache path that is not a usable SQLite file; the message names it."""


class ParseCache:
    """Bracketed trees keyed by (parser cache key, caption text)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.is_dir():
            raise ParseCacheError(f"parse cache {self.path} is a folder; --cache names a file (SQLite)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=60)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS trees (key BLOB PRIMARY KEY, tree TEXT NOT NULL)")
            self._db.commit()
        except (sqlite3.DatabaseError, OSError) as err:
            raise ParseCacheError(f"parse cache {self.path}: cannot be opened as a SQLite parse cache ({err}); "
                                  f"point --cache at another file or delete this one") from None

    def get_many(self, parser_key: str, captions: list[str]) -> list[str | None]:
        """The cached tree of each caption, ``None`` where there is none."""
        keys = [_key(parser_key, c) for c in captions]
        found: dict[bytes, str] = {}
        for start in range(0, len(keys), 900):  # SQLite's limit on bound parameters
            chunk = keys[start:start + 900]
            rows = self._db.execute(
                f"SELECT key, tree FROM trees WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            found.update(rows.fetchall())
        return [found.get(k) for k in keys]

    def put_many(self, parser_key: str, items: Iterable[tuple[str, str]]) -> None:
        """Store ``(caption, bracketed_tree)`` pairs and commit."""
        self._db.executemany("INSERT OR REPLACE INTO trees (key, tree) VALUES (?, ?)",
                             [(_key(parser_key, c), t) for c, t in items])
        self._db.commit()

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM trees").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ParseCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
