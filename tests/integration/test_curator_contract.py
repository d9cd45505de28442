"""The CuratorStore contract: InMemoryCuratorStore and RedisCuratorStore behave the same.

Every test runs against both implementations. Episodes are written by the memory
store's own write path (`commit`), cycles run through `CuratorRunner` (the
orchestration the maintenance handler calls) or straight through `apply`, and
results are read back through the stores' protocols and a small harness over
what they keep: raw hashes and keys for Redis, the inspection methods of the
in-memory stores for the other. Redis is the real one, started by the project's
services manager (tests/integration/conftest.py); each test gets its own key
prefix and index and removes them afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import pytest
from redis.asyncio import Redis

from grimoire.agents.maintenance.curator_task import CuratorRunner, cycle_inputs, cycle_playbook
from grimoire.infra.settings import Settings
from grimoire.streams.learn.curator.plan import plan_cycle
from grimoire.streams.learn.curator.values import DEFAULT_CURATOR_POLICY
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.learn.runs import MemoryCredit
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.lexicon import query_terms
from grimoire.streams.model.records import Kind, MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.maintenance.curator_store import CuratorCycle, CuratorState, RedisCuratorStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.ports.maintenance import CuratorStore
from grimoire.tables.ports.memory import MemoryStore
from grimoire.tables.testing.curator_store import InMemoryCuratorStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.contract import BACKENDS, memory_or_deployment, scratch_deployment
from tests.support.curator import SWAP_KEYS, T0, no_reschedule, swap_episode
from tests.support.embedders import TextSeededEmbedder
from tests.support.stored import owned_key
from tests.support.usage import apply_usage_entry

pytestmark = pytest.mark.integration

DIMS = 384
NOW = T0 + DAY_MS  # one event time for every cycle: votes are exact, not decayed
A, B = "agent-a", "agent-b"
TOTALS = ("proposed", "promoted", "upvoted", "downvoted", "demoted", "edited", "pruned", "released")
VECTOR_FIELDS = ("canonical", "eidolon")
Hash = dict[str, str | bytes]
EMBEDDER = TextSeededEmbedder(DIMS)
vector = EMBEDDER.vector
fake_embed = EMBEDDER.embed_bytes


def record(agent: str, n: int, outcome: str, **fields: Any) -> MemoryRecord:
    """A swap episode (tests/support/curator.py) in this suite's vector space."""
    return swap_episode(agent, n, outcome, dims=DIMS, **fields)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _readable(raw: dict[Any, Any]) -> Hash:
    """A hash with text keys and values, vectors left as bytes."""
    return {_text(k): v if _text(k) in VECTOR_FIELDS else _text(v) for k, v in raw.items()}


# --- the two implementations behind one harness -------------------------------------------


class Harness:
    name: str
    memory: MemoryStore
    curator: CuratorStore

    @property
    def runner(self) -> CuratorRunner:
        return CuratorRunner(self.curator, fake_embed, no_reschedule)

    async def write(self, *records: MemoryRecord) -> None:
        await self.memory.commit(WriteBatch(records=tuple(records)))

    async def episodes(self, agent: str, start: int, *outcomes: str) -> None:
        await self.write(*(record(agent, start + i, o) for i, o in enumerate(outcomes)))

    async def hashes(self) -> list[Hash]:
        raise NotImplementedError

    async def by_kind(self, agent: str, kind: str) -> list[Hash]:
        found = [h for h in await self.hashes() if h["agent_id"] == agent and h["kind"] == kind]
        return sorted(found, key=lambda h: _text(h["memory_id"]))

    async def set_field(self, memory_id: str, name: str, value: str) -> None:
        raise NotImplementedError

    async def usage(self, memory_id: str) -> Hash:
        raise NotImplementedError

    async def bookkeeping(self, agent: str) -> dict[str, Any]:
        raise NotImplementedError

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        raise NotImplementedError

    async def indexes(self, agent: str) -> dict[str, Any]:
        """The curator's schedule (id → due ms), signature members and playbook ids."""
        raise NotImplementedError

    async def snapshot(self) -> dict[str, Any]:
        """Everything either store keeps, comparable before and after a call."""
        records = {_text(h["memory_id"]): h for h in await self.hashes()}
        return {
            "records": records,
            "usage": {i: await self.usage(i) for i in records},
            "books": {a: await self.bookkeeping(a) for a in (A, B)},
            "states": {a: await self.curator.state(a) for a in (A, B)},
            "playbooks": {a: await self.curator.get_playbook(a) for a in (A, B)},
            "nexus": {(a, k): await self.nexus(a, k) for a in (A, B) for k in SWAP_KEYS},
            "indexes": {a: await self.indexes(a) for a in (A, B)},
        }


