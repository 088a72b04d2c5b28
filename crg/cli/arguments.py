"""Argument types shared by every command of the library (the graph commands here, the model commands above)."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count of images or regions: 0 or less fails only after the
    training or the scoring it was meant for, deep inside)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
