"""The curator's pure cycle plan: distil, vote, promote, demote, prune, review."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from grimoire.streams.learn.curator.distill import (
    EpisodeView,
    Polarity,
    cluster_episodes,
    outcome_success,
    situation_keys,
)
from grimoire.streams.learn.curator.plan import curated_id, plan_cycle
from grimoire.streams.learn.curator.values import (
    CuratedEntry,
    CuratorOp,
    CuratorPlan,
    EntryStatus,
    QuarantineAction,
    QuarantinedView,
)
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.records import Kind

AGENT = "agent-1"
T0 = 1_790_000_000_000
KEYS = ("entity:eth", "entity:usdc", "tag:strategy/eth-dca", "session:s1")


def ep(
    n: int, success: bool | None, *, ts: int = T0, tool: str = "swap", keys: Sequence[str] = KEYS
) -> EpisodeView:
    return EpisodeView(
        memory_id=f"ep-{n:04d}",
        text=f"swapped ETH for USDC via router attempt {n}",
        tool=tool,
        nexus_keys=tuple(keys),
        regime="calm",
        success=success,
        ts_ms=ts + n,
    )


def batch(start: int, *verdicts: bool | None, ts: int = T0) -> list[EpisodeView]:
    return [ep(start + i, verdict, ts=ts) for i, verdict in enumerate(verdicts)]


def apply(entries: Sequence[CuratedEntry], plan: CuratorPlan) -> list[CuratedEntry]:
    """What the store does: replace changed entries, drop archived ones."""
    merged = {entry.memory_id: entry for entry in entries}
    merged.update({change.entry.memory_id: change.entry for change in plan.changes})
    return [e for e in merged.values() if e.status is not EntryStatus.ARCHIVED]


def one(entries: Sequence[CuratedEntry], kind: Kind) -> CuratedEntry:
    (found,) = [entry for entry in entries if entry.kind is kind]
    return found


def test_repeated_similar_episodes_yield_one_insight() -> None:
    plan = plan_cycle(AGENT, 1, T0 + 10, batch(0, True, True, True, None), [])
    (change,) = plan.changes
    insight = change.entry
    assert change.new and change.text_changed
    assert insight.kind is Kind.INSIGHT and insight.status is EntryStatus.PROPOSED
    assert insight.confidence == 0.5
    assert insight.polarity is Polarity.WORKS
    assert insight.validated_count == 3 and insight.contradicted_count == 0
    assert insight.strategy == "eth-dca"
    assert "tends to work" in insight.text and "swapped ETH" in insight.text
    assert insight.memory_id == curated_id(AGENT, Kind.INSIGHT, insight.signature, T0)
    assert plan.report.proposed == 1 and plan.watermark_ms == T0 + 3


def test_two_episodes_or_a_tie_add_nothing() -> None:
    assert plan_cycle(AGENT, 1, T0, batch(0, True, True), []).changes == ()
    assert plan_cycle(AGENT, 1, T0, batch(0, True, False, None), []).changes == ()


def test_failing_cluster_yields_a_fails_insight() -> None:
    plan = plan_cycle(AGENT, 1, T0, batch(0, False, False, False), [])
    assert plan.changes[0].entry.polarity is Polarity.FAILS
    assert "tends to fail" in plan.changes[0].entry.text


def test_different_situations_do_not_cluster() -> None:
    episodes = [ep(0, True), ep(1, True), ep(2, True, tool="bridge")]
    assert plan_cycle(AGENT, 1, T0, episodes, []).changes == ()


@pytest.fixture
def insight() -> CuratedEntry:
    plan = plan_cycle(AGENT, 1, T0 + 10, batch(0, True, True, True), [])
    return plan.changes[0].entry


def test_upvote_adds_exactly_point_one_and_promotes(insight: CuratedEntry) -> None:
    plan = plan_cycle(AGENT, 2, T0 + 10, batch(10, True, True, False), [insight])
    after = plan.changes[0].entry
    assert after.confidence == pytest.approx(0.6, abs=1e-9)
    assert after.status is EntryStatus.ACTIVE
    assert (after.validated_count, after.contradicted_count) == (5, 1)
    # 5 supporting episodes on an active insight: a heuristic is derived too.
    assert [op.op for op in plan.operations] == [CuratorOp.UPVOTE, CuratorOp.PROMOTE, CuratorOp.ADD]
    assert plan.report.promoted == 1 and plan.report.upvoted == 1 and plan.report.proposed == 1


def test_downvote_subtracts_exactly_point_one_five(insight: CuratedEntry) -> None:
    plan = plan_cycle(AGENT, 2, T0 + 10, batch(10, False, False), [insight])
    after = plan.changes[0].entry
    assert after.confidence == pytest.approx(0.35, abs=1e-9)
    assert plan.report.downvoted == 1 and plan.report.edited == 0


def test_votes_start_from_the_decayed_confidence(insight: CuratedEntry) -> None:
    later = insight.last_accessed_ms + 7 * DAY_MS  # one insight half-life
    plan = plan_cycle(AGENT, 2, later, batch(10, True, ts=later), [insight])
    after = plan.changes[0].entry
    assert after.confidence == pytest.approx(0.25 + 0.1, abs=1e-9)
    assert after.last_accessed_ms == later  # the vote restarts the decay clock


def test_contradicting_majority_edits_the_insight(insight: CuratedEntry) -> None:
    plan = plan_cycle(AGENT, 2, T0 + 10, batch(10, False, False, False, False), [insight])
    after = plan.changes[0].entry
    assert plan.changes[0].text_changed
    assert after.polarity is Polarity.FAILS and "tends to fail" in after.text
    assert (after.validated_count, after.contradicted_count) == (4, 3)
    assert after.memory_id == insight.memory_id
    assert [op.op for op in plan.operations] == [CuratorOp.DOWNVOTE, CuratorOp.EDIT]


def test_heuristic_is_derived_then_promoted_then_demoted() -> None:
    entries: list[CuratedEntry] = []
    now = T0 + 100
    for cycle in range(1, 6):
        plan = plan_cycle(AGENT, cycle, now, batch(cycle * 10, True, True, True), entries)
        entries = apply(entries, plan)
    heuristic = one(entries, Kind.HEURISTIC)
    # cycle 1 adds (0.5), 2 upvotes to 0.6 → active → heuristic (0.5); 3..5 upvote it.
    assert heuristic.text.startswith("Prefer tool swap on entity:eth, entity:usdc")
    assert heuristic.confidence == pytest.approx(0.8, abs=1e-9)
    assert heuristic.status is EntryStatus.PLAYBOOK
    assert heuristic.source_ids[0] == one(entries, Kind.INSIGHT).memory_id
    assert heuristic.strategy == "eth-dca"

    plan = plan_cycle(AGENT, 6, now, batch(90, False, False), entries)
    entries = apply(entries, plan)
    assert one(entries, Kind.HEURISTIC).status is EntryStatus.PLAYBOOK  # 0.65 ≥ 0.4
    plan = plan_cycle(AGENT, 7, now + 30 * DAY_MS, [], entries)
    entries = apply(entries, plan)
    assert one(entries, Kind.HEURISTIC).status is EntryStatus.DEMOTED
    assert plan.report.demoted == 2  # the insight too


def _stale(kind: Kind, provenance: str = "self") -> CuratedEntry:
    return CuratedEntry(
        memory_id=f"{kind.value}-{provenance}",
        kind=kind,
        text="old news",
        confidence=0.5,
        last_accessed_ms=T0,
        ts_ms=T0,
        provenance=provenance,
    )


def test_archive_after_three_low_cycles_with_exemptions() -> None:
    entries = [_stale(Kind.INSIGHT), _stale(Kind.WARNING), _stale(Kind.HEURISTIC, "bloodstain")]
    now = T0 + 120 * DAY_MS  # far below 0.1, at the 0.05 floor
    for cycle in (1, 2):
        plan = plan_cycle(AGENT, cycle, now + cycle, [], entries)
        entries = apply(entries, plan)
        assert len(entries) == 3 and plan.report.pruned == 0
        assert {e.consecutive_low for e in entries} == {cycle}
    plan = plan_cycle(AGENT, 3, now + 3, [], entries)
    archived = [c.entry for c in plan.changes if c.entry.status is EntryStatus.ARCHIVED]
    assert [e.memory_id for e in archived] == ["insight-self"]
    assert plan.report.pruned == 1
    assert {c.entry.memory_id for c in plan.changes if c.record_changed} == {"insight-self"}


def test_recovering_entry_resets_the_low_counter() -> None:
    entry = replace(_stale(Kind.INSIGHT), consecutive_low=2)
    plan = plan_cycle(AGENT, 1, T0 + DAY_MS, [], [entry])
    assert plan.changes[0].entry.consecutive_low == 0
    assert not plan.changes[0].record_changed


def test_quarantine_review() -> None:
    views = [
        QuarantinedView("q-support", Kind.EPISODE, T0, validated_count=2, contradicted_count=1),
        QuarantinedView("q-contra", Kind.INSIGHT, T0, contradicted_count=1),
        QuarantinedView("q-young", Kind.INSIGHT, T0),
        QuarantinedView("q-old", Kind.INSIGHT, T0 - 8 * DAY_MS),
        QuarantinedView("q-warn", Kind.WARNING, T0 - 8 * DAY_MS, contradicted_count=3),
    ]
    plan = plan_cycle(AGENT, 1, T0, [], [], views)
    assert {(d.memory_id, d.action) for d in plan.quarantine} == {
        ("q-support", QuarantineAction.RELEASE),
        ("q-contra", QuarantineAction.ARCHIVE),
        ("q-old", QuarantineAction.ARCHIVE),
    }
    assert plan.report.released == 1 and plan.report.pruned == 2


def test_plan_is_deterministic_and_order_free(insight: CuratedEntry) -> None:
    episodes = batch(10, True, False, True) + batch(50, False, False, False)
    first = plan_cycle(AGENT, 2, T0 + 10, episodes, [insight])
    second = plan_cycle(AGENT, 2, T0 + 10, list(reversed(episodes)), [insight])
    assert first == second


def test_signature_ignores_ids_errors_and_key_order() -> None:
    a = ep(0, True, keys=("entity:usdc", "entity:eth", "session:a", "err:timeout"))
    b = ep(1, True, keys=("entity:eth", "run:r9", "entity:usdc"))
    (cluster,) = cluster_episodes([a, b], top_keys=2)
    assert cluster.situation.keys == ("entity:eth", "entity:usdc")
    assert situation_keys(("path:/a", "entity:x", "chan:c"), 2) == ("entity:x", "path:/a")


@pytest.mark.parametrize(
    ("outcome", "keys", "expected"),
    [
        ("success", (), True),
        ("Failed: timeout", (), False),
        ("ok (3 fills)", (), True),
        ("returned", (), None),
        ("success", ("err:timeout",), False),
        ("", (), None),
    ],
)
def test_outcome_success(outcome: str, keys: tuple[str, ...], expected: bool | None) -> None:
    assert outcome_success(outcome, keys) is expected


def test_a_clade_siblings_insight_is_never_derived_nor_its_heuristic_promoted() -> None:
    from dataclasses import replace as _replace

    from grimoire.streams.learn.curator.distill import Polarity, Situation
    from grimoire.streams.learn.curator.plan import plan_cycle
    from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
    from grimoire.streams.model.records import Kind as _Kind

    now = 1_790_000_000_000
    situation = Situation("restart", ("path:/var/lib",), "", "")
    insight = CuratedEntry(
        memory_id="i-clade",
        kind=_Kind.INSIGHT,
        text="restart tends to work",
        confidence=0.95,
        last_accessed_ms=now,
        ts_ms=now,
        status=EntryStatus.ACTIVE,
        signature="sig-1",
        situation=situation,
        polarity=Polarity.WORKS,
        provenance="clade",
        validated_count=50,
    )
    heuristic = _replace(
        insight, memory_id="h-clade", kind=_Kind.HEURISTIC, status=EntryStatus.PROPOSED,
        signature="sig-2",
    )  # fmt: skip
    plan = plan_cycle("agent", 1, now, [], [insight, heuristic])
    assert not [c for c in plan.changes if c.new]  # no heuristic derived from the sibling's
    assert all(c.entry.status is not EntryStatus.PLAYBOOK for c in plan.changes)
    own = _replace(insight, memory_id="i-own", provenance="self")
    plan = plan_cycle("agent", 1, now, [], [own])
    assert [c.entry.kind for c in plan.changes if c.new] == [_Kind.HEURISTIC]


def test_the_playbook_s_evidence_says_which_action_works_best_where_with_its_count() -> None:
    from grimoire.streams.learn.curator.playbook import (
        EvidenceRow,
        render_evidence,
        with_evidence,
    )
    from grimoire.streams.learn.evidence import DEFAULT_EVIDENCE_POLICY

    disk = ("tag:alert/disk-pressure",)
    rows = [
        EvidenceRow(disk, "rotate-logs", 1, 2),
        EvidenceRow(disk, "prune-wal", 3, 0),
        EvidenceRow(disk, "prune-wal", 5, 0, shared=True, weight=0.8),  # a sibling's
        EvidenceRow(("tag:alert/lag",), "scale-consumers", 0, 1),
    ]
    text = render_evidence(rows, DEFAULT_EVIDENCE_POLICY)
    assert text.splitlines() == [
        "## Evidence: what works where",
        "",
        "### alert/disk-pressure",
        "",
        "- works best: prune-wal: 7 of 7 runs succeeded _(posterior mean 0.89)_",
        "- rotate-logs: 1 of 3 runs succeeded _(posterior mean 0.40)_",
        "",
        "### alert/lag",
        "",
        "- works best: scale-consumers: 0 of 1 runs succeeded _(posterior mean 0.33)_",
    ]
    assert render_evidence([], DEFAULT_EVIDENCE_POLICY).endswith("_No evidence yet._\n")
    assert with_evidence(None, "a", text).startswith("# PLAYBOOK — a")
