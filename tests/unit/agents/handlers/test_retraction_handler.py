"""RetractionHandler (agents/handlers/retraction.py) over the in-memory reference
stores: memories written by the real write path (ingest), compaction and the
curator, retracted by their source events; recall (the RecallHandler of
tests/support/handlers.py) never returns what was retracted or a derivative left
without a source; the witness callback sees every step. Pins and unpins too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from grimoire.agents.handlers.retraction import (
    PIN_OP,
    UNPIN_OP,
    RetractionHandler,
)
from grimoire.agents.maintenance.compaction_task import CompactionTask
from grimoire.streams.learn.curator.plan import plan_cycle
from grimoire.streams.learn.curator.values import EntryStatus, QuarantinedView
from grimoire.streams.maintenance.compaction import DAY_MS, CompactionPolicy
from grimoire.streams.model.records import EventType, HyperedgeRef, Kind, MemoryRecord
from grimoire.streams.model.records import Role as HyperRole
from grimoire.streams.trust.retraction import DerivationRole, Edge, RetractionOp
from grimoire.streams.write.changes import AggregateFold, Reinforcement, WriteBatch
from grimoire.streams.write.plan import aggregate_id
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.ports.trust import DerivationStore
from grimoire.tables.testing.compaction_store import InMemoryCompactionStore
from grimoire.tables.testing.curator_store import InMemoryCuratorStore
from grimoire.tables.testing.derivations import InMemoryDerivationStore, edge_index
from grimoire.tables.trust.derivations import batch_edges
from tests.support.curator import curated_entry
from tests.support.handlers import REPLY_TO, Rig, episode, messages, mid, recall_request
from tests.support.maintenance import compacted_summary
from tests.support.retraction import (
    SWAP_SITUATION,
    Witness,
    curate_over,
    demoted_steps,
    retracted_steps,
    swap_record,
)

A, B = "agent-1", "agent-2"
T0 = 1_790_000_000_000 - 1_790_000_000_000 % DAY_MS
NOW = T0 + 30 * DAY_MS
KEYS = ("entity:eth", "entity:usdc", "tag:strategy/eth-dca")


class World(Rig):
    """The handlers' rig plus compaction, curator and derivation stores on its memory."""

    def __init__(
        self, derivations: type[InMemoryDerivationStore] = InMemoryDerivationStore
    ) -> None:
        super().__init__()
        self.compaction = InMemoryCompactionStore(self.store, dims=self.fake.dims)
        self.curator = InMemoryCuratorStore(self.store)
        self.derivations = derivations(self.store, self.curator, dims=self.fake.dims)
        _as_protocol: DerivationStore = self.derivations
        self.witness = Witness()
        self.retraction = RetractionHandler(
            self.derivations, self.fake, self.curator, witness=self.witness
        )

    def doc(self, memory_id: str) -> dict[str, str]:
        found = self.store.record(memory_id) or {}
        return {k: text_of(v) for k, v in found.items() if k not in ("canonical", "eidolon")}

    async def recalled(self, agent: str, query: str) -> list[str]:
        self.sink.sent.clear()
        await self.recall.handle(
            recall_request(
                agent_id=agent, query=query, as_of=NOW, mode="full", budgets={"max_items": 50}
            )
        )
        (reply,) = self.on(REPLY_TO)
        assert "error" not in reply, reply
        return [item["id"] for item in reply["items"]]

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self.fake.embed(texts)


def record(world: World, agent: str, event: str, text: str, ts: int, **fields: Any) -> MemoryRecord:
    return swap_record(world.fake, agent, event, text, ts, **fields)


# ---- the write path: a memory and its share of an aggregate -------------------------

REPEAT = "rpc endpoint timed out on node seven"


