"""``model.safetensors`` written byte-identically for identical weights, and atomically.

``safetensors`` keeps the file's string metadata in a Rust hash map, whose order changes from process to
process: two runs saving the same weights with ``{"format": "pt", "model_type": ...}`` wrote files that
differed in the order of those two keys (3 of 6 saves in one measurement), so a checksum could not tell
that two trainings agreed. :func:`save_weights` writes the file through ``safetensors`` and then puts its
metadata keys in sorted order (the header keeps its length: the same keys and values, reordered), in a
temporary file renamed over the target, so an interrupted save never leaves a truncated file.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path

import torch

__all__ = ["canonical_header", "save_weights"]

_META = "__metadata__"


def canonical_header(header: bytes) -> bytes:
    """A safetensors JSON header with its ``__metadata__`` keys sorted and first, the tensors' entries in
    their order (safetensors' own: by dtype, then name), padded with spaces to the same length.

    >>> canonical_header(b'{"__metadata__":{"b":"2","a":"1"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}  ')
    b'{"__metadata__":{"a":"1","b":"2"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}  '
    """
    parsed = json.loads(header.decode("utf-8"))
    ordered = {}
    if _META in parsed:
        ordered[_META] = dict(sorted(parsed[_META].items()))
    ordered.update((k, v) for k, v in parsed.items() if k != _META)
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(text) > len(header):  # cannot happen for safetensors' compact JSON; never write a wrong header
        raise ValueError(f"the reordered safetensors header is longer ({len(text)} > {len(header)} bytes)")
    return text + b" " * (len(header) - len(text))


def save_weights(state: Mapping[str, torch.Tensor], path: str | Path, metadata: Mapping[str, str]) -> Path:
    """Write ``state`` to ``path`` in safetensors format with ``metadata``, deterministically (sorted
    metadata) and atomically (a synced temporary file in the same folder, renamed). Returns ``path``."""
    from safetensors.torch import save_file

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(dict(state), str(tmp), metadata=dict(metadata))
        with open(tmp, "r+b") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = canonical_header(f.read(n))
            f.seek(8)
            f.write(header)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
