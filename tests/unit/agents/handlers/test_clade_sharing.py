"""The origin's side of clades: publish along the journaled route, unpublish by
route, withdraw what a retraction or a forget takes, share again what changed, and
`share_policy` auto (warnings, promoted entries). In memory: the registry, the
published store, the configuration, a sink that records what was sent."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from grimoire.agents.handlers.clade import AutoShare, CladeSender, Sharing
from grimoire.agents.ports import MemorySink
from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
from grimoire.streams.model.records import Kind
from grimoire.streams.recall.ports import RecallRecord
from grimoire.tables.testing.clade_store import InMemoryCladeRegistry, InMemoryPublishedStore
from grimoire.tables.testing.config_store import InMemoryConfigStore
from grimoire.topics.declarations import TopicNames

TOPICS = TopicNames("unit")
TS = 1_790_000_000_000
ROUTE = (("ops", ("b", "c")), ("sre", ("c", "d")))


class Records:
    def __init__(self, *records: RecallRecord) -> None:
        self.held = {r.memory_id: r for r in records}

    async def records(self, memory_ids: Sequence[str]) -> dict[str, RecallRecord]:
        return {i: self.held[i] for i in memory_ids if i in self.held}


def record(memory_id: str, **more: object) -> RecallRecord:
    fields: dict[str, object] = {
        "memory_id": memory_id,
        "kind": "warning",
        "layer": "observation",
        "text": f"text of {memory_id}",
        "ts_ms": TS,
        "confidence": 0.7,
    }
    return RecallRecord(**{**fields, **more})  # type: ignore[arg-type]


def rig(*records: RecallRecord) -> tuple[Sharing, MemorySink, InMemoryPublishedStore]:
    sink = MemorySink()
    published = InMemoryPublishedStore()
    source = Records(*records)
    sharing = Sharing(
        InMemoryCladeRegistry(), published, lambda _agent: source, CladeSender(sink, TOPICS, "w")
    )
    return sharing, sink, published


def sent(sink: MemorySink) -> list[tuple[str, str, str]]:
    return [
        (m["op"], m["agent_id"], m["clade"])
        for m in (orjson.loads(v) for v in sink.on(TOPICS.clade))
    ]


async def test_publish_sends_each_recipient_one_share_and_records_the_route() -> None:
    sharing, sink, published = rig(record("m1"))
    op, ids, fields = await sharing.publish("a", "m1", ROUTE, TS, "cmd-1")
    assert (op, ids, fields["published"], fields["recipients"]) == ("publish", ("m1",), True, 3)
    # c is reached through both clades: one share, through the first
    assert sent(sink) == [("share", "b", "ops"), ("share", "c", "ops"), ("share", "d", "sre")]
    held = (await published.published("a"))["m1"]
    assert held.clades == ("ops", "sre") and held.recipients == ("b", "c", "d")
    share = orjson.loads(sink.on(TOPICS.clade)[0])
    assert share["entry"]["text"] == "text of m1" and share["origin_agent_id"] == "a"
    assert share["event_id"] == "share:a:m1:b:cmd-1"  # the same cause, the same id


async def test_nothing_is_published_without_a_route_a_live_memory_or_as_a_copy() -> None:
    sharing, sink, _ = rig(
        record("m1"), record("gone", deleted=True), record("cp", provenance="clade")
    )
    for memory, route, reason in (
        ("m1", (), "no clade"),
        ("gone", ROUTE, "not found"),
        ("nope", ROUTE, "not found"),
        ("cp", ROUTE, "a clade copy"),
    ):
        _, _, fields = await sharing.publish("a", memory, route, TS, "c")
        assert fields == {"published": False, "reason": reason}
    assert sink.sent == []


async def test_unpublishing_one_clade_withdraws_only_whom_no_other_clade_reaches() -> None:
    sharing, sink, published = rig(record("m1"))
    await sharing.publish("a", "m1", ROUTE, TS, "c1")
    sink.sent.clear()
    _, _, fields = await sharing.unpublish("a", "m1", "ops", TS, "c2")
    assert fields == {"withdrawn": 1, "clades": ["sre"]}
    assert sent(sink) == [("withdraw", "b", "ops")]
    assert (await published.published("a"))["m1"].recipients == ("c", "d")
    sink.sent.clear()
    await sharing.unpublish("a", "m1", "", TS, "c3")
    assert sorted(sent(sink)) == [("withdraw", "c", "sre"), ("withdraw", "d", "sre")]
    assert await published.published("a") == {}


async def test_a_retraction_or_forget_withdraws_every_copy_of_what_was_published() -> None:
    sharing, sink, published = rig(record("m1"), record("m2"), record("m3"))
    for memory in ("m1", "m2"):
        await sharing.publish("a", memory, ROUTE, TS, "c")
    sink.sent.clear()
    steps = await sharing.withdraw_all("a", ["m1", "m3"], TS, "retract-1")
    assert [ids for _, ids, _ in steps] == [("m1",)]
    assert {op for op, _, _ in sent(sink)} == {"withdraw"} and len(sink.sent) == 3
    sink.sent.clear()
    await sharing.withdraw_all("a", (), TS, "forget")  # () = everything published
    assert len(sink.sent) == 3 and await published.published("a") == {}


async def test_a_published_entry_that_changed_is_shared_again_with_its_new_state() -> None:
    sharing, sink, _ = rig(record("e1", validated_count=3))
    await sharing.publish("a", "e1", (("ops", ("b",)),), TS, "c")
    sink.sent.clear()
    await sharing.share_changed("a", ["e1"], (), TS + 1, "run-2", auto=False)
    (again,) = [orjson.loads(v) for v in sink.on(TOPICS.clade)]
    assert again["op"] == "share" and again["entry"]["validated"] == 3
    assert again["event_id"] == "share:a:e1:b:run-2"


async def test_auto_shares_warnings_and_promoted_entries_only_for_auto_agents() -> None:
    sharing, sink, published = rig(record("w1"), record("i1", kind="insight"))
    configs = InMemoryConfigStore()

    class Curated:
        async def entries(self, agent_id: str) -> list[CuratedEntry]:
            def entry(memory_id: str, kind: Kind, status: EntryStatus, **more: str) -> CuratedEntry:
                return CuratedEntry(memory_id, kind, "t", 0.8, TS, TS, status, **more)  # type: ignore[arg-type]

            return [
                entry("i1", Kind.INSIGHT, EntryStatus.ACTIVE),
                entry("i2", Kind.INSIGHT, EntryStatus.PROPOSED),
                entry("h1", Kind.HEURISTIC, EntryStatus.ACTIVE),
                entry("i3", Kind.INSIGHT, EntryStatus.ACTIVE, provenance="clade"),
            ]

    auto = AutoShare(sharing, configs, Curated())  # type: ignore[arg-type]
    route = (("ops", ("b",)),)
    assert await auto.warnings("a", ["w1"], route, TS, "auto") == []  # explicit by default
    assert await auto.promoted("a", route, TS, "auto") == []
    configs.configs["a"] = AgentConfig(share_policy="auto")
    assert [ids for _, ids, _ in await auto.warnings("a", ["w1"], route, TS, "auto")] == [("w1",)]
    # only its own active insight (i1): not proposed, not an active heuristic, not a copy
    assert [ids for _, ids, _ in await auto.promoted("a", route, TS, "auto")] == [("i1",)]
    assert await auto.promoted("a", route, TS, "auto") == []  # published once
    assert sorted(await published.published("a")) == ["i1", "w1"]
    assert len(sink.sent) == 2