class MemoryHarness(Harness):
    name = "memory"

    def __init__(self) -> None:
        self.memory_store = InMemoryMemoryStore(dims=DIMS)
        self.memory = self.memory_store
        self.store = InMemoryCuratorStore(self.memory_store)
        self.curator = self.store

    async def hashes(self) -> list[Hash]:
        return [_readable(dict(h)) for h in self.memory_store.hashes()]

    async def set_field(self, memory_id: str, name: str, value: str) -> None:
        (doc,) = [h for h in self.memory_store.hashes() if _text(h["memory_id"]) == memory_id]
        doc[name] = value

    async def usage(self, memory_id: str) -> Hash:
        return _readable(self.memory_store.usage(memory_id))

    async def bookkeeping(self, agent: str) -> dict[str, Any]:
        return {k: orjson.loads(v) for k, v in self.store.bookkeeping(agent).items()}

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        return await self.memory_store.nexus(agent, key)

    async def indexes(self, agent: str) -> dict[str, Any]:
        indexes = self.store.indexes
        return {
            "due": dict(indexes.due.get(agent, {})),
            "signatures": set(indexes.signatures.get(agent, set())),
            "playbook": set(indexes.playbook.get(agent, set())),
        }


class RedisHarness(Harness):
    name = "redis"

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.memory_store = RedisMemoryStore(redis, prefix, DIMS)
        self.memory = self.memory_store
        self.store = RedisCuratorStore(redis, prefix)
        self.curator = self.store

    async def hashes(self) -> list[Hash]:
        keys = [key async for key in self.redis.scan_iter(match=f"{self.prefix}:mem:*")]
        return [_readable(await self.redis.hgetall(key)) for key in keys]

    async def set_field(self, memory_id: str, name: str, value: str) -> None:
        key = await owned_key(self.redis, self.store.memory_key, (A, B), memory_id)
        await self.redis.hset(key, name, value)

    async def usage(self, memory_id: str) -> Hash:
        key = await owned_key(self.redis, self.store.memory_key, (A, B), memory_id)
        agent = key[key.index("{") + 1 : key.index("}")]
        return _readable(await self.redis.hgetall(self.store.usage_key(agent, memory_id)))

    async def bookkeeping(self, agent: str) -> dict[str, Any]:
        raw = await self.redis.hgetall(self.store.entries_key(agent))
        return {_text(k): orjson.loads(v) for k, v in raw.items()}

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        members = await self.redis.zrange(
            self.memory_store.graph.keys.nexus(agent, key), 0, -1, withscores=True
        )
        return {_text(member): int(score) for member, score in members}

    async def indexes(self, agent: str) -> dict[str, Any]:
        keys = self.memory_store.keys
        due = await self.redis.zrange(keys.curator_due(agent), 0, -1, withscores=True)
        signatures = await self.redis.zrange(keys.curator_signatures(agent), 0, -1)
        playbook = await self.redis.smembers(keys.curator_playbook(agent))
        return {
            "due": {_text(member): int(score) for member, score in due},
            "signatures": {_text(member) for member in signatures},
            "playbook": {_text(member) for member in playbook},
        }

    async def commands(self) -> int:
        """Commands the Redis server has processed (this test's client is its only one)."""
        return int((await self.redis.info("stats"))["total_commands_processed"])


@pytest.fixture(params=BACKENDS)
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    subject = memory_or_deployment(request, MemoryHarness, RedisHarness, tag="cc", dims=DIMS)
    async with subject as harness:
        yield harness