async def aggregated(world: World) -> tuple[str, str]:
    """Three events with one text: the first admitted, the others folded into an
    aggregate of count 3. Returns (the first memory, the aggregate)."""
    payloads = [episode(A, REPEAT, NOW - 3 + n, f"agg-{n}") for n in range(3)]
    for payload in payloads:  # one batch each, as the events arrive
        await world.ingest.handle(EventType.EPISODE, messages(payload))
    first = mid(A, "agg-0", NOW - 3)
    group = aggregate_id(A, first)
    assert [e["action"] for e in world.events()] == ["admit", "aggregate", "aggregate"]
    assert world.doc(group)["count"] == "3"
    return first, group


async def test_the_write_path_records_what_each_memory_derives_from() -> None:
    world = World()
    first, group = await aggregated(world)
    assert edge_index(world.store).edges(A) == sorted(
        [
            Edge(first, "agg-0", DerivationRole.RECORD),
            Edge(group, "agg-1", DerivationRole.FOLD),
            Edge(group, "agg-2", DerivationRole.FOLD),
            Edge(group, first, DerivationRole.ORIGIN),
        ]
    )


async def test_retracting_a_folded_event_takes_its_share_of_the_aggregate() -> None:
    world = World()
    first, group = await aggregated(world)
    # agg-2, not agg-1: the aggregate's text is agg-1's (its seed), see below.
    report = await world.retraction.retract(A, "agg-2", at_ms=NOW)
    assert [(s.op, s.memory_id) for s in report.steps] == [(RetractionOp.REDUCE, group)]
    assert world.doc(group)["count"] == "2"
    assert world.witness.ops() == [("retract.aggregate_share", (group,))]
    found = await world.recalled(A, REPEAT)  # one copy of a repeated text
    assert found and set(found) <= {first, group}


async def test_retracting_every_share_retracts_the_aggregate() -> None:
    world = World()
    first, group = await aggregated(world)
    for event in ("agg-2", "agg-0"):  # the seed (agg-1) last: its text stays till then
        await world.retraction.retract(A, event, at_ms=NOW)
    assert world.doc(group)["count"] == "1"
    assert (world.doc(first)["retracted"], world.doc(first)["deleted"]) == ("1", "1")
    assert world.doc(first)["retracted_at"] == str(NOW)
    assert await world.recalled(A, REPEAT) == [group]
    world.witness.ops()

    report = await world.retraction.retract(A, "agg-1", at_ms=NOW)
    assert report.retracted == (group,)
    assert world.doc(group)["retracted"] == "1"
    assert world.witness.ops() == [("retract.memory", (group,))]
    assert await world.recalled(A, REPEAT) == []
    assert edge_index(world.store).edges(A) == []


async def test_a_retracted_memory_leaves_the_nexus_index_and_its_hyperedges() -> None:
    world = World()
    await world.ingest.handle(
        EventType.EPISODE,
        messages(episode(A, "disk full on node seven", NOW, "d-1", session_id="s-1")),
    )
    target = mid(A, "d-1", NOW)
    turn = [
        record(world, A, f"t-{n}", f"turn part {n}", NOW, hyperedge=HyperedgeRef("turn-1", role))
        for n, role in ((1, HyperRole.TRIGGER), (2, HyperRole.OUTCOME))
    ]
    await world.store.commit(WriteBatch(records=tuple(turn)))
    await world.retraction.retract(A, "t-1", at_ms=NOW)
    assert await world.store.hyperedge(A, "turn-1") == {turn[1].id: str(HyperRole.OUTCOME)}
    keys = world.doc(target)["nexus_keys"].split("|")
    assert keys
    for key in keys:
        assert target in await world.store.nexus(A, key)
    await world.retraction.retract(A, "d-1", at_ms=NOW)
    for key in keys:
        assert target not in await world.store.nexus(A, key)
    assert target not in await world.recalled(A, "disk full on node seven")


