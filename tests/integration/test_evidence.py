"""Evidence that aggregates (docs/learning.md), end to end through the real broker,
worker and Redis: runs of a named situation (a tagged alert) whose action is a
tool call end with a quality; the agent's evidence entries count them per
situation x action, and a recall about the situation puts them first, the best
posterior first, with their counts on the wire. A twin with learning off gets
the same events and no evidence.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from grimoire.streams.learn.evidence import evidence_id, situation_edge
from grimoire.streams.model.ids import memory_id
from grimoire.streams.recall.evidence_first import EVIDENCE_REASON
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.curator_store import RedisCuratorStore, playbook_text
from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import CommandV1, EpisodeV1, OutcomeV1, ToolEventV1
from tests.support.live import Live
from tests.support.stored import memory_fields, outcomes_applied

BASE_TS = 1_792_000_000_000
MINUTE = 60_000
DISK = ("tag:alert/disk-pressure",)
HOSTS = ("db-3", "db-7", "pg-12", "pg-40", "ledger-2", "cache-9", "queue-5")
# (situation tag, tool, succeeded) per run, in order
RUNS = (
    ("disk-pressure", "rotate-logs", False),
    ("disk-pressure", "prune-wal", True),
    ("disk-pressure", "rotate-logs", True),
    ("consumer-lag", "scale-consumers", True),
    ("disk-pressure", "prune-wal", True),
    ("disk-pressure", "rotate-logs", False),
    ("disk-pressure", "prune-wal", True),
)
QUERY = "the disk is filling up on a database host: what should be done?"


def _inputs(agent: str, number: int) -> tuple[EpisodeV1, ToolEventV1, EpisodeV1]:
    tag, tool, success = RUNS[number]
    run_id = f"{agent}-run-{number}"
    ts = BASE_TS + number * 10 * MINUTE
    host = HOSTS[number]
    what = "disk usage at 9{n}% on {h}" if tag == "disk-pressure" else "consumer lag on {h}"
    return (
        EpisodeV1(
            agent_id=agent,
            ts=ts,
            text=f"alert fired: {what.format(n=number, h=host)}, growing every hour",
            event_id=f"{run_id}-alert",
            episode_type="alert",
            importance=0.7,
            run_id=run_id,
            tags=[f"alert/{tag}"],
        ),
        ToolEventV1(
            agent_id=agent,
            ts=ts + MINUTE,
            tool=tool,
            result=f"ran {tool} on {host}",
            event_id=f"{run_id}-act",
            run_id=run_id,
        ),
        EpisodeV1(
            agent_id=agent,
            ts=ts + 2 * MINUTE,
            text=f"checked {host} again after the {tool}: verdict "
            + ("success" if success else "failure"),
            event_id=f"{run_id}-result",
            episode_type="report",
            outcome="success" if success else "failure",
            importance=0.8,
            run_id=run_id,
        ),
    )


async def _play(
    client: GrimoireClient, redis: Redis, keys: Keyspace, agent: str, eventually: Any
) -> None:
    """Each run's inputs, then (once they are decided: a run's end learns from the
    members the journal holds) its end."""
    for number, (_, _, success) in enumerate(RUNS):
        alert, act, result = _inputs(agent, number)
        await client.publish_episode(alert)
        await client.publish_tool_event(act)
        await client.publish_episode(result)
        ids = [
            memory_id(agent, event.event_id or "", 0, event.ts) for event in (alert, act, result)
        ]

        async def decided(wanted: list[str] = ids) -> bool:
            held = await redis.hkeys(keys.decided(agent))
            return all(i.encode() in held for i in wanted)

        await eventually(decided, timeout=60)
        end = OutcomeV1(
            agent_id=agent,
            ts=BASE_TS + number * 10 * MINUTE + 3 * MINUTE,
            outcome="run_ended",
            run_id=f"{agent}-run-{number}",
            quality=0.9 if success else 0.1,
            event_id=f"{agent}-run-{number}-end",
        )
        await client.publish_outcome(end)

        async def ended(wanted: str = end.event_id or "") -> bool:
            return await outcomes_applied(redis, keys, agent, [wanted])

        await eventually(ended, timeout=60)


async def test_runs_count_per_situation_and_action_and_lead_a_matching_recall(live: Live) -> None:
    client, redis_client, keys = live.client, live.redis, live.keys
    learner, control = live.agents
    await client.send_command(
        CommandV1(agent_id=control, command="configure", config={"learn_from_outcomes": False})
    )
    for agent in (learner, control):
        await _play(client, redis_client, keys, agent, live.eventually)

    prune = evidence_id(learner, DISK, "prune-wal")
    rotate = evidence_id(learner, DISK, "rotate-logs")
    for entry, counts in ((prune, ("3", "0")), (rotate, ("1", "2"))):
        stored = await memory_fields(
            redis_client, keys, learner, entry, "validated_count", "contradicted_count", "kind"
        )
        assert (stored["validated_count"], stored["contradicted_count"]) == counts
        assert stored["kind"] == "insight"

    answer = await client.recall(learner, QUERY, k=6, explain=True, record_usage=False)
    first, second = answer.items[0], answer.items[1]
    assert (first.id, second.id) == (prune, rotate)
    assert first.evidence == {
        "situation": situation_edge(DISK),
        "action": "prune-wal",
        "successes": 3,
        "failures": 0,
        "posterior_mean": 0.8,
        # no sibling shares: the pooled counts are the agent's own
        "pooled_successes": 3.0,
        "pooled_failures": 0.0,
        "pooled_posterior_mean": 0.8,
    }
    assert second.evidence is not None and second.evidence["posterior_mean"] == 0.4
    assert EVIDENCE_REASON in (first.reasons or [])
    # the other situation's entry is not led in (the query is not about it)
    lag = evidence_id(learner, ("tag:alert/consumer-lag",), "scale-consumers")
    assert all(
        item.id != lag or EVIDENCE_REASON not in (item.reasons or []) for item in answer.items
    )

    # PLAYBOOK.md says which action works best where, with its evidence count
    text = await playbook_text(
        RedisCuratorStore(redis_client, live.prefix),
        learner,
        live.settings.recall.clade_discount,
    )
    assert text is not None
    assert "- works best: prune-wal: 3 of 3 runs succeeded _(posterior mean 0.80)_" in text
    assert "- rotate-logs: 1 of 3 runs succeeded _(posterior mean 0.40)_" in text

    # learning off: the runs close, nothing is counted, no evidence leads
    off = await client.recall(control, QUERY, k=6, record_usage=False)
    assert off.items and all(item.evidence is None for item in off.items)
    assert not await redis_client.exists(
        keys.memory(control, evidence_id(control, DISK, "prune-wal"))
    )
