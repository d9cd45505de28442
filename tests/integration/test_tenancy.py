"""Tenancy through the real broker, worker and Redis: agents that share texts,
event ids, sessions, tags and entities never see each other's memories, in any
lane, in the walk or in episode expansion."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import EpisodeV1

pytestmark = pytest.mark.integration

BASE_TS = 1_790_000_000_000
WORDS = ("disk", "cpu", "node", "seven", "backup", "deploy")
WORDS += ("staging", "prod", "oracle", "gas", "reorg", "funding")
SHARED_TEXT = "disk full on node seven"


def _events(agents: list[str], rng: random.Random) -> list[EpisodeV1]:
    events = [
        # The very same event (id, text, time, session) from every agent.
        EpisodeV1(
            agent_id=agent,
            ts=BASE_TS,
            event_id="common-0",
            text=SHARED_TEXT,
            session_id="s-shared",
            tags=["topic/disk"],
            entities=["node-7"],
        )
        for agent in agents
    ]
    for n in range(1, 61):
        text = SHARED_TEXT if n % 5 == 0 else " ".join(rng.sample(WORDS, 5))
        events.append(
            EpisodeV1(
                agent_id=rng.choice(agents),
                ts=BASE_TS + n * 1_000,
                event_id=f"e{n}",
                text=text,
                session_id=f"s-{n % 4}",  # the same session names in every agent
                tags=[f"topic/{word}" for word in rng.sample(WORDS, 2)],
                entities=[f"node-{rng.randrange(3)}"],
            )
        )
    return events


async def test_randomised_agents_sharing_everything_never_see_each_other(
    client: GrimoireClient, eventually: Any
) -> None:
    rng = random.Random(20261125)
    suffix = uuid.uuid4().hex[:8]
    agents = [f"tenant-{i}-{suffix}" for i in range(4)]
    events = _events(agents, rng)
    owned: dict[str, set[str]] = {agent: set() for agent in agents}
    latest: dict[str, int] = {}
    for event in events:
        owned[event.agent_id].add(event.event_id or "")
        latest[event.agent_id] = max(latest.get(event.agent_id, 0), event.ts)
        await client.publish_episode(event)

    for agent in agents:

        async def caught_up(agent: str = agent) -> Any:
            answer = await client.recall(agent, "disk", k=1, record_usage=False)
            return answer if answer.watermark == latest[agent] else None

        await eventually(caught_up, timeout=30)

    seen: dict[str, set[str]] = {agent: set() for agent in agents}
    for n in range(24):
        agent = agents[n % len(agents)]
        query = SHARED_TEXT if n < len(agents) else " ".join(rng.sample(WORDS, 3))
        answer = await client.recall(
            agent, query, k=20, expand_episodes=True, record_usage=False, timeout=20
        )
        assert answer.agent_id == agent
        assert answer.items, (agent, query)
        for item in answer.items:
            assert item.agent_id == agent
            assert item.source_event_id in owned[agent]
            seen[agent].add(item.id)
            seen[agent].update(sibling["id"] for sibling in item.episode or ())
        if query == SHARED_TEXT:  # every agent holds it: each finds its own copy first
            assert answer.items[0].text == SHARED_TEXT
    for agent in agents:
        others = set().union(*(seen[other] for other in agents if other != agent))
        assert not seen[agent] & others, agent