async def planned(h: Harness, agent: str, cycle: int, now_ms: int = NOW) -> CuratorCycle:
    """A cycle as the runner would hand it to `apply`, built step by step."""
    state = await h.curator.state(agent)
    inputs = await cycle_inputs(h.curator, agent, state, now_ms)
    plan = plan_cycle(
        agent, cycle, now_ms, inputs.episodes, inputs.entries, inputs.quarantined,
        context=inputs.context, watermark_ms=max(state.watermark_ms, 0),
    )  # fmt: skip
    written = [change.entry for change in plan.changes if change.text_changed]
    vectors = await fake_embed([entry.text for entry in written])
    before = (*inputs.entries, *inputs.context)
    return CuratorCycle(
        agent_id=agent,
        plan=plan,
        before=before,
        vectors={entry.memory_id: v for entry, v in zip(written, vectors, strict=True)},
        playbook=cycle_playbook(agent, now_ms, plan, before, DEFAULT_CURATOR_POLICY),
        gone=inputs.gone,
        stale_signatures=inputs.stale_signatures,
    )


# --- reads -----------------------------------------------------------------------------


async def test_a_fresh_agent_has_no_state_entries_or_playbook(h: Harness) -> None:
    assert await h.curator.state(A) == CuratorState(-1, -1, None)
    assert await h.curator.entries(A) == []
    assert await h.curator.get_playbook(A) is None
    inputs = await h.curator.cycle_inputs(A, -1)
    assert (inputs.episodes, inputs.entries, inputs.quarantined) == ((), (), ())


async def test_inputs_are_the_agents_own_live_memories_oldest_first(h: Harness) -> None:
    await h.write(
        record(A, 3, "success"),
        record(A, 1, "failed"),
        record(A, 2, "", quarantined=True, text="held back claim"),
        record(A, 4, "", kind=Kind.INSIGHT, text="routers fill at night"),
        record(A, 5, "", kind=Kind.WARNING, text="never bridge on friday"),
        record(A, 6, "", kind=Kind.CAUSAL_LINK, text="gas is low"),
        record(B, 7, "success"),
        record(B, 8, "", kind=Kind.INSIGHT, text="the other agent's insight"),
    )
    inputs = await h.curator.cycle_inputs(A, -1)
    assert [(e.tick, e.success, e.tool) for e in inputs.episodes] == [
        (1, False, "swap"),
        (3, True, "swap"),
    ]
    assert [(e.kind, e.text) for e in inputs.entries] == [
        (Kind.INSIGHT, "routers fill at night"),
        (Kind.WARNING, "never bridge on friday"),
    ]
    assert [(q.memory_id, q.kind, q.ts_ms) for q in inputs.quarantined] == [
        (record(A, 2, "").id, Kind.EPISODE, T0 + 2)
    ]
    assert [e.tick for e in (await h.curator.cycle_inputs(A, T0 + 1)).episodes] == [3]
    assert [e.text for e in await h.curator.entries(B)] == ["the other agent's insight"]


async def test_entries_read_their_decay_origin_and_defaults(h: Harness) -> None:
    await h.write(record(A, 1, "", kind=Kind.INSIGHT, text="an insight from elsewhere", ts=T0))
    (entry,) = await h.curator.entries(A)
    assert (entry.confidence, entry.last_accessed_ms, entry.ts_ms) == (0.5, T0, T0)
    assert (entry.status.value, entry.signature, entry.situation) == ("proposed", "", None)


# --- cycles through the runner ---------------------------------------------------------


async def test_repeated_episodes_become_a_recallable_insight(h: Harness) -> None:
    await h.episodes(A, 0, "success", "success", "success: filled", "returned")
    await h.episodes(B, 0, "success", "success")
    report = await h.runner.run_cycle(A, NOW, 1)
    assert (report.proposed, report.episodes_seen) == (1, 4)

    (insight,) = await h.by_kind(A, "insight")
    assert float(insight["confidence"]) == 0.5
    assert insight["archived"] == "0" and insight["event_type"] == "curator"
    assert insight["canonical"] == vector(_text(insight["text"]))
    assert "tends to work" in _text(insight["text"])
    hits = await h.memory.full_text(A, query_terms("tends"), 10)
    assert [hit.memory.id for hit in hits] == [insight["memory_id"]]
    knn = await h.memory.knn(
        A, np.frombuffer(vector(_text(insight["text"])), dtype=np.float32).tolist(), 1
    )
    assert knn[0].memory.id == insight["memory_id"]
    assert await h.by_kind(B, "insight") == []  # the other tenant saw nothing
    assert (
        await h.curator.get_playbook(A)
        == "# PLAYBOOK — agent-a\n\n## Global\n\n_No heuristics yet._\n"
    )
    state = await h.curator.state(A)
    assert (state.cycle, state.watermark_ms, state.report) == (1, T0 + 3, report)


