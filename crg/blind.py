"""Blind text baselines: scorers that never see an image (SugarCrepe's method, Hsieh et al. 2023, §3).

A compositionality benchmark asks a model to score the true caption of an image above a negative one.
If a model that reads only the two texts can already tell which is which, the benchmark measures
plausibility and grammar, not vision. Two such scorers live here, both pure Python:

* :class:`TrigramLM`: an interpolated Kneser-Ney trigram language model trained on captions. A
  caption's score is its mean log-probability per token (the end of sentence included), so a longer
  caption is not penalised for its length alone. Its probabilities are those of nltk's
  ``nltk.lm.KneserNeyInterpolated`` (the reference the tests compare with, see :class:`TrigramLM`),
  computed from count tables built once: nltk's own model takes 90-105 s to fit on Flickr30K's
  145,000 training captions and far longer to score with Kneser-Ney (its continuation counts scan
  every trigram per query).
* :func:`grammar_violations` / :class:`GrammarLengthHeuristic`: a few agreement rules on POS tags
  (a singular determiner before a plural noun, a number before a singular one, "is" after a plural
  subject, a word repeated) and, between captions with as many violations, the shorter one.

:func:`blind_accuracy` turns the scores of (positive, negative) pairs into the blind model's accuracy;
a tie counts one half (a blind model that cannot tell two texts apart is at chance, 50%).

>>> lm = TrigramLM.fit(["a dog runs on the grass", "a cat sleeps on the sofa", "a dog sleeps"], min_count=1)
>>> lm.score("a dog runs on the grass") > lm.score("the grass runs on a dog")
True
>>> blind_accuracy([(2.0, 1.0), (1.0, 1.0), (0.0, 1.0)])
50.0
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "BOS", "EOS", "UNK",
    "COUNTING_RULES",
    "CountingRule",
    "GrammarLengthHeuristic",
    "NEGATION_WORDS",
    "RuleOutcome",
    "TrigramLM",
    "blind_accuracy",
    "conjunction_count",
    "fit_pair_logistic",
    "grouped_folds",
    "pair_classifier_outcome",
    "pair_features",
    "negation_count",
    "rule_outcome",
    "space_before_punctuation",
    "word_count",
    "grammar_violations",
    "spacy_tagger",
    "tokenize",
]

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokenize(text: str) -> list[str]:
    """Lower-cased words and numbers; punctuation dropped, so "road ." and "road." read alike.

    >>> tokenize("A man's red helmet, on a small moped .")
    ['a', "man's", 'red', 'helmet', 'on', 'a', 'small', 'moped']
    """
    return _WORD.findall(text.lower())


@dataclass
class TrigramLM:
    """Interpolated Kneser-Ney trigram model (Chen & Goodman 1998, §3.4) with one absolute discount.

    With ``c`` raw trigram counts, ``N1+`` numbers of distinct types (bigram types are those that end a
    trigram: ``(<s>, <s>)`` is none) and ``d`` the discount::

        P3(w | u v) = max(c(u v w) - d, 0) / c(u v .) + d * N1+(u v .) / c(u v .) * P2(w | v)
        P2(w | v)   = max(N1+(. v w) - d, 0) / N1+(. v .) + d * N1+(v .) / N1+(. v .) * P1(w)
        P1(w)       = (1 - b) * N1+(. w) / N1+(. .) + b / |V|        (b = uniform_weight, default 0)

    a context never seen hands its whole mass to the next order. Each context's probabilities over the
    vocabulary (``<unk>`` and ``</s>`` included, ``<s>`` never predicted) sum to one. Sentences are
    padded as ``<s> <s> w1 ... wn </s>``; training words seen fewer than ``min_count`` times become
    ``<unk>``, and so does every unknown word at scoring time, so no probability is zero. These are
    the probabilities of nltk's ``KneserNeyInterpolated(3, discount=d)`` fitted on the trigrams,
    unigrams and the bigrams that end a trigram of the padded sentences (the tests compare them).

    Build with :meth:`fit`; the attributes are the count tables.
    """

    discount: float
    vocab: frozenset
    c3: dict = field(repr=False)          # (u, v, w) -> count
    c3_ctx: dict = field(repr=False)      # (u, v) -> (sum_w c(u v w), N1+(u v .))
    cont2: dict = field(repr=False)       # (v, w) -> N1+(. v w)
    cont2_ctx: dict = field(repr=False)   # v -> (sum_w N1+(. v w), N1+(v .))
    cont1: dict = field(repr=False)       # w -> N1+(. w)
    cont1_total: int = 0                  # N1+(. .): distinct bigram types
    uniform_weight: float = 0.0           # P1 mixed with 1/|V| by this weight (0: exactly nltk's model)

    @classmethod
    def fit(cls, texts: Iterable[str], *, discount: float = 0.75, min_count: int = 2, uniform_weight: float = 0.0,
            tokenizer: Callable[[str], list[str]] = tokenize) -> "TrigramLM":
        """Train on ``texts`` (one caption each).

        Args:
            discount: ``d`` above, in (0, 1).
            min_count: training words seen fewer times become ``<unk>`` (1 keeps every word; then an
                unknown word has probability 0 unless ``uniform_weight`` > 0).
            uniform_weight: ``b`` above, in [0, 1).
        """
        if not 0.0 < discount < 1.0:
            raise ValueError(f"discount must be in (0, 1), got {discount}")
        if not 0.0 <= uniform_weight < 1.0:
            raise ValueError(f"uniform_weight must be in [0, 1), got {uniform_weight}")
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        sentences = [tokenizer(t) for t in texts]
        sentences = [s for s in sentences if s]
        if not sentences:
            raise ValueError("TrigramLM.fit: no text with a word to train on")
        counts = Counter(w for s in sentences for w in s)
        vocab = frozenset(w for w, c in counts.items() if c >= min_count) | {UNK, EOS}
        c3: Counter = Counter()
        for s in sentences:
            padded = [BOS, BOS, *(w if w in vocab else UNK for w in s), EOS]
            c3.update(zip(padded, padded[1:], padded[2:]))
        return cls.from_trigram_counts(c3, vocab=vocab, discount=discount, uniform_weight=uniform_weight)

    @classmethod
    def from_trigram_counts(cls, c3: dict, *, vocab: Iterable[str], discount: float,
                            uniform_weight: float = 0.0) -> "TrigramLM":
        """The model of given trigram counts ``(u, v, w) -> count`` of padded sentences."""
        ctx_sum: dict = defaultdict(int)
        ctx_types: dict = defaultdict(int)
        cont2: dict = defaultdict(int)
        for (u, v, w), c in c3.items():
            ctx_sum[u, v] += c
            ctx_types[u, v] += 1
            cont2[v, w] += 1
        cont2_sum: dict = defaultdict(int)
        followers: dict = defaultdict(int)
        cont1: dict = defaultdict(int)
        for (v, w), n in cont2.items():
            cont2_sum[v] += n
            followers[v] += 1
            cont1[w] += 1
        return cls(discount=discount, vocab=frozenset(vocab), c3=dict(c3),
                   c3_ctx={k: (ctx_sum[k], ctx_types[k]) for k in ctx_sum}, cont2=dict(cont2),
                   cont2_ctx={v: (cont2_sum[v], followers[v]) for v in cont2_sum}, cont1=dict(cont1),
                   cont1_total=len(cont2), uniform_weight=uniform_weight)

    def _p1(self, w: str) -> float:
        b = self.uniform_weight
        return (1.0 - b) * self.cont1.get(w, 0) / self.cont1_total + b / len(self.vocab)

    def _p2(self, w: str, v: str) -> float:
        ctx = self.cont2_ctx.get(v)
        if ctx is None:
            return self._p1(w)
        total, followers = ctx
        d = self.discount
        return max(self.cont2.get((v, w), 0) - d, 0.0) / total + d * followers / total * self._p1(w)

    def prob(self, word: str, context: tuple[str, str]) -> float:
        """``P(word | context)`` for a two-word context (words outside the vocabulary read as ``<unk>``)."""
        w = word if word in self.vocab else UNK
        u, v = (x if x in self.vocab or x == BOS else UNK for x in context)
        ctx = self.c3_ctx.get((u, v))
        if ctx is None:
            return self._p2(w, v)
        total, types = ctx
        d = self.discount
        return max(self.c3.get((u, v, w), 0) - d, 0.0) / total + d * types / total * self._p2(w, v)

    def order_prob(self, word: str, context: tuple[str, str], order: int = 3) -> float:
        """``P(word | context)`` of the model cut at ``order`` (1: the Kneser-Ney continuation unigram,
        2: the interpolated bigram, 3: :meth:`prob`): lower orders of the same counts, each a
        distribution over the vocabulary, so one fit gives LMs of three orders (refinement's ensemble)."""
        if order == 3:
            return self.prob(word, context)
        w = word if word in self.vocab else UNK
        if order == 2:
            v = context[1] if context[1] in self.vocab or context[1] == BOS else UNK
            return self._p2(w, v)
        if order == 1:
            return self._p1(w)
        raise ValueError(f"order must be 1, 2 or 3, got {order}")

    def token_logprobs(self, text: str, tokenizer: Callable[[str], list[str]] = tokenize,
                       order: int = 3) -> list[float]:
        """Natural-log probability of each word of ``text`` and of its end, given the ``order - 1`` before."""
        padded = [BOS, BOS, *tokenizer(text), EOS]
        out = []
        for i in range(2, len(padded)):
            p = self.order_prob(padded[i], (padded[i - 2], padded[i - 1]), order)
            if p <= 0.0:
                raise ValueError(f"{text!r}: the word {padded[i]!r} has probability 0 (unknown, and <unk> was never "
                                 f"seen in training); fit with min_count >= 2 or uniform_weight > 0")
            out.append(math.log(p))
        return out

    def score(self, text: str, order: int = 3) -> float:
        """Mean log-probability per token (higher = more plausible caption), of the model cut at ``order``."""
        lp = self.token_logprobs(text, order=order)
        return sum(lp) / len(lp)

    def perplexity(self, texts: Iterable[str]) -> float:
        """Per-token perplexity over ``texts`` (every word and sentence end)."""
        total, n = 0.0, 0
        for t in texts:
            lp = self.token_logprobs(t)
            total += sum(lp)
            n += len(lp)
        if n == 0:
            raise ValueError("perplexity of no token")
        return math.exp(-total / n)


_SINGULAR_DETERMINERS = frozenset({"a", "an", "one", "each", "every", "this", "that", "another"})
_PLURAL_DETERMINERS = frozenset({"two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "these",
                                 "those", "several", "many", "both", "few", "multiple", "some"})
_NOUN_TAGS = frozenset({"NN", "NNS"})
_SKIPPABLE_TAGS = frozenset({"JJ", "JJR", "JJS", "VBG", "VBN", "RB", "CD", ","})


def grammar_violations(tagged: Sequence[tuple[str, str]]) -> int:
    """How many simple agreement rules ``tagged`` ((word, PTB tag) pairs) breaks.

    The rules: a singular determiner ("a", "one", "this", ...) whose noun (after adjectives and
    participles) is plural (NNS) or a plural one ("two", "these", "several") whose noun is singular
    (NN, not a mass noun we can tell); "is"/"was" (or any VBZ verb) right after a plural noun,
    "are"/"were" (or any VBP verb) right after a singular one; the same word twice in a row.

    >>> grammar_violations([("a", "DT"), ("red", "JJ"), ("dogs", "NNS"), ("is", "VBZ"), ("here", "RB")])
    2
    >>> grammar_violations([("two", "CD"), ("dogs", "NNS"), ("are", "VBP"), ("here", "RB")])
    0
    """
    words = [w.lower() for w, _ in tagged]
    tags = [t for _, t in tagged]
    out = 0
    for i, w in enumerate(words):
        if i and w == words[i - 1] and w.isalpha():
            out += 1
        if w in _SINGULAR_DETERMINERS or w in _PLURAL_DETERMINERS:
            j = i + 1
            while j < len(tags) and tags[j] in _SKIPPABLE_TAGS:
                j += 1
            if j < len(tags) and tags[j] in _NOUN_TAGS and j < len(tags) - 1 + 1:
                head = j
                while head + 1 < len(tags) and tags[head + 1] in _NOUN_TAGS:  # compound: "tennis rackets"
                    head += 1
                if w in _SINGULAR_DETERMINERS and tags[head] == "NNS" and w not in ("that",):
                    out += 1
                elif w in _PLURAL_DETERMINERS and tags[head] == "NN" and w != "some":
                    out += 1
        if i and w in ("is", "was") and tags[i - 1] == "NNS":
            out += 1
        if i and w in ("are", "were") and tags[i - 1] == "NN":
            out += 1
        elif i and w not in ("is", "was", "are", "were") and w.isalpha() and \
                ((tags[i] == "VBZ" and tags[i - 1] == "NNS") or (tags[i] == "VBP" and tags[i - 1] == "NN")):
            out += 1  # "flowers contains", "a dog run": any verb, not only "be"
    return out


@dataclass(frozen=True)
class GrammarLengthHeuristic:
    """A caption's score: minus its :func:`grammar_violations`, then minus ``length_weight`` per word,
    so fewer violations always win and, between captions with as many, the shorter one does.

    >>> h = GrammarLengthHeuristic()
    >>> h.score([("a", "DT"), ("dog", "NN")]) > h.score([("a", "DT"), ("dogs", "NNS")])
    True
    >>> h.score([("a", "DT"), ("dog", "NN")]) > h.score([("a", "DT"), ("big", "JJ"), ("dog", "NN")])
    True
    """

    length_weight: float = 0.01

    def score(self, tagged: Sequence[tuple[str, str]]) -> float:
        words = sum(1 for w, _ in tagged if _WORD.fullmatch(w.lower()))
        return -float(grammar_violations(tagged)) - self.length_weight * words


def spacy_tagger(model: str | None = None, *, batch_size: int = 1000) -> Callable[[Sequence[str]], list]:
    """texts -> ``[(word, PTB tag), ...]`` per text, by the tagger of the project's spaCy model
    (:func:`crg.spacy_parser.load_spacy_model`; the dependency parser is not run)."""
    from crg.spacy_parser import load_spacy_model

    nlp = load_spacy_model(model)

    def tag(texts: Sequence[str]) -> list[list[tuple[str, str]]]:
        with nlp.select_pipes(disable=[p for p in nlp.pipe_names if p == "parser"]):
            return [[(t.text, t.tag_) for t in doc] for doc in nlp.pipe(texts, batch_size=batch_size)]

    return tag


def blind_accuracy(pairs: Iterable[tuple[float, float]]) -> float:
    """Accuracy (%) of a blind scorer over ``(positive score, negative score)`` pairs: it picks the
    positive when its score is higher; a tie counts one half (a guess).

    >>> blind_accuracy([(1.0, 0.0), (0.0, 1.0)])
    50.0
    """
    wins = n = 0.0
    for pos, neg in pairs:
        n += 1
        wins += 1.0 if pos > neg else 0.5 if pos == neg else 0.0
    if n == 0:
        raise ValueError("blind_accuracy of no pair")
    return 100.0 * wins / n


# ------------------------------------------------------------------ counting rules
#: Words that negate: a negative made by negation carries more of them than its caption.
NEGATION_WORDS = frozenset({"no", "not", "n't", "never", "without", "none", "nobody", "nothing", "neither", "nor",
                            "cannot", "nowhere"})
_SPACE_PUNCT = re.compile(r"\s[.,;:!?]")


def space_before_punctuation(text: str) -> int:
    """How many punctuation marks follow whitespace ("a vehicle ." has one): a formatting cue.

    >>> space_before_punctuation("A man , a dog ."), space_before_punctuation("A man, a dog.")
    (2, 0)
    """
    return len(_SPACE_PUNCT.findall(text))


def negation_count(text: str) -> int:
    """How many negating words (:data:`NEGATION_WORDS`, and any "...n't") the text has.

    >>> negation_count("A man without a hat is not smiling"), negation_count("There isn't a dog .")
    (2, 1)
    """
    return sum(1 for w in tokenize(text) if w in NEGATION_WORDS or w.endswith("n't"))


def conjunction_count(text: str, word: str = "and") -> int:
    """How many times the conjunction ``word`` occurs (a compound split adds an "and").

    >>> conjunction_count("A red car and a blue bus and a van")
    2
    """
    return sum(1 for w in tokenize(text) if w == word)


def word_count(text: str) -> int:
    """Words and numbers (:func:`tokenize`): what a length rule compares."""
    return len(tokenize(text))


@dataclass(frozen=True)
class CountingRule:
    """A blind rule that compares one count of the two texts of a pair: the text with more
    (``caption_has_more``) or fewer is taken for the true caption; equal counts are a guess.

    >>> r = CountingRule("negation", negation_count, caption_has_more=False)
    >>> r.score("a dog") > r.score("no dog")
    True
    """

    name: str
    count: Callable[[str], int]
    caption_has_more: bool

    def score(self, text: str) -> float:
        c = self.count(text)
        return float(c if self.caption_has_more else -c)


#: The counting rules every set of negatives should be checked with (issue 33): a formatting cue, a
#: negation cue (NEG), a conjunction cue (compound splits), length.
COUNTING_RULES = (
    CountingRule("space before punctuation is the caption", space_before_punctuation, caption_has_more=True),
    CountingRule("more negation words is the negative", negation_count, caption_has_more=False),
    CountingRule("more 'and' is the negative", conjunction_count, caption_has_more=False),
    CountingRule("shorter is the caption", word_count, caption_has_more=False),
)


@dataclass(frozen=True)
class RuleOutcome:
    """How a blind scorer does on pairs: ``accuracy`` (%, a tie one half), ``decided`` (% of pairs
    it does not tie) and ``right_when_decided`` (% of those it gets right; None if it never decides).
    A rule is as telling when it is mostly wrong (turned round it is right): judge ``|accuracy - 50|``."""

    pairs: int
    accuracy: float
    decided: float
    right_when_decided: float | None

    def as_dict(self) -> dict:
        return {"pairs": self.pairs, "accuracy": round(self.accuracy, 2), "decided": round(self.decided, 2),
                "right_when_decided": None if self.right_when_decided is None else round(self.right_when_decided, 2)}


def rule_outcome(pairs: Iterable[tuple[float, float]]) -> RuleOutcome:
    """:class:`RuleOutcome` of ``(caption score, negative score)`` pairs (higher = taken for the caption).

    >>> rule_outcome([(1, 0), (1, 0), (0, 0), (0, 1)])
    RuleOutcome(pairs=4, accuracy=62.5, decided=75.0, right_when_decided=66.66666666666667)
    """
    n = right = decided = 0
    for pos, neg in pairs:
        n += 1
        if pos != neg:
            decided += 1
            right += pos > neg
    if n == 0:
        raise ValueError("rule_outcome of no pair")
    accuracy = 100.0 * (right + 0.5 * (n - decided)) / n
    return RuleOutcome(n, accuracy, 100.0 * decided / n, 100.0 * right / decided if decided else None)


# ------------------------------------------------------------------ word-pair logistic regression
def grouped_folds(groups: Sequence[object], num_folds: int = 5, *, seed: int = 0) -> list[int]:
    """A fold (0..num_folds-1) per item such that items of one group share a fold: groups are shuffled
    with ``seed`` and dealt round-robin, so fold sizes in groups differ by at most one.

    >>> f = grouped_folds(["a", "b", "a", "c", "b"], 2)
    >>> f[0] == f[2] and f[1] == f[4]
    True
    """
    import random

    if num_folds < 2:
        raise ValueError(f"num_folds must be >= 2, got {num_folds}")
    distinct = sorted(set(map(str, groups)))
    random.Random(seed).shuffle(distinct)
    fold_of = {g: k % num_folds for k, g in enumerate(distinct)}
    return [fold_of[str(g)] for g in groups]


def pair_features(pairs: Sequence[tuple[str, str]], *, bigrams: bool = True):
    """``(N, F)`` sparse matrix of ``bag(first) - bag(second)`` per pair: counts of words and, with
    ``bigrams``, adjacent word pairs (:func:`tokenize`), over the features the pairs use. A linear
    model of it without intercept is antisymmetric: swapping a pair's texts negates its score."""
    from scipy.sparse import csr_matrix

    index: dict[str, int] = {}
    rows, cols, vals = [], [], []

    def bag(text: str) -> Counter:
        words = tokenize(text)
        c = Counter(words)
        if bigrams:
            c.update(f"{a} {b}" for a, b in zip(words, words[1:]))
        return c

    for r, (a, b) in enumerate(pairs):
        diff = bag(a)
        diff.subtract(bag(b))
        for f, v in diff.items():
            if v:
                rows.append(r)
                cols.append(index.setdefault(f, len(index)))
                vals.append(float(v))
    return csr_matrix((vals, (rows, cols)), shape=(len(pairs), max(len(index), 1)))


def fit_pair_logistic(x, *, l2: float = 1.0, max_iter: int = 500):
    """Weights ``w`` (F,) of an L2-regularised logistic regression without intercept that takes the
    first text of every pair for the caption: minimises ``sum_i log(1 + exp(-x_i . w)) + l2/2 |w|^2``
    (the same as fitting both orders of every pair, ``x`` labelled 1 and ``-x`` 0, with half the
    loss), by L-BFGS. ``x``: ``(N, F)`` from :func:`pair_features`."""
    import numpy as np
    from scipy.optimize import minimize
    from scipy.special import expit

    if l2 <= 0:
        raise ValueError(f"l2 must be > 0, got {l2}")

    def loss(w):
        m = x @ w                                       # (N,) margins
        value = np.logaddexp(0.0, -m).sum() + 0.5 * l2 * w @ w
        grad = -(x.T @ expit(-m)) + l2 * w              # (F,)
        return value, grad

    res = minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "gtol": 1e-8})
    return res.x


def pair_classifier_outcome(pairs: Sequence[tuple[str, str]], groups: Sequence[object], *, num_folds: int = 5,
                            seed: int = 0, l2: float = 1.0) -> RuleOutcome:
    """Held-out accuracy of the word-pair logistic regression on ``(caption, negative)`` pairs: each fold
    is scored by a model (:func:`fit_pair_logistic` on :func:`pair_features`) fitted on the other
    folds, with folds grouped by ``groups`` (:func:`grouped_folds`; the source caption, so no caption's
    pairs are on both sides). As a blind check: the caption is taken where the score is > 0, a tie
    (score 0, e.g. no feature seen in training) is half right."""
    import numpy as np

    pairs = list(pairs)
    if len(pairs) != len(groups):
        raise ValueError(f"{len(pairs)} pairs but {len(groups)} groups")
    x = pair_features(pairs)
    folds = np.asarray(grouped_folds(groups, num_folds, seed=seed))
    margins = np.zeros(len(pairs))
    for k in range(num_folds):
        test = folds == k
        if not test.any() or test.all():
            continue
        w = fit_pair_logistic(x[~test], l2=l2)
        margins[test] = x[test] @ w
    return rule_outcome((float(m), 0.0) for m in margins)
