"""A negative written in its caption's own surface form: only the edited words change.

A negative re-joined by a fixed rule ("no space before punctuation") differs from a caption written
another way ("a vehicle ." in COCO's tokenised captions) in characters that have nothing to do with
the edit, and a string rule then tells the two apart without reading a word (issue 33: 99.9% of the
time it applies). Here every token of the parse is located in the caption's text
(:func:`token_offsets`), and a negative is written as the caption's characters with only the edited
regions replaced (:func:`realize_surface`): a token the edit left in place, with the word it had,
keeps its characters and the whitespace before it; new words in a region are joined as the caption
joins its own (a space before punctuation where the caption has one).

Each region is recorded as an :class:`EditSpan` (source and negative character ranges), so a reader
can check that outside them the two texts are equal.

>>> from crg.hard_negatives.parsed_caption import EditToken
>>> src = "A dog on a mat ."
>>> offs = token_offsets(src, ["A", "dog", "on", "a", "mat", "."])
>>> toks = [EditToken(w, "X", src=i) for i, w in enumerate(["A", "cat", "on", "a", "mat", "."])]
>>> toks[1] = EditToken("cat", "NN", True)
>>> text, spans = realize_surface(toks, src, offs)
>>> text, spans
('A cat on a mat .', (EditSpan(source_start=1, source_end=6, negative_start=1, negative_end=6),))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["EditSpan", "token_offsets", "spaced_punctuation", "realize_surface", "PUNCTUATION_WORDS"]

#: Tokens written against the word before them in standard English ("road." / "man's" / "aren't").
PUNCTUATION_WORDS = frozenset({".", ",", ";", ":", "!", "?", "%", ")", "]", "'", "'s", "'re", "'m", "'ve", "'ll",
                               "'d", "n't"})
_OPENERS = ("(", "[", "$")
_CLOSING_CHARS = frozenset(".,;:!?%)]}")
#: How a parser's token may be written in the text: PTB quotes come back as '"' from ``, '' or ".
_WRITTEN_AS = {'"': ('"', "``", "''"), "'": ("'", "`")}


@dataclass(frozen=True)
class EditSpan:
    """One edited region: ``source[source_start:source_end]`` became ``negative[negative_start:negative_end]``."""

    source_start: int
    source_end: int
    negative_start: int
    negative_end: int


def token_offsets(text: str, words: Sequence[str]) -> tuple[tuple[int, int], ...] | None:
    """``(start, end)`` of each token in ``text``, found in order after any whitespace; None when a
    token is not the next characters of the text (a parser that rewrote a word, quotes as ````).

    >>> token_offsets("Two  dogs, a cat .", ["Two", "dogs", ",", "a", "cat", "."])
    ((0, 3), (5, 9), (9, 10), (11, 12), (13, 16), (17, 18))
    >>> token_offsets("a dog", ["a", "cat"]) is None
    True
    >>> token_offsets("reads `` hi ''", ["reads", "`", "`", "hi", '"'])
    ((0, 5), (6, 7), (7, 8), (9, 11), (12, 14))
    """
    out, pos = [], 0
    for w in words:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        written = next((f for f in _WRITTEN_AS.get(w, (w,)) if f and text.startswith(f, pos)), None)
        if written is None:
            return None
        out.append((pos, pos + len(written)))
        pos += len(written)
    return tuple(out)


def spaced_punctuation(text: str, words: Sequence[str], offsets: Sequence[tuple[int, int]]) -> bool:
    """Whether the caption puts a space before its punctuation and clitics ("road .", "man 's").

    >>> spaced_punctuation("a road .", ["a", "road", "."], token_offsets("a road .", ["a", "road", "."]))
    True
    """
    gaps = [offsets[i][0] > offsets[i - 1][1] for i in range(1, len(words)) if _closing(words[i])]
    return bool(gaps) and sum(gaps) * 2 >= len(gaps)


def _closing(word: str) -> bool:
    """Punctuation written against the word before it: ".", "..", "!?", "'s", "n't"."""
    return word in PUNCTUATION_WORDS or word.startswith("'") or (bool(word) and set(word) <= _CLOSING_CHARS)


def _separator(before: str, word: str, spaced: bool) -> str:
    if _closing(word):
        return " " if spaced else ""
    return "" if before.endswith(_OPENERS) else " "


def realize_surface(toks: Sequence, source: str, offsets: Sequence[tuple[int, int]],
                    token_words: Sequence[str] | None = None) -> tuple[str, tuple[EditSpan, ...]]:
    """The negative of edited tokens written in ``source``'s form, and the regions that changed.

    Args:
        toks: the edited tokens as they will be written (articles agreeing, casing final); each has
            ``word`` and ``src`` (its index among the source's tokens, or None for a new token).
        source: the caption's text.
        offsets: :func:`token_offsets` of the source's tokens in ``source``.
        token_words: the source's tokens as the parser wrote them (default: their characters in
            ``source``; they differ for quotes, '"' for ``).

    A token is *kept* when its ``src`` is set, its word equals the source token's, and its ``src`` is
    above every kept token's before it; between two consecutive kept tokens that were neighbours in
    the source the source's characters are copied, anything else is one region. A region that
    replaces source tokens starts and ends with the whitespace the source had there; inside it, and
    around pure insertions, words are joined as the caption joins its own.
    """
    words = [source[s:e] for s, e in offsets]
    parsed_words = list(token_words) if token_words is not None else words
    spaced = spaced_punctuation(source, words, offsets)
    anchors: list[tuple[int, int]] = [(-1, -1)]
    for j, t in enumerate(toks):
        i = getattr(t, "src", None)
        if i is not None and i > anchors[-1][1] and i < len(words) and t.word == parsed_words[i]:
            anchors.append((j, i))
    anchors.append((len(toks), len(words)))
    out: list[str] = []
    spans: list[EditSpan] = []
    length = 0
    prefix = source[:offsets[0][0]] if offsets else ""
    suffix = source[offsets[-1][1]:] if offsets else source

    def emit(piece: str) -> None:
        nonlocal length
        out.append(piece)
        length += len(piece)

    def start(i: int) -> int:
        return offsets[i][0] if i < len(words) else len(source)

    def end(i: int) -> int:
        return offsets[i][1] if i >= 0 else 0

    for (j0, i0), (j1, i1) in zip(anchors, anchors[1:]):
        if j1 == j0 + 1 and i1 == i0 + 1:
            emit(source[end(i0):start(i1)])
        else:
            s_start, s_end, n_start = end(i0), start(i1), length
            new = toks[j0 + 1:j1]
            replaces = i1 > i0 + 1  # source tokens i0+1 .. i1-1 are gone
            prev = toks[j0].word if j0 >= 0 else None
            for k, t in enumerate(new):
                if prev is None:
                    sep = prefix
                elif k == 0 and replaces and i0 >= 0 and _closing(t.word) == _closing(words[i0 + 1]):
                    sep = source[end(i0):start(i0 + 1)]  # the whitespace the replaced word had before it
                else:
                    sep = _separator(prev, t.word, spaced)
                emit(sep + t.word)
                prev = t.word
            if i1 >= len(words):
                emit(suffix)
            elif prev is None:
                emit(prefix)
            elif replaces and _closing(prev) == _closing(words[i1 - 1]):
                emit(source[end(i1 - 1):start(i1)])  # and the whitespace the last one had after it
            else:
                emit(_separator(prev, words[i1], spaced))
            spans.append(EditSpan(s_start, s_end, n_start, length))
        if i1 < len(words):
            emit(words[i1])
    return "".join(out), tuple(spans)
