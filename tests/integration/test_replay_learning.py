"""A replay with learning, facts and imports in the journal (issue 22, must-show 6),
through the real broker, workers and Redis.

A worker of its own on a prefix of its own (maintenance off, so nothing but the
inputs moves the state), and a donor deployment on a second prefix whose agent is
exported and imported here. Into the first prefix's journal go, for four agents:

- runs of episodes and tool events (with `latency_ms`), some run's `run_ended`
  outcome journaled before its last member (credited late), successes and
  failures; recalls with `serving_run_id` made before acting (their usage entries
  applied before the run goes on), an explicit `positive` outcome naming memories;
- a `configure` turning one agent's learning off and, later, on again;
- facts asserted, superseded and retracted; the retraction of a run's member;
- an ordinary import of the donor's export (a fresh agent here, carrying a run's
  recalls that an outcome here then learns from) and a successor import of it.

Every digest (full and state) is taken once everything is applied, with 32
recall answers (explain, causal links, no usage) as bytes; the memory state is
wiped (not the key store) and the journal replayed: the digests are the same,
every witness chain verifies, and the answers are byte-identical. On a digest
mismatch the assertion names every key that differs, family by family.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from grimoire.infra.exchange import export_agent, import_file
from grimoire.infra.local.worker_process import stop_worker
from grimoire.infra.settings import Settings
from grimoire.streams.model.ids import memory_id
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_footprint
from grimoire.tables.trust.digest import (
    EXCLUDED_FAMILIES,
    EXCLUDED_FIELDS,
    _without,
    agent_digest,
    state_digest,
)
from grimoire.tables.trust.stored_values import member_value, read_stored
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit
from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import CommandV1, EpisodeV1, FactV1, OutcomeV1, ToolEventV1
from tests.support.rebuild import replay_journal, stop_and_wipe
from tests.support.stored import memory_fields, settled_digests, wait_outcomes_applied
from tests.support.workers import add_worker, client_for, prefixed_settings, workers_fixture

BASE_TS = 1_792_000_000_000
MINUTE = 60_000
LEARNING_OFF = {"learn_from_outcomes": False, "use_learned_weights": False}
LEARNING_ON = {"learn_from_outcomes": True, "use_learned_weights": True}

pytestmark = pytest.mark.timeout(900)

# Per theme: what a run's alert, action (a tool call) and report say, and the query
# a recall made before acting asks. Entities tie the memories to the facts.
THEMES: dict[str, dict[str, str]] = {
    "deploy": {
        "alert": "alert: the checkout deploy of build {n} timed out in region {r}",
        "tool": "kubectl",
        "result": "restarted the {s} pods for build {n}",
        "report": "the {s} restart {verdict} the checkout deploy of build {n} in region {r}",
        "query": "checkout deploy timed out, what fixed it",
        "entity": "payment-svc",
    },
    "replica": {
        "alert": "alert: replication lag on the orders database reached {n} seconds in {r}",
        "tool": "psql",
        "result": "promoted the {s} replica after lag of {n} seconds",
        "report": "promoting the {s} replica {verdict} the orders database lag in {r}",
        "query": "orders database replication lag, what worked",
        "entity": "orders-db",
    },
    "cache": {
        "alert": "alert: cache eviction storm on the session tier, hit rate {n} percent in {r}",
        "tool": "redis-cli",
        "result": "raised maxmemory on the {s} shard to {n} gigabytes",
        "report": "raising maxmemory on {s} {verdict} the eviction storm in {r}",
        "query": "session cache eviction storm, how was it handled",
        "entity": "session-cache",
    },
}
REGIONS = ("Frankfurt", "Virginia", "Mumbai", "Stockholm", "Oregon", "Dublin", "Tokyo")
# A name per run number, so no run's memory folds into another's at admission.
SERVICES = ("billing", "cart", "search", "auth", "inventory", "shipping", "catalog")


# ---- fixtures ----------------------------------------------------------------------


def _prefixed(settings: Settings, head: str) -> Settings:
    return prefixed_settings(settings, head, timer=False, maintenance_enabled=False)


@pytest.fixture(scope="module")
def main_settings(settings: Settings) -> Settings:
    return _prefixed(settings, "rl")


@pytest.fixture(scope="module")
def donor_settings(settings: Settings) -> Settings:
    return _prefixed(settings, "rd")


workers = workers_fixture("workers", main="main_settings")


# ---- inputs ------------------------------------------------------------------------


class Agent:
    """One agent's runs on one deployment, and the waits that order its inputs."""

    def __init__(
        self, client: GrimoireClient, redis: Redis, prefix: str, agent_id: str, theme: str,
        eventually: Any,
    ) -> None:  # fmt: skip
        self.client = client
        self.redis = redis
        self.keys = Keyspace(prefix)
        self.id = agent_id
        self.theme = THEMES[theme]
        self.eventually = eventually
        self.outcomes: list[str] = []

    def run_id(self, n: int) -> str:
        return f"{self.id}-run-{n}"

    def _ts(self, n: int, step: int) -> int:
        return BASE_TS + n * 10 * MINUTE + step * MINUTE

    def member(self, n: int, part: str) -> str:
        """The memory id of run `n`'s alert, action or report."""
        step = {"alert": 0, "action": 1, "report": 2}[part]
        return memory_id(self.id, f"{self.run_id(n)}-{part}", 0, self._ts(n, step))

    def members(self, n: int, success: bool) -> dict[str, Any]:
        """Run `n`'s alert, action (a tool call, with its latency) and report."""
        run_id, theme = self.run_id(n), self.theme
        words = {"n": 400 + n, "r": REGIONS[n % len(REGIONS)], "s": SERVICES[n % len(SERVICES)],
                 "verdict": "fixed" if success else "did not fix"}  # fmt: skip
        common = {"agent_id": self.id, "run_id": run_id}
        return {
            "alert": EpisodeV1(
                **common, ts=self._ts(n, 0), tick=3 * n, event_id=f"{run_id}-alert",
                episode_type="alert", text=theme["alert"].format(**words),
                entities=[theme["entity"]],
            ),
            "action": ToolEventV1(
                **common, ts=self._ts(n, 1), tick=3 * n + 1, event_id=f"{run_id}-action",
                tool=theme["tool"], result=theme["result"].format(**words),
                latency_ms=250.0 + 100 * n,
            ),
            "report": EpisodeV1(
                **common, ts=self._ts(n, 2), tick=3 * n + 2, event_id=f"{run_id}-report",
                episode_type="report", outcome="success" if success else "failure",
                text=theme["report"].format(**words), entities=[theme["entity"]],
            ),
        }  # fmt: skip

    async def field(self, memory: str, name: str) -> str | None:
        return (await memory_fields(self.redis, self.keys, self.id, memory, name)).get(name)

    async def publish(self, event: Any) -> None:
        if isinstance(event, ToolEventV1):
            await self.client.publish_tool_event(event)
        else:
            await self.client.publish_episode(event)

    async def written(self, *memory_ids: str) -> None:
        async def done() -> bool:
            decided = set(await self.redis.hkeys(self.keys.decided(self.id)))
            return all(m.encode() in decided for m in memory_ids)

        await self.eventually(done, timeout=60, interval=0.1)

    async def end(self, n: int, quality: float) -> None:
        """Run `n`'s outcome, once it is applied."""
        outcome = OutcomeV1(
            agent_id=self.id, ts=self._ts(n, 3), outcome="run_ended", run_id=self.run_id(n),
            quality=quality, event_id=f"{self.run_id(n)}-ended",
        )  # fmt: skip
        await self.client.publish_outcome(outcome)
        await self.applied(outcome.event_id or "")

    async def applied(self, outcome_id: str) -> None:
        self.outcomes.append(outcome_id)
        await wait_outcomes_applied(self.eventually, self.redis, self.keys, self.id, [outcome_id])

    async def run(self, n: int, quality: float, *, late: bool, recall: bool) -> None:
        """Run `n`: a recall for it first (its usage applied); its members; its outcome,
        before the report when `late` (the report is then credited as it is written)."""
        if recall:
            await self.recall_for(n)
        events = self.members(n, quality >= 0.5)
        for part in ("alert", "action") if late else ("alert", "action", "report"):
            await self.publish(events[part])
        if not late:
            await self.written(*(self.member(n, p) for p in ("alert", "action", "report")))
            await self.end(n, quality)
            return
        await self.written(self.member(n, "alert"), self.member(n, "action"))
        await self.end(n, quality)
        await self.publish(events["report"])
        await self.written(self.member(n, "report"))

    async def recall_for(self, n: int) -> None:
        answer = await self.client.recall(
            self.id, self.theme["query"], k=3, serving_run_id=self.run_id(n),
            include_causal=True, explain=True, timeout=30,
        )  # fmt: skip
        assert answer.items, (self.id, n)

        async def kept() -> bool:
            return bool(await self.redis.hexists(self.keys.run_recalls(self.id), self.run_id(n)))

        await self.eventually(kept, timeout=60, interval=0.1)

    async def configure(self, config: Mapping[str, Any], *, stored: bool) -> None:
        await self.client.send_command(
            CommandV1(agent_id=self.id, command="configure", config=dict(config))
        )

        async def done() -> bool:  # the defaults are stored as nothing
            return bool(await self.redis.exists(self.keys.agent_config(self.id))) == stored

        await self.eventually(done, timeout=60, interval=0.1)

    async def positive(self, n: int, *parts: str) -> None:
        outcome_id = f"{self.id}-thanks-{n}"
        await self.client.publish_outcome(
            OutcomeV1(
                agent_id=self.id, ts=self._ts(n, 5), outcome="positive",
                memory_ids=[self.member(n, p) for p in parts], event_id=outcome_id,
            )
        )  # fmt: skip
        await self.applied(outcome_id)

    async def facts(self, n: int) -> None:
        """Assert, supersede (same subject and predicate) and retract the superseding
        fact (its predecessor is restored); one more fact stays."""
        entity, ts = self.theme["entity"], self._ts(n, 6)
        asserted = [
            FactV1(agent_id=self.id, ts=ts, subject=entity, predicate="runs_on",
                   object="node-a", valid_from=10 * n, event_id=f"{self.id}-fact-1"),
            FactV1(agent_id=self.id, ts=ts + 1, subject=entity, predicate="runs_on",
                   object="node-b", valid_from=10 * n + 5, event_id=f"{self.id}-fact-2"),
            FactV1(agent_id=self.id, ts=ts + 2, subject=entity, predicate="owner",
                   object="platform team", valid_from=10 * n, event_id=f"{self.id}-fact-3"),
            FactV1(agent_id=self.id, ts=ts + 3, subject="node-a", predicate="max_latency_ms",
                   object="900", valid_from=10 * n, object_is_entity=False,
                   event_id=f"{self.id}-fact-4"),
        ]  # fmt: skip
        for fact in asserted:
            await self.client.assert_fact(fact)

        async def known() -> bool:
            return len(await self.client.facts_as_known_at(self.id, ts + 3)) == len(asserted)

        await self.eventually(known, timeout=60, interval=0.2)
        await self.retract(f"{self.id}-fact-2", ts + 4)

        async def restored() -> bool:
            found = await self.client.facts_valid_at(
                self.id, 10 * n + 6, subject=entity, predicate="runs_on"
            )
            return [f.object for f in found] == ["node-a"]

        await self.eventually(restored, timeout=60, interval=0.2)

    async def retract(self, source_event_id: str, ts: int) -> None:
        await self.client.send_command(
            CommandV1(agent_id=self.id, command="retract", source_event_id=source_event_id, ts=ts)
        )

    async def retract_member(self, n: int, part: str) -> None:
        """Retract run `n`'s member: its memory is marked retracted and deleted."""
        await self.retract(f"{self.run_id(n)}-{part}", self._ts(n, 7))
        gone = self.member(n, part)

        async def done() -> bool:
            return await self.field(gone, "retracted") == "1"

        await self.eventually(done, timeout=60, interval=0.1)


