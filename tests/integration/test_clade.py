"""Clades (docs/clades.md), through the real broker, a worker of its own (a prefix of
its own, for the wipe and replay at the end) and Redis.

An origin publishes a warning to its clade: each sibling's recall returns the copy
with its origin and the discounted confidence, witnessed on both sides; an agent
outside the clade never sees it. `unpublish`, a retraction of the original at the
origin, and forgetting the origin each take the copies out of every sibling's
recall, witnessed. Evidence reaches the clade as it is counted (`share_policy`
auto), a sibling's run that acted on a copy credits the origin, and the wiped
deployment's replay rebuilds every member's state digest.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.clade.copies import copy_id
from grimoire.streams.learn.evidence import evidence_id
from grimoire.streams.model.ids import memory_id
from grimoire.tables.clade.store import RedisCladeRegistry, RedisPublishedStore
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.digest import agent_digest
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit
from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import CommandV1, EpisodeV1, OutcomeV1, ToolEventV1
from tests.support.rebuild import replay_journal, stop_and_wipe
from tests.support.stored import memory_fields, settled_digests
from tests.support.workers import client_for, prefixed_settings, workers_fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

T0 = 1_793_000_000_000
MINUTE = 60_000
WARNING = "never restart the primary database while a backup runs: the WAL gets corrupted"
QUERY = "may I restart the primary database while the backup is running?"


@pytest.fixture(scope="module")
def clade_settings(settings: Settings) -> Settings:
    return prefixed_settings(settings, "cl", timer=False, maintenance_enabled=False)


clade_worker = workers_fixture("clade_worker", main="clade_settings")


class Deployment:
    def __init__(self, client: GrimoireClient, redis: Redis, prefix: str, eventually: Any) -> None:
        self.client = client
        self.redis = redis
        self.keys = Keyspace(prefix)
        self.prefix = prefix
        self.eventually = eventually

    async def episode(self, agent: str, event_id: str, text: str, ts: int, **more: Any) -> str:
        await self.client.publish_episode(
            EpisodeV1(agent_id=agent, ts=ts, text=text, event_id=event_id, **more)
        )
        written = memory_id(agent, event_id, 0, ts)
        await self.decided(agent, written)
        return written

    async def decided(self, agent: str, *ids: str) -> None:
        async def done() -> bool:
            held = await self.redis.hkeys(self.keys.decided(agent))
            return all(i.encode() in held for i in ids)

        await self.eventually(done, timeout=60)

    async def command(self, agent: str, command: str, ts: int, **more: Any) -> str:
        event_id = f"{command}-{agent}-{ts}"
        await self.client.send_command(
            CommandV1(agent_id=agent, command=command, ts=ts, event_id=event_id, **more)
        )
        return event_id

    async def ops(self, agent: str) -> list[str]:
        return [r.op for r in await RedisWitnessLog(self.redis, self.prefix).records(agent)]

    async def until_op(self, agent: str, op: str, count: int = 1) -> None:
        async def seen() -> bool:
            return (await self.ops(agent)).count(op) >= count

        await self.eventually(seen, timeout=60)

    async def copy_fields(self, agent: str, memory: str) -> dict[str, str]:
        return await memory_fields(self.redis, self.keys, agent, memory)

    async def sees(self, agent: str, origin: str, original: str) -> list[Any]:
        answer = await self.client.recall(agent, QUERY, k=8, record_usage=False)
        return [
            item
            for item in answer.items
            if item.origin == {"agent_id": origin, "memory_id": original}
        ]


async def test_publish_share_withdraw_credit_and_replay_across_a_clade(
    clade_settings: Settings, clade_worker: dict[str, Any], eventually: Any
) -> None:
    suffix = uuid.uuid4().hex[:6]
    origin, sibling, other, outsider = (f"{n}-{suffix}" for n in ("origin", "sib", "sib2", "out"))
    members = [origin, sibling, other]
    clade = f"ops-{suffix}"
    prefix = clade_settings.broker.topic_prefix
    redis = Redis.from_url(clade_settings.redis.url)
    registry = RedisCladeRegistry(redis, prefix)
    try:
        for agent in members:
            assert await registry.join(clade, agent)
        async with client_for(clade_settings) as client:
            d = Deployment(client, redis, prefix, eventually)
            # Every agent exists (a share to an agent never seen is not journaled).
            for n, agent in enumerate([*members, outsider]):
                await d.episode(agent, f"hello-{agent}", f"agent {agent} started its shift", T0 + n)
            original = await d.episode(
                origin, "warn-1", WARNING, T0 + MINUTE, kind="warning", importance=0.9
            )
            stored = await d.copy_fields(origin, original)

            # publish: a copy at each sibling, discounted, with its origin; witnessed
            await d.command(origin, "publish", T0 + 2 * MINUTE, memory_id=original)
            for agent in (sibling, other):
                await d.until_op(agent, "clade_share")
            assert "publish" in await d.ops(origin)
            published = await RedisPublishedStore(redis, prefix).published(origin)
            assert published[original].clades == (clade,)
            assert published[original].recipients == tuple(sorted((sibling, other)))
            for agent in (sibling, other):
                copy = await d.copy_fields(agent, copy_id(agent, origin, original))
                assert copy["provenance"] == "clade" and copy["kind"] == "warning"
                assert copy["source_event_id"] == f"clade:{origin}/{original}"
                assert float(copy["confidence"]) == pytest.approx(float(stored["confidence"]) * 0.8)
                (item,) = await d.sees(agent, origin, original)
                assert item.id == copy_id(agent, origin, original)
            assert await d.sees(outsider, origin, original) == []
            assert not await redis.exists(
                d.keys.memory(outsider, copy_id(outsider, origin, original))
            )

            # unpublish: the copies leave every sibling's recall, witnessed there
            await d.command(origin, "unpublish", T0 + 3 * MINUTE, memory_id=original)
            for agent in (sibling, other):
                await d.until_op(agent, "clade_withdraw")
                assert await d.sees(agent, origin, original) == []
            assert "unpublish" in await d.ops(origin)

            # published again, then the original retracted at the origin: withdrawn
            await d.command(origin, "publish", T0 + 4 * MINUTE, memory_id=original)
            for agent in (sibling, other):
                await d.until_op(agent, "clade_share", 2)
                assert len(await d.sees(agent, origin, original)) == 1
            await d.command(origin, "retract", T0 + 5 * MINUTE, source_event_id="warn-1")
            for agent in (sibling, other):
                await d.until_op(agent, "clade_withdraw", 2)
                assert await d.sees(agent, origin, original) == []
            assert (await d.ops(origin)).count("unpublish") == 2

            # evidence as it is counted (share_policy auto), and credit flowing back
            await d.command(origin, "configure", T0 + 6 * MINUTE, config={"share_policy": "auto"})
            await d.until_op(origin, "configure")  # commands and episodes race to the journal
            # auto: a warning reaches the clade as it is written
            second = await d.episode(
                origin, "warn-2", "never fail over during a schema migration: it loses writes",
                T0 + 6 * MINUTE + 1, kind="warning", importance=0.9,
            )  # fmt: skip
            for agent in (sibling, other):
                await d.until_op(agent, "clade_share", 3)
                shared = await d.copy_fields(agent, copy_id(agent, origin, second))
                assert shared["provenance"] == "clade" and shared["kind"] == "warning"
            # an explicit agent's warning stays its own
            kept = await d.episode(
                sibling, "warn-3", "never page the database team twice in an hour",
                T0 + 6 * MINUTE + 2, kind="warning", importance=0.9,
            )  # fmt: skip
            await _run(d, origin, "r1", T0 + 7 * MINUTE, success=True)
            entry = evidence_id(origin, ("tag:alert/disk-pressure",), "prune-wal")
            for agent in (sibling, other):
                await d.until_op(agent, "clade_share", 4)
                copy = await d.copy_fields(agent, copy_id(agent, origin, entry))
                assert (copy["validated_count"], copy["contradicted_count"]) == ("1", "0")
            # the sibling acts on the shared evidence (a recall that serves its run)
            answer = await client.recall(
                sibling,
                "the disk is filling up on a database host: what now?",
                k=4,
                serving_run_id=f"{sibling}-r1",
            )
            assert answer.items[0].id == copy_id(sibling, origin, entry)
            await d.until_op(sibling, "usage")
            await _run(d, sibling, "r1", T0 + 8 * MINUTE, success=True)

            # the run used more than one of the origin's copies (the warning too): each
            # credit is its own clade entry, so wait for the entry's, not the first one
            async def entry_credited() -> bool:
                return "clade_validated" in await d.copy_fields(origin, entry)

            await eventually(entry_credited, timeout=60)
            credited = await d.copy_fields(origin, entry)
            assert credited["clade_validated"] == "1"
            assert "clade_credit" in await d.ops(origin)

            assert not await redis.exists(d.keys.memory(other, copy_id(other, sibling, kept)))
            # forgetting the origin withdraws everything it published (warn-2, evidence)
            await d.command(origin, "forget", T0 + 9 * MINUTE)
            for agent in (sibling, other):
                await d.until_op(agent, "clade_withdraw", 4)
                gone = await d.copy_fields(agent, copy_id(agent, origin, second))
                assert gone.get("deleted") == "1"
                copy = await d.copy_fields(agent, copy_id(agent, origin, entry))
                assert copy.get("deleted") == "1"
            assert origin not in await registry.members(clade)

            # a surviving member publishes too: the replay rebuilds a publisher's state
            own = await d.episode(
                sibling, "warn-s", "never drain two regions at once", T0 + 10 * MINUTE,
                kind="warning", importance=0.9,
            )  # fmt: skip
            await d.command(sibling, "publish", T0 + 11 * MINUTE, memory_id=own)
            await d.until_op(other, "clade_share", 5)
            assert (await RedisPublishedStore(redis, prefix).published(sibling))[
                own
            ].recipients == (other,)

            survivors = [sibling, other, outsider]
            before = await settled_digests(redis, prefix, survivors, eventually, quiet_s=2.0)
            for agent in survivors:
                assert (await audit(RedisWitnessLog(redis, prefix), agent)).ok, agent

        # wipe and replay: every member's state is rebuilt from its own journal
        await stop_and_wipe(redis, clade_settings, clade_worker.pop("main"))
        await replay_journal(clade_settings)
        after = [(await agent_digest(redis, prefix, a)).sha256 for a in survivors]
        assert after == before
    finally:
        await redis.aclose()


async def _run(d: Deployment, agent: str, run: str, ts: int, *, success: bool) -> None:
    """A run of the disk-pressure situation whose action is prune-wal, and its end."""
    run_id = f"{agent}-{run}"
    alert = EpisodeV1(
        agent_id=agent, ts=ts, text=f"disk usage at 93% on the database host of {agent}",
        event_id=f"{run_id}-alert", episode_type="alert", importance=0.8, run_id=run_id,
        tags=["alert/disk-pressure"],
    )  # fmt: skip
    act = ToolEventV1(
        agent_id=agent, ts=ts + 1_000, tool="prune-wal", result="pruned 40 GB of WAL",
        event_id=f"{run_id}-act", run_id=run_id,
    )  # fmt: skip
    await d.client.publish_episode(alert)
    await d.client.publish_tool_event(act)
    await d.decided(
        agent,
        memory_id(agent, alert.event_id or "", 0, alert.ts),
        memory_id(agent, act.event_id or "", 0, act.ts),
    )
    await d.client.publish_outcome(
        OutcomeV1(
            agent_id=agent,
            ts=ts + 2_000,
            outcome="run_ended",
            run_id=run_id,
            quality=0.9 if success else 0.1,
            event_id=f"{run_id}-end",
        )
    )

    async def ended() -> bool:
        applied = await d.redis.smembers(d.keys.applied_outcomes(agent))
        return f"{run_id}-end".encode() in applied

    await d.eventually(ended, timeout=60)