async def test_a_new_entry_is_linked_used_and_booked(h: Harness) -> None:
    await h.episodes(A, 0, "success", "success", "success")
    await h.runner.run_cycle(A, NOW, 1)
    (insight,) = await h.by_kind(A, "insight")
    insight_id = _text(insight["memory_id"])
    ts = int(_text(insight["ts"]))
    for key in SWAP_KEYS:
        assert (await h.nexus(A, key))[insight_id] == ts
    assert (await h.usage(insight_id)) == {"last_accessed": str(NOW)}
    book = (await h.bookkeeping(A))[insight_id]
    assert (book["status"], book["polarity"], book["consecutive_low"]) == ("proposed", "works", 0)
    assert len(book["source_ids"]) == 3
    (entry,) = await h.curator.entries(A)
    assert (entry.memory_id, entry.last_accessed_ms, entry.signature) == (
        insight_id,
        NOW,
        book["signature"],
    )


async def test_votes_promotion_into_playbook_and_demotion(h: Harness) -> None:
    await h.episodes(A, 0, "success", "success", "success")
    await h.runner.run_cycle(A, NOW, 1)
    await h.episodes(A, 10, "success", "success")
    report = await h.runner.run_cycle(A, NOW, 2)
    assert (report.upvoted, report.promoted, report.proposed) == (1, 1, 1)
    (insight,) = await h.by_kind(A, "insight")
    assert float(insight["confidence"]) == pytest.approx(0.6, abs=1e-9)
    (heuristic,) = await h.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == 0.5

    for cycle in (3, 4):
        await h.episodes(A, cycle * 10, "success", "success")
        await h.runner.run_cycle(A, NOW, cycle)
    (heuristic,) = await h.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == pytest.approx(0.7, abs=1e-9)
    playbook = await h.curator.get_playbook(A)
    assert playbook is not None
    section = playbook.split("## Strategy: eth-dca\n", 1)[1]
    assert section.startswith(f"\n- {_text(heuristic['text'])} _(confidence 0.70;")

    await h.episodes(A, 50, "failed", "failed")
    report = await h.runner.run_cycle(A, NOW, 5)
    (heuristic,) = await h.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == pytest.approx(0.55, abs=1e-9)
    assert report.downvoted == 2 and report.demoted == 0
    await h.episodes(A, 60, "failed", "failed")
    await h.runner.run_cycle(A, NOW, 6)
    await h.episodes(A, 70, "failed", "failed")
    report = await h.runner.run_cycle(A, NOW, 7)
    (heuristic,) = await h.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == pytest.approx(0.25, abs=1e-9)
    # both fell below 0.4 (insight 0.8 → 0.35); the heuristic, now contradicted
    # 6 to 4, was also reworded to the opposite advice, and re-embedded
    assert (report.demoted, report.edited) == (2, 1)
    assert _text(heuristic["text"]).startswith("Avoid tool swap")
    assert heuristic["canonical"] == vector(_text(heuristic["text"]))
    playbook = await h.curator.get_playbook(A)
    assert playbook is not None and _text(heuristic["memory_id"]) not in playbook


async def test_archive_after_three_low_cycles_warning_exempt(h: Harness) -> None:
    old_insight = record(A, 1, "", ts=T0, kind=Kind.INSIGHT, text="stale gas insight")
    old_warning = record(A, 2, "", ts=T0, kind=Kind.WARNING, text="stale gas warning")
    await h.write(old_insight, old_warning)
    later = T0 + 120 * DAY_MS
    for cycle in (1, 2):
        report = await h.runner.run_cycle(A, later + cycle, cycle)
        assert report.pruned == 0
    assert [hit.memory.id for hit in await h.memory.full_text(A, ["stale"], 10)] != []
    report = await h.runner.run_cycle(A, later + 3, 3)
    assert report.pruned == 1
    (insight,) = await h.by_kind(A, "insight")
    (warning,) = await h.by_kind(A, "warning")
    assert (insight["archived"], warning["archived"]) == ("1", "0")
    hits = await h.memory.full_text(A, ["stale"], 10)
    assert [hit.memory.id for hit in hits] == [warning["memory_id"]]
    assert list(await h.bookkeeping(A)) == [old_warning.id]  # archived: bookkeeping dropped
    assert [e.memory_id for e in await h.curator.entries(A)] == [old_warning.id]


