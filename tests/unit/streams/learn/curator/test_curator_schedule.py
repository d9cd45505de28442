"""When the curator next looks at an entry, and a cycle that looks only at what is
due deciding what the cycle that looks at everything decides (pure)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from grimoire.streams.learn.curator.distill import (
    EpisodeView,
    Polarity,
    Situation,
    cluster_episodes,
)
from grimoire.streams.learn.curator.plan import effective, plan_cycle
from grimoire.streams.learn.curator.schedule import (
    LOOK_NOW,
    NO_LOOK_MS,
    next_look_ms,
    signature_key,
    signature_keys,
    signature_member,
    split_signature_member,
)
from grimoire.streams.learn.curator.values import (
    DEFAULT_CURATOR_POLICY,
    CuratedEntry,
    CuratorPlan,
    EntryStatus,
    QuarantineAction,
    QuarantinedView,
)
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.records import Kind

AGENT = "agent-1"
T0 = 1_790_000_000_000
POLICY = DEFAULT_CURATOR_POLICY


def entry(n: int, **fields: object) -> CuratedEntry:
    base = CuratedEntry(
        memory_id=f"m-{n:04d}",
        kind=Kind.INSIGHT,
        text=f"insight {n}",
        confidence=0.8,
        last_accessed_ms=T0,
        ts_ms=T0,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def crossing(found: CuratedEntry, due: int, level: float) -> None:
    """`due` is the first ms at which `found` falls below `level`."""
    assert effective(found, due - 1, POLICY) >= level > effective(found, due, POLICY)


# --- next_look_ms -----------------------------------------------------------------------


def test_an_active_entry_is_next_looked_at_when_it_falls_below_the_demotion_level() -> None:
    active = entry(1, status=EntryStatus.ACTIVE)
    due = next_look_ms(active, T0, POLICY)
    crossing(active, due, POLICY.demote_below)
    # 0.8 → 0.4 is one insight half-life (7 days)
    assert T0 + 7 * DAY_MS - 2 <= due <= T0 + 7 * DAY_MS + 2


def test_an_entry_that_cannot_be_demoted_is_next_looked_at_below_the_prune_level() -> None:
    for status in (EntryStatus.PROPOSED, EntryStatus.DEMOTED):
        proposed = entry(1, status=status)
        due = next_look_ms(proposed, T0, POLICY)
        crossing(proposed, due, POLICY.prune_below)
        # from a later look the same moment comes out: the curve did not move
        assert next_look_ms(proposed, T0 + 5 * DAY_MS, POLICY) == due


def test_below_the_prune_level_an_entry_is_looked_at_every_cycle_until_it_cannot_change() -> None:
    low = entry(1, confidence=0.08)
    assert next_look_ms(low, T0 + 1, POLICY) == T0 + 1
    assert next_look_ms(replace(low, consecutive_low=2), T0 + 9, POLICY) == T0 + 9
    warning = replace(low, kind=Kind.WARNING)
    assert next_look_ms(replace(warning, consecutive_low=2), T0, POLICY) == T0
    # exempt: never archived, so once its counter reached 3 nothing about it changes
    assert next_look_ms(replace(warning, consecutive_low=3), T0, POLICY) == NO_LOOK_MS
    bloodstain = replace(low, provenance="bloodstain", consecutive_low=3)
    assert next_look_ms(bloodstain, T0, POLICY) == NO_LOOK_MS
    # pinned: still counting, so that an unpin lets the next cycle archive it
    pinned = replace(low, pinned=True, consecutive_low=7)
    assert next_look_ms(pinned, T0 + 3, POLICY) == T0 + 3


def test_what_never_changes_by_time_alone_is_not_looked_at() -> None:
    assert next_look_ms(entry(1, status=EntryStatus.ARCHIVED), T0, POLICY) == NO_LOOK_MS
    structural = entry(1, status=EntryStatus.ACTIVE, decay_class="structural")
    assert next_look_ms(structural, T0, POLICY) == NO_LOOK_MS
    assert LOOK_NOW < T0 < NO_LOOK_MS


def test_signature_members_name_kind_situation_and_entry() -> None:
    insight = entry(1, signature="abc123")
    member = signature_member(insight)
    assert member == "insight|abc123|m-0001"
    assert member.startswith(signature_key(Kind.INSIGHT, "abc123"))
    assert split_signature_member(member) == ("abc123", "m-0001")
    assert signature_member(entry(2)) is None  # no situation: not in the index
    assert signature_member(entry(3, kind=Kind.WARNING, signature="abc123")) is None
    assert signature_keys(["b", "", "a", "b"]) == [
        "heuristic|a|",
        "heuristic|b|",
        "insight|a|",
        "insight|b|",
    ]


# --- plan_cycle with context --------------------------------------------------------------


def test_context_entries_are_read_never_decided_on() -> None:
    # Far past its demotion: looked at, it would be demoted; as context it is not.
    old = entry(1, status=EntryStatus.ACTIVE, last_accessed_ms=T0 - 60 * DAY_MS)
    looked = entry(2, status=EntryStatus.ACTIVE, last_accessed_ms=T0 - 60 * DAY_MS)
    plan = plan_cycle(AGENT, 1, T0, [], [looked], context=[old])
    assert [change.entry.memory_id for change in plan.changes] == [looked.memory_id]
    assert plan.report.demoted == 1 and plan.report.entries_seen == 1
    assert [memory_id for memory_id, _ in plan.schedule.due] == [looked.memory_id]
    with pytest.raises(ValueError, match="both"):
        plan_cycle(AGENT, 1, T0, [], [looked], context=[looked])


def test_the_plan_says_how_the_indexes_change() -> None:
    situation = Situation("swap", ("entity:eth",), "calm", "")
    heuristic = entry(
        1,
        kind=Kind.HEURISTIC,
        status=EntryStatus.PLAYBOOK,
        confidence=0.9,
        signature=situation.signature,
        situation=situation,
        polarity=Polarity.WORKS,
    )
    dying = entry(2, confidence=0.05, consecutive_low=2)
    quarantined = [
        QuarantinedView("q-1", Kind.WARNING, T0, validated_count=1),
        QuarantinedView("q-2", Kind.EPISODE, T0, validated_count=1),
    ]
    plan = plan_cycle(AGENT, 1, T0, [], [heuristic, dying], quarantined)
    schedule = plan.schedule
    assert schedule.dropped == (dying.memory_id,)  # archived: out of every index
    assert dict(schedule.due) == {
        heuristic.memory_id: next_look_ms(heuristic, T0, POLICY),
        "q-1": LOOK_NOW,  # a released curated entry: the next cycle looks at it
    }
    assert schedule.signed == (signature_member(heuristic),)
    assert (schedule.playbook, schedule.unplaybook) == ((heuristic.memory_id,), (dying.memory_id,))
    assert [d.action for d in plan.quarantine] == [QuarantineAction.RELEASE] * 2


# --- the same decisions, looking at what is due only ---------------------------------------

SITUATIONS = [
    Situation(tool, (key,), "calm", strategy)
    for tool in ("swap", "bridge")
    for key in ("entity:eth", "entity:usdc", "entity:sol")
    for strategy in ("", "dca")
]


def _episodes(rng: random.Random, cycle: int, now_ms: int) -> list[EpisodeView]:
    found = []
    for n in range(rng.randrange(0, 9)):
        situation = rng.choice(SITUATIONS[: 4 + cycle % 8])
        keys = [*situation.keys] + (
            [f"tag:strategy/{situation.strategy}"] * bool(situation.strategy)
        )
        found.append(
            EpisodeView(
                memory_id=f"ep-{cycle:03d}-{n}",
                text=f"{situation.tool} on {situation.keys[0]} attempt {cycle}.{n}",
                tool=situation.tool,
                nexus_keys=tuple(keys),
                regime=situation.regime,
                success=rng.choice([True, True, False, None]),
                ts_ms=now_ms - 1000 + n,
            )
        )
    return found


def _decided(plan: CuratorPlan) -> dict[str, int]:
    report = plan.report
    return {
        name: getattr(report, name)
        for name in ("pruned", "promoted", "proposed", "demoted", "upvoted", "downvoted", "edited")
    }


def _comparable(entry: CuratedEntry) -> CuratedEntry:
    # The documented difference: an exempt entry's low counter stops at 3.
    if POLICY.exempt(entry):
        return replace(entry, consecutive_low=min(entry.consecutive_low, POLICY.prune_after_cycles))
    return entry


@pytest.mark.parametrize("seed", range(6))
def test_looking_at_the_due_entries_decides_what_looking_at_all_decides(seed: int) -> None:
    rng = random.Random(seed)
    seeded = [
        entry(
            100 + n,
            kind=rng.choice([Kind.INSIGHT, Kind.WARNING, Kind.HEURISTIC]),
            confidence=rng.choice([0.15, 0.45, 0.65, 0.75, 0.95]),
            last_accessed_ms=T0 - rng.randrange(0, 40) * DAY_MS,
            quality=rng.choice([0.2, 0.5]),
            pinned=rng.random() < 0.1,
        )
        for n in range(40)
    ]
    full = {e.memory_id: e for e in seeded}
    looked = dict(full)
    due: dict[str, int] = dict.fromkeys(full, LOOK_NOW)
    now = T0
    for cycle in range(1, 40):
        now += rng.choice([1, 6, 24, 72]) * 3_600_000
        episodes = _episodes(rng, cycle, now)
        everything = plan_cycle(AGENT, cycle, now, episodes, sorted(full.values(), key=_id))
        # what the runner reads: due entries and the voted situations' entries
        voted = {cluster.signature for cluster in cluster_episodes(episodes, POLICY.top_keys)}
        wanted = {i for i, at in due.items() if at <= now}
        wanted |= {i for i, e in looked.items() if e.signature in voted}
        entries = sorted((looked[i] for i in wanted), key=_id)
        context = sorted((e for i, e in looked.items() if i not in wanted), key=_id)
        due_only = plan_cycle(AGENT, cycle, now, episodes, entries, context=context)

        assert _decided(due_only) == _decided(everything)
        for plan, world in ((everything, full), (due_only, looked)):
            for change in plan.changes:
                if change.entry.status is EntryStatus.ARCHIVED:
                    world.pop(change.entry.memory_id, None)
                else:
                    world[change.entry.memory_id] = change.entry
        for memory_id in due_only.schedule.dropped:
            due.pop(memory_id, None)
        due.update(due_only.schedule.due)
        assert sorted(map(_comparable, looked.values()), key=_id) == sorted(
            map(_comparable, full.values()), key=_id
        )
        assert due_only.report.entries_seen <= everything.report.entries_seen


def _id(entry: CuratedEntry) -> str:
    return entry.memory_id
