"""Anti-rumination (streams/recall/anti_rumination.py): when a window is due, how contrarian
memories are chosen, and what the recall answers with them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grimoire.infra.settings import Settings
from grimoire.streams.inbound.recall_request import RecallQuery
from grimoire.streams.model.field_state import Affect
from grimoire.streams.recall.anti_rumination import (
    CONTRARIAN_REASON,
    ContrarianPolicy,
    is_due,
    opposes,
    window_of,
)
from grimoire.streams.recall.flow import RankingPolicy, RecallOutcome, run_recall
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.relevance import RelevancePolicy
from tests.support.recall import DictSource, context, query, record, seed_vector

ANXIOUS = Affect(pleasure=-0.7, arousal=0.6)
ELATED = Affect(pleasure=0.8)
POLICY = ContrarianPolicy()
DEFAULT_POLICY = RankingPolicy()


def test_a_window_needs_a_tick_and_a_mood_with_a_valence() -> None:
    assert window_of(250, ANXIOUS, POLICY) == 2
    assert window_of(99, ELATED, POLICY) == 0
    assert window_of(None, ANXIOUS, POLICY) is None
    assert window_of(250, None, POLICY) is None
    assert window_of(250, Affect(pleasure=0.1, arousal=0.9), POLICY) is None  # no valence
    assert window_of(250, ANXIOUS, ContrarianPolicy(every_ticks=0)) is None
    assert window_of(250, ANXIOUS, ContrarianPolicy(items=0)) is None
    assert window_of(250, ANXIOUS, ContrarianPolicy(every_ticks=50)) == 5


def test_each_window_is_due_once_and_never_again_later() -> None:
    assert is_due(2, None)
    assert is_due(3, 2)
    assert not is_due(2, 2)
    assert not is_due(1, 2)  # a late recall does not reopen a window
    assert not is_due(None, None)


def test_opposite_valence_needs_both_signs_past_the_threshold() -> None:
    assert opposes(ELATED, ANXIOUS, 0.2)
    assert opposes(Affect(pleasure=-0.3), ELATED, 0.2)
    assert not opposes(Affect(pleasure=-0.9), ANXIOUS, 0.2)  # congruent
    assert not opposes(Affect(pleasure=0.1), ANXIOUS, 0.2)  # no valence
    assert not opposes(None, ANXIOUS, 0.2)
    assert not opposes(ELATED, Affect(pleasure=-0.1), 0.2)


def test_the_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        ContrarianPolicy(items=-1)
    with pytest.raises(ValueError):
        ContrarianPolicy(min_valence=1.5)


# --- in a recall ----------------------------------------------------------------------

SAD = Affect(pleasure=-0.8)
GLAD = Affect(pleasure=0.7)
# Five anxious memories about the query, and one confident one about it that
# loses on relevance (fewer of the query's words, a farther vector).
STORE = [
    record("s1", "disk full on node seven again", 1, affect=SAD),
    record("s2", "disk full on node seven, writes failing", 2, affect=SAD),
    record("s3", "node seven disk full, paged on-call", 3, affect=SAD),
    record("s4", "disk full on node seven after the backup", 4, affect=SAD),
    record("s5", "disk on node seven full once more", 5, affect=SAD),
    record("g1", "cleared the disk on node seven quickly, all good", 40, affect=GLAD),
    record("n1", "unrelated note about lunch", 41),
]


async def recall(
    source: DictSource,
    q: RecallQuery,
    *,
    due: bool,
    mood: Affect | None = SAD,
    policy: RankingPolicy = DEFAULT_POLICY,
) -> RecallOutcome:
    ctx = replace(context(q.query, seed_vector(1)), affect=mood, contrarian_due=due)
    return await run_recall(q, ctx, source, policy=policy)


def ids(outcome: RecallOutcome) -> list[str]:
    return [item.record.memory_id for item in outcome.items]


async def test_a_due_recall_carries_a_memory_against_the_mood_at_its_tail() -> None:
    source = DictSource(STORE)
    plain = await recall(source, query(max_items=4), due=False)
    assert "g1" not in ids(plain)
    assert plain.contrarian == ()

    due = await recall(source, query(max_items=4), due=True)
    assert ids(due)[:3] == ids(plain)[:3]  # the top of the answer stands
    assert ids(due)[3] == "g1" and len(due.items) == 4
    assert due.contrarian == ("g1",)
    injected = due.items[3]
    assert injected.reasons[-1] == CONTRARIAN_REASON
    assert dict(injected.factors)["contrarian"] == 1.0
    assert all(CONTRARIAN_REASON not in item.reasons for item in due.items[:3])


async def test_it_comes_from_past_the_pool_when_the_pool_is_all_one_mood() -> None:
    source = DictSource(STORE)
    narrow = RankingPolicy(relevance=replace(RelevancePolicy(), pool_depth=3))
    plain = await recall(source, query(max_items=4), due=False, policy=narrow)
    assert "g1" not in ids(plain)
    due = await recall(source, query(max_items=4), due=True, policy=narrow)
    assert due.contrarian == ("g1",)
    assert ids(due)[-1] == "g1"


async def test_nothing_is_injected_without_room_a_mood_or_an_opposite_memory() -> None:
    source = DictSource(STORE)
    assert (await recall(source, query(max_items=1), due=True)).contrarian == ()
    assert (await recall(source, query(max_items=4), due=True, mood=None)).contrarian == ()
    gloomy = DictSource([r for r in STORE if r.memory_id != "g1"])
    outcome = await recall(gloomy, query(max_items=4), due=True)
    assert outcome.contrarian == () and len(outcome.items) == 4


async def test_a_memory_of_the_right_valence_already_in_the_answer_counts() -> None:
    source = DictSource(STORE)
    glad = await recall(source, query(max_items=4), due=True, mood=GLAD)
    plain = await recall(source, query(max_items=4), due=False, mood=GLAD)
    assert ids(glad) == ids(plain)  # the sad memories already oppose a glad mood
    assert glad.contrarian == ()


async def test_injection_honours_the_filters_and_deletion() -> None:
    hidden = [replace(r, session_id="other") if r.memory_id == "g1" else r for r in STORE]
    filtered = query(max_items=4, filters=ProvenanceFilters(session_id="work"))
    working = [replace(r, session_id="work") if r.memory_id != "g1" else r for r in hidden]
    assert (await recall(DictSource(working), filtered, due=True)).contrarian == ()
    deleted = [replace(r, deleted=True) if r.memory_id == "g1" else r for r in STORE]
    assert (await recall(DictSource(deleted), query(max_items=4), due=True)).contrarian == ()


async def test_a_due_recall_is_repeatable() -> None:
    source = DictSource(STORE)
    first = await recall(source, query(max_items=4), due=True)
    second = await recall(source, query(max_items=4), due=True)
    assert first == second


def test_the_worker_takes_the_policy_from_its_settings() -> None:
    settings = Settings(
        contrarian_every_ticks=50,
        contrarian_items=2,
        contrarian_min_valence=0.4,
        contrarian_scan=10,
        _env_file=None,  # type: ignore[call-arg]
    )
    assert settings.ranking_policy.contrarian == ContrarianPolicy(50, 2, 0.4, 10)
    assert Settings(_env_file=None).ranking_policy.contrarian == ContrarianPolicy()  # type: ignore[call-arg]


@pytest.mark.parametrize("pool_depth", [40, 3])
async def test_a_copy_of_a_shortlisted_text_is_passed_over(pool_depth: int) -> None:
    # g1 repeats s1's text (same normalized hash) in another mood: injecting it
    # would take s1's place in the dedupe, so the next memory of that valence goes in.
    copy = [replace(r, normalized_hash="s1") if r.memory_id == "g1" else r for r in STORE]
    other = record("g2", "a calm and sunny afternoon", 42, affect=GLAD)
    policy = RankingPolicy(relevance=replace(RelevancePolicy(), pool_depth=pool_depth))
    outcome = await recall(DictSource([*copy, other]), query(max_items=4), due=True, policy=policy)
    assert outcome.contrarian == ("g2",)
    assert "s1" in ids(outcome)
