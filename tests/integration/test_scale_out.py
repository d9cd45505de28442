"""Scale-out (issue 24): workers join and die in one consumer group while events flow,
and the fold comes out as one worker's.

Two deployments on one broker and Redis, each on a prefix and consumer group of its
own, with 6 partitions: the same events go to both, in the same order, at a steady
pace. 24 agents cover every partition (checked); each agent's events are of one kind
(repetitive heartbeat episodes, which merge and aggregate; tool events; transcript
lines, some of two blocks), so each agent's inputs are in one order on one topic and
both journals hold them in that order (`bench.faults.valid_events`,
the stream `make bench-faults` runs).

- **scaled**: worker 1 alone; worker 2 joins (the group rebalances to two members),
  worker 3 joins (three), worker 1 is SIGKILLed (back to two: its partitions are
  taken over from their last committed offsets, its outbox drained by their next
  owners). Each change waits until the workers have decided more since the last
  one (a joined worker is also seen at work); the stream is then topped up, so the
  change, and the rebalance it causes (as the broker first shows it), find
  published events undecided (asserted);
- **reference**: one worker, nothing else.

Once every published event is decided in both, a few outcomes naming memories both
wrote go to both, then the scaled deployment answers a few recalls. Then, for the
scaled deployment:

- nothing lost: every candidate of every published event is in its agent's
  `decided` hash (written in the decision's transaction). A lost event never gets
  there: the wait for "all decided" ends on its stall limit, and `lost` names it;
- nothing decided twice: at most one distinct decision event per candidate on
  memory-events and no more memory records per source event than candidates
  (`account_valid`, as bench-faults counts). A byte-identical copy of an event is
  the outbox sending again what a killed worker had already sent (at-least-once),
  not a second decision. Every decision has its event; nothing is dead-lettered;
- the same decisions as the reference, candidate by candidate, and per agent the
  same state and the same witness chain, as bench-faults compares them
  (`comparable_digest`): everything stored for the agent but its witness log, as
  `agent_digest` digests it, and the chain record by record on (seq, op, ids,
  fields digest). Full `agent_digest`s are not comparable: witness records name
  journal positions (partition, offset), and two deployments have two journals
  (other agents interleave differently, a killed worker's sequencer journals an
  input again). A decision applied twice (a reinforcement, an aggregate's count)
  or an input folded twice changes the state digest; a mutation left unwitnessed,
  the chain;
- the recalls, served by the workers left standing, answer with the agent's
  memories, which the reference holds too. Answers are not compared between the
  deployments, nor is usage recorded: what the lexical lane finds depends on the
  index's write history, not only on its documents (two indexes of equal documents,
  garbage collected, held 82,702 and 87,904 records; one answer in eight then
  differed in its fifth item), and a usage entry would carry that into the fold.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner
from redis.asyncio import Redis

from bench.faults import (
    ValidEvent,
    account_valid,
    comparable_digest,
    decided_sets,
    decided_total,
    decision_event_counts,
    expected_candidates,
    read_topics,
    records_per_event,
    valid_events,
)
from grimoire.infra.local.worker_process import start_worker
from grimoire.infra.settings import Settings
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.witness_store import RedisWitnessLog
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import OutcomeV1
from tests.support.workers import ROOT, add_worker, client_for, prefixed_settings, running_workers

PARTITIONS = 6
AGENTS = 24  # every partition holds three or more of them
MAX_EVENTS = 6_000  # the stream's length at most: the changes are over long before
RATE = 20.0  # events per second into each deployment, at most
BACKLOG = 400  # candidates published and not yet decided by the scaled workers, at most
STEP = 120  # candidates decided between one membership change and the next
PHASE_S = 240.0  # a worker joins, or the group settles, within this
STALL_S = 60.0  # no decision for this long while some are missing: stop waiting
OUTCOME_AGENTS = 8
RECALLS = ("slippage reverted swap", "oracle liquidity position", "health factor depth")

pytestmark = pytest.mark.timeout(600)


def _deployment(settings: Settings, head: str) -> Settings:
    prefixed = prefixed_settings(settings, head, partitions=PARTITIONS)
    # A consumer group of its own: the membership this test changes is its alone.
    return prefixed.with_values(app_id=f"grimoire-{prefixed.broker.topic_prefix}")


def _worker(settings: Settings, logs: Path, name: str) -> Settings:
    return settings.with_values(data_dir=logs / f"{name}-data")


@dataclass
class _Stream:
    """The events, published to every deployment in one order: `RATE` a second, never
    more than `BACKLOG` candidates ahead of what the watched deployment has decided,
    and on `fill` at once up to that."""

    events: Sequence[ValidEvent]
    candidates: Sequence[int]  # candidates of events[i]
    clients: Sequence[GrimoireClient]
    redis: Redis
    watched: str  # its prefix
    agents: list[str]
    published: int = 0
    published_candidates: int = 0
    decided: int = 0
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    # While set, every round fills up to `BACKLOG`: a change's rebalance must find
    # events waiting however fast the workers drain them.
    full: bool = False
    _filled: asyncio.Event | None = None

    async def waiting(self) -> int:
        """Candidates published and not decided yet, read now."""
        decided = await decided_total(self.redis, self.watched, self.agents)
        self.decided = self.decided if decided is None else decided  # None: Redis away
        return self.published_candidates - self.decided

    async def fill(self) -> int:
        """Up to `BACKLOG` candidates waiting, at once; how many wait then."""
        self._filled = filled = asyncio.Event()
        await asyncio.wait_for(filled.wait(), PHASE_S)
        return await self.waiting()

    async def run(self) -> None:
        last, allowance = time.monotonic(), 0.0
        while not self.stopped.is_set():
            now = time.monotonic()
            allowance, last = min(allowance + (now - last) * RATE, RATE), now
            filled, self._filled = self._filled, None
            room = BACKLOG - await self.waiting()
            end = self.published
            while (
                end < len(self.events)
                and self.candidates[end] <= room
                and (filled is not None or self.full or end - self.published < int(allowance))
            ):
                room -= self.candidates[end]
                end += 1
            if filled is None and not self.full:
                allowance -= end - self.published
            for client in self.clients:
                for event in self.events[self.published : end]:
                    topic = getattr(client.topics, event.topic_kind)
                    await client.publish_raw(topic, event.agent_id, event.value, wait=False)
                await client.flush()
            self.published_candidates += sum(self.candidates[self.published : end])
            self.published = end
            if filled is not None:
                filled.set()
            await asyncio.sleep(0.25)


async def _until(
    what: str,
    check: Callable[[], Awaitable[bool]],
    *,
    timeout: float = PHASE_S,
    publisher: asyncio.Task[None] | None = None,
    interval: float = 0.25,
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if publisher is not None and publisher.done():
            publisher.result()  # its failure, raised here
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        await asyncio.sleep(interval)


async def _group(admin: AIOKafkaAdminClient, group: str) -> tuple[str, int]:
    """The consumer group's state and member count, as the broker has them."""
    (response,) = await admin.describe_consumer_groups([group])
    _, _, state, _, _, members = response.groups[0]
    return state, len(members)