async def test_a_retraction_is_applied_once_and_only_for_its_agent() -> None:
    world = World()
    first, _ = await aggregated(world)
    assert (await world.retraction.retract(B, "agg-0", at_ms=NOW)).steps == ()
    assert world.doc(first)["deleted"] == "0"
    assert (await world.retraction.retract(A, "agg-0", at_ms=NOW)).retracted == (first,)
    world.witness.ops()
    again = await world.retraction.retract(A, "agg-0", at_ms=NOW)
    assert again.steps == () and world.witness.ops() == []


def test_a_reinforcement_and_an_origin_edge_from_a_batch() -> None:
    seed = record(World(), A, "e-2", REPEAT, NOW)
    batch = WriteBatch(
        folds=(AggregateFold(A, "agg", "target", seed.id, NOW, seed),),
        reinforcements=(
            Reinforcement(A, "target", "member", NOW, source_event_id="e-3"),
            Reinforcement(A, "other", "by-hand", NOW),  # built without its event
        ),
    )
    edges = batch_edges(batch)
    assert (A, Edge("agg", "e-2", DerivationRole.FOLD)) in edges
    assert (A, Edge("agg", "target", DerivationRole.ORIGIN)) in edges
    assert [edge for _, edge in edges if edge.role is DerivationRole.REINFORCE] == [
        Edge(
            "target", "e-3", DerivationRole.REINFORCE
        ),  # the event: a retraction naming it finds it
        Edge("other", "by-hand", DerivationRole.REINFORCE),
    ]


# ---- the write path: a reinforcement taken back -------------------------------------

REPLICA = "replica lag grew while compaction ran overnight"


async def test_retracting_a_reinforcing_event_takes_its_reinforcement_back() -> None:
    world = World()
    # The same seven words and one more (cosine 0.935): merged into r-0's memory.
    for n, text in enumerate((REPLICA, f"{REPLICA} today", f"{REPLICA} yesterday")):
        await world.ingest.handle(EventType.EPISODE, messages(episode(A, text, NOW + n, f"r-{n}")))
    assert [e["action"] for e in world.events()] == ["admit", "merge", "merge"]
    target = mid(A, "r-0", NOW)
    assert world.doc(target)["reinforced_count"] == "2"
    assert await world.derivations.derived_from(A, ["r-1"]) == [
        Edge(target, "r-1", DerivationRole.REINFORCE)
    ]

    report = await world.retraction.retract(A, "r-1", at_ms=NOW + 9)
    assert [(s.op, s.memory_id, s.reinforced_count) for s in report.steps] == [
        (RetractionOp.UNREINFORCE, target, 1)
    ]
    assert report.details()["reinforcements"] == [target]
    assert world.doc(target)["reinforced_count"] == "1"
    assert world.doc(target)["deleted"] == "0"  # a reinforcement never sustained it
    # A maximum over the events that touched it, kept per memory only: it stays.
    assert world.doc(target)["last_seen"] == str(NOW + 2)
    assert world.witness.ops() == [("retract.reinforcement", (target,))]
    assert edge_index(world.store).edges(A) == [
        Edge(target, "r-0", DerivationRole.RECORD),
        Edge(target, "r-2", DerivationRole.REINFORCE),
    ]
    again = await world.retraction.retract(A, "r-1", at_ms=NOW + 9)
    assert again.steps == () and world.doc(target)["reinforced_count"] == "1"

    # The memory's own event: it goes, and the reinforcement left with it.
    report = await world.retraction.retract(A, "r-0", at_ms=NOW + 9)
    assert report.retracted == (target,)
    assert edge_index(world.store).edges(A) == []


# ---- the write path: an aggregate whose seed is retracted ---------------------------


ORIGIN = "rpc endpoint on node seven timed out after retries during the nightly deploy window"
SEED = f"{ORIGIN} again"  # cosine 0.976 to ORIGIN: folded, not admitted