async def test_cycle_is_idempotent_per_number(h: Harness) -> None:
    await h.episodes(A, 0, "success", "success", "success")
    first = await h.runner.run_cycle(A, NOW, 1)
    before = await h.snapshot()
    await h.episodes(A, 10, "success", "success")  # new evidence must wait for cycle 2
    after_write = await h.snapshot()
    again = await h.runner.run_cycle(A, NOW, 1)
    assert again == first
    assert await h.snapshot() == after_write
    assert before["records"].keys() <= after_write["records"].keys()
    older = await h.runner.run_cycle(A, NOW, 0)
    assert (older.cycle, older.proposed, older.episodes_seen) == (0, 0, 0)
    report = await h.runner.run_cycle(A, NOW, 2)
    assert report.upvoted == 1


async def test_quarantine_review_releases_or_archives(h: Harness) -> None:
    stale = record(A, 1, "", ts=NOW - 10 * DAY_MS, text="doubtful claim", quarantined=True)
    fresh = record(A, 2, "", ts=NOW - DAY_MS, text="unverified claim", quarantined=True)
    backed = record(A, 3, "", ts=NOW - DAY_MS, text="backed claim", quarantined=True)
    await h.write(stale, fresh, backed)
    await h.set_field(backed.id, "validated_count", "2")
    report = await h.runner.run_cycle(A, NOW, 1)
    assert (report.pruned, report.released) == (1, 1)
    rows = {
        r["memory_id"]: (r["quarantined"], r["archived"]) for r in await h.by_kind(A, "episode")
    }
    assert rows == {stale.id: ("1", "1"), fresh.id: ("1", "0"), backed.id: ("0", "0")}
    ids = [stale.id, fresh.id, backed.id]
    source = h.memory.recall_source(A)
    nodes, records = await source.nodes(ids), await source.records(ids)
    assert nodes == {i: r.node() for i, r in records.items()} and len(nodes) == 3
    assert [nodes[i].deleted for i in ids] == [True, True, False]  # archived, held, released
    assert [q.memory_id for q in (await h.curator.cycle_inputs(A, -1)).quarantined] == [fresh.id]


# --- the indexes a cycle reads instead of every entry ------------------------------------


async def test_load_reads_only_the_agents_live_curated_entries(h: Harness) -> None:
    live = record(A, 1, "", kind=Kind.INSIGHT, text="routers fill at night")
    warning = record(A, 2, "", kind=Kind.WARNING, text="never bridge on friday")
    held = record(A, 3, "", kind=Kind.INSIGHT, text="held back", quarantined=True)
    gone = record(A, 4, "", kind=Kind.INSIGHT, text="deleted since")
    theirs = record(B, 5, "", kind=Kind.INSIGHT, text="the other agent's insight")
    await h.write(live, warning, held, gone, theirs, record(A, 6, "success"))
    await h.set_field(gone.id, "deleted", "1")
    ids = [live.id, warning.id, held.id, gone.id, theirs.id, record(A, 6, "").id, "missing"]
    found = await h.curator.load(A, ids)
    assert sorted(found) == sorted([live.id, warning.id])
    assert found == {e.memory_id: e for e in await h.curator.entries(A)}  # as the search reads
    assert list(await h.curator.load(B, ids)) == [theirs.id]