async def _logged(log: Path, line: str) -> bool:
    return log.exists() and line in log.read_text(errors="replace")


async def _all_decided(
    redis: Redis, prefixes: Sequence[str], agents: list[str], total: int
) -> None:
    """Until every deployment has decided `total` candidates, or decisions stop."""
    moved, last = time.monotonic(), [-1] * len(prefixes)
    while True:
        now = [await decided_total(redis, prefix, agents) or 0 for prefix in prefixes]
        if all(n >= total for n in now):
            return
        if now != last:
            moved, last = time.monotonic(), now
        elif time.monotonic() - moved > STALL_S:
            return  # the accounting names what is missing
        await asyncio.sleep(0.5)


async def _witnessed(redis: Redis, prefix: str, agent: str, op: str, wanted: int) -> bool:
    """Whether the agent's chain holds `wanted` records of `op` (more fails at once)."""
    found = sum(1 for r in await RedisWitnessLog(redis, prefix).records(agent) if r.op == op)
    assert found <= wanted, f"{agent} in {prefix}: {found} {op} records for {wanted} inputs"
    return found == wanted


async def _decisions(redis: Redis, prefix: str, agents: list[str]) -> dict[str, dict[str, str]]:
    keys = Keyspace(prefix)
    out: dict[str, dict[str, str]] = {}
    for agent in agents:
        stored = await redis.hgetall(keys.decided(agent))
        out[agent] = {text_of(k): text_of(v) for k, v in stored.items()}
    return out


async def _fold(redis: Redis, prefix: str, agent: str) -> tuple[str, str, str]:
    """(state digest, witness chain by content, witness records)."""
    digest = await comparable_digest(redis, prefix, agent)
    return digest["state"], digest["witness"], digest["records"]


