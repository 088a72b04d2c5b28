"""The columnar saved graph: one ``.npy`` file per array and per string table, memory-mapped on load.

Why: the first format (``graph.npz`` + ``graph_strings.json.gz``) is read whole into Python objects, about
1.4 KiB per distinct concept, so a web-scale graph would need tens of GB in the process that opens it. Here
every array is a plain ``.npy`` (``numpy.load(mmap_mode="r")``) and every string table two of them, the
UTF-8 bytes of all strings and their ``(n+1,)`` offsets (:class:`StringTable`), decoded only where read;
opening a graph costs the headers, and memory grows with what is touched.

Layout of a graph folder::

    graph.json            format, layout, meta, and what the arrays are (the commit point: written last)
    graph/NAME.npy        every array of :data:`crg.graph._ARRAYS`
    graph/NAME.offsets.npy, graph/NAME.utf8.npy
                          every string table (concept texts and labels, templates, captions, image ids)
    graph/image_split_codes.npy
                          the image splits as codes into ``graph.json``'s ``split_names`` (-1: no split)

:class:`ColumnarWriter` writes the same folder piece by piece (the distributed merge fills arrays it
never holds whole); :func:`write_columnar` writes a whole :class:`~crg.graph.ConceptGraph`.

>>> t = StringTable.from_strings(["a dog", "", "ćat"])
>>> len(t), t[2], t[-3], t[1:], t == ["a dog", "", "ćat"]
(3, 'ćat', 'a dog', ['', 'ćat'], True)
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

__all__ = ["COLUMNAR_VERSION", "StringTable", "HashIndex", "CodedStrings", "INDEXED", "ColumnarWriter", "write_columnar", "read_columnar",
           "is_columnar", "columnar_files", "map_or_read"]

COLUMNAR_VERSION = 2
INDEXED = ("concept_texts", "predicate_templates", "image_ids")  # string tables saved with a HashIndex
MANIFEST = "graph.json"
FOLDER = "graph"


class StringTable(Sequence):
    """A read-only sequence of strings stored as UTF-8 ``data`` (uint8) and ``offsets`` (int64, ``(n+1,)``).

    Both may be memory-mapped: indexing decodes one string, iteration decodes blocks.
    """

    __hash__ = None  # a sequence compared by value, like a list

    def __init__(self, offsets: np.ndarray, data: np.ndarray, lookup: "HashIndex | None" = None):
        if offsets.ndim != 1 or len(offsets) < 1:
            raise ValueError("a string table needs (n+1,) offsets")
        self.offsets = offsets
        self.data = data
        self.lookup = lookup    # text -> position, when the table was saved with its hash index

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> "StringTable":
        encoded = [s.encode("utf-8") for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(offsets, np.frombuffer(b"".join(encoded), dtype=np.uint8))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"string {index} of a table of {n}")
        return bytes(self.data[self.offsets[i]:self.offsets[i + 1]]).decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        block = 65536
        for start in range(0, len(self), block):
            stop = min(start + block, len(self))
            off = np.asarray(self.offsets[start:stop + 1])
            text = bytes(self.data[off[0]:off[-1]])
            rel = (off - off[0]).tolist()
            for a, b in zip(rel[:-1], rel[1:]):
                yield text[a:b].decode("utf-8")

    def __eq__(self, other) -> bool:
        if isinstance(other, StringTable):
            return len(self) == len(other) and np.array_equal(self.offsets - self.offsets[0],
                                                              other.offsets - other.offsets[0]) and \
                np.array_equal(self.data[self.offsets[0]:self.offsets[-1]], other.data[other.offsets[0]:other.offsets[-1]])
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"StringTable([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"


class HashIndex:
    """Text -> position in a :class:`StringTable`, without a dictionary of every string: the positions sorted by
    the strings' crc32 (``order``) and those hashes (``hashes``, sorted), both memory-mapped; a lookup binary-searches
    the hash and compares the few strings that share it (O(log n) pages touched).

    >>> t = StringTable.from_strings(["dog", "cat", "a red ball"])
    >>> index = HashIndex.build(t)
    >>> index["cat"], "bird" in index
    (1, False)
    """

    def __init__(self, hashes: np.ndarray, order: np.ndarray, table: StringTable):
        self.hashes, self.order, self.table = hashes, order, table

    @staticmethod
    def hash(text: str) -> int:
        """The key of a string: crc32 of its UTF-8 (what the partitioned merge computes from the bytes)."""
        return zlib.crc32(text.encode("utf-8"))

    @classmethod
    def hash_all(cls, table: Iterable[str]) -> np.ndarray:
        return np.fromiter((cls.hash(s) for s in table), dtype=np.uint32)

    @classmethod
    def build(cls, table: StringTable) -> "HashIndex":
        hashes = cls.hash_all(table)
        order = np.argsort(hashes, kind="stable")
        return cls(hashes[order], order.astype(np.int64), table)

    def get(self, text: str, default=None):
        h = self.hash(text)
        lo = int(np.searchsorted(self.hashes, h, side="left"))
        hi = int(np.searchsorted(self.hashes, h, side="right"))
        for k in range(lo, hi):
            position = int(self.order[k])
            if self.table[position] == text:
                return position
        return default

    def __getitem__(self, text: str) -> int:
        position = self.get(text)
        if position is None:
            raise KeyError(text)
        return position

    def __contains__(self, text: str) -> bool:
        return self.get(text) is not None


class CodedStrings(Sequence):
    """A read-only sequence of a few distinct strings (or ``None``): int codes into ``names``, -1 for ``None``."""

    __hash__ = None

    def __init__(self, codes: np.ndarray, names: Sequence[str]):
        self.codes = codes
        self.names = list(names)

    @classmethod
    def from_values(cls, values: Iterable[str | None]) -> "CodedStrings":
        names: dict[str, int] = {}
        codes = [-1 if v is None else names.setdefault(v, len(names)) for v in values]
        return cls(np.asarray(codes, dtype=np.int32), list(names))

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        code = int(self.codes[index])
        return None if code < 0 else self.names[code]

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"CodedStrings(n={len(self)}, names={self.names})"


def is_columnar(directory: str | Path) -> bool:
    return (Path(directory) / MANIFEST).exists()


def columnar_files() -> tuple[str, str]:
    """The names a columnar graph takes in its folder (for output-folder bookkeeping)."""
    return MANIFEST, FOLDER


class ColumnarWriter:
    """Writes a columnar graph folder piece by piece; :meth:`commit` makes it the folder's graph.

    Pieces go to ``graph.tmp/`` and move to ``graph/`` on commit, ``graph.json`` last, so a reader never sees
    half a graph. Arrays can be written whole (:meth:`array`) or allocated and filled through a memory map
    (:meth:`open_array`), by this process or by others that open the same file (:func:`open_piece`).
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.tmp = self.directory / (FOLDER + ".tmp")
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir(parents=True)
        self.arrays: dict[str, dict] = {}
        self.strings: list[str] = []

    def path(self, name: str) -> Path:
        return self.tmp / f"{name}.npy"

    def array(self, name: str, values: np.ndarray) -> None:
        np.save(self.path(name), np.ascontiguousarray(values))
        self.arrays[name] = {"dtype": str(values.dtype), "shape": list(values.shape)}

    def open_array(self, name: str, dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A writable memory map of a new ``.npy`` (flush it, or let it go, before :meth:`commit`)."""
        self.arrays[name] = {"dtype": str(np.dtype(dtype)), "shape": list(shape)}
        return np.lib.format.open_memmap(self.path(name), mode="w+", dtype=dtype, shape=shape)

    def string_table(self, name: str, table: StringTable | Sequence[str]) -> None:
        if not isinstance(table, StringTable):
            table = StringTable.from_strings(table)
        self.array(f"{name}.offsets", np.asarray(table.offsets, dtype=np.int64) - int(table.offsets[0]))
        self.array(f"{name}.utf8", np.asarray(table.data[table.offsets[0]:table.offsets[-1]], dtype=np.uint8))
        self.strings.append(name)
        if name in INDEXED:
            index = HashIndex.build(table)
            self.array(f"{name}.hash_sorted", index.hashes)
            self.array(f"{name}.hash_order", index.order)

    def declare_strings(self, names: Sequence[str]) -> None:
        """``NAME.offsets`` and ``NAME.utf8`` of each name were written through :meth:`open_array`."""
        self.strings.extend(names)

    def commit(self, meta: dict, split_names: Sequence[str], extra: dict | None = None) -> None:
        """Make the pieces the folder's graph; ``extra``: more manifest entries (e.g. the saved MCD counts)."""
        manifest = {"format_version": COLUMNAR_VERSION, "layout": "columnar", "arrays": self.arrays,
                    "strings": self.strings, "split_names": list(split_names), "meta": meta, **(extra or {})}
        for old in ("graph.npz", "graph_strings.json.gz", MANIFEST):  # one graph per folder
            (self.directory / old).unlink(missing_ok=True)
        final = self.directory / FOLDER
        if final.exists():
            shutil.rmtree(final)
        os.replace(self.tmp, final)
        tmp = self.directory / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, self.directory / MANIFEST)


