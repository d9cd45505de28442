"""Folding a journal usage entry (streams/journal/usage.py): what the store holds for
the entry in, its writes out. An entry counts once, and a recall request answered by
two entries counts the first; the applied marks kept are the latest `remembered`."""

from __future__ import annotations

from grimoire.streams.journal.usage import (
    USAGE_SEQ_WINDOW,
    RecallUsage,
    UsageChanges,
    UsageView,
    answered_twice,
    fold_usage,
)

A = "agent-a"
REQUEST = "g.recall-requests:2:27"
USED = RecallUsage(("m1", "m2"), 1_000, 4, "run-7")
FRESH = UsageView(seq_applied=False)


def test_a_fresh_entry_writes_its_uses_and_marks() -> None:
    changes = fold_usage(FRESH, A, USED, 50, REQUEST)
    assert changes == UsageChanges(
        agent_id=A,
        seq=50,
        request=REQUEST,
        memory_ids=("m1", "m2"),
        as_of_ms=1_000,
        contrarian_window=4,
        forget_below=50 - USAGE_SEQ_WINDOW + 1,
    )


def test_an_entry_applied_before_writes_nothing() -> None:
    assert fold_usage(UsageView(seq_applied=True), A, USED, 50, None) is None
    assert fold_usage(UsageView(True, 50), A, USED, 50, REQUEST) is None


def test_a_request_answered_by_another_entry_writes_nothing() -> None:
    view = UsageView(seq_applied=False, request_seq=49)
    assert fold_usage(view, A, USED, 50, REQUEST) is None
    assert answered_twice(view, 50)


def test_a_request_answered_by_this_entry_is_not_answered_twice() -> None:
    view = UsageView(seq_applied=True, request_seq=50)
    assert fold_usage(view, A, USED, 50, REQUEST) is None  # read again after a crash
    assert not answered_twice(view, 50)


def test_an_entry_without_a_request_is_folded_by_its_seq_alone() -> None:
    changes = fold_usage(FRESH, A, USED, 50, None)
    assert changes is not None and changes.request is None
    assert not answered_twice(FRESH, 50)


def test_the_marks_kept_are_the_latest_remembered_seqs() -> None:
    changes = fold_usage(FRESH, A, USED, 12, REQUEST, remembered=5)
    assert changes is not None
    assert changes.forget_below == 8  # seqs 8..12 kept: five entries
    assert fold_usage(FRESH, A, USED, 20_000, None).forget_below == 10_001  # type: ignore[union-attr]


def test_an_entry_that_used_nothing_still_serves_its_window_and_is_marked() -> None:
    changes = fold_usage(FRESH, A, RecallUsage((), 7, 3), 9, None)
    assert changes is not None
    assert (changes.memory_ids, changes.contrarian_window, changes.seq) == ((), 3, 9)