async def _learner(agent: Agent) -> None:
    """Learning on throughout: a success whose outcome beats its report, a recalled
    success, a recalled failure whose outcome beats its report, thanks, facts, and a
    recalled run's member retracted."""
    await agent.run(1, 0.9, late=True, recall=False)

    async def credited_late() -> bool:  # its report, as it was written after the outcome
        return await agent.field(agent.member(1, "report"), "validated_count") == "1"

    await agent.eventually(credited_late, timeout=60, interval=0.1)
    await agent.run(2, 1.0, late=False, recall=True)
    await agent.run(3, 0.1, late=True, recall=True)
    await agent.positive(1, "action", "report")
    await agent.facts(3)
    await agent.run(4, 0.8, late=False, recall=True)
    assert await agent.redis.exists(agent.keys.learned_weights(agent.id))
    assert await agent.redis.hlen(agent.keys.causal_edges(agent.id)) >= 3
    await agent.retract_member(2, "alert")


async def _toggler(agent: Agent) -> None:
    """Learning off for two runs (one recalled: its recalls are dropped), on again
    for two more (one with its outcome before its report)."""
    await agent.configure(LEARNING_OFF, stored=True)
    await agent.run(1, 0.9, late=False, recall=False)
    await agent.run(2, 0.2, late=True, recall=True)
    # Nothing learned while off: the run closed, its recalls dropped.
    assert await agent.field(agent.member(1, "action"), "validated_count") in (None, "0")
    assert not await agent.redis.exists(agent.keys.run_recalls(agent.id))
    assert not await agent.redis.exists(agent.keys.learned_weights(agent.id))
    await agent.configure(LEARNING_ON, stored=False)
    await agent.run(3, 0.95, late=True, recall=True)
    await agent.run(4, 0.0, late=False, recall=True)
    await agent.positive(3, "action")
    await agent.facts(4)
    await agent.retract_member(3, "action")


