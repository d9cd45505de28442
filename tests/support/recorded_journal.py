"""A journal recorded once, kept as test data, and folded again by today's code.

A restructure of the fold must not change what it decides. `record` runs inputs of
every kind for three agents through the worker's own composition (`compose`: the
sequencer journals them, the apply loop folds them into Redis; the fake embedder
stands in for the model so the vectors are exact) and returns what a later fold
needs: every journal record, the key store that opens them (the journal's secret,
the agents' keys), and each agent's state digest. `fold` puts that key store into
an empty prefix and folds the records with the current code.

Regenerate only on purpose (a change of the stored format, with a migration):
``python -m tests.support.recorded_journal tests/data/recorded-journal.json``.
When the fold is meant to decide differently (a new behaviour, say why in the
commit), keep the recorded entries and fold them again for new digests:
``python -m tests.support.recorded_journal --redigest tests/data/recorded-journal.json``.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import EntryKind
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_memory_ids
from grimoire.tables.trust.digest import agent_digest
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import (
    CommandV1,
    EpisodeV1,
    FactV1,
    MaintenanceCommandV1,
    OutcomeV1,
    RecallRequestV1,
    ToolEventV1,
    TranscriptV1,
)
from tests.support.composed import compose_in_process
from tests.support.composed import fold as fold_journal
from tests.support.history import BASE_TS, episode_at, line_at, tool_call_at

__all__ = ["AGENTS", "RecordedJournal", "fold", "record"]

FORMAT = "grimoire.recorded-journal/1"
AGENTS = ("ops-alpha", "ops-beta", "ops-gamma")


@dataclass(frozen=True, slots=True)
class RecordedJournal:
    records: tuple[tuple[int, int, bytes], ...]  # (partition, offset, value)
    keystore: Mapping[str, Any]  # key (without the prefix) -> its value, by type
    digests: Mapping[str, str]  # agent -> state digest (sha256)
    partitions: int

    def dumps(self) -> bytes:
        return orjson.dumps(
            {
                "format": FORMAT,
                "partitions": self.partitions,
                "digests": dict(sorted(self.digests.items())),
                "keystore": self.keystore,
                "records": [[p, o, base64.b64encode(v).decode()] for p, o, v in self.records],
            },
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS,
        )

    @classmethod
    def loads(cls, raw: bytes) -> RecordedJournal:
        data = orjson.loads(raw)
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        return cls(
            records=tuple((int(p), int(o), base64.b64decode(v)) for p, o, v in data["records"]),
            keystore=data["keystore"],
            digests=data["digests"],
            partitions=int(data["partitions"]),
        )


# Which journal entry, on which input topic (a `TopicNames` attribute), each input is.
_ENTRY_OF: Mapping[type, tuple[EntryKind, str]] = {
    EpisodeV1: (EntryKind.EPISODE, "episodes"),
    ToolEventV1: (EntryKind.TOOL_EVENT, "tool_events"),
    TranscriptV1: (EntryKind.TRANSCRIPT, "transcripts"),
    FactV1: (EntryKind.FACT, "facts"),
    CommandV1: (EntryKind.COMMAND, "commands"),
    MaintenanceCommandV1: (EntryKind.MAINTENANCE, "maintenance"),
}


def _inputs(topics: TopicNames) -> list[tuple[EntryKind, str, bytes]]:
    """Every kind of input for three agents, in the order they are journaled."""
    out: list[tuple[EntryKind, str, bytes]] = []

    def add(message: Any) -> None:
        kind, topic = _ENTRY_OF[type(message)]
        out.append((kind, getattr(topics, topic), message.dumps_json()))

    for n, agent in enumerate(AGENTS):
        for i in range(14):
            text = (
                f"replica {i % 4} of shard {n} lagged {3 + i % 5} s behind the primary"
                if i % 3
                else f"disk on node {i % 4} reached {80 + i} percent after the compaction"
            )
            add(
                episode_at(
                    agent,
                    i,
                    text,
                    tags=[f"shard/{n}", f"node/{i % 4}"],
                    affect={"pleasure": (i % 5 - 2) / 4, "arousal": 0.3},
                )
            )
        for i in range(5):
            add(
                tool_call_at(
                    agent,
                    i,
                    "failover",
                    error=f"timeout promoting replica {i}",
                    result=f"promoted replica {i}",
                    paths=[f"/etc/cluster/shard-{n}.yaml"],
                )
            )
        for i in range(4):
            role = "user" if i % 2 == 0 else "assistant"
            content = f"should we fail over shard {n} now, step {i}"
            add(line_at(agent, i, {"role": role, "content": content}, turn_id=f"t-{i // 2}"))
        # The second fact supersedes the first (same subject and predicate).
        for event_id, ts, obj, valid_from in (
            ("fact-1", BASE_TS + 100_000, "node-1", 8),
            ("fact-2", BASE_TS + 160_000, "node-3", 13),
        ):
            add(
                FactV1(
                    agent_id=agent,
                    ts=ts,
                    subject=f"shard-{n}",
                    predicate="primary_on",
                    object=obj,
                    valid_from=valid_from,
                    object_is_entity=True,
                    event_id=event_id,
                )
            )
        for event_id, ts, command, fields in (
            ("cmd-configure", 170_000, "configure", {"config": {"use_causal_scoring": n % 2 == 0}}),
            # Filled when journaled: pins the agent's first memory.
            ("cmd-pin", 171_000, "pin", {"memory_id": ""}),
            ("cmd-retract", 172_000, "retract", {"source_event_id": "ep-4"}),
            ("cmd-retract-fact", 173_000, "retract", {"source_event_id": "fact-2"}),
        ):
            add(
                CommandV1(
                    agent_id=agent, command=command, ts=BASE_TS + ts, event_id=event_id, **fields
                )
            )
        add(MaintenanceCommandV1(agent_id=agent, reason="manual", force_compaction=True))
    return out


def _outcomes(topics: TopicNames, memory_ids: Mapping[str, Sequence[str]]) -> list[bytes]:
    out: list[bytes] = []
    for agent in AGENTS:
        ids = sorted(memory_ids[agent])
        for event_id, ts, outcome, credited in (
            ("out-1", 180_000, "positive", ids[:2]),
            ("out-2", 181_000, "negative", ids[2:3]),
        ):
            message = OutcomeV1(
                agent_id=agent,
                ts=BASE_TS + ts,
                outcome=outcome,
                memory_ids=credited,
                event_id=event_id,
            )
            out.append(message.dumps_json())
    return out


async def _keystore(redis: Redis, prefix: str) -> dict[str, Any]:
    keys = Keyspace(prefix)
    dumped: dict[str, Any] = {}
    async for raw in redis.scan_iter(match=keys.keystore_pattern, count=1000):
        key = raw.decode()
        kind = (await redis.type(key)).decode()
        name = key[len(prefix) + 1 :]
        if kind == "string":
            value = await redis.get(key)
            dumped[name] = {"string": base64.b64encode(value).decode()}
        elif kind == "hash":
            fields = await redis.hgetall(key)
            dumped[name] = {
                "hash": {
                    base64.b64encode(f).decode(): base64.b64encode(v).decode()
                    for f, v in sorted(fields.items())
                }
            }
        else:
            raise ValueError(f"key store key {key} is a {kind}: not recorded")
    return dict(sorted(dumped.items()))


async def _restore_keystore(redis: Redis, prefix: str, keystore: Mapping[str, Any]) -> None:
    for name, value in keystore.items():
        key = f"{prefix}:{name}"
        if "string" in value:
            await redis.set(key, base64.b64decode(value["string"]))
        else:
            await redis.hset(
                key,
                mapping={
                    base64.b64decode(f): base64.b64decode(v) for f, v in value["hash"].items()
                },
            )


def _settings(base: Settings, prefix: str) -> Settings:
    return base.with_values(topic_prefix=prefix, auth_enabled=False)


async def record(redis: Redis, base: Settings) -> RecordedJournal:
    prefix = f"rec{uuid.uuid4().hex[:8]}"
    settings = _settings(base, prefix)
    topics = TopicNames(prefix)
    sink = MemorySink()
    composed = await compose_in_process(settings, redis, sink, "recorded-journal")
    sequencer, applier = composed.handlers.sequencer, composed.handlers.applier
    offsets: dict[str, int] = {}
    folded = 0

    async def journal(kind: EntryKind, topic: str, value: bytes) -> None:
        nonlocal folded
        offset = offsets.get(topic, 0)
        offsets[topic] = offset + 1
        message = InputMessage(value=value, topic=topic, partition=0, offset=offset)
        await sequencer.append(kind, [message])
        everything = sink.as_consumed(topics.journal)
        await fold_journal(applier, everything[folded:])
        folded = len(everything)

    for kind, topic, value in _inputs(topics):
        data = orjson.loads(value)
        if data.get("command") == "pin":
            # The agent's first memory by id, as the store now holds it.
            ids = await agent_memory_ids(redis, prefix, data["agent_id"])
            data["memory_id"] = ids[0]
            value = orjson.dumps(data)
        await journal(kind, topic, value)
    memory_ids = {agent: await agent_memory_ids(redis, prefix, agent) for agent in AGENTS}
    for value in _outcomes(topics, memory_ids):
        await journal(EntryKind.OUTCOME, topics.outcomes, value)
    for n, agent in enumerate(AGENTS):
        request = RecallRequestV1(
            agent_id=agent,
            query=f"replica lag on shard {n}",
            reply_to=f"{prefix}.replies.recorded",
            correlation_id=f"corr-{n}",
            k=4,
        )
        message = InputMessage(
            value=request.dumps_json(), topic=topics.recall_requests, partition=0, offset=n
        )
        await composed.handlers.recall.handle(message)
        everything = sink.as_consumed(topics.journal)
        await fold_journal(applier, everything[folded:])
        folded = len(everything)
    records = tuple(
        (m.partition or 0, m.offset or 0, m.value) for m in sink.as_consumed(topics.journal)
    )
    digests = {agent: (await agent_digest(redis, prefix, agent)).sha256 for agent in AGENTS}
    return RecordedJournal(
        records=records,
        keystore=await _keystore(redis, prefix),
        digests=digests,
        partitions=settings.broker.partitions,
    )


async def fold(
    redis: Redis, base: Settings, recorded: RecordedJournal, prefix: str | None = None
) -> dict[str, str]:
    """Fold the recorded journal into an empty prefix with today's code; each agent's
    state digest."""
    prefix = prefix or f"rep{uuid.uuid4().hex[:8]}"
    settings = _settings(base, prefix).with_values(partitions=recorded.partitions)
    topics = TopicNames(prefix)
    await _restore_keystore(redis, prefix, recorded.keystore)
    composed = await compose_in_process(settings, redis, MemorySink(), "recorded-journal")
    messages = [
        InputMessage(value=v, topic=topics.journal, partition=p, offset=o)
        for p, o, v in recorded.records
    ]
    await fold_journal(composed.handlers.applier, messages)
    return {agent: (await agent_digest(redis, prefix, agent)).sha256 for agent in AGENTS}


async def _main(out: Path, *, redigest: bool = False) -> None:
    from grimoire.infra.local.services import LocalServices, ServicePorts

    state = Path(".grimoire") / "recorded-journal"
    services = LocalServices(state, ServicePorts(kafka=19962, redis=17262))
    services.up()
    try:
        redis = Redis.from_url(services.redis_url)
        try:
            settings = Settings(redis_url=services.redis_url)
            if redigest:
                kept = RecordedJournal.loads(out.read_bytes())
                recorded = RecordedJournal(
                    kept.records, kept.keystore, await fold(redis, settings, kept), kept.partitions
                )
            else:
                recorded = await record(redis, settings)
            again = await fold(redis, settings, recorded)
            if again != dict(recorded.digests):
                raise SystemExit(f"a second fold differs: {again} != {recorded.digests}")
        finally:
            await redis.aclose()
    finally:
        services.down()
    out.write_bytes(recorded.dumps() + b"\n")
    print(f"{len(recorded.records)} records, digests {dict(recorded.digests)} -> {out}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    asyncio.run(
        _main(Path(arguments[-1]), redigest="--redigest" in arguments[:-1]),
    )
