"""The loop every converter shares: stream records into a store, resumably, with a progress bar.

A converter yields :class:`SourceRecord` s whose arrays are decoded only when needed, so images already in
the store (a resumed run) cost one id comparison. Each record's ``where`` (``file:line``, ``key``) goes into
every error message.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from .store import FeatureStoreWriter

__all__ = ["SourceRecord", "Decoded", "IngestStats", "ConversionError", "ingest", "setup_cli_logging", "run_conversion"]

logger = logging.getLogger(__name__)


class ConversionError(ValueError):
    """A source record cannot be converted. The message names the file, the record and the fix."""


@dataclass
class Decoded:
    """One image's arrays: features ``(N, D)``, boxes ``(N, 4)`` pixels or ``None``, image size in pixels."""

    features: np.ndarray
    boxes: np.ndarray | None
    width: int = 0
    height: int = 0


@dataclass
class SourceRecord:
    """An image in a source file: its id, where it is (for messages), and how to decode it."""

    image_id: str
    where: str
    decode: Callable[[], Decoded]


@dataclass
class IngestStats:
    """What a conversion did. ``bad`` lists ``(where, message)`` of records skipped with ``skip_bad``."""

    written: int = 0
    skipped_existing: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)
    regions: int = 0

    def summary(self) -> str:
        text = (f"{self.written} images written ({self.regions} regions), "
                f"{self.skipped_existing} already in the store")
        if self.bad:
            text += f", {len(self.bad)} broken records skipped (first: {self.bad[0][0]}: {self.bad[0][1]})"
        return text


def ingest(records: Iterable[SourceRecord], writer: FeatureStoreWriter, *, skip_bad: bool = False,
           progress: Callable[[SourceRecord], None] | None = None) -> IngestStats:
    """Write every record not yet in ``writer``'s store; returns counts.

    A record that fails to decode or validate raises :class:`ConversionError` naming it, unless
    ``skip_bad``, which logs it and goes on. Ids already in the store from an earlier run are skipped: a
    resumed run picks up where the last commit left off. An id the source holds twice is such a broken
    record (naming both places): which of the two is the image cannot be told.
    """
    stats = IngestStats()
    first_seen: dict[str, str] = {}  # image id -> where the source first had it, in this run
    for rec in records:
        if progress is not None:
            progress(rec)
        if rec.image_id in first_seen:
            msg = f"image id {rec.image_id!r} repeated (first at {first_seen[rec.image_id]})"
            if not skip_bad:
                raise ConversionError(f"{rec.where}: {msg}; the source holds two records for one image. Fix the "
                                      f"source, or pass --skip-bad to keep the first and list the others") from None
            logger.warning("skipping %s: %s", rec.where, msg)
            stats.bad.append((rec.where, msg))
            continue
        first_seen[rec.image_id] = rec.where
        if rec.image_id in writer:
            stats.skipped_existing += 1
            continue
        try:
            d = rec.decode()
            writer.add(rec.image_id, d.features, d.boxes, d.width, d.height)
        except (ValueError, TypeError) as err:
            msg = str(err)
            if not skip_bad:
                raise ConversionError(f"{rec.where} (image {rec.image_id!r}): {msg}. Fix the source, or pass "
                                      f"--skip-bad to skip broken records and list them at the end") from None
            logger.warning("skipping %s (image %r): %s", rec.where, rec.image_id, msg)
            stats.bad.append((rec.where, msg))
            continue
        stats.written += 1
        stats.regions += int(d.features.shape[0])
    writer.commit()
    return stats


def setup_cli_logging(verbose: bool) -> None:
    """INFO (or DEBUG with ``-v``) to stderr, for the ``python -m features.*`` tools."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")


def run_conversion(out, convert, note: str = "") -> int:
    """The command-line ending every converter shares: run ``convert()`` (which returns
    :class:`IngestStats`), print its summary, or print the user-facing error and return exit code 2."""
    from features.store import FeatureStoreError

    try:
        stats = convert()
    except (ConversionError, FeatureStoreError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{out}: {stats.summary()}{note}")
    return 0
