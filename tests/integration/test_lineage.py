"""Lineage on the wire, end to end through the real broker, worker and Redis:
events published with `provenance`, `decay_class` and `pinned` are stored with
them, and a recall with `explain` at a chosen `as_of` shows the decayed confidence
and the bloodstain boost, both worked out by hand below.

Half-lives (streams/model/decay.py): warning 30 d, tactical 7 d, structural
never; a lineage provenance (bloodstain, predecessor, death_reflection) triples
the half-life and multiplies the rerank score by 1.2. At `as_of` = 90 days after
the events:

* bloodstain warning: 90 d half-life, retention 2^-1 = 1/2, boost 1.2;
* plain warning: 30 d half-life, retention 2^-3 = 1/8, boost 1;
* tactical tool call: 7 d half-life, retention 2^(-90/7) < 0.0002, so the 0.05 floor;
* structural, pinned transcript line (clade): no decay, boost 1.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.model.ids import memory_id
from grimoire.tables.keyspace import Keyspace
from grimoire.topics.schemas import EpisodeV1, ToolEventV1, TranscriptV1
from tests.support.dead_letters import dead_letters_where
from tests.support.live import Live

BASE_TS = 1_790_000_000_000
DAY_MS = 86_400_000
AS_OF = BASE_TS + 90 * DAY_MS
FLOOR = 0.05
PRIOR_SHARE = 0.30  # rerank: score = boost · relevance · (1 - share + share · prior)
STORED = ("kind", "provenance", "decay_class", "pinned", "confidence", "quality", "strength")


def _warning(agent: str, name: str, text: str, **lineage: Any) -> EpisodeV1:
    """An important warning, event id `<agent>-<name>` (as `_stored` reads it back)."""
    return EpisodeV1(
        agent_id=agent,
        ts=BASE_TS,
        event_id=f"{agent}-{name}",
        kind="warning",
        importance=0.9,
        text=text,
        **lineage,
    )


def _events(agent: str) -> dict[str, Any]:
    return {
        "blood": _warning(
            agent,
            "blood",
            "When gas spikes above 400 gwei, avoid the bridge contract: "
            "it drained 120 ETH at block 19000000",
            provenance="bloodstain",
        ),
        "plain": _warning(
            agent,
            "plain",
            "When the mempool holds over 150000 pending txs, do not use the "
            "bridge relayer: it stalled for 60 minutes",
        ),
        "tactical": ToolEventV1(
            agent_id=agent,
            ts=BASE_TS,
            event_id=f"{agent}-tactical",
            tool="swap",
            result="bridge swap slipped 3% at 18:00 UTC gas peak, use a 1% limit",
            decay_class="tactical",
        ),
        "structural": TranscriptV1(
            agent_id=agent,
            ts=BASE_TS,
            event_id=f"{agent}-structural",
            line={
                "role": "user",
                "content": (
                    "The bridge fee tier is fixed at 5 bps (0.05%) by protocol v3 contract 0xabc123"
                ),
            },
            provenance="clade",
            decay_class="structural",
            pinned=True,
        ),
    }


async def _stored(redis: Redis, settings: Settings, agent: str, name: str) -> dict[str, str]:
    key = Keyspace(settings.broker.topic_prefix).memory(
        agent, memory_id(agent, f"{agent}-{name}", 0, BASE_TS)
    )
    values = await redis.hmget(key, list(STORED))
    return {f: v.decode() for f, v in zip(STORED, values, strict=True) if v is not None}


async def test_lineage_fields_from_the_wire_drive_decay_and_the_boost(live: Live) -> None:
    client = live.client
    agent, _ = live.agents
    events = _events(agent)
    await client.publish_episode(events["blood"])
    await client.publish_episode(events["plain"])
    await client.publish_tool_event(events["tactical"])
    await client.publish_transcript(events["structural"])
    # An origin no model code knows is refused on its field, not stored as "self".
    await client.publish_episode(
        EpisodeV1(
            agent_id=agent, ts=BASE_TS, event_id=f"{agent}-ghost", text="x", provenance="ghost"
        )
    )

    async def all_there() -> Any:
        answer = await client.recall(agent, "bridge", k=10, record_usage=False)
        return answer if len(answer.items) == len(events) else None

    await live.eventually(all_there, timeout=30)

    stored = {name: await _stored(live.redis, live.settings, agent, name) for name in events}
    assert stored["blood"]["provenance"] == "bloodstain"
    assert stored["blood"]["kind"] == "warning"
    assert "decay_class" not in stored["blood"] and "pinned" not in stored["blood"]
    assert stored["plain"]["provenance"] == "self"
    assert stored["tactical"]["decay_class"] == "tactical"
    assert (
        stored["structural"]["provenance"],
        stored["structural"]["decay_class"],
        stored["structural"]["pinned"],
    ) == ("clade", "structural", "1")
    for fields in stored.values():
        # The hand values below assume no low-quality speed-up (quality < 0.3 halves
        # a half-life; these texts are specific enough to stay above) and strength 1.
        assert float(fields["quality"]) >= 0.3 and float(fields["strength"]) == 1.0, fields

    def conf(name: str) -> float:
        return float(stored[name]["confidence"])

    expected = {
        "blood": (max(FLOOR, conf("blood") / 2), 1.2),
        "plain": (max(FLOOR, conf("plain") / 8), 1.0),
        "tactical": (FLOOR, 1.0),
        "structural": (conf("structural"), 1.0),
    }
    answer = await client.recall(
        agent, "bridge", k=10, as_of=AS_OF, explain=True, record_usage=False
    )
    assert answer.as_of == AS_OF
    by_event = {item.source_event_id.removeprefix(f"{agent}-"): item for item in answer.items}
    assert set(by_event) == set(events)
    for name, (confidence, boost) in expected.items():
        scores = by_event[name].scores
        assert scores is not None
        assert abs(scores["effective_confidence"] - confidence) < 1e-8, (name, scores)
        assert scores["boost"] == boost, (name, scores)
        scale = 1.0 - PRIOR_SHARE + PRIOR_SHARE * scores["prior"]
        assert abs(scores["score"] - boost * scores["relevance"] * scale) < 1e-8, (name, scores)

    (letter,) = await dead_letters_where(
        live.read_topic, live.settings, lambda d: d.get("agent_id") == agent, timeout=20
    )
    assert (letter["reason"], letter["field"]) == ("invalid_value", "provenance")