async def _donor_history(agent: Agent) -> None:
    """What the donor exports: learned runs, facts, thanks, and a run's recalls
    kept for an outcome that is not sent there."""
    await agent.run(1, 0.8, late=False, recall=False)
    await agent.run(2, 0.3, late=True, recall=True)
    await agent.positive(1, "action")
    await agent.facts(2)
    await agent.recall_for(3)


# ---- settling, snapshots and their difference ---------------------------------------


async def _settled(redis: Redis, prefix: str, agents: list[str], eventually: Any) -> list[str]:
    """Every agent's full digest, once it stops moving."""
    return await settled_digests(redis, prefix, agents, eventually, quiet_s=3.0)


Snapshot = dict[tuple[str, str], Any]


async def _snapshot(redis: Redis, prefix: str, agent_id: str) -> Snapshot:
    """(family, name) -> (redis type, value) of every key the agent digest covers, as
    the digest reads it (wall-clock fields left out); members as (family, "")."""
    footprint = await agent_footprint(redis, prefix, agent_id)
    out: Snapshot = {}
    for family, keys in footprint.families.items():
        if family in EXCLUDED_FAMILIES or not keys:
            continue
        for key, (kind, value) in zip(keys, await read_stored(redis, list(keys)), strict=True):
            if kind != "none":
                fields = EXCLUDED_FIELDS.get(family, frozenset())
                out[(family, footprint.name_of(family, key))] = (
                    kind,
                    _without(kind, value, fields),
                )
    keys_ = Keyspace(prefix)
    for family in footprint.members:
        out[(family, "")] = ("member", await member_value(redis, keys_, family, agent_id))
    return out


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _diff(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs, family by family: keys only on one side, and of a key on both,
    its fields (a hash, a stream's entries) or its value."""
    lines: list[str] = []
    for family in sorted({f for f, _ in before} | {f for f, _ in after}):
        names_b = {n for f, n in before if f == family}
        names_a = {n for f, n in after if f == family}
        for name in sorted(names_b - names_a):
            lines.append(f"{family} {name!r}: only before the replay")
        for name in sorted(names_a - names_b):
            lines.append(f"{family} {name!r}: only after the replay")
        for name in sorted(names_b & names_a):
            (kind_b, was), (kind_a, now) = before[(family, name)], after[(family, name)]
            if (kind_b, was) == (kind_a, now):
                continue
            if kind_b == kind_a == "hash":
                old, new = dict(map(tuple, was)), dict(map(tuple, now))
                for field in sorted(set(old) | set(new)):
                    if old.get(field) != new.get(field):
                        lines.append(
                            f"{family} {name!r} field {field!r}: "
                            f"{_short(old.get(field))} -> {_short(new.get(field))}"
                        )
            elif kind_b == kind_a and isinstance(was, tuple) and isinstance(now, tuple):
                if len(was) != len(now):
                    lines.append(f"{family} {name!r}: {len(was)} entries -> {len(now)}")
                for i, (x, y) in enumerate(zip(was, now, strict=False)):
                    if x != y:
                        lines.append(f"{family} {name!r} [{i}]: {_short(x)} -> {_short(y)}")
            else:
                lines.append(
                    f"{family} {name!r}: {_short((kind_b, was))} -> {_short((kind_a, now))}"
                )
    return lines


# ---- the test ----------------------------------------------------------------------


async def test_a_replay_with_learning_facts_and_imports_rebuilds_the_same_digests_and_answers(
    main_settings: Settings,
    donor_settings: Settings,
    workers: dict[str, Any],
    tmp_path: Path,
    eventually: Any,
) -> None:
    suffix = uuid.uuid4().hex[:6]
    learner, toggler = f"learner-{suffix}", f"toggler-{suffix}"
    donor, successor = f"donor-{suffix}", f"heir-{suffix}"
    agents = [learner, toggler, donor, successor]
    prefix = main_settings.broker.topic_prefix
    redis = Redis.from_url(main_settings.redis.url)
    try:
        # The donor deployment: its agent's history, exported, and the deployment gone.
        await add_worker(workers, "donor", donor_settings)
        async with client_for(donor_settings) as client:
            elsewhere = Agent(client, redis, donor_settings.broker.topic_prefix, donor, "cache",
                              eventually)  # fmt: skip
            await _donor_history(elsewhere)
        await _settled(redis, donor_settings.broker.topic_prefix, [donor], eventually)
        path = tmp_path / "donor.jsonl"
        with path.open("wb") as out:
            exported = await export_agent(donor_settings, donor, out, progress=False)
        for family in ("run_recalls", "ended_runs", "facts", "causal_edges", "learned_weights"):
            assert exported.counts.get(family), (family, exported.counts)
        stop_worker(workers.pop("donor"))

        async with client_for(main_settings) as client:
            a = Agent(client, redis, prefix, learner, "deploy", eventually)
            b = Agent(client, redis, prefix, toggler, "replica", eventually)
            c = Agent(client, redis, prefix, donor, "cache", eventually)
            d = Agent(client, redis, prefix, successor, "cache", eventually)
            await asyncio.gather(_learner(a), _toggler(b))
            # A fresh agent here, from the donor's export; its run 3, whose recalls
            # came with the file, ends here and is learned from.
            report = await import_file(main_settings, path, timeout_s=120, progress=False)
            assert report.applied and report.agent == donor
            await c.run(3, 0.9, late=True, recall=False)
            assert not await redis.hexists(c.keys.run_recalls(donor), c.run_id(3))
            inherited = await import_file(
                main_settings, path, agent_id=successor, successor_of=donor, timeout_s=120,
                progress=False,
            )  # fmt: skip
            assert inherited.applied and inherited.successor_of == donor
            await d.run(5, 0.7, late=True, recall=True)

            before = await _settled(redis, prefix, agents, eventually)
            states = [(await state_digest(redis, prefix, a)).sha256 for a in agents]
            snapshots = {agent: await _snapshot(redis, prefix, agent) for agent in agents}
            for agent in agents:
                assert (await audit(RedisWitnessLog(redis, prefix), agent)).ok, agent
            questions = [
                (agent, query)
                for agent, theme in (
                    (learner, "deploy"),
                    (toggler, "replica"),
                    (donor, "cache"),
                    (successor, "cache"),
                )
                for query in (
                    THEMES[theme]["query"],
                    THEMES[theme]["alert"].format(n=402, r="Mumbai"),
                    THEMES[theme]["report"].format(n=403, r="Stockholm", s="auth", verdict="fixed"),
                    THEMES[theme]["result"].format(n=401, s="cart"),
                    f"what runs on {THEMES[theme]['entity']}",
                    "which node has a latency limit",
                    f"tool {THEMES[theme]['tool']} returned",
                    "what failed and what worked",
                )
            ]
            answers = await _ask(client, redis, prefix, questions)
        assert len(answers) >= 32 and sum(len(x) > 200 for x in answers) >= 28

        await stop_and_wipe(redis, main_settings, workers.pop("main"))
        assert not await redis.exists(Keyspace(prefix).learned_weights(learner))
        await replay_journal(main_settings)
        after = [(await agent_digest(redis, prefix, a)).sha256 for a in agents]
        if after != before:
            differences = {
                agent: _diff(snapshots[agent], await _snapshot(redis, prefix, agent))
                for agent, was, now in zip(agents, before, after, strict=True)
                if was != now
            }
            pytest.fail("the replay's digests differ:\n" + "\n".join(
                f"{agent}: {line}" for agent, lines in differences.items() for line in lines
            ))  # fmt: skip
        assert [(await state_digest(redis, prefix, a)).sha256 for a in agents] == states
        for agent in agents:
            assert (await audit(RedisWitnessLog(redis, prefix), agent)).ok, agent

        await add_worker(workers, "main", main_settings)
        async with client_for(main_settings) as client:
            again = await _ask(client, redis, prefix, questions)
        assert again == answers, [q for q, x, y in zip(questions, answers, again, strict=True)
                                  if x != y]  # fmt: skip
    finally:
        await redis.aclose()


async def _ask(
    client: GrimoireClient, redis: Redis, prefix: str, questions: list[tuple[str, str]]
) -> list[bytes]:
    """Each answer as bytes: its items, the weights it ranked with, its mode and
    budget (not its timings)."""
    # RediSearch counts a rewritten document's old version in its BM25 statistics
    # until its garbage collector runs (see test_journal.py).
    for _ in range(2):
        await redis.execute_command("FT.DEBUG", "GC_FORCEINVOKE", Keyspace(prefix).index_name)
    out = []
    for agent, query in questions:
        answer = await client.recall(
            agent, query, k=5, explain=True, record_usage=False, include_causal=True, timeout=30
        )
        out.append(
            orjson.dumps(
                {
                    "items": [item.asdict() for item in answer.items],
                    "learning": answer.learning,
                    "mode": answer.mode,
                    "as_of": answer.as_of,
                    "watermark": answer.watermark,
                    "budget": answer.budget,
                }
            )
        )
    return out
