"""The admission gate (docs/design.md §4 step 4): A-MAC five-factor scoring of a memory candidate.

composite = 0.25·future_utility + 0.25·factual_confidence + 0.20·novelty
          + 0.15·recency + 0.15·type_prior                      (weights: defaults)

Precedence inside `decide`, first match wins:

1. QUARANTINE: the candidate contradicts a high-confidence neighbour (confidence
   >= 0.7) and its own factual confidence is < 0.3. Checked first because a
   negation barely moves cosine similarity: "the bridge is not safe" sits above
   0.9 from "the bridge is safe" and would otherwise be merged as reinforcement
   of the very claim it denies. A contradiction that is not quarantined also
   skips step 2 for the same reason.
2. AGGREGATE (similarity > 0.95) and MERGE (similarity > 0.90): a near-duplicate
   never becomes a new record whatever its score; its value is the count and
   last_seen of an aggregate, or reinforcement of the existing memory.
3. Composite bands: < 0.45 REJECT; [0.45, 0.55] ADMIT at confidence 0.3;
   > 0.55 ADMIT at the kind's standard confidence.

Off-topic (similarity < 0.50) is only a flag; the candidate still goes through
steps 1-3. Bounds: the lower band edge is inclusive ("below 0.45 rejected"),
every "above" is exclusive, so exactly 0.55, 0.90 and 0.95 fall to the lower band.

Every estimator is a separate pure function so that one can be replaced, e.g.
an LLM judge for future utility whose score is passed to `decide(utility=...)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import astuple, dataclass, field
from enum import StrEnum
from types import MappingProxyType

from grimoire.streams.model.decay import recency as decay_recency
from grimoire.streams.model.records import Kind
from grimoire.streams.model.text import STOPWORDS

# Factors and the composite are rounded so that band edges computed by hand
# (0.45, 0.55, 0.3) are not decided by binary floating-point noise.
_COMPOSITE_DIGITS = 9

# Factual confidence, default estimator (see `estimate_factual_confidence`).
FACTUAL_BASE = 0.4
FACTUAL_EVIDENCE_BONUS = 0.2
FACTUAL_ALIGN_GAIN = 0.2
FACTUAL_CONTRADICTION_PENALTY = 0.4

# Future utility, default estimator (see `estimate_future_utility`).
UTILITY_IMPORTANCE_WEIGHT = 0.4
UTILITY_BY_EPISODE_TYPE: Mapping[str, float] = MappingProxyType(
    {
        "observation": 0.0,
        "report": 0.05,
        "coordination": 0.05,
        "action": 0.15,
        # A conversation line is the agent's own experience (what it was told or
        # said): more reusable than a routine heartbeat.
        "dialogue": 0.15,
        "regime_shift": 0.25,
        "alert": 0.25,
    }
)
UTILITY_DISTILLED = 0.15  # every kind other than episode is already a distillation
UTILITY_ERROR = 0.2
UTILITY_PER_KEY = 0.025
UTILITY_MAX_KEYS = 4
UTILITY_SHORT = -0.2  # fewer than 4 words
UTILITY_PHATIC = -0.15  # "thanks", "ok", "sounds good" with little else in it
# A courtesy opening a substantive line ("Thanks, Mel! My grandma gave me this
# necklace in Sweden") is not chit-chat: only a line with at most this many
# content words besides the phatic ones counts as phatic.
PHATIC_MAX_CONTENT_WORDS = 3

_EPISODE_TYPES = frozenset(UTILITY_BY_EPISODE_TYPE)

_WORDS = re.compile(r"\S+")
_NUMBER = re.compile(r"\d")
_EVIDENCE = re.compile(r"\d|0x[0-9a-f]{6,}|https?://|(?:^|\s)[~.]?/[\w.-]+/", re.IGNORECASE)
# "no errors" / "0 errors" in a healthy status line is not error evidence.
_ERROR = re.compile(
    r"(?<!no )(?<!0 )(?<!without )\b(?:errors?|exception|traceback|fail(?:ed|ure|s)"
    r"|time(?:out|d out)|revert(?:ed)?|panic|crash(?:ed)?|denied|refused)\b",
    re.IGNORECASE,
)
_PHATIC = re.compile(
    r"\b(?:thanks|thank you|ok|okay|sure|got it|sounds good|hello|hi|hey|cool|great|lol|np)\b",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|cannot|without)\b|n't\b", re.IGNORECASE
)


def _poles(a: str, b: str) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(a.split()), frozenset(b.split())


# Opposite poles; a text that uses one pole of a pair while the other text uses
# the opposite pole flips polarity once, just as a negation does.
_ANTONYMS = (
    _poles("succeed succeeded succeeds success successful passed", "fail failed fails failure"),
    _poles(
        "increase increased increases rise rises rose rising",
        "decrease decreased decreases fall falls fell falling",
    ),
    _poles("above higher", "below lower"),
    _poles("enable enabled", "disable disabled"),
    _poles("bullish", "bearish"),
    _poles("profit profitable gain gains", "loss losses"),
    _poles("safe", "unsafe dangerous"),
    _poles("true", "false"),
)


class Action(StrEnum):
    ADMIT = "admit"
    REJECT = "reject"
    MERGE = "merge"  # reinforce the existing near-duplicate
    AGGREGATE = "aggregate"  # no new record; fold into an aggregate (count, last_seen)
    QUARANTINE = "quarantine"  # stored, excluded from recall until the next curator cycle


@dataclass(frozen=True, slots=True)
class AdmissionWeights:
    future_utility: float = 0.25
    factual_confidence: float = 0.25
    novelty: float = 0.20
    recency: float = 0.15
    type_prior: float = 0.15

    def __post_init__(self) -> None:
        values = astuple(self)
        # The bands are absolute numbers, so they only mean something if the
        # composite stays a convex combination of unit-interval factors.
        if min(values) < 0 or abs(sum(values) - 1.0) > 1e-9:
            raise ValueError("admission weights must be non-negative and sum to 1")


@dataclass(frozen=True, slots=True)
class TypePriors:
    """Prior usefulness per kind; episodes are looked up by their episode type.

    Episode types that are not routine borrow the prior of the kind they act
    like: an alert is warning-like (a missed one costs far more than a spurious
    one), a regime shift is structural like a causal link, an action is
    context-dependent like a strategy fragment. Unknown episode types count as
    routine observations.
    """

    warning: float = 0.9
    causal_link: float = 0.7
    heuristic: float = 0.6
    insight: float = 0.5
    strategy_fragment: float = 0.4
    summary: float = 0.5
    aggregate: float = 0.2
    observation: float = 0.2
    report: float = 0.2
    coordination: float = 0.2
    action: float = 0.4
    dialogue: float = 0.5
    regime_shift: float = 0.7
    alert: float = 0.9

    def prior(self, kind: Kind, episode_type: str = "observation") -> float:
        # Fields are named after Kind values and episode types.
        if kind is not Kind.EPISODE:
            return float(getattr(self, kind.value))
        return float(
            getattr(self, episode_type if episode_type in _EPISODE_TYPES else "observation")
        )


@dataclass(frozen=True, slots=True)
class StandardConfidence:
    """Confidence an admitted record starts at when it clears the upper band.

    Insights, heuristics and strategy fragments start at 0.5: retrievable, but
    one validation (+0.1) cannot lift them past the curator's 0.7 promotion bar.
    Episodes, summaries and aggregates record what was observed, not inferred,
    so they start higher at 0.6. Warnings start at 0.7 so that they count as
    high-confidence at once and are protected by the contradiction firewall.
    """

    episode: float = 0.6
    insight: float = 0.5
    heuristic: float = 0.5
    warning: float = 0.7
    causal_link: float = 0.6
    strategy_fragment: float = 0.5
    summary: float = 0.6
    aggregate: float = 0.6

    def for_kind(self, kind: Kind) -> float:
        return float(getattr(self, kind.value))  # fields are named after Kind values


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    weights: AdmissionWeights = field(default_factory=AdmissionWeights)
    type_priors: TypePriors = field(default_factory=TypePriors)
    standard_confidence: StandardConfidence = field(default_factory=StandardConfidence)
    reject_below: float = 0.45
    low_confidence_below: float = 0.55  # inclusive upper edge of the low band
    low_confidence: float = 0.3
    aggregate_above: float = 0.95
    merge_above: float = 0.90
    off_topic_below: float = 0.50
    quarantine_factual_below: float = 0.3
    high_confidence: float = 0.7
    contradiction_similarity: float = 0.8
    recency_half_life_ms: int = 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if not self.reject_below <= self.low_confidence_below:
            raise ValueError("reject_below must not exceed low_confidence_below")
        if not self.merge_above <= self.aggregate_above:
            raise ValueError("merge_above must not exceed aggregate_above")
        if self.recency_half_life_ms <= 0:
            raise ValueError("recency_half_life_ms must be positive")


DEFAULT_POLICY = AdmissionPolicy()


@dataclass(frozen=True, slots=True)
class NearMemory:
    """The nearest stored memory, as the vector search returned it."""

    memory_id: str
    similarity: float  # cosine
    confidence: float
    text: str


@dataclass(frozen=True, slots=True)
class AdmissionCandidate:
    """The signals the deterministic estimators read.

    `episode_type` is only consulted for `Kind.EPISODE`; tool events are
    actions, transcript lines observations. `key_count` is the number of nexus
    keys extracted from the candidate: more keys, more specific content.
    """

    kind: Kind
    text: str
    ts_ms: int
    importance: float = 0.5
    episode_type: str = "observation"
    has_error: bool = False
    key_count: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.importance <= 1.0:
            raise ValueError("importance must be within [0, 1]")
        if self.key_count < 0:
            raise ValueError("key_count must be non-negative")


@dataclass(frozen=True, slots=True)
class AdmissionFactors:
    """The five A-MAC factors, each in [0, 1]."""

    future_utility: float
    factual_confidence: float
    novelty: float
    recency: float
    type_prior: float

    def composite(self, weights: AdmissionWeights) -> float:
        total = (
            weights.future_utility * self.future_utility
            + weights.factual_confidence * self.factual_confidence
            + weights.novelty * self.novelty
            + weights.recency * self.recency
            + weights.type_prior * self.type_prior
        )
        return round(total, _COMPOSITE_DIGITS)


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """What to do with a candidate; `reason` is a stable machine-readable code.

    `confidence` is what a newly written record is stored with: 0.0 when nothing
    new is written (reject, merge, aggregate), the factual confidence for a
    quarantined record. `target_id` is the neighbour merged into or aggregated
    with, or the contradicted one for a quarantine; `contradicted_id` is set on
    any detected contradiction, quarantined or not, so the curator can review it.
    """

    action: Action
    reason: str
    composite: float
    factors: AdmissionFactors
    confidence: float
    off_topic: bool
    target_id: str | None = None
    contradicted_id: str | None = None

    def breakdown(self) -> dict[str, float]:
        """The composite and its five factors, as recorded with every decision."""
        factors = self.factors
        return {
            "composite": self.composite,
            "future_utility": factors.future_utility,
            "factual_confidence": factors.factual_confidence,
            "novelty": factors.novelty,
            "recency": factors.recency,
            "type_prior": factors.type_prior,
        }


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _factor(value: float) -> float:
    # Same rounding as the composite: 0.6 - 0.4·0.75 must be 0.3, not 0.29999999999999993.
    return round(_clamp(value), _COMPOSITE_DIGITS)


def estimate_future_utility(c: AdmissionCandidate) -> float:
    """Deterministic stand-in for "will this help future decisions?", in [0, 1].

    U = 0.4·importance + type term + 0.2·error + 0.025·min(keys, 4)
        - 0.2·(fewer than 4 words) - 0.15·(phatic, see `is_phatic`, and no digits)

    Type term: episode observation 0.0, report/coordination 0.05, action 0.15,
    regime_shift/alert 0.25; any other kind 0.15. Error evidence is the flag or
    an error word in the text ("no errors" does not count). Numbers are left to
    factual confidence, which already rewards them as evidence. E.g. an alert at
    importance 0.8 with two keys: 0.32 + 0.25 + 0.05 = 0.62; a routine heartbeat
    at importance 0.5 with one key: 0.2 + 0.025 = 0.225.
    """
    words = len(_WORDS.findall(c.text))
    has_digits = _NUMBER.search(c.text) is not None
    if c.kind is Kind.EPISODE:
        type_term = UTILITY_BY_EPISODE_TYPE.get(c.episode_type, 0.0)
    else:
        type_term = UTILITY_DISTILLED
    error = c.has_error or _ERROR.search(c.text) is not None
    utility = UTILITY_IMPORTANCE_WEIGHT * c.importance + type_term
    utility += UTILITY_ERROR if error else 0.0
    utility += UTILITY_PER_KEY * min(c.key_count, UTILITY_MAX_KEYS)
    utility += UTILITY_SHORT if words < 4 else 0.0
    if not has_digits and is_phatic(c.text):
        utility += UTILITY_PHATIC
    return _factor(utility)


def is_phatic(text: str) -> bool:
    """Courtesy with (almost) nothing else: a phatic phrase and at most
    `PHATIC_MAX_CONTENT_WORDS` other content words."""
    if _PHATIC.search(text) is None:
        return False
    rest = _PHATIC.sub(" ", text.casefold())
    content = [w for w in _TOKEN.findall(rest) if w not in STOPWORDS and len(w) > 1]
    return len(content) <= PHATIC_MAX_CONTENT_WORDS


def estimate_factual_confidence(
    c: AdmissionCandidate,
    nearest: NearMemory | None,
    contradicted: NearMemory | None,
    policy: AdmissionPolicy,
) -> float:
    """Cross-reference against the store, in [0, 1].

    F = 0.4 (an unchecked claim) + 0.2 if the text carries checkable evidence
    (digits, hex ids, URLs, paths); then either - 0.4·contradicted.confidence,
    or, for an on-topic neighbour (similarity >= 0.5) that agrees,
    + 0.2·similarity·neighbour.confidence. So a bare claim against a 0.8 entry
    gets 0.4 - 0.32 = 0.08, while one with evidence gets 0.6 - 0.32 = 0.28.
    """
    base = FACTUAL_BASE
    if _EVIDENCE.search(c.text) is not None:
        base += FACTUAL_EVIDENCE_BONUS
    if contradicted is not None:
        return _factor(base - FACTUAL_CONTRADICTION_PENALTY * contradicted.confidence)
    if nearest is not None and nearest.similarity >= policy.off_topic_below:
        base += FACTUAL_ALIGN_GAIN * _clamp(nearest.similarity) * _clamp(nearest.confidence)
    return _factor(base)


def _pole(words: set[str], pole_a: frozenset[str], pole_b: frozenset[str]) -> int:
    """+1 or -1 when the words use only one pole of an antonym pair, else 0."""
    return int(bool(words & pole_a)) - int(bool(words & pole_b))


def _polarity_flips(text: str, other: str) -> int:
    flips = int((_NEGATION.search(text) is None) != (_NEGATION.search(other) is None))
    mine = set(_TOKEN.findall(text.casefold()))
    theirs = set(_TOKEN.findall(other.casefold()))
    for pole_a, pole_b in _ANTONYMS:
        if _pole(mine, pole_a, pole_b) * _pole(theirs, pole_a, pole_b) < 0:
            flips += 1
    return flips


def detect_contradiction(text: str, neighbour: NearMemory, policy: AdmissionPolicy) -> bool:
    """A deterministic heuristic: about the same thing, with the opposite polarity.

    True when similarity >= 0.8 and the polarity flips an odd number of times:
    one flip when exactly one side is negated (not, no, never, n't, without...),
    one per antonym pair used from opposite poles (failed/succeeded,
    rose/fell, above/below...). An even count cancels: "did not fall" agrees
    with "rose". Confidence of the neighbour is not considered here.
    """
    if neighbour.similarity < policy.contradiction_similarity:
        return False
    return _polarity_flips(text, neighbour.text) % 2 == 1


def novelty(nearest: NearMemory | None) -> float:
    """1 - cosine similarity to the nearest memory, in [0, 1]; an empty store gives 1.0."""
    if nearest is None:
        return 1.0
    return _factor(1.0 - nearest.similarity)


def recency(ts_ms: int, now_ms: int, half_life_ms: int) -> float:
    """2^(-Δt / half_life) with Δt = max(0, now - ts): one half-life ago gives 0.5.

    A timestamp ahead of `now_ms` (clock skew between producers) counts as now.
    """
    return _factor(decay_recency(now_ms - ts_ms, half_life_ms))


def decide(
    c: AdmissionCandidate,
    *,
    nearest: NearMemory | None,
    now_ms: int,
    policy: AdmissionPolicy = DEFAULT_POLICY,
    utility: float | None = None,
) -> AdmissionDecision:
    """Score a candidate and pick an action (precedence in the module docstring).

    `utility` replaces the default future-utility estimator, e.g. with a judge's score.
    """
    contradicted = None
    if nearest is not None and detect_contradiction(c.text, nearest, policy):
        contradicted = nearest
    factors = AdmissionFactors(
        future_utility=_factor(utility) if utility is not None else estimate_future_utility(c),
        factual_confidence=estimate_factual_confidence(c, nearest, contradicted, policy),
        # A contradiction adds the one thing the store lacks, the opposite claim,
        # however close its wording is.
        novelty=1.0 if contradicted is not None else novelty(nearest),
        recency=recency(c.ts_ms, now_ms, policy.recency_half_life_ms),
        type_prior=policy.type_priors.prior(c.kind, c.episode_type),
    )
    composite = factors.composite(policy.weights)
    target: str | None = None
    if (
        contradicted is not None
        and contradicted.confidence >= policy.high_confidence
        and factors.factual_confidence < policy.quarantine_factual_below
    ):
        action, reason, confidence = (
            Action.QUARANTINE,
            "contradiction",
            factors.factual_confidence,
        )
        target = contradicted.memory_id
    elif nearest is not None and contradicted is None and nearest.similarity > policy.merge_above:
        if nearest.similarity > policy.aggregate_above:
            action, reason = Action.AGGREGATE, "duplicate"
        else:
            action, reason = Action.MERGE, "near_duplicate"
        confidence, target = 0.0, nearest.memory_id
    elif composite < policy.reject_below:
        action, reason, confidence = Action.REJECT, "below_threshold", 0.0
    elif composite <= policy.low_confidence_below:
        action, reason, confidence = Action.ADMIT, "admitted_low_confidence", policy.low_confidence
    else:
        action, reason = Action.ADMIT, "admitted"
        confidence = policy.standard_confidence.for_kind(c.kind)
    return AdmissionDecision(
        action=action,
        reason=reason,
        composite=composite,
        factors=factors,
        confidence=confidence,
        off_topic=nearest is not None and nearest.similarity < policy.off_topic_below,
        target_id=target,
        contradicted_id=contradicted.memory_id if contradicted is not None else None,
    )
