"""A distributed merge of shard parts into the columnar graph: no process holds the whole graph.

The default engine numbers concepts, predicates and derivations by first occurrence in corpus order. Shards
are contiguous pieces of the corpus and each part lists its keys in first-occurrence order, so a key's global
id is the rank of its first occurrence ``(shard, local id)``: new keys of shard ``s`` get ids from
``base[s]`` = the keys first seen in earlier shards, in local-id order. That is computed without a global
dictionary:

1. **scan** -- keys are hash-partitioned (``crc32 % P``, cut so by the workers); each :class:`KeyPartition` (a
   Ray actor, or an object in one process) reads its members of every shard in shard order, keeps a dictionary
   of *its* keys only and records which local ids are new in each shard (written to a file), returning the
   per-shard counts.
2. **base** -- the driver sums the counts: ``base = cumsum`` (one integer per shard).
3. **assign** -- each partition reads every partition's new-id lists (small integer arrays), ranks its own new
   keys within their shard, and writes, per shard, the global id of each of its local keys (a *map piece*).
4. **write** -- each partition writes its keys' rows (strings, kinds, labels, derivation rows) into the final
   memory-mapped arrays at their global ids; ragged rows in two passes (lengths, the driver's running sum of
   them in fixed-size chunks, then values).

Concepts and predicates go through this first; then each shard's derivations are rewritten in global concept
and predicate ids (:func:`remap_shard`) and go through it as keys of their own; then each shard writes its
captions' slice of the caption arrays and buckets its (concept, image) pairs by concept range
(:func:`write_shard_captions`), each range its denotations (:func:`denotation_range`, :func:`place_denotation`),
and each shard its rows of the MCD counts (:func:`shard_counts`, :func:`place_counts`). Those per-shard and
per-range steps run on the partition actors, round robin. Image ids go through a scan too, to refuse an id
given twice.

The result equals :meth:`crg.graph.GraphBuilder.add_part` over the parts in order, which equals the default
engine's graph (``tests/test_crg_scale.py`` checks every array and string table). The driver holds a few
integers per shard and per chunk, never a table.
"""

from __future__ import annotations

import shutil
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from crg.graph_store import ColumnarWriter, map_or_read
from crg.shard_parts import PartSummary, load_part, partitioned_keys

__all__ = ["KeyPartition", "LocalExecutor", "MergePlan", "MergeReport", "merge_parts", "remap_shard", "write_shard_captions",
           "denotation_range", "running_sum", "TablePartition",
           "place_denotation", "place_counts", "shard_counts"]

_CHUNK = 1 << 22   # elements per step of the driver's running sums


@dataclass
class MergeReport:
    """How the merge went: seconds per step, and the largest partition process's peak resident memory (in one
    process: this process's)."""

    seconds: dict[str, float]
    partition_peak_rss_mb: float


@dataclass(frozen=True)
class MergePlan:
    """Where the merge reads and writes: shard parts, its own working files, the final graph's pieces."""

    shard_dir: str
    work_dir: str
    graph_tmp: str          # the ColumnarWriter's folder of pieces
    num_shards: int
    num_partitions: int
    sync: bool = False      # msync every write through a memory map (several nodes on a shared file system)

    def piece(self, name: str) -> Path:
        return Path(self.graph_tmp) / f"{name}.npy"

    def work(self, name: str) -> Path:
        return Path(self.work_dir) / name


