"""Which captions to skip, and why: empty, not text, not English, absurdly long.

Skipped captions are counted per reason and reported (``stats.json``, the log), never silently
dropped. The English check is a deliberately conservative heuristic: it only rejects captions that
are clearly another language (non-Latin script, or several words with no English function word and
some function words of common European languages), so short English fragments ("Dogs.") pass.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["caption_problem", "normalize_caption", "MAX_CAPTION_WORDS", "MAX_CAPTION_CHARS"]

MAX_CAPTION_WORDS = 100
MAX_CAPTION_CHARS = 1000

_ENGLISH = frozenset("""a an the is are was were be been being of in on at to with and or but for from by
this that these those there here it its his her their they he she we you i his him them who which what
while as into onto near next under over behind front top some two three four five several many one
has have had not no up down out off""".split())
_FOREIGN = frozenset("""der das und ein eine einer einem einen mit ist sind auf im von zu le la les
et est une des du avec sur dans el los las y es un una con en por del il lo gli che di da della nel
sono het een op""".split())
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def normalize_caption(text: str) -> str:
    """Collapse whitespace (including newlines and tabs) to single spaces and strip the ends."""
    return " ".join(text.split())


def caption_problem(text, *, max_words: int = MAX_CAPTION_WORDS, max_chars: int = MAX_CAPTION_CHARS) -> str | None:
    """The reason to skip a caption, or ``None`` when it is fine.

    >>> caption_problem("Two dogs run on the grass.") is None
    True
    >>> caption_problem("   ")
    'empty'
    >>> caption_problem(42)
    'not_text'
    >>> caption_problem("Ein Mann mit einem roten Hut steht auf der Straße.")
    'not_english'
    >>> caption_problem("一只狗在草地上奔跑")
    'not_english'
    """
    if not isinstance(text, str):
        return "not_text"
    text = normalize_caption(text)
    if not text:
        return "empty"
    if len(text) > max_chars or len(text.split()) > max_words:
        return "too_long"
    if any(unicodedata.category(ch) in ("Cc", "Cs", "Co") for ch in text):
        return "not_text"
    words = [w.lower() for w in _WORD.findall(text)]
    if not words:
        return "no_words"
    letters = [ch for w in words for ch in w]
    latin = sum(1 for ch in letters if "LATIN" in unicodedata.name(ch, ""))
    if latin < 0.8 * len(letters):
        return "not_english"
    if len(words) >= 4:
        english = sum(w in _ENGLISH for w in words)
        foreign = sum(w in _FOREIGN for w in words)
        if english == 0 and foreign >= 1 or foreign >= 2 and foreign > 2 * english:
            return "not_english"
    return None