async def test_new_curated_entries_are_due_at_once_and_a_cycle_schedules_them(h: Harness) -> None:
    insight = record(A, 1, "", kind=Kind.INSIGHT, text="routers fill at night", ts=NOW)
    await h.write(insight, record(A, 2, "success"), record(B, 3, "", kind=Kind.WARNING))
    assert (await h.indexes(A))["due"] == {insight.id: 0}  # the write path marked it
    assert await h.curator.due_ids(A, 0) == [insight.id]
    await h.episodes(A, 10, "success", "success", "success")
    await h.runner.run_cycle(A, NOW, 1)
    indexes = await h.indexes(A)
    (distilled,) = [e for e in await h.curator.entries(A) if e.signature]
    # 0.5 at NOW falls below 0.1 after log2(5) insight half-lives of 7 days
    assert NOW + 16 * DAY_MS < indexes["due"][insight.id] < NOW + 17 * DAY_MS
    assert indexes["due"][distilled.memory_id] == indexes["due"][insight.id]
    assert await h.curator.due_ids(A, NOW + DAY_MS) == []
    assert await h.curator.due_ids(A, NOW + 17 * DAY_MS) == sorted(
        [insight.id, distilled.memory_id]
    )
    prefix = f"insight|{distilled.signature}|"
    assert indexes["signatures"] == {prefix + distilled.memory_id}
    found = await h.curator.signature_members(A, [prefix, "heuristic|x|"])
    assert found == {prefix: [prefix + distilled.memory_id], "heuristic|x|": []}
    assert await h.curator.playbook_ids(A) == [] and indexes["playbook"] == set()
    assert (await h.curator.state(A)).scheduled


async def test_usage_outcomes_and_credits_mark_scheduled_entries_due(h: Harness) -> None:
    first = record(A, 1, "", kind=Kind.INSIGHT, text="routers fill at night", ts=NOW)
    second = record(A, 2, "", kind=Kind.WARNING, text="never bridge on friday", ts=NOW)
    third = record(A, 3, "", kind=Kind.INSIGHT, text="gas is low at dawn", ts=NOW)
    episode = record(A, 4, "success")
    await h.write(first, second, third, episode)
    await h.runner.run_cycle(A, NOW, 1)
    assert 0 not in (await h.indexes(A))["due"].values()
    await apply_usage_entry(h.memory, A, 1, [first.id, episode.id], NOW + 5, None)
    await h.memory.apply_outcome(
        Outcome("o-1", A, NOW + 6, OutcomeKind.NEGATIVE, (second.id, episode.id))
    )
    due = (await h.indexes(A))["due"]
    assert (due[first.id], due[second.id]) == (0, 0) and due[third.id] > NOW
    assert episode.id not in due  # only what the schedule holds is marked
    await h.memory.apply_credits(
        Outcome("o-2", A, NOW + 7, OutcomeKind.RUN_ENDED, (), run_id="r", quality=1.0),
        [MemoryCredit(third.id, ("recalled",), 0.05, 0.0, 1, 0)],
        {},
    )
    assert (await h.indexes(A))["due"][third.id] == 0
    await h.runner.run_cycle(A, NOW + 8, 2)  # looked at again, and scheduled again
    assert 0 not in (await h.indexes(A))["due"].values()


async def test_archived_and_gone_entries_leave_the_indexes(h: Harness) -> None:
    stale = record(A, 1, "", kind=Kind.INSIGHT, text="stale gas insight", ts=T0)
    gone = record(A, 2, "", kind=Kind.INSIGHT, text="forgotten since", ts=T0)
    await h.write(stale, gone)
    later = T0 + 120 * DAY_MS
    await h.runner.run_cycle(A, later + 1, 1)
    await h.set_field(gone.id, "deleted", "1")
    for cycle in (2, 3):
        report = await h.runner.run_cycle(A, later + cycle, cycle)
    assert report.pruned == 1
    assert (await h.indexes(A))["due"] == {}


async def test_a_cycles_reads_do_not_grow_with_the_entries_nothing_touched(
    settings: Settings,
) -> None:
    """The same cycle after 10 and after 400 untouched entries (confident insights
    of other situations, nothing due for weeks) reads the same entries, and on
    Redis sends the same number of commands."""
    work: dict[int, tuple[int, int]] = {}
    for untouched in (10, 400):
        async with scratch_deployment(settings, "cc", DIMS) as scratch:
            harness = RedisHarness(*scratch)
            await harness.write(
                *(
                    record(A, 1000 + n, "", kind=Kind.INSIGHT, text=f"insight {n}", ts=NOW)
                    for n in range(untouched)
                )
            )
            await harness.episodes(A, 0, "success", "success", "success")
            await harness.runner.run_cycle(A, NOW, 1)  # builds the indexes: reads all once
            await harness.episodes(A, 10, "success", "success")
            before = await harness.commands()
            report = await harness.runner.run_cycle(A, NOW + DAY_MS, 2)
            commands = await harness.commands() - before - 1  # not the INFO itself
            assert report.upvoted == 1
            work[untouched] = (report.entries_seen, commands)
    assert work[10] == work[400]
    assert work[400][0] == 1


