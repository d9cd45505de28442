"""Quality and importance of a memory at creation time (docs/design.md §4 step 5).

total = 0.25·specificity + 0.25·actionability + 0.20·novelty + 0.15·verifiability
      + 0.15·consistency - 0.1·(number of distinct red flags), clamped to [0, 1]

Specificity, actionability and verifiability are rule-based and read only the
text; novelty comes from the vector search (1 - similarity to the nearest
memory) and consistency from a regeneration check that only curator promotions
pay for, so both are passed in. Recall multiplies by quality and decay doubles
for quality < 0.3, so the rules lean towards plain, checkable, usable statements.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from grimoire.streams.model.records import Kind

# Unmeasured consistency is neither rewarded nor punished: the midpoint.
NEUTRAL_CONSISTENCY = 0.5

# Four concrete anchors are plenty for a memory-sized statement.
SPECIFICITY_SATURATION = 4
HEDGE_PENALTY = 0.25

ACTION_TRIGGER = 0.5
ACTION_DIRECTIVE = 0.3
ACTION_THRESHOLD = 0.2

VERIFY_TX_HASH = 0.4
VERIFY_ADDRESS = 0.3
VERIFY_BLOCK = 0.3
VERIFY_URL = 0.3
VERIFY_UNIT = 0.2
VERIFY_TOOL_OUTPUT = 0.2

# One alternation, scanned left to right, so each concrete token counts once
# (a URL's digits or a timestamp's parts are not counted again as numbers).
_CONCRETE = re.compile(
    r"https?://\S+"
    r"|\b0x[0-9a-fA-F]+\b"
    r"|\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?Z?"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\b"
    r"|(?<![\w/])(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)+"
    r"|\b[0-9a-f]{32,}\b"
    r"|[$€]?\b\d+(?:[.,]\d+)*%?"
    r"|\b[A-Za-z]\w*_\w+\b"
    r"|\b[A-Za-z_]\w*\(\)"
)
_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|might|somewhat|probably|possibly|it seems|seems to|sort of|kind of"
    r"|i think|i guess|roughly|apparently)\b",
    re.IGNORECASE,
)
_TRIGGER = re.compile(
    r"\bif\b.+\bthen\b|\bif\b[^,.;]+,|\b(?:when|whenever|once|as soon as)\b[^,.;]+,",
    re.IGNORECASE,
)
_DIRECTIVE = re.compile(
    r"\b(?:should|must|never|do not|don't|avoid|prefer)\b"
    r"|(?:^|[,;:]\s*|\bthen\s+)(?:retry|rebalance|reduce|increase|raise|lower|set|wait|check"
    r"|switch|stop|pause|sell|buy|exit|use|skip|delay|hedge|close|escalate|restart|roll back"
    r"|cap|limit|split)\b",
    re.IGNORECASE,
)
_THRESHOLD = re.compile(
    r"(?:[<>]=?|\b(?:above|below|over|under|exceeds?|at least|at most|more than|less than))"
    r"\s*[$€]?\d",
    re.IGNORECASE,
)
_TX_HASH = re.compile(r"\b0x[0-9a-fA-F]{64}\b")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{40}\b")
_BLOCK = re.compile(r"\bblock\s*(?:#|no\.?\s*|number\s*)?\d+", re.IGNORECASE)
_URL = re.compile(r"https?://\S+", re.IGNORECASE)
_UNIT = re.compile(
    r"\d\s*(?:%|(?:ms|s|sec|seconds|min|minutes|h|hours|days|gwei|wei|eth|btc|usdc|usdt"
    r"|usd|bps|kb|mb|gb|tb)\b)|[$€]\d",
    re.IGNORECASE,
)
_TOOL_OUTPUT = re.compile(
    r"\btool \S+ (?:returned|failed)\b|\bexit (?:code|status)\s*\d+|\bstatus\s*[1-5]\d\d\b"
    r"|\bstdout\b|\bstderr\b|\btraceback\b",
    re.IGNORECASE,
)

RED_FLAGS: Mapping[str, re.Pattern[str]] = MappingProxyType(
    {
        "empty_rhetoric": re.compile(
            r"\b(?:game[- ]changer|revolutionary|paradigm shift|groundbreaking|unprecedented"
            r"|world[- ]class|cutting[- ]edge|next[- ]level|synerg(?:y|ies))\b",
            re.IGNORECASE,
        ),
        "weasel_words": re.compile(
            r"\b(?:some say|many believe|people say|experts agree|it is said|everyone knows"
            r"|clearly|obviously|undoubtedly)\b",
            re.IGNORECASE,
        ),
        "unverified_causal": re.compile(
            r"\b(?:always (?:causes|leads to|results in)|guaranteed?|guarantees|never fails"
            r"|will (?:definitely|certainly))\b",
            re.IGNORECASE,
        ),
        "self_praise": re.compile(
            r"\b(?:i am|i'm|i was) (?:so |very |really )?(?:great|brilliant|excellent|genius"
            r"|amazing|the best)\b|\bmy (?:brilliant|excellent|genius|flawless|superb|amazing)\b",
            re.IGNORECASE,
        ),
        "tautology": re.compile(
            r"\bit is what it is\b"
            r"|\b(?:an? |the )?([a-z]+) (?:is|are|was|were|will be) (?:just )?(?:an? |the )?\1\b",
            re.IGNORECASE,
        ),
    }
)

IMPORTANCE_BY_EPISODE_TYPE: Mapping[str, float] = MappingProxyType(
    {
        "observation": 0.3,
        "report": 0.4,
        "coordination": 0.4,
        "action": 0.5,
        "dialogue": 0.5,
        "regime_shift": 0.8,
        "alert": 0.9,
    }
)
IMPORTANCE_BY_KIND: Mapping[Kind, float] = MappingProxyType(
    {
        Kind.WARNING: 0.9,
        Kind.CAUSAL_LINK: 0.7,
        Kind.HEURISTIC: 0.7,
        Kind.INSIGHT: 0.6,
        Kind.STRATEGY_FRAGMENT: 0.5,
        Kind.SUMMARY: 0.5,
        Kind.AGGREGATE: 0.3,
    }
)
# The costly mistake is forgetting a failure, so error evidence sets a floor.
IMPORTANCE_ERROR_FLOOR = 0.7


@dataclass(frozen=True, slots=True)
class QualityWeights:
    specificity: float = 0.25
    actionability: float = 0.25
    novelty: float = 0.20
    verifiability: float = 0.15
    consistency: float = 0.15
    red_flag_penalty: float = 0.1


DEFAULT_WEIGHTS = QualityWeights()


@dataclass(frozen=True, slots=True)
class QualityScore:
    specificity: float
    actionability: float
    novelty: float
    verifiability: float
    consistency: float
    red_flags: tuple[str, ...]
    total: float


def _clamp(value: float) -> float:
    # Clamped and rounded (as in admission) so that 0.4 + 0.3 + 0.2 is exactly 0.9.
    return round(min(1.0, max(0.0, value)), 9)


def specificity(text: str) -> float:
    """min(concrete, 4)/4 - 0.25·hedges, clamped.

    Concrete tokens: URLs, 0x-hex, hashes, timestamps and dates, paths, numbers
    and percentages, identifiers with an underscore or a call `name()`.
    Hedges: maybe, perhaps, might, somewhat, probably, it seems, i think...
    """
    concrete = len(_CONCRETE.findall(text))
    hedges = len(_HEDGE.findall(text))
    return _clamp(
        min(concrete, SPECIFICITY_SATURATION) / SPECIFICITY_SATURATION - HEDGE_PENALTY * hedges
    )


def actionability(text: str) -> float:
    """0.5 for a trigger (if/then, "when X, ..."), 0.3 for a directive (should,
    must, avoid, or an imperative verb opening a clause), 0.2 for a numeric
    threshold (> 50, above 3, at least 2); each counted once, summed, max 1."""
    score = ACTION_TRIGGER if _TRIGGER.search(text) else 0.0
    score += ACTION_DIRECTIVE if _DIRECTIVE.search(text) else 0.0
    score += ACTION_THRESHOLD if _THRESHOLD.search(text) else 0.0
    return _clamp(score)


def verifiability(text: str) -> float:
    """Sum of what can be checked outside the agent, each counted once, max 1:
    tx hash (0x + 64 hex) 0.4, address (0x + 40 hex) 0.3, block number 0.3,
    URL 0.3, a number with a unit 0.2, tool output 0.2."""
    checks = (
        (_TX_HASH, VERIFY_TX_HASH),
        (_ADDRESS, VERIFY_ADDRESS),
        (_BLOCK, VERIFY_BLOCK),
        (_URL, VERIFY_URL),
        (_UNIT, VERIFY_UNIT),
        (_TOOL_OUTPUT, VERIFY_TOOL_OUTPUT),
    )
    return _clamp(sum(weight for pattern, weight in checks if pattern.search(text)))


def red_flags(text: str) -> tuple[str, ...]:
    """Stable codes of the red flags present, in `RED_FLAGS` order."""
    return tuple(code for code, pattern in RED_FLAGS.items() if pattern.search(text))


def score_quality(
    text: str,
    *,
    novelty: float,
    consistency: float = NEUTRAL_CONSISTENCY,
    weights: QualityWeights = DEFAULT_WEIGHTS,
) -> QualityScore:
    """Score every dimension and the penalised, clamped total.

    A flag counts once however often it occurs: repetition of one habit is
    one defect, not several.
    """
    spec = specificity(text)
    action = actionability(text)
    verify = verifiability(text)
    flags = red_flags(text)
    nov = _clamp(novelty)
    cons = _clamp(consistency)
    total = (
        weights.specificity * spec
        + weights.actionability * action
        + weights.novelty * nov
        + weights.verifiability * verify
        + weights.consistency * cons
        - weights.red_flag_penalty * len(flags)
    )
    return QualityScore(spec, action, nov, verify, cons, flags, _clamp(total))


def score_importance(
    *,
    kind: Kind = Kind.EPISODE,
    episode_type: str = "observation",
    explicit: float | None = None,
    has_error: bool = False,
) -> float:
    """How much a memory matters, in [0, 1].

    The producer's explicit value wins when given; otherwise episodes take their
    type's default (observation 0.3, report/coordination 0.4, action 0.5,
    regime_shift 0.8, alert 0.9; unknown types 0.3) and other kinds theirs
    (warning 0.9, causal_link/heuristic 0.7, insight 0.6, strategy_fragment and
    summary 0.5, aggregate 0.3). Error evidence lifts the result to at least 0.7.
    """
    if explicit is not None:
        base = _clamp(explicit)
    elif kind is Kind.EPISODE:
        base = IMPORTANCE_BY_EPISODE_TYPE.get(
            episode_type, IMPORTANCE_BY_EPISODE_TYPE["observation"]
        )
    else:
        base = IMPORTANCE_BY_KIND[kind]
    return max(base, IMPORTANCE_ERROR_FLOOR) if has_error else base
