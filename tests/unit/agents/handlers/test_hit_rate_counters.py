"""The retrieval hit rate (docs/design.md §8, seed 001: the share of recalled items later
followed by a positive outcome), counted where a run's credits are applied.

Through the outcome handler over the in-memory stores (the run's memories written
by the ingest handler, its recall recorded as a usage entry leaves it):
- a successful run that recalled memories counts them all as recalled and those
  its success credited as hits; a failed run counts recalls and no hit;
- a redelivered outcome counts nothing twice; a run closed with learning off counts
  nothing;
- the counters are in the agent's stats (so digests and replays cover them), and
  the cognitive reading built from them is rated against the seed's range.
The pure rule (`run_recall_counters`) is checked on hand-made credits too."""

from __future__ import annotations

import pytest

from grimoire.infra.http.cognitive import assess
from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.learn.hedge import LEARNED_FACTORS, RANK
from grimoire.streams.learn.runs import (
    RECALLED,
    RUN_RECALLED,
    RUN_RECALLED_HITS,
    MemoryCredit,
    run_recall_counters,
)
from grimoire.tables.memory.inspect import CognitiveReading
from tests.support.handlers import episode, mid
from tests.support.learning import AGENT, IDS, RUN, SEEN, TS, Learner

# Two more memories the run recalls, ranked below `seen`: the fourth (rank 3) is
# past the default `recalled_depth` (3), so a success does not credit it.
OLD = (
    episode(AGENT, "cache eviction storm on tuesday", TS + 1, "old-1"),
    episode(AGENT, "certificate rotation went smoothly", TS + 2, "old-2"),
    episode(AGENT, "dns resolver flapped during deploy", TS + 3, "old-3"),
)
OLD_IDS = [mid(AGENT, f"old-{n}", TS + n) for n in (1, 2, 3)]


async def ran(learner: Learner) -> None:
    await learner.write(SEEN, *OLD)
    recalls = {IDS["seen"]: 0.0, OLD_IDS[0]: 1.0, OLD_IDS[1]: 2.0, OLD_IDS[2]: 3.0}
    factors = {m: {n: 0.6 for n in LEARNED_FACTORS} | {RANK: r} for m, r in recalls.items()}
    await learner.learning.record_recalls(AGENT, RUN, factors)


def counters(stats: dict[str, float]) -> tuple[float, float]:
    return stats.get(RUN_RECALLED, 0.0), stats.get(RUN_RECALLED_HITS, 0.0)


@pytest.mark.parametrize(("quality", "hits"), [(0.9, 3), (0.5, 3), (0.1, 0), (0.49, 0)])
async def test_a_run_counts_its_recalls_and_the_ones_its_success_credited(
    quality: float, hits: int
) -> None:
    learner = Learner()
    await ran(learner)
    assert counters(await learner.store.stats(AGENT)) == (0, 0)
    assert await learner.end(quality) > 0
    assert counters(await learner.store.stats(AGENT)) == (4, hits)
    # Redelivered: applied once, counted once.
    assert await learner.end(quality) == -1
    assert counters(await learner.store.stats(AGENT)) == (4, hits)


async def test_runs_add_up_and_the_reading_rates_them() -> None:
    learner = Learner()
    await ran(learner)
    assert await learner.end(0.9, event_id="first") > 0
    # A second run of the same id, failed this time, recalling the same memories.
    factors = {m: {n: 0.6 for n in LEARNED_FACTORS} | {RANK: 0.0} for m in OLD_IDS}
    await learner.learning.record_recalls(AGENT, RUN, factors)
    assert await learner.end(0.1, event_id="second") >= 0
    recalled, hits = counters(await learner.store.stats(AGENT))
    assert (recalled, hits) == (7, 3)
    reading = CognitiveReading(
        candidates=10, stored=5, window_ms=1, window_end_ms=TS, window_memories=5,
        window_quality=0.6, live=5, recalled=int(recalled), hits=int(hits),
    )  # fmt: skip
    rated = assess(reading)["retrieval_hit_rate"]
    assert rated["value"] == round(3 / 7, 4) and rated["status"] == "healthy"
    assert rated["basis"] == {"recalled": 7, "hits": 3}
    assert rated["healthy_range"] == [0.3, None]


async def test_with_learning_off_nothing_is_counted() -> None:
    learner = Learner()
    await learner.configs.save(AGENT, AgentConfig(learn_from_outcomes=False))
    await ran(learner)
    assert await learner.end(0.9) == 0
    assert counters(await learner.store.stats(AGENT)) == (0, 0)


def test_the_rule_on_hand_made_credits() -> None:
    def credit(memory_id: str, roles: tuple[str, ...], strength: float) -> MemoryCredit:
        return MemoryCredit(memory_id, roles, 0.1, strength, 0, 0)

    credits = (
        credit("a", ("action",), 0.0),  # a member the run did not recall
        credit("b", (RECALLED,), 1.0),  # recalled and credited by a success
        credit("c", ("context", RECALLED), 1.0),
        credit("d", (RECALLED,), 0.0),  # recalled, no strength: a failure
    )
    recalled = {"b": {}, "c": {}, "d": {}, "e": {}}  # `e`: below the credited depth
    assert run_recall_counters(credits, recalled) == ((RUN_RECALLED, 4), (RUN_RECALLED_HITS, 2))
    assert run_recall_counters((), {}) == ((RUN_RECALLED, 0), (RUN_RECALLED_HITS, 0))
