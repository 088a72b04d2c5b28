"""What the hard-negative generators take and give: the type names, the settings, the negatives themselves.

A negative records what was edited (:class:`Change`) so that an evaluation can be broken down by
edit and a doubtful negative can be inspected; the world's verified negatives
(:mod:`features.world.hard_negatives`) use the same records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["HN_ATOM", "HN_SWAP", "HN_NEG", "HN_COMP", "HN_TYPES", "Change", "HardNegative", "HardNegativeConfig",
           "RefinementConfig", "CaptionNegatives", "NegativeCandidate", "CaptionCandidates"]

HN_ATOM, HN_SWAP, HN_NEG, HN_COMP = "HN-ATOM", "HN-SWAP", "HN-NEG", "HN-COMP"
HN_TYPES = (HN_ATOM, HN_SWAP, HN_NEG, HN_COMP)


@dataclass(frozen=True)
class Change:
    """What a hard negative changed.

    Attributes:
        op: the edit: ``swap_arguments``, ``replace_noun``, ``replace_color``, ``replace_size``,
            ``replace_relation``, ``negate_caption``, ``negate_verb``, ``remove_negation``,
            ``negate_attribute``, ``swap_attributes``, ``move_attribute``, ``split_compound``
            (world negatives add ``replace_shape``, ``replace_attribute``, ``swap_objects``).
        before, after: the words (or phrases) as they were and as they are.
        where: the predicate template, atom kind or phrase the edit happened in.
    """

    op: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    where: str = ""


@dataclass(frozen=True)
class HardNegative:
    """One hard negative caption.

    Attributes:
        type: one of :data:`HN_TYPES`.
        text: the negative caption.
        source: the true caption it was made from.
        change: what was changed.
        image_id: the image the source caption describes (``None`` if unknown).
        spans: the edited character regions (:class:`crg.hard_negatives.surface.EditSpan`): outside
            them ``text`` has the characters of ``source`` (empty where not recorded, as in the world's
            negatives, which are re-realised).
    """

    type: str
    text: str
    source: str
    change: Change
    image_id: str | None = None
    spans: tuple = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["change"] = {k: list(v) if isinstance(v, tuple) else v for k, v in d["change"].items()}
        d["spans"] = [[s.source_start, s.source_end, s.negative_start, s.negative_end] for s in self.spans]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "HardNegative":
        from crg.hard_negatives.surface import EditSpan

        c = d["change"]
        return cls(d["type"], d["text"], d["source"],
                   Change(c["op"], tuple(c["before"]), tuple(c["after"]), c.get("where", "")), d.get("image_id"),
                   tuple(EditSpan(*s) for s in d.get("spans", ())))


#: How refinement picks each caption's candidates (:class:`RefinementConfig`).
PICK_RULES = ("close", "lose")


@dataclass(frozen=True)
class RefinementConfig:
    """Adversarial refinement (SugarCrepe, Hsieh et al. 2023, §3.3): over-generate, then keep negatives
    that blind text scorers cannot tell from the true caption (:mod:`crg.hard_negatives.refine`).

    Attributes:
        candidates_per_type: candidates drawn per caption and type before selection (the plain
            generator keeps ``per_type``); more candidates leave more plausible ones to keep.
        max_blind_accuracy: per type and blind scorer, the largest fraction (0.5-1) of kept pairs in
            which the scorer prefers the true caption (a tie counts one half), and one minus the
            smallest (preferring the negative as often is as telling). The issue's bar is 0.65; the
            default leaves a margin for scorers that differ from the ones refined against (another
            LM, spaCy's tags instead of the edit's).
        extended_edits: also propose edits the plain generator does not make: HN-SWAP of two object
            nouns (CREPE's "swap two atoms of the same type"), and negations that do not lengthen the
            caption ("with" -> "without", a determiner -> "no"), so that length alone cannot tell
            a negation from its caption.
        pick: how each caption's ``per_type`` candidates are picked before balancing. ``"close"``
            (default): those whose scores are closest to the caption's under every scorer (the sum
            of ``|gap| / scale``): with several scorers, picking the candidates that *lose* to most
            of them (``"lose"``, the earlier rule) over-picks negatives the scorers prefer to the
            caption (a unigram LM then prefers the negative 60% of the time, and a bag-of-words
            classifier learns that turned-round cue).
        spread: when balancing removes pairs, a caption's first pick goes after its other picks
            (among pairs that ease as many bounds), so that more captions keep a negative.
        margin: balancing counts a scorer's preference for the negative against the bound from above
            only beyond this fraction of the scorer's median absolute gap over the type (an exact tie
            stays a tie; the bound from below counts plain preferences), and the closest pick aims at
            such pairs. Selecting on a noisy score keeps pairs it loses by a hair, which another scorer
            of the same kind (an LM of other captions) mostly still wins; pairs lost clearly hold up
            better (:func:`crg.hard_negatives.refine.select_negatives`).
        margin_types: the types the margin applies to (None: all); the others are balanced without.
    """

    candidates_per_type: int = 20
    max_blind_accuracy: float = 0.6
    extended_edits: bool = True
    pick: str = "close"
    spread: bool = True
    margin: float = 0.0
    margin_types: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.candidates_per_type < 1:
            raise ValueError(f"candidates_per_type must be >= 1, got {self.candidates_per_type}")
        if not 0.5 <= self.max_blind_accuracy <= 1.0:
            raise ValueError(f"max_blind_accuracy must be in [0.5, 1] (a fraction, not a percentage), got "
                             f"{self.max_blind_accuracy}")
        if self.pick not in PICK_RULES:
            raise ValueError(f"pick must be one of {PICK_RULES}, got {self.pick!r}")
        if not self.margin >= 0.0:
            raise ValueError(f"margin must be >= 0 (a fraction of the type's median gap), got {self.margin}")
        if self.margin_types is not None:
            object.__setattr__(self, "margin_types", tuple(self.margin_types))
            unknown = set(self.margin_types) - set(HN_TYPES)
            if unknown:
                raise ValueError(f"margin_types: unknown types {sorted(unknown)} (known: {list(HN_TYPES)})")


@dataclass(frozen=True)
class HardNegativeConfig:
    """How many negatives to make and from which atoms.

    Attributes:
        per_type: negatives kept per caption and type. CREPE's productivity sets hold 5 per type
            (§B.3); fewer are kept when fewer distinct ones exist.
        types: which types to make.
        min_atom_count: a corpus noun or colour is a foil only if it occurs this often (CREPE uses
            seen atoms; rare words make easy, odd foils).
        seed: the seed of every random choice.
        refinement: ``None`` (default): the plain generator. A :class:`RefinementConfig`: candidates
            are over-generated and selected so that blind text scorers are near chance per type
            (:func:`crg.hard_negatives.corpus_hard_negatives` then needs ``scorers``).
        drop_ungrammatical: drop a candidate that breaks more agreement rules
            (:func:`crg.blind.grammar_violations`, read from the tags the edit wrote) than its caption
            ("a dogs", "two cat", "cars is"), counted per type (``CaptionCandidates.ungrammatical``): issue 33
            asks for grammatical negatives, and a blind grammar check would spot them.
        foil_sampling: ``"frequency"`` (default): HN-ATOM draws a foil in proportion to its corpus
            count, so negatives use words as often as captions do (a word-pair classifier learns
            "a rare noun is the negative" from uniform draws); ``"uniform"``: every foil alike.
        move_attributes: HN-COMP also moves an attribute from one object to another ("a small boy
            holding a plate" -> "a boy holding a small plate"). Off by default: the other object may
            well have the attribute too, so the negative is often not false (22 of 50 read by hand on
            COCO, docs/hard_negatives.md); swaps and compound splits remain.
    """

    per_type: int = 5
    types: tuple[str, ...] = HN_TYPES
    min_atom_count: int = 2
    seed: int = 0
    refinement: RefinementConfig | None = None
    drop_ungrammatical: bool = True
    foil_sampling: str = "frequency"
    move_attributes: bool = False

    def __post_init__(self):
        if self.per_type < 1:
            raise ValueError(f"per_type must be >= 1, got {self.per_type}")
        unknown = [t for t in self.types if t not in HN_TYPES]
        if unknown:
            raise ValueError(f"unknown hard negative types {unknown}; choose from {HN_TYPES}")
        if self.foil_sampling not in ("frequency", "uniform"):
            raise ValueError(f"foil_sampling must be 'frequency' or 'uniform', got {self.foil_sampling!r}")
        if self.min_atom_count < 1:
            raise ValueError(f"min_atom_count must be >= 1, got {self.min_atom_count}")
        if self.refinement is not None and self.refinement.candidates_per_type < self.per_type:
            raise ValueError(f"refinement.candidates_per_type ({self.refinement.candidates_per_type}) must be >= "
                             f"per_type ({self.per_type}): refinement selects among the candidates")

    @property
    def extended_edits(self) -> bool:
        """Whether the generators propose the refinement's extra edits (noun swaps, short negations)."""
        return self.refinement is not None and self.refinement.extended_edits


@dataclass
class CaptionNegatives:
    """The negatives of one caption and, per type that gave none, why; per type, candidates dropped as
    ungrammatical."""

    negatives: list[HardNegative]
    skipped: dict[str, str]
    ungrammatical: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NegativeCandidate:
    """A negative before refinement, with its ``(word, tag)`` tokens as the edit wrote them (tags of
    the source's parse, and of the words the edit put in): what a grammar scorer reads, untagged again."""

    negative: HardNegative
    tagged: tuple[tuple[str, str], ...]


@dataclass
class CaptionCandidates:
    """One caption's candidates per type (in the generator's order, distinct) and, per type with none, why."""

    candidates: dict[str, list[NegativeCandidate]]
    skipped: dict[str, str]
    #: per type, candidates dropped as ungrammatical (``HardNegativeConfig.drop_ungrammatical``)
    ungrammatical: dict[str, int] = field(default_factory=dict)