async def seeded_aggregate(world: World) -> tuple[str, str]:
    """ORIGIN admitted (s-0), then SEED (s-1) creating the aggregate with its own
    text, then ORIGIN again (s-2) folded into it. Returns (origin, aggregate)."""
    for n, text in enumerate((ORIGIN, SEED, ORIGIN)):
        await world.ingest.handle(EventType.EPISODE, messages(episode(A, text, NOW + n, f"s-{n}")))
    assert [e["action"] for e in world.events()] == ["admit", "aggregate", "aggregate"]
    origin = mid(A, "s-0", NOW)
    group = aggregate_id(A, origin)
    assert (world.doc(group)["text"], world.doc(group)["count"]) == (SEED, "3")
    return origin, group


async def test_retracting_an_aggregate_s_seed_takes_its_text_too() -> None:
    world = World()
    origin, group = await seeded_aggregate(world)
    world.fake.texts.clear()

    report = await world.retraction.retract(A, "s-1", at_ms=NOW + 9)
    assert [(s.op, s.memory_id) for s in report.steps] == [
        (RetractionOp.REDUCE, group),
        (RetractionOp.REBUILD, group),
    ]
    assert report.details()["aggregates_rebuilt"] == [group]
    assert report.details()["summaries_rebuilt"] == []
    after, source = world.doc(group), world.doc(origin)
    assert after["count"] == "2"
    for name in ("text", "gist", "normalized_hash", "nexus_keys", "tags", "ts"):
        assert after[name] == source[name], name
    assert after["kind"] == "aggregate"
    assert world.fake.texts == [ORIGIN]  # one embedding, of the text it shows now
    vector = world.store.record(group)["canonical"]  # type: ignore[index]
    assert vector == world.fake.vector(ORIGIN).astype(np.float32).tobytes()
    assert world.witness.ops() == [
        ("retract.aggregate_share", (group,)),
        ("retract.summary_rebuilt", (group,)),  # the op REBUILD's value; kind: aggregate
    ]
    found = await world.recalled(A, SEED)
    assert found and set(found) <= {origin, group}

    # Its text is the origin's now: when the origin goes, nothing readable is left
    # (s-2's share has no text of its own), and the aggregate goes too.
    report = await world.retraction.retract(A, "s-0", at_ms=NOW + 9)
    assert report.retracted == (origin, group)
    assert world.doc(group)["retracted"] == "1"
    assert await world.recalled(A, ORIGIN) == []
    assert edge_index(world.store).edges(A) == []


async def test_an_aggregate_keeps_its_seed_s_text_while_the_seed_stands() -> None:
    world = World()
    origin, group = await seeded_aggregate(world)
    for event in ("s-2", "s-0"):
        await world.retraction.retract(A, event, at_ms=NOW + 9)
    assert world.doc(origin)["retracted"] == "1"
    assert (world.doc(group)["text"], world.doc(group)["count"]) == (SEED, "1")
    assert [op for op, _ in world.witness.ops()] == [
        "retract.aggregate_share",
        "retract.memory",
        "retract.aggregate_share",
    ]
    report = await world.retraction.retract(A, "s-1", at_ms=NOW + 9)
    assert report.retracted == (group,)


# ---- compaction: a summary rebuilt, then retracted -----------------------------------


async def compacted(world: World) -> tuple[list[str], str]:
    """Three old episodes on one key folded into one summary."""
    texts = [f"worker {n} ran out of memory loading batch {n}" for n in (1, 2, 3)]
    records = [
        record(world, A, f"c-{n}", texts[n - 1], T0 + n * 60_000, keys=("err:oom", f"path:/{n}"))
        for n in (1, 2, 3)
    ]
    await world.store.commit(WriteBatch(records=tuple(records)))
    return [r.id for r in records], await compacted_summary(world.compaction, world.embed, A, NOW)


async def test_compaction_records_each_summary_source() -> None:
    world = World()
    sources, summary = await compacted(world)
    assert world.doc(summary)["deleted"] == "0"
    assert sorted(await world.derivations.sources_of(A, [summary])) == [
        Edge(summary, source, DerivationRole.COMPACTED) for source in sorted(sources)
    ]