def write_columnar(graph, directory: str | Path, arrays: Sequence[str], strings: Sequence[str]) -> None:
    """Write ``graph`` (a :class:`~crg.graph.ConceptGraph`) as a columnar folder (atomically: see the writer):
    its fields named in ``arrays`` and ``strings`` (``image_splits`` among them, as codes)."""
    writer = ColumnarWriter(directory)
    for name in arrays:
        writer.array(name, np.asarray(getattr(graph, name)))
    for name in strings:
        if name != "image_splits":
            writer.string_table(name, getattr(graph, name))
    splits = graph.image_splits if isinstance(graph.image_splits, CodedStrings) else \
        CodedStrings.from_values(graph.image_splits)
    writer.array("image_split_codes", np.asarray(splits.codes, dtype=np.int32))
    writer.commit(graph.meta, splits.names)


def map_or_read(path: Path) -> np.ndarray:
    """``path`` (a ``.npy``) memory-mapped read-only; read into memory when it holds no element (numpy cannot
    map an empty array)."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:
        return np.load(path, allow_pickle=False)


def _load(path: Path, spec: dict, mmap: bool) -> np.ndarray:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the columnar graph in {path.parent.parent} is incomplete; "
                                f"rebuild it")
    if not mmap or int(np.prod(spec["shape"])) == 0:  # an empty file cannot be mapped
        arr = np.load(path, allow_pickle=False)
    else:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    if str(arr.dtype) != spec["dtype"] or list(arr.shape) != spec["shape"]:
        raise ValueError(f"{path}: {arr.dtype}{list(arr.shape)}, but graph.json says {spec['dtype']}{spec['shape']}")
    return arr


def read_columnar(directory: str | Path, arrays: Sequence[str], strings: Sequence[str], *, mmap: bool = True) -> dict:
    """The fields ``arrays`` and ``strings`` of a :class:`~crg.graph.ConceptGraph` (and ``meta``) from a columnar
    folder: arrays memory-mapped (unless ``mmap=False``), string tables as :class:`StringTable`, image splits as
    :class:`CodedStrings`."""
    directory = Path(directory)
    manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("format_version") != COLUMNAR_VERSION or manifest.get("layout") != "columnar":
        raise ValueError(f"{directory / MANIFEST}: graph format {manifest.get('format_version')} "
                         f"({manifest.get('layout')}), expected {COLUMNAR_VERSION} (columnar); rebuild the graph")
    folder = directory / FOLDER
    specs = manifest["arrays"]

    def get(name: str) -> np.ndarray:
        if name not in specs:
            raise ValueError(f"{directory / MANIFEST} lists no array {name!r}; rebuild the graph")
        return _load(folder / f"{name}.npy", specs[name], mmap)

    fields: dict = {name: get(name) for name in arrays}
    for name in strings:
        if name != "image_splits":
            table = StringTable(get(f"{name}.offsets"), get(f"{name}.utf8"))
            if f"{name}.hash_sorted" in specs:  # a graph saved before the index loads without it
                table.lookup = HashIndex(get(f"{name}.hash_sorted"), get(f"{name}.hash_order"), table)
            fields[name] = table
    fields["image_splits"] = CodedStrings(get("image_split_codes"), manifest["split_names"])
    fields["meta"] = manifest.get("meta", {})
    return fields
