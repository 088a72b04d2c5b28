"""Argument types shared by every command of the library (the graph commands here, the model commands above).

Each turns a bad value into argparse's one-line error naming the flag (``argument --jobs: must be at least 1,
got 0``) before any work, where ``int()`` alone would accept a value that fails deep inside, or print a bare
``invalid literal for int()``.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["int_list", "non_negative_float", "non_negative_int", "positive_float", "positive_int"]


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count of images or regions: 0 or less fails only after the
    training or the scoring it was meant for, deep inside)."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (worker processes, counts where 0 means none)."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (a learning rate; ``nan`` would train a model of NaNs)."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0 (a gradient clip, where 0 is off; a minimum gain)."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated whole numbers >= 0, at least one (``--seeds 0,1,2``).

    >>> int_list("0, 1,2")
    [0, 1, 2]
    """
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}")
    bad = [t for t in items if not t.isdigit()]
    if bad:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 0, got {', '.join(map(repr, bad))}"
                                         f" in {text!r}")
    return [int(t) for t in items]