async def test_workers_joining_and_dying_mid_stream_fold_as_one_worker(
    settings: Settings, tmp_path: Path
) -> None:
    began = time.monotonic()
    scaled, reference = _deployment(settings, "so"), _deployment(settings, "sr")
    prefixes = (scaled.broker.topic_prefix, reference.broker.topic_prefix)
    events = valid_events(events=MAX_EVENTS, agents=AGENTS, seed=24)
    agents = sorted({e.agent_id for e in events})
    every = list(range(PARTITIONS))
    assert {DefaultPartitioner()(a.encode(), every, every) for a in agents} == set(every)
    expected_all = expected_candidates(events, scaled)
    logs = tmp_path
    redis = Redis.from_url(scaled.redis.url)
    admin = AIOKafkaAdminClient(bootstrap_servers=scaled.bootstrap_servers)
    await admin.start()
    changes: list[dict[str, Any]] = []
    recalled: list[tuple[str, list[tuple[str, str]]]] = []
    try:
        async with running_workers(logs) as held:
            await asyncio.gather(
                add_worker(held, "w1", _worker(scaled, logs, "w1")),
                add_worker(held, "reference", _worker(reference, logs, "reference")),
            )
            async with client_for(scaled) as sclient, client_for(reference) as rclient:
                clients = {
                    scaled.broker.topic_prefix: sclient,
                    reference.broker.topic_prefix: rclient,
                }
                counts = [len(expected_all[e.event_id]) for e in events]
                stream = _Stream(events, counts, (sclient, rclient), redis, prefixes[0], agents)
                publisher = asyncio.create_task(stream.run(), name="scale-out-publisher")

                async def group_of(size: int) -> bool:
                    return await _group(admin, scaled.worker.app_id) == ("Stable", size)

                async def decided_since(mark: int) -> bool:
                    return stream.decided >= mark + STEP

                async def change(what: str, size: int, act: Callable[[], None]) -> None:
                    """`act` once STEP more are decided, with events waiting; then
                    until the group is `size` members again."""
                    mark = changes[-1]["decided"] if changes else 0
                    await _until(
                        f"{STEP} more decided before: {what}",
                        lambda: decided_since(mark),
                        publisher=publisher,
                    )
                    was = await _group(admin, scaled.worker.app_id)
                    waiting_at_act = await stream.fill()
                    stream.full = True
                    act()
                    moved: list[int] = []

                    async def rebalancing() -> bool:
                        # The first sight of the group otherwise than it was.
                        if await _group(admin, scaled.worker.app_id) == was:
                            return False
                        moved.append(await stream.waiting())
                        return True

                    try:
                        await _until(
                            f"a rebalance after: {what}",
                            rebalancing,
                            publisher=publisher,
                            interval=0.05,
                        )
                    finally:
                        stream.full = False
                    await _until(
                        f"a group of {size} after: {what}",
                        lambda: group_of(size),
                        publisher=publisher,
                    )
                    changes.append(
                        {
                            "change": what,
                            "waiting_at_act": waiting_at_act,
                            "waiting_at_rebalance": moved[0],
                            "decided": stream.decided,
                            "published": stream.published,
                            "at_s": round(time.monotonic() - began, 1),
                        }
                    )

                def join(name: str) -> Callable[[], None]:
                    def start() -> None:
                        worker = _worker(scaled, logs, name)
                        held[name] = start_worker(worker, logs / f"{name}.log", cwd=ROOT)

                    return start

                def kill_w1() -> None:
                    process: subprocess.Popen[bytes] = held["w1"]
                    process.send_signal(signal.SIGKILL)
                    process.wait()

                await _until("worker 1 alone in its group", lambda: group_of(1))
                for name, size in (("w2", 2), ("w3", 3)):
                    await change(f"worker {name[1]} joins", size, join(name))
                    # It holds partitions and works them: its runtime is built on
                    # the first input it handles.
                    await _until(
                        f"{name} at work",
                        lambda log=logs / f"{name}.log": _logged(log, "runtime ready"),
                        publisher=publisher,
                    )
                await change("worker 1 SIGKILLed", 2, kill_w1)
                mark = stream.decided
                await _until(
                    "the survivors decide on", lambda: decided_since(mark), publisher=publisher
                )
                stream.stopped.set()
                await publisher
                published = events[: stream.published]
                expected = {e.event_id: expected_all[e.event_id] for e in published}
                total = sum(len(pairs) for pairs in expected.values())
                await _all_decided(redis, prefixes, agents, total)

                # Outcomes naming memories both wrote, published once everything
                # is decided: after each agent's events in both journals.
                written = await _decisions(redis, reference.broker.topic_prefix, agents)
                outcomes: dict[str, int] = {}
                # Each agent's events are in event-time order: its last is its latest.
                last_ts = {e.agent_id: int(orjson.loads(e.value)["ts"]) for e in published}
                for n, agent in enumerate(agents[:: AGENTS // OUTCOME_AGENTS]):
                    memories = sorted(c for c, d in written[agent].items() if d == "admit")
                    for i, memory in enumerate(memories[:2]):
                        outcome = OutcomeV1(
                            agent_id=agent,
                            ts=last_ts[agent] + 1_000 + i,
                            outcome="positive" if (n + i) % 2 == 0 else "negative",
                            memory_ids=[memory],
                            event_id=f"{agent}-outcome-{i}",
                        )
                        for client in clients.values():
                            await client.publish_outcome(outcome)
                        outcomes[agent] = outcomes.get(agent, 0) + 1
                for prefix in prefixes:
                    for agent, sent in outcomes.items():
                        await _until(
                            f"{agent}'s outcomes applied in {prefix}",
                            lambda p=prefix, a=agent, s=sent: _witnessed(redis, p, a, "outcome", s),
                        )

                # Recalls, served by the workers left standing. No usage is recorded:
                # what the lexical lane finds depends on the index's write history
                # (see above), and a usage entry would carry it into the fold.
                for n, agent in enumerate(agents[1::3]):
                    answer = await sclient.recall(
                        agent, RECALLS[n % len(RECALLS)], k=5, record_usage=False, timeout=60
                    )
                    recalled.append((agent, [(i.id, i.agent_id) for i in answer.items]))
            for name in ("w2", "w3", "reference"):
                assert held[name].poll() is None, f"{name} died: see {logs / f'{name}.log'}"
        stopped_s = time.monotonic() - began
        # Every worker stopped: what they published is on the broker.
        topics = TopicNames(scaled.broker.topic_prefix)
        records = await read_topics(
            scaled.bootstrap_servers, [topics.memory_events, topics.dead_letters]
        )
        decision_events, redelivered = decision_event_counts(
            value for _, _, value in records[topics.memory_events]
        )
        account = account_valid(
            expected,
            await decided_sets(redis, scaled.broker.topic_prefix, agents),
            decision_events,
            await records_per_event(redis, scaled.broker.topic_prefix),
        )
        reference_account = account_valid(
            expected, await decided_sets(redis, reference.broker.topic_prefix, agents), {}, {}
        )
        decisions = {prefix: await _decisions(redis, prefix, agents) for prefix in prefixes}
        in_reference = [
            await redis.exists(Keyspace(reference.broker.topic_prefix).memory(owner, memory)) == 1
            for _, items in recalled
            for memory, owner in items
        ]
        folds = {prefix: {a: await _fold(redis, prefix, a) for a in agents} for prefix in prefixes}
    finally:
        await admin.close()
        await redis.aclose()

    report = {
        "events": len(expected),
        "candidates": total,
        "changes": changes,
        "events_redelivered": redelivered,
        "workers_stopped_at_s": round(stopped_s, 1),
        "seconds": round(time.monotonic() - began, 1),
    }
    print(orjson.dumps(report).decode())
    # Each change, and the rebalance it caused, came with events waiting.
    assert all(c["waiting_at_act"] > 0 and c["waiting_at_rebalance"] > 0 for c in changes), report
    assert reference_account.lost == 0, reference_account
    assert (account.lost, account.lost_examples) == (0, ()), account
    assert (account.duplicated, account.duplicated_examples) == (0, ()), account
    assert account.decision_events_missing == 0, account
    assert records[topics.dead_letters] == []
    one, two = (decisions[prefix] for prefix in prefixes)
    otherwise = {a: sorted(one[a].items() ^ two[a].items())[:4] for a in agents if one[a] != two[a]}
    assert otherwise == {}, "decided otherwise than by one worker: (candidate, decision)"
    one_fold, two_fold = (folds[prefix] for prefix in prefixes)
    differ = {a: (one_fold[a], two_fold[a]) for a in agents if one_fold[a] != two_fold[a]}
    assert differ == {}, "(state digest, witness chain, records): scaled, reference"
    for agent, items in recalled:
        assert items and {owner for _, owner in items} == {agent}, (agent, items)
    assert all(in_reference), recalled  # the memories recalled are the reference's too
