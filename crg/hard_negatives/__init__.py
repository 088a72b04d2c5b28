"""Hard negative captions from a caption's CRG parse: CREPE's HN-SWAP, HN-ATOM, HN-NEG and HN-COMP.

CREPE (Ma et al. 2023, Table 1 and §A.4) probes a model with captions that differ from a true one in
one compositional respect. Here they are made from the structure the CRG already has -- concepts,
predicates with their argument concepts, primitives (:mod:`crg.extract`) -- plus the POS tags of the
parse for the words inside templates:

* **HN-SWAP** (binding of arguments): exchange the two argument concepts of a predicate,
  ``[NP] chasing [NP]``: "a dog chasing a cat" -> "a cat chasing a dog". Arguments must be of one
  kind (nominal with nominal, clause with clause) and differ; coordinations and symmetric relations
  ("and", "next to", ...) are skipped, since swapping their arguments keeps the meaning.
* **HN-ATOM** (atoms): replace one atom by another of the same kind: a primitive noun by a corpus
  noun with the same tag (NN for NN, NNS for NNS), a colour by a corpus colour, a size word by one of
  the opposite size, a spatial word by its opposite ("on" -> "under"). Never the same word, a
  singular/plural form of it, a generic noun ("person", "thing": likely true of any image), or a
  word that any caption of the same image uses (those are probably true of it).
* **HN-NEG** (negation, as CREPE): a noun-phrase caption becomes "there is/are no ...", a sentence
  gets "not" after its auxiliary or do-support ("plays" -> "does not play"; an already negated one
  loses its "not"), an attribute becomes a negated relative clause ("a yellow vase" -> "a vase that
  is not yellow").
* **HN-COMP** (binding of attributes to objects): swap adjectives between two objects ("a red cube
  and a blue sphere" -> "a blue cube and a red sphere"), move one to another object ("a red cube and
  a sphere" -> "a cube and a red sphere"), or, for a caption with one attributed object, CREPE's
  compound split: "a pink car" -> "a pink toy and a blue car" (atomic foils fill the halves).

Unlike CREPE on Visual Genome, a corpus caption has no scene graph to verify against, so these
negatives are probably, not certainly, false (CREPE's own human check found 70-92% valid, Table 6).
The generated world verifies its negatives exactly (:mod:`features.world.hard_negatives`).

Everything is deterministic given ``seed``: each (type, image, caption) has its own random stream,
so adding captions or types changes nothing else. A caption for which a type cannot be made is
skipped for that type and counted with a reason; a negative never equals its source caption.

Where things live (each module imports only those above it):

* :mod:`~crg.hard_negatives.records` -- the type names (``HN_*``), :class:`HardNegativeConfig`,
  :class:`Change`, :class:`HardNegative` and :class:`CaptionNegatives`;
* :mod:`~crg.hard_negatives.lexicon` -- the fixed word lists: colours, size poles, spatial
  opposites, generic and relational nouns, synonym groups, auxiliaries;
* :mod:`~crg.hard_negatives.morphology` -- word forms (lemminflect): plurals, verb base forms; articles;
* :mod:`~crg.hard_negatives.parsed_caption` -- :class:`ParsedCaption`, the tokens being edited and
  their realisation as text (:func:`realize_words`), the structural queries the generators share;
* :mod:`~crg.hard_negatives.vocabulary` -- :class:`AtomVocabulary`, the corpus's nouns and colours;
* :mod:`~crg.hard_negatives.generators` -- the four edits and :func:`caption_hard_negatives`;
* :mod:`~crg.hard_negatives.refine` -- adversarial refinement against blind text scorers
  (:func:`select_negatives`, :class:`LanguageModelScorer`, :class:`GrammarScorer`), switched on by
  ``HardNegativeConfig(refinement=RefinementConfig())``;
* :mod:`~crg.hard_negatives.corpus` -- :func:`corpus_hard_negatives` and :class:`GenerationReport`;
* :mod:`~crg.hard_negatives.reasons` -- :func:`false_because`: the concept a negative contradicts.
"""

from crg.hard_negatives.corpus import GenerationReport, corpus_hard_negatives
from crg.hard_negatives.generators import caption_candidates, caption_hard_negatives
from crg.hard_negatives.lexicon import COLOR_WORDS
from crg.hard_negatives.parsed_caption import ParsedCaption, realize_words
from crg.hard_negatives.records import (
    HN_ATOM, HN_COMP, HN_NEG, HN_SWAP, HN_TYPES, CaptionCandidates, CaptionNegatives, Change, HardNegative,
    HardNegativeConfig, NegativeCandidate, RefinementConfig)
from crg.hard_negatives.reasons import FalseReason, false_because
from crg.hard_negatives.refine import (
    BlindScorer, CandidateGroup, CountingScorer, GrammarScorer, LanguageModelScorer, Selection, TypeSelection,
    ensemble_scores, select_negatives)
from crg.hard_negatives.vocabulary import AtomVocabulary

__all__ = [
    "HN_ATOM", "HN_SWAP", "HN_NEG", "HN_COMP", "HN_TYPES", "Change", "HardNegative", "HardNegativeConfig",
    "RefinementConfig", "ParsedCaption", "AtomVocabulary", "CaptionNegatives", "CaptionCandidates",
    "NegativeCandidate", "GenerationReport", "caption_hard_negatives", "caption_candidates", "corpus_hard_negatives",
    "realize_words", "COLOR_WORDS", "BlindScorer", "LanguageModelScorer", "GrammarScorer", "CandidateGroup",
    "Selection", "TypeSelection", "select_negatives", "CountingScorer", "ensemble_scores", "FalseReason",
    "false_because",
]