# --- apply -----------------------------------------------------------------------------


async def test_apply_writes_a_cycle_once(h: Harness) -> None:
    await h.episodes(A, 0, "success", "success", "success")
    cycle = await planned(h, A, 1)
    assert await h.curator.apply(cycle)
    applied = await h.snapshot()
    assert await h.curator.state(A) == CuratorState(1, T0 + 2, cycle.plan.report, True)
    assert await h.curator.get_playbook(A) == cycle.playbook
    assert not await h.curator.apply(cycle)
    older = replace(cycle, plan=replace(cycle.plan, report=replace(cycle.plan.report, cycle=0)))
    assert not await h.curator.apply(older)
    assert await h.snapshot() == applied


async def test_apply_refuses_a_rewritten_text_without_its_vector(h: Harness) -> None:
    await h.episodes(A, 0, "success", "success", "success")
    cycle = await planned(h, A, 1)
    before = await h.snapshot()
    with pytest.raises(ValueError, match="lacks vectors"):
        await h.curator.apply(replace(cycle, vectors={}))
    assert await h.snapshot() == before


async def test_apply_only_touches_the_agents_curator_state(h: Harness) -> None:
    await h.episodes(A, 0, "success", "success", "success")
    await h.episodes(B, 0, "failed", "failed", "failed")
    assert await h.curator.apply(await planned(h, A, 1))
    assert await h.curator.state(B) == CuratorState()
    assert await h.bookkeeping(B) == {} and await h.curator.get_playbook(B) is None
    assert await h.curator.apply(await planned(h, B, 1))
    (works,) = await h.curator.entries(A)
    (fails,) = await h.curator.entries(B)
    assert (works.polarity, fails.polarity) != (None, None)
    assert works.polarity != fails.polarity


# --- both backends, one scenario -------------------------------------------------------


async def test_both_backends_store_the_same_values(settings: Settings) -> None:
    """The same scenario (every kind of operation: add, votes, promotion into the
    playbook, a derived heuristic, demotion, an edit, quarantine release and
    archive) leaves the same hashes, usage, bookkeeping, nexus, playbook and state."""
    stale = record(A, 90, "", ts=NOW - 10 * DAY_MS, text="doubtful claim", quarantined=True)
    backed = record(A, 91, "", ts=NOW - DAY_MS, text="backed claim", quarantined=True)
    reports: dict[str, list[dict[str, Any]]] = {}
    async with scratch_deployment(settings, "cc", DIMS) as scratch:
        harnesses: list[Harness] = [MemoryHarness(), RedisHarness(*scratch)]
        for hx in harnesses:
            await hx.write(stale, backed)
            await hx.write(record(A, 95, "", kind=Kind.WARNING, text="never bridge on friday"))
            await hx.set_field(backed.id, "validated_count", "1")
            outcomes = [("success",) * 3] + [("success",) * 2] * 3 + [("failed",) * 2] * 3
            for cycle, batch in enumerate(outcomes, 1):
                await hx.episodes(A, cycle * 10, *batch)
                report = await hx.runner.run_cycle(A, NOW, cycle)
                reports.setdefault(hx.name, []).append(orjson.loads(orjson.dumps(report)))
        memory, real = [await hx.snapshot() for hx in harnesses]
        assert memory == real
        assert reports["memory"] == reports["redis"]
        totals = {k: sum(r[k] for r in reports["memory"]) for k in TOTALS}
        assert totals == {
            "proposed": 2, "promoted": 2, "upvoted": 5, "downvoted": 6,
            "demoted": 2, "edited": 1, "pruned": 1, "released": 1,
        }  # fmt: skip
        kinds = sorted(_text(h["kind"]) for h in memory["records"].values())
        assert kinds == ["episode"] * 17 + ["heuristic", "insight", "warning"]