def _open(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r+")


def _done(arr: np.ndarray, plan: MergePlan) -> None:
    """Finish writing through a memory map: on one machine the page cache already shares the writes; on a
    cluster's shared file system they are synced (``plan.sync``) before another node reads them."""
    if plan.sync:
        arr.flush()


def _shard_keys(plan: MergePlan, table: str, shard: int, p: int) -> dict[str, np.ndarray]:
    """Partition ``p``'s members of ``table`` in one shard (:func:`crg.shard_parts.partitioned_keys`)."""
    names = ["local", "off", "key"] + (["kinds", "label_off", "label"] if table == "concepts" else [])
    path = plan.work(f"{shard:05d}.dkeys.npz") if table == "derivations" else None
    try:
        if path is not None:
            with np.load(path) as data:
                return {n: data[f"{table}.{p}.{n}"] for n in names}
        part = load_part(plan.shard_dir, shard, [f"{table}.{p}.{n}" for n in names])
    except KeyError:
        raise RuntimeError(f"shard {shard}'s part has no {table} partition {p} of {plan.num_partitions}: it was "
                           f"made for another number of merge partitions") from None
    return {n: part[f"{table}.{p}.{n}"] for n in names}


class KeyPartition:
    """One hash partition of every key table (one actor: its start-up is paid once): a :class:`TablePartition`
    per table, reached by the table's name."""

    def __init__(self, plan: MergePlan, index: int):
        self.plan, self.index = plan, index
        self.tables: dict[str, TablePartition] = {}

    def scan(self, table: str, unique: bool = False) -> list[int]:
        self.tables[table] = TablePartition(self.plan, table, self.index, unique)
        return self.tables[table].scan()

    def assign(self, table: str, base: Sequence[int]) -> int:
        return self.tables[table].assign(base)

    def write_lengths(self, table: str, ptr_name: str, what: str) -> None:
        self.tables[table].write_lengths(ptr_name, what)

    def write_values(self, table: str, ptr_name: str, data_name: str, what: str) -> None:
        self.tables[table].write_values(ptr_name, data_name, what)

    def write_scalars(self, table: str) -> None:
        self.tables[table].write_scalars()

    def write_hashes(self, table: str, path: str) -> None:
        self.tables[table].write_hashes(path)

    def drop(self, table: str) -> None:
        """Let go of a table once its rows are written."""
        self.tables.pop(table, None)

    def peak_rss_mb(self) -> float:
        from crg.shards import peak_rss_mb

        return peak_rss_mb()

    def run(self, fn: Callable, *args):
        """Run a per-shard or per-range step here (a warm process: no new worker to start and import)."""
        return fn(*args)


class TablePartition:
    """One hash partition of one key table: its keys' first occurrences, global ids and rows (module docstring)."""

    def __init__(self, plan: MergePlan, table: str, index: int, unique: bool = False):
        self.plan, self.table, self.index, self.unique = plan, table, index, unique
        self.keys: list[bytes] = []
        self.occurrences: list[tuple[np.ndarray, np.ndarray]] = []  # per shard: (local ids, entry ids)
        self.first_shard: list[int] = []
        self.kinds: np.ndarray | None = None
        self.labels: list[bytes] = []
        self.gids: np.ndarray | None = None

    def scan(self) -> list[int]:
        """Step 1: read this partition's keys of every shard; returns the count of new keys per shard."""
        plan, p = self.plan, self.index
        ids: dict[bytes, int] = {}
        kind_entries, kind_bits = [], []
        new_ptr, new_locals, counts = [0], [], []
        for s in range(plan.num_shards):
            got = _shard_keys(plan, self.table, s, p)
            mine = got["local"]                                             # (m,) local ids of this partition
            blob, offl = got["key"].tobytes(), got["off"].tolist()
            labels = got["label"].tobytes() if "label" in got else b""
            label_off = got["label_off"].tolist() if "label" in got else []
            entries = np.empty(len(mine), dtype=np.int64)
            new_here = []
            for k, local in enumerate(mine.tolist()):
                key = blob[offl[k]:offl[k + 1]]
                entry = ids.get(key)
                if entry is None:
                    entry = ids[key] = len(self.keys)
                    self.keys.append(key)
                    self.first_shard.append(s)
                    new_here.append(local)
                    if label_off:
                        self.labels.append(labels[label_off[k]:label_off[k + 1]])
                elif self.unique:
                    raise ValueError(f"image id {key.decode('utf-8')!r} appears twice in the corpus (shards "
                                     f"{self.first_shard[entry]} and {s}); image ids must be unique (in a TSV, an "
                                     f"image's lines must be together)")
                entries[k] = entry
            if "kinds" in got:
                kind_entries.append(entries)
                kind_bits.append(got["kinds"])
            self.occurrences.append((mine.astype(np.int64), entries))
            new_locals.extend(new_here)
            new_ptr.append(len(new_locals))
            counts.append(len(new_here))
        self.kinds = np.zeros(len(self.keys), dtype=np.uint8)             # OR of the kinds of every occurrence
        if kind_entries:
            np.bitwise_or.at(self.kinds, np.concatenate(kind_entries), np.concatenate(kind_bits))
        np.savez(plan.work(f"{self.table}.new.{p}.npz"), ptr=np.asarray(new_ptr, dtype=np.int64),
                 locals=np.asarray(new_locals, dtype=np.int64))
        return counts

    def assign(self, base: Sequence[int]) -> int:
        """Step 3: global ids of this partition's keys, and per shard the global id of each local key it holds
        (its map piece). Returns the number of keys."""
        plan = self.plan
        news = []
        for q in range(plan.num_partitions):
            with np.load(plan.work(f"{self.table}.new.{q}.npz")) as data:
                news.append((data["ptr"], data["locals"]))
        mine_ptr, mine = news[self.index]
        self.gids = np.empty(len(self.keys), dtype=np.int64)
        entry = 0
        for s in range(plan.num_shards):
            own = mine[mine_ptr[s]:mine_ptr[s + 1]]
            if len(own) == 0:
                continue
            union = np.sort(np.concatenate([lc[pt[s]:pt[s + 1]] for pt, lc in news]))
            self.gids[entry:entry + len(own)] = int(base[s]) + np.searchsorted(union, own)
            entry += len(own)
        ptr = np.zeros(plan.num_shards + 1, dtype=np.int64)
        np.cumsum([len(lc) for lc, _ in self.occurrences], out=ptr[1:])
        locals_ = np.concatenate([lc for lc, _ in self.occurrences]) if self.occurrences else np.zeros(0, np.int64)
        entries = np.concatenate([e for _, e in self.occurrences]) if self.occurrences else np.zeros(0, np.int64)
        # separate .npy files: a shard's caption step maps them and reads its own slice, not every shard's
        for name, values in (("ptr", ptr), ("locals", locals_), ("gids", self.gids[entries])):
            np.save(plan.work(f"{self.table}.map.{self.index}.{name}.npy"), values)
        self.occurrences = []
        return len(self.keys)

    # ---------------------------------------------------------------- step 4: rows into the final arrays
    def _values(self, what: str) -> list[np.ndarray]:
        if what == "text":
            return [np.frombuffer(k, dtype=np.uint8) for k in self.keys]
        if what == "label":
            return [np.frombuffer(k, dtype=np.uint8) for k in self.labels]
        if what == "children":
            return [np.frombuffer(k, dtype=np.int64)[2:].astype(np.int32) for k in self.keys]
        raise ValueError(what)

    def write_lengths(self, ptr_name: str, what: str) -> None:
        ptr = _open(self.plan.piece(ptr_name))
        ptr[self.gids + 1] = [len(v) for v in self._values(what)]
        _done(ptr, self.plan)

    def write_values(self, ptr_name: str, data_name: str, what: str) -> None:
        values = self._values(what)
        if not values:
            return
        ptr = np.load(self.plan.piece(ptr_name), mmap_mode="r")
        lengths = np.asarray([len(v) for v in values], dtype=np.int64)
        if lengths.sum() == 0:
            return
        data = _open(self.plan.piece(data_name))
        starts = np.asarray(ptr[self.gids], dtype=np.int64)
        # (sum lengths,) position of every value: its row's start plus its place within the row
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        data[np.repeat(starts, lengths) + within] = np.concatenate(values)
        _done(data, self.plan)

    def write_hashes(self, path: str) -> None:
        """The crc32 of each key at its global id, into the working array ``path`` (for the text index)."""
        if not self.keys:
            return
        arr = np.load(path, mmap_mode="r+")
        arr[self.gids] = np.fromiter((zlib.crc32(k) for k in self.keys), dtype=np.uint32, count=len(self.keys))
        _done(arr, self.plan)

    def write_scalars(self) -> None:
        """Concepts: their kinds; derivations: parent and predicate."""
        if not self.keys:
            return
        if self.table == "concepts":
            kinds = _open(self.plan.piece("concept_kinds"))
            kinds[self.gids] = self.kinds
            _done(kinds, self.plan)
        elif self.table == "derivations":
            rows = [np.frombuffer(k, dtype=np.int64)[:2] for k in self.keys]
            if rows:
                rows = np.stack(rows)                                      # (n, 2) parent, predicate
                for col, name in ((0, "deriv_parent"), (1, "deriv_predicate")):
                    out = _open(self.plan.piece(name))
                    out[self.gids] = rows[:, col].astype(np.int32)
                    _done(out, self.plan)


def _shard_map(plan: MergePlan, table: str, shard: int, size: int) -> np.ndarray:
    """``(size,)`` global id of each local key of ``shard``, from every partition's map piece."""
    out = np.full(size, -1, dtype=np.int64)
    for q in range(plan.num_partitions):
        ptr = map_or_read(plan.work(f"{table}.map.{q}.ptr.npy"))
        lo, hi = int(ptr[shard]), int(ptr[shard + 1])
        if hi > lo:
            locals_ = map_or_read(plan.work(f"{table}.map.{q}.locals.npy"))
            gids = map_or_read(plan.work(f"{table}.map.{q}.gids.npy"))
            out[np.asarray(locals_[lo:hi])] = gids[lo:hi]
    if size and out.min() < 0:
        raise RuntimeError(f"shard {shard}: some {table} got no global id (a map piece is missing)")
    return out


def remap_shard(plan: MergePlan, shard: int, num_concepts: int, num_predicates: int) -> None:
    """A shard's derivations as keys in global concept and predicate ids (for the derivation partitions), and
    its concept map (for its captions)."""
    part = load_part(plan.shard_dir, shard, ["d_parent", "d_predicate", "d_child_ptr", "d_children"])
    cmap = _shard_map(plan, "concepts", shard, num_concepts)
    pmap = _shard_map(plan, "predicates", shard, num_predicates)
    np.save(plan.work(f"{shard:05d}.cmap.npy"), cmap)
    arity = np.diff(part["d_child_ptr"])
    n = len(arity)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(arity + 2, out=ptr[1:])
    vals = np.empty(int(ptr[-1]), dtype=np.int64)                        # per derivation: parent, predicate, children
    vals[ptr[:-1]] = cmap[part["d_parent"]]
    vals[ptr[:-1] + 1] = pmap[part["d_predicate"]]
    child_pos = np.repeat(ptr[:-1] + 2, arity) + (np.arange(int(arity.sum())) - np.repeat(part["d_child_ptr"][:-1], arity))
    vals[child_pos] = cmap[part["d_children"]]
    keys = [vals[a:b].tobytes() for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist())]
    arrays: dict[str, np.ndarray] = {}
    partitioned_keys(arrays, "derivations", keys, plan.num_partitions)
    np.savez(plan.work(f"{shard:05d}.dkeys.npz"), **arrays)


