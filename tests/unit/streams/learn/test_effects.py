"""The outcome and credit folds: the texts and rules the Lua scripts had."""

from __future__ import annotations

from grimoire.streams.learn.effects import (
    EffectsView,
    MemoryChange,
    MemoryState,
    fold_credits,
    fold_outcome,
    number_text,
)
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.learn.runs import MemoryCredit


def _outcome(kind: OutcomeKind, *ids: str, ts_ms: int = 1_000) -> Outcome:
    return Outcome("o1", "agent", ts_ms, kind, ids)


def _view(applied: bool = False, **memories: MemoryState) -> EffectsView:
    return EffectsView(applied, memories)


def _credit(memory_id: str, delta: float, strength: float = 0.0) -> MemoryCredit:
    return MemoryCredit(memory_id, ("acted",), delta, strength, 1, 0)


def test_applied_before_is_none() -> None:
    view = _view(True, m=MemoryState(True, "0.5"))
    assert fold_outcome(view, _outcome(OutcomeKind.POSITIVE, "m")) is None
    assert fold_credits(view, _outcome(OutcomeKind.RUN_ENDED), [_credit("m", 0.1)], {}) is None


def test_foreign_or_missing_memory_is_skipped_and_not_counted() -> None:
    view = _view(m=MemoryState(True, "0.5"), x=MemoryState(False, "0.5"))
    changes = fold_outcome(view, _outcome(OutcomeKind.POSITIVE, "x", "m", "gone"))
    assert changes is not None
    assert [c.memory_id for c in changes.memories] == ["m"]
    assert changes.changed == 1 and changes.mark_applied and changes.outcome_id == "o1"


def test_confidence_text_and_clamping() -> None:
    assert number_text(0.1 + 0.2) == "0.3"
    assert number_text(0.6 + 0.1) == "0.7"
    assert number_text(1.0) == "1" and number_text(0.0) == "0"
    view = _view(
        low=MemoryState(True, "0.1"),
        high=MemoryState(True, "0.95"),
        unset=MemoryState(True, None),
        mid=MemoryState(True, "0.6"),
    )
    up = fold_outcome(view, _outcome(OutcomeKind.POSITIVE, "high", "unset", "mid"))
    down = fold_outcome(view, _outcome(OutcomeKind.NEGATIVE, "low"))
    assert up is not None and down is not None
    assert [c.confidence for c in up.memories] == ["1", "0.6", "0.7"]
    assert down.memories[0].confidence == "0"


def test_outcome_strength_counts_and_decay_origin_only_forward() -> None:
    view = _view(
        old=MemoryState(True, "0.5", "500"),
        new=MemoryState(True, "0.5", "2000"),
        never=MemoryState(True, "0.5", None),
    )
    positive = fold_outcome(view, _outcome(OutcomeKind.POSITIVE, "old", "new", "never"))
    assert positive is not None
    assert [c.last_accessed for c in positive.memories] == ["1000", None, "1000"]
    assert all(c.strength == 1.0 for c in positive.memories)
    validated = fold_outcome(view, _outcome(OutcomeKind.VALIDATED, "old"))
    assert validated is not None
    assert validated.memories == (MemoryChange("old", confidence="0.5", validated=1),)


def test_outcome_rewrites_confidence_with_delta_zero_credits_do_not() -> None:
    view = _view(m=MemoryState(True, "0.50"))
    outcome = fold_outcome(view, _outcome(OutcomeKind.CONTRADICTED, "m"))
    assert outcome is not None
    assert outcome.memories == (MemoryChange("m", confidence="0.5", contradicted=1),)
    credits = fold_credits(view, _outcome(OutcomeKind.RUN_ENDED), [_credit("m", 0.0, 0.5)], {})
    assert credits is not None
    assert credits.memories == (MemoryChange("m", strength=0.5, validated=1),)


def test_credits_move_confidence_and_origin_and_pass_uplift_text() -> None:
    view = _view(a=MemoryState(True, "0.95", "10"), b=MemoryState(True), c=MemoryState(False))
    changes = fold_credits(
        view, _outcome(OutcomeKind.RUN_ENDED), [_credit("a", 0.1)], {"b": 0.25, "c": 1.0}
    )
    assert changes is not None
    assert changes.memories == (
        MemoryChange("a", confidence="1", validated=1, last_accessed="1000"),
        MemoryChange("b", causal_uplift="0.25"),
    )
    assert changes.changed == 2


def test_a_memory_named_twice_applies_twice() -> None:
    view = _view(m=MemoryState(True, "0.5"))
    changes = fold_outcome(view, _outcome(OutcomeKind.POSITIVE, "m", "m"))
    assert changes is not None and changes.changed == 2
    assert [c.confidence for c in changes.memories] == ["0.6", "0.7"]
    assert [c.last_accessed for c in changes.memories] == ["1000", None]
