"""Image ids: the one string that joins a caption corpus to a feature store.

Sources spell the same image differently: COCO's caption files say ``391895``, a directory of images says
``COCO_val2014_000000391895.jpg``, some TSVs zero-pad. Every converter and the extractor take an
``--id-format`` that maps what the source has to what the corpus has:

* ``verbatim`` -- the source's string, stripped of surrounding whitespace;
* ``stem`` -- the file name without directories and extension;
* ``int`` -- the last run of digits as an integer (drops zero padding and COCO's file-name prefix).
"""

from __future__ import annotations

import re
from pathlib import PurePath

__all__ = ["ID_FORMATS", "normalize_image_id", "suggest_id_format"]

ID_FORMATS = ("verbatim", "stem", "int")
_DIGITS = re.compile(r"(\d+)(?!.*\d)")


def normalize_image_id(raw: str, id_format: str = "verbatim") -> str:
    """Map a source's image id to the corpus's spelling.

    >>> normalize_image_id(" 391895 ")
    '391895'
    >>> normalize_image_id("val2014/COCO_val2014_000000391895.jpg", "stem")
    'COCO_val2014_000000391895'
    >>> normalize_image_id("COCO_val2014_000000391895.jpg", "int"), normalize_image_id("000042", "int")
    ('391895', '42')
    >>> normalize_image_id("cat.jpg", "int")
    Traceback (most recent call last):
    ValueError: image id 'cat.jpg' has no digits for --id-format int; use verbatim or stem
    """
    raw = raw.strip()
    if id_format == "verbatim":
        return raw
    if id_format == "stem":
        name = PurePath(raw).name
        return name.rsplit(".", 1)[0] if "." in name else name
    if id_format == "int":
        m = _DIGITS.search(PurePath(raw).name.rsplit(".", 1)[0] if "." in raw else raw)
        if m is None:
            raise ValueError(f"image id {raw!r} has no digits for --id-format int; use verbatim or stem")
        return str(int(m.group(1)))
    raise ValueError(f"unknown id format {id_format!r}; choose one of {ID_FORMATS}")


def suggest_id_format(store_ids: list[str], corpus_ids: set[str]) -> str | None:
    """The ``--id-format`` that would make most of ``store_ids`` (a sample) match ``corpus_ids``, if any.

    >>> suggest_id_format(["COCO_val2014_000000391895"], {"391895"})
    'int'
    >>> suggest_id_format(["a"], {"b"}) is None
    True
    """
    best, best_hits = None, 0
    for fmt in ("int", "stem"):
        hits = 0
        for raw in store_ids:
            try:
                hits += normalize_image_id(raw, fmt) in corpus_ids
            except ValueError:
                pass
        if hits > best_hits:
            best, best_hits = fmt, hits
    return best if best_hits * 2 > len(store_ids) else None