@dataclass(frozen=True)
class ShardBases:
    """Where one shard's captions and images go in the final arrays."""

    caption: int
    caption_deriv: int
    caption_concept: int
    caption_text_byte: int
    image: int
    image_byte: int


def write_shard_captions(plan: MergePlan, shard: int, bases: ShardBases, num_derivations: int,
                         split_codes: Sequence[int], concept_ranges: Sequence[int], num_images: int) -> None:
    """Shard ``shard``'s slice of the caption arrays, caption texts, image ids and splits; and its distinct
    (concept, image) pairs, bucketed by the concept-id ranges ``concept_ranges`` (``(R+1,)`` bounds) for the
    denotation steps (each reads its own bucket of every shard)."""
    part = load_part(plan.shard_dir, shard)
    cmap = np.load(plan.work(f"{shard:05d}.cmap.npy"))
    dmap = _shard_map(plan, "derivations", shard, num_derivations)
    n = len(part["cap_root"])
    c0 = bases.caption

    def put(name: str, at: int, values: np.ndarray) -> None:
        if len(values):
            arr = _open(plan.piece(name))
            arr[at:at + len(values)] = values
            _done(arr, plan)

    put("caption_image", c0, part["cap_image"] + bases.image)
    put("caption_index", c0, part["cap_index"])
    put("caption_root", c0, cmap[part["cap_root"]].astype(np.int32))
    put("caption_height", c0, part["cap_height"])
    put("caption_deriv_ptr", c0 + 1, part["cap_deriv_ptr"][1:] + bases.caption_deriv)
    put("caption_derivs", bases.caption_deriv, dmap[part["cap_derivs"]].astype(np.int32))
    put("caption_concept_ptr", c0 + 1, part["cap_concept_ptr"][1:] + bases.caption_concept)
    row = np.repeat(np.arange(n), np.diff(part["cap_concept_ptr"]))      # (nnz,) caption of each concept entry
    gids = cmap[part["cap_concepts"]]
    put("caption_concepts", bases.caption_concept, gids[np.lexsort((gids, row))].astype(np.int32))
    width = max(num_images, 1)
    pairs = np.unique(gids * width + (part["cap_image"].astype(np.int64) + bases.image)[row])  # (concept, image)
    bucket_of = np.searchsorted(np.asarray(concept_ranges[1:-1], dtype=np.int64), pairs // width, side="right")
    cuts = np.searchsorted(bucket_of, np.arange(len(concept_ranges)))     # pairs are sorted, so are their buckets
    np.savez(plan.work(f"{shard:05d}.den.npz"), **{f"r{r}": pairs[cuts[r]:cuts[r + 1]]
                                                  for r in range(len(concept_ranges) - 1)})
    put("caption_texts.offsets", c0 + 1, part["cap_text_off"][1:] + bases.caption_text_byte)
    put("caption_texts.utf8", bases.caption_text_byte, part["cap_text_utf8"])
    i0 = bases.image
    put("image_ids.offsets", i0 + 1, part["img_off"][1:] + bases.image_byte)
    put("image_ids.utf8", bases.image_byte, part["img_utf8"])
    codes = np.asarray(list(split_codes) + [-1], dtype=np.int32)         # local code -> global; -1 stays -1
    put("image_split_codes", i0, codes[part["img_split"]])


def _read(plan: MergePlan, name: str) -> np.ndarray:
    """A final array, memory-mapped (an empty one cannot be mapped: read)."""
    return map_or_read(plan.piece(name))


def shard_counts(plan: MergePlan, shard: int, bases: ShardBases, num_captions: int, num_images: int,
                 num_predicates: int) -> tuple[int, int]:
    """The MCD count rows of a shard's images (:mod:`crg.mcd_counts`), from its slice of the final caption arrays,
    to a working file; returns their non-zeros ``(compounds, atoms)``."""
    from crg.mcd_counts import caption_block_counts

    c0, c1 = bases.caption, bases.caption + num_captions
    compounds, atoms = caption_block_counts(
        _read(plan, "caption_image")[c0:c1], _read(plan, "caption_deriv_ptr")[c0:c1 + 1],
        _read(plan, "caption_derivs"), _read(plan, "caption_concept_ptr")[c0:c1 + 1], _read(plan, "caption_concepts"),
        _read(plan, "deriv_predicate"), _read(plan, "concept_kinds"), num_predicates, num_images, bases.image)
    np.savez(plan.work(f"{shard:05d}.counts.npz"), c_data=compounds.data, c_indices=compounds.indices,
             c_indptr=compounds.indptr, a_data=atoms.data, a_indices=atoms.indices, a_indptr=atoms.indptr)
    return compounds.nnz, atoms.nnz


def denotation_range(plan: MergePlan, r: int, lo: int, hi: int, num_images: int) -> int:
    """The denotations of concepts ``[lo, hi)`` (range ``r``): the shards' pairs of that range, to a working file
    as per-concept counts and sorted images; returns how many pairs."""
    width = max(num_images, 1)
    pieces = []
    for s in range(plan.num_shards):
        with np.load(plan.work(f"{s:05d}.den.npz")) as data:
            pieces.append(data[f"r{r}"])
    # a shard's pairs are distinct and shards hold different images, so the union has no duplicate
    pairs = np.sort(np.concatenate(pieces)) if pieces else np.zeros(0, np.int64)
    np.savez(plan.work(f"denotation.{lo}.npz"), counts=np.bincount(pairs // width - lo, minlength=hi - lo),
             images=(pairs % width).astype(np.int32))
    return len(pairs)


def place_denotation(plan: MergePlan, lo: int, hi: int, at: int) -> None:
    """Range ``[lo, hi)``'s denotations into the final CSR at pair offset ``at`` (every range in parallel)."""
    with np.load(plan.work(f"denotation.{lo}.npz")) as data:
        counts, images = data["counts"], data["images"]
    if hi > lo:
        ptr = _open(plan.piece("concept_image_ptr"))
        ptr[lo + 1:hi + 1] = at + np.cumsum(counts)
        _done(ptr, plan)
    if len(images):
        out = _open(plan.piece("concept_images"))
        out[at:at + len(images)] = images
        _done(out, plan)


def place_counts(plan: MergePlan, shard: int, image_start: int, at: Sequence[int]) -> None:
    """Shard ``shard``'s count rows into the graph's two CSR matrices, at non-zero offsets ``at`` (compounds,
    atoms); every shard in parallel."""
    with np.load(plan.work(f"{shard:05d}.counts.npz")) as piece:
        pieces = {k: piece[k] for k in piece.files}
    for (name, prefix), base in zip((("mcd_compounds", "c"), ("mcd_atoms", "a")), at):
        data, indices, indptr = pieces[f"{prefix}_data"], pieces[f"{prefix}_indices"], pieces[f"{prefix}_indptr"]
        if len(data):
            for suffix, values in (("data", data), ("indices", indices)):
                arr = _open(plan.piece(f"{name}.{suffix}"))
                arr[base:base + len(values)] = values
                _done(arr, plan)
        if len(indptr) > 1:
            arr = _open(plan.piece(f"{name}.indptr"))
            arr[image_start + 1:image_start + len(indptr)] = indptr[1:] + base
            _done(arr, plan)


def sort_hash_index(plan: MergePlan, name: str) -> None:
    """String table ``name``'s :class:`crg.graph_store.HashIndex`: its ids sorted by hash, and those hashes, from
    the working array of per-id hashes (one task: 12 bytes per string)."""
    hashes = map_or_read(plan.work(f"{name}.hash.npy"))
    order = np.argsort(hashes, kind="stable")
    for suffix, values in (("hash_sorted", np.asarray(hashes)[order]), ("hash_order", order.astype(np.int64))):
        if len(values):
            arr = _open(plan.piece(f"{name}.{suffix}"))
            arr[:] = values
            _done(arr, plan)


def _hash_index(executor, writer: ColumnarWriter, plan: MergePlan, parts: list, table: str, name: str,
                n: int) -> None:
    np.lib.format.open_memmap(plan.work(f"{name}.hash.npy"), mode="w+", dtype=np.uint32, shape=(n,))
    executor.call(parts, "write_hashes", table, str(plan.work(f"{name}.hash.npy")))
    writer.open_array(f"{name}.hash_sorted", np.uint32, (n,))
    writer.open_array(f"{name}.hash_order", np.int64, (n,))
    executor.map_on(parts, sort_hash_index, [(plan, name)])


def running_sum(path: Path) -> int:
    """In place: a ``(n+1,)`` array holding lengths at ``[1:]`` becomes their offsets; in fixed-size chunks, so
    the driver's memory does not grow with ``n``. Returns the total."""
    arr = _open(path)
    total = 0
    for a in range(1, len(arr), _CHUNK):
        chunk = np.cumsum(arr[a:a + _CHUNK], dtype=np.int64) + total
        arr[a:a + _CHUNK] = chunk
        total = int(chunk[-1])
    arr.flush()
    return total


class LocalExecutor:
    """Runs the merge's steps in this process, one after another (tests; small corpora)."""

    def actors(self, cls, args_list: list[tuple]) -> list:
        return [cls(*args) for args in args_list]

    def call(self, actors: list, method: str, *args) -> list:
        return [getattr(a, method)(*args) for a in actors]

    def map(self, fn: Callable, args_list: list[tuple]) -> list:
        return [fn(*args) for args in args_list]

    def map_on(self, actors: list, fn: Callable, args_list: list[tuple]) -> list:
        """``fn`` over ``args_list``, spread over ``actors`` (here: in order, in this process)."""
        return [fn(*args) for args in args_list]


def _global_table(executor, parts: list, plan: MergePlan, table: str, unique: bool = False) -> int:
    counts = np.asarray(executor.call(parts, "scan", table, unique), dtype=np.int64).reshape(plan.num_partitions,
                                                                                             plan.num_shards)
    per_shard = counts.sum(axis=0)                                         # (S,) new keys per shard
    base = np.concatenate([[0], np.cumsum(per_shard)])
    executor.call(parts, "assign", table, base[:-1].tolist())
    return int(base[-1])


def _ragged_piece(executor, writer: ColumnarWriter, parts: list, table: str, n: int, ptr_name: str, data_name: str,
                  what: str, dtype) -> None:
    writer.open_array(ptr_name, np.int64, (n + 1,))
    executor.call(parts, "write_lengths", table, ptr_name, what)
    total = running_sum(writer.path(ptr_name))
    writer.open_array(data_name, dtype, (total,))
    executor.call(parts, "write_values", table, ptr_name, data_name, what)


def merge_parts(shard_dir: str | Path, summaries: Sequence[PartSummary], out_dir: str | Path, meta: dict, *,
                executor=None, num_partitions: int = 2, sync: bool = False) -> "MergeReport":
    """Merge the parts of ``summaries`` (in shard order) into the columnar graph of ``out_dir`` (module
    docstring). ``executor`` runs the partitions and per-shard steps (:class:`LocalExecutor` by default; the Ray
    engine passes Ray actors and tasks). Returns the seconds each step took and the partitions' peak memory."""
    seconds: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        seconds[name] = round(now - clock[0], 3)
        clock[0] = now

    executor = executor or LocalExecutor()
    shard_dir = Path(shard_dir)
    work = shard_dir / "merge"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    writer = ColumnarWriter(out_dir)
    n_shards = len(summaries)
    if [s.shard for s in summaries] != list(range(n_shards)):
        raise ValueError("merge_parts needs the summaries of shards 0..S-1 in order")
    cut_for = sorted({s.num_partitions for s in summaries})
    if cut_for != [max(1, num_partitions)]:
        raise ValueError(f"the parts were cut for {cut_for} merge partitions, not {num_partitions}: merge them with "
                         f"the number they were made for (or make them again)")
    plan = MergePlan(str(shard_dir), str(work), str(writer.tmp), n_shards, max(1, num_partitions), sync)

    parts = executor.actors(KeyPartition, [(plan, p) for p in range(plan.num_partitions)])
    lap("start_partitions")
    n_images = _global_table(executor, parts, plan, "images", unique=True)
    _hash_index(executor, writer, plan, parts, "images", "image_ids", n_images)
    executor.call(parts, "drop", "images")
    lap("images")
    n_concepts = _global_table(executor, parts, plan, "concepts")
    n_predicates = _global_table(executor, parts, plan, "predicates")
    writer.open_array("concept_kinds", np.uint8, (n_concepts,))
    executor.call(parts, "write_scalars", "concepts")
    _ragged_piece(executor, writer, parts, "concepts", n_concepts, "concept_texts.offsets", "concept_texts.utf8",
                  "text", np.uint8)
    _ragged_piece(executor, writer, parts, "concepts", n_concepts, "concept_labels.offsets", "concept_labels.utf8",
                  "label", np.uint8)
    _ragged_piece(executor, writer, parts, "predicates", n_predicates, "predicate_templates.offsets",
                  "predicate_templates.utf8", "text", np.uint8)
    _hash_index(executor, writer, plan, parts, "concepts", "concept_texts", n_concepts)
    _hash_index(executor, writer, plan, parts, "predicates", "predicate_templates", n_predicates)
    executor.call(parts, "drop", "concepts")
    executor.call(parts, "drop", "predicates")
    lap("concepts_predicates")
    executor.map_on(parts, remap_shard, [(plan, s.shard, s.num_concepts, s.num_predicates) for s in summaries])
    lap("remap_shards")
    n_derivs = _global_table(executor, parts, plan, "derivations")
    writer.open_array("deriv_parent", np.int32, (n_derivs,))
    writer.open_array("deriv_predicate", np.int32, (n_derivs,))
    executor.call(parts, "write_scalars", "derivations")
    _ragged_piece(executor, writer, parts, "derivations", n_derivs, "deriv_child_ptr", "deriv_children", "children",
                  np.int32)
    lap("derivations")

    sizes = np.asarray([[s.num_used, s.num_caption_derivs, s.num_caption_concepts, s.caption_text_bytes,
                         s.num_images, s.image_id_bytes] for s in summaries], dtype=np.int64).reshape(n_shards, 6)
    starts = np.vstack([np.zeros((1, 6), np.int64), np.cumsum(sizes, axis=0)])  # (S+1, 6)
    n_caps, n_cap_derivs, n_cap_concepts, text_bytes, n_img, img_bytes = (int(x) for x in starts[-1])
    if n_img != n_images:
        raise RuntimeError(f"the shards hold {n_img} images but {n_images} distinct ids")
    for name, dtype, shape in (("caption_image", np.int32, n_caps), ("caption_index", np.int16, n_caps),
                               ("caption_root", np.int32, n_caps), ("caption_height", np.int16, n_caps),
                               ("caption_deriv_ptr", np.int64, n_caps + 1), ("caption_derivs", np.int32, n_cap_derivs),
                               ("caption_concept_ptr", np.int64, n_caps + 1),
                               ("caption_concepts", np.int32, n_cap_concepts),
                               ("caption_texts.offsets", np.int64, n_caps + 1), ("caption_texts.utf8", np.uint8, text_bytes),
                               ("image_ids.offsets", np.int64, n_img + 1), ("image_ids.utf8", np.uint8, img_bytes),
                               ("image_split_codes", np.int32, n_img)):
        writer.open_array(name, dtype, (shape,))
    split_names: dict[str, int] = {}
    codes = [[split_names.setdefault(name, len(split_names)) for name in s.split_names] for s in summaries]
    step = max(1, -(-n_concepts // plan.num_partitions))
    ranges = [(lo, min(lo + step, n_concepts)) for lo in range(0, n_concepts, step)]
    bounds = [lo for lo, _ in ranges] + [n_concepts]
    executor.map_on(parts, write_shard_captions, [(plan, s.shard, ShardBases(*(int(x) for x in starts[k])),
                                                   s.num_derivations, codes[k], bounds, n_img)
                                                  for k, s in enumerate(summaries)])
    lap("captions")

    totals = executor.map_on(parts, denotation_range, [(plan, r, lo, hi, n_img) for r, (lo, hi) in enumerate(ranges)])
    writer.open_array("concept_image_ptr", np.int64, (n_concepts + 1,))
    writer.open_array("concept_images", np.int32, (int(sum(totals)),))
    at = np.concatenate([[0], np.cumsum(totals, dtype=np.int64)])       # (R+1,) where each range's pairs go
    executor.map_on(parts, place_denotation, [(plan, lo, hi, int(at[r])) for r, (lo, hi) in enumerate(ranges)])
    lap("denotations")
    nnz = np.asarray(executor.map_on(parts, shard_counts, [(plan, s.shard, ShardBases(*(int(x) for x in starts[k])),
                                                            s.num_used, s.num_images, n_predicates)
                                                           for k, s in enumerate(summaries)]),
                     dtype=np.int64).reshape(n_shards, 2)
    nnz_at = np.vstack([np.zeros((1, 2), np.int64), np.cumsum(nnz, axis=0)])  # (S+1, 2) compounds, atoms
    counts = {}
    for k, (name, width) in enumerate((("mcd_compounds", n_predicates), ("mcd_atoms", n_concepts))):
        writer.open_array(f"{name}.data", np.int32, (int(nnz_at[-1, k]),))
        writer.open_array(f"{name}.indices", np.int32, (int(nnz_at[-1, k]),))
        writer.open_array(f"{name}.indptr", np.int64, (n_img + 1,))
        counts[name] = [n_img, width]
    executor.map_on(parts, place_counts, [(plan, s.shard, int(starts[k, 4]), nnz_at[k].tolist())
                                          for k, s in enumerate(summaries)])
    peak = max(executor.call(parts, "peak_rss_mb"), default=0.0)
    del parts  # the actors end with their handles
    lap("mcd_counts")
    writer.declare_strings(["concept_texts", "concept_labels", "predicate_templates", "caption_texts", "image_ids"])
    writer.commit(meta, list(split_names), {"counts": counts})
    shutil.rmtree(work)
    lap("commit")
    return MergeReport(seconds, peak)