async def test_a_summary_is_rebuilt_without_the_retracted_source_then_retracted() -> None:
    world = World()
    sources, summary = await compacted(world)
    before = world.doc(summary)["text"]
    assert "worker 1 ran out" in before
    world.fake.texts.clear()

    report = await world.retraction.retract(A, "c-1", at_ms=NOW)
    assert [(s.op, s.memory_id) for s in report.steps] == [
        (RetractionOp.RETRACT, sources[0]),
        (RetractionOp.REBUILD, summary),
    ]
    after = world.doc(summary)
    assert after["text"].startswith("Summary of 2 memories on err:oom")
    assert "worker 1 ran out" not in after["text"] and "worker 2 ran out" in after["text"]
    assert after["source_ids"] == "|".join(sorted(sources[1:]))
    assert world.fake.texts == [after["text"]]  # one embedding, of the new text
    vector = world.store.record(summary)["canonical"]  # type: ignore[index]
    assert vector == world.fake.vector(after["text"]).astype(np.float32).tobytes()
    assert world.doc(sources[0])["retracted"] == "1"
    assert "replaced_by_summary_id" not in world.doc(sources[0])  # it stands for nothing
    assert world.witness.ops() == [
        ("retract.memory", (sources[0],)),
        ("retract.summary_rebuilt", (summary,)),
    ]
    found = await world.recalled(A, "worker ran out of memory loading batch")
    assert summary in found and sources[0] not in found

    for event in ("c-2", "c-3"):
        await world.retraction.retract(A, event, at_ms=NOW)
    assert world.doc(summary)["retracted"] == "1"
    assert world.witness.ops()[-1] == ("retract.memory", (summary,))
    assert await world.recalled(A, "worker ran out of memory loading batch") == []


# ---- the curator: an insight demoted, then retracted with its heuristic ------------


entry = partial(curated_entry, situation=SWAP_SITUATION, now=NOW)


async def curated(world: World) -> tuple[list[str], str, str]:
    """Two episodes, an active insight distilled from them and a playbook
    heuristic derived from the insight, written by one curator cycle."""
    episodes = [
        record(world, A, f"ep-{n}", f"swap ETH for USDC attempt {n}", NOW - 20 + n, keys=KEYS)
        for n in (1, 2)
    ]
    await world.store.commit(WriteBatch(records=tuple(episodes)))
    ids = [r.id for r in episodes]
    await curate_over(world.curator, world.fake, A, NOW, tuple(ids))
    assert "heuristic-1" in (await world.curator.get_playbook(A) or "")
    return ids, "insight-1", "heuristic-1"


async def test_the_curator_records_each_entry_s_evidence() -> None:
    world = World()
    episodes, insight, heuristic = await curated(world)
    assert await world.derivations.sources_of(A, [insight, heuristic]) == [
        Edge(heuristic, insight, DerivationRole.EVIDENCE),
        *(Edge(insight, e, DerivationRole.EVIDENCE) for e in sorted(episodes)),
    ]


async def test_an_insight_is_demoted_then_retracted_with_its_heuristic() -> None:
    world = World()
    episodes, insight, heuristic = await curated(world)

    report = await world.retraction.retract(A, "ep-1", at_ms=NOW)
    assert [(s.op, s.memory_id) for s in report.steps] == [
        (RetractionOp.RETRACT, episodes[0]),
        (RetractionOp.DEMOTE, insight),
    ]
    (demoted,) = [e for e in await world.curator.entries(A) if e.memory_id == insight]
    assert demoted.confidence == pytest.approx(0.4)
    assert demoted.status is EntryStatus.DEMOTED and demoted.source_ids == (episodes[1],)
    assert world.witness.ops() == demoted_steps(
        episodes[0], insight
    )  # the heuristic keeps its insight: the playbook reads the same
    assert "heuristic-1" in (await world.curator.get_playbook(A) or "")

    report = await world.retraction.retract(A, "ep-2", at_ms=NOW)
    assert report.retracted == (episodes[1], insight, heuristic)
    assert report.memory_ids == report.retracted
    assert report.playbook_regenerated
    assert report.details() == {
        "source_event_id": "ep-2",
        "retracted": [episodes[1], insight, heuristic],
        "aggregate_shares": [],
        "summaries_rebuilt": [],
        "aggregates_rebuilt": [],
        "insights_demoted": [],
        "reinforcements": [],
        "edges_dropped": 3,  # ep-2 -> e2 -> insight -> heuristic
        "playbook_regenerated": True,
    }
    assert world.witness.ops() == retracted_steps(episodes[1], insight, heuristic)
    playbook = await world.curator.get_playbook(A) or ""
    assert "heuristic-1" not in playbook and "_No heuristics yet._" in playbook
    assert await world.curator.entries(A) == []
    assert world.curator.bookkeeping(A) == {}
    found = await world.recalled(A, "tool swap tends to work prefer")
    assert not {insight, heuristic, *episodes} & set(found)


async def test_the_witness_details_name_the_source_and_hold_no_text() -> None:
    world = World()
    episodes, _, _ = await curated(world)
    await world.retraction.retract(A, "ep-1", at_ms=NOW)
    demoted = world.witness.seen[1][2]
    assert demoted == {
        "source_event_id": "ep-1",
        "at": NOW,
        "kind": "insight",
        "lost": [episodes[0]],
        "kept": [episodes[1]],
        "confidence": pytest.approx(0.4),
        "status": "demoted",
    }


# ---- pins --------------------------------------------------------------------------


async def test_pin_and_unpin_are_witnessed_and_scoped_to_the_agent() -> None:
    world = World()
    sources, _ = await compacted(world)
    assert await world.retraction.pin(A, sources[0])
    assert world.doc(sources[0])["pinned"] == "1"
    assert await world.retraction.unpin(A, sources[0])
    assert world.doc(sources[0])["pinned"] == "0"
    assert not await world.retraction.pin(B, sources[0])
    assert not await world.retraction.pin(A, "no-such-memory")
    assert world.witness.ops() == [(PIN_OP, (sources[0],)), (UNPIN_OP, (sources[0],))]


async def test_compaction_leaves_a_pinned_memory_alone() -> None:
    world = World()
    texts = [f"worker {n} ran out of memory loading batch {n}" for n in (1, 2, 3)]
    records = [
        record(world, A, f"c-{n}", texts[n - 1], T0 + n, keys=("err:oom",)) for n in (1, 2, 3)
    ]
    await world.store.commit(WriteBatch(records=tuple(records)))
    await world.retraction.pin(A, records[0].id)
    policy = CompactionPolicy(min_age_ms=7 * DAY_MS)
    report = await CompactionTask(world.compaction, world.embed, policy).compact(A, NOW)
    assert report.status == "empty"  # two eligible memories make no cluster of three


async def test_the_curator_never_archives_a_pinned_entry() -> None:
    low = replace(
        entry("i", Kind.INSIGHT, EntryStatus.PROPOSED, ()),
        confidence=0.01,
        consecutive_low=2,
        last_accessed_ms=NOW,
    )
    for pinned, archived in ((False, True), (True, False)):
        plan = plan_cycle(A, 3, NOW, (), [replace(low, pinned=pinned)])
        statuses = [change.entry.status for change in plan.changes]
        assert (EntryStatus.ARCHIVED in statuses) is archived
    old = QuarantinedView("q", Kind.EPISODE, NOW - 30 * DAY_MS)
    for pinned, archived in ((False, 1), (True, 0)):
        plan = plan_cycle(A, 3, NOW, (), (), [replace(old, pinned=pinned)])
        assert len(plan.quarantine) == archived


async def test_the_curator_store_reads_the_pin() -> None:
    world = World()
    _, insight, _ = await curated(world)
    await world.retraction.pin(A, insight)
    (read,) = [e for e in await world.curator.entries(A) if e.memory_id == insight]
    assert read.pinned
