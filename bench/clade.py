"""`python -m bench clade`: does what one sibling learns reach the others (issue 36)?

The world of `bench learning` (`learning_env.py`: recurring situations, each with
candidate actions of hidden success probability) played by two arms through the
real pipeline (tansu + Redis + one worker process), with the same agent slots:
slot s meets the same situations in the same order and draws the same outcome per
run in both arms (common random numbers, `learning_env.draw_outcome`), and its
ε draws are the same too.

- `clade_on`: N sibling agents (`sib-<slot>`), members of one clade (joined in the
  deployment's registry, `RedisCladeRegistry.join`), each configured with learning
  on and `share_policy` auto: its evidence entries (one per situation x action,
  counted at each run's end) reach its siblings as they are counted, and a
  sibling's recall pools them with its own evidence.
- `clade_off`: N agents (`solo-<slot>`), learning on, in no clade.

Every agent acts as `bench learning`'s `grimoire` arm does (`learning.act_on_recall`:
recall the situation's query before the run, read the first recalled evidence
entry or memory of its own runs, ε-greedy with decay; then the run's alert, tool
call and report under one run id, then `run_ended`). The slots advance in
lockstep: run i of every agent of both arms, then run i + 1; a round ends once
every run's end is witnessed and, in the clade arm, once the shares those ends
caused are applied at the siblings (clade witness records on memory-events, see
`_CladeWatch`), so each sibling's next recall can see them.

Maintenance is on by default (`--no-maintenance` turns it off): the worker's block
timer fires every `block_interval_s` of wall-clock time and each run moves an
agent's event time by 5 minutes, so the curator is due after every round; after
the last round the bench waits until every sibling's curator has run as of its last
episode.
Then it reads every memory of kind `heuristic` each sibling holds from Redis
(`heuristics_check`): no heuristic of its own may rest on clade copies alone (its
sources, followed through the curated entries they name, must reach a memory of
its own), and no copy of a sibling's heuristic (provenance `clade`: with
`share_policy` auto a sibling's curator shares what it promoted) may be promoted by
its own curator (in its playbook). The bench exits non-zero when one is. It also
compares each sibling's evidence entries with the copies the others hold
(`copies_check`: missing copies, other counts).

Last line: one JSON object: per arm the mean regret per agent and the late success
rate, the ratio clade_on / clade_off (target at most 0.6), the oracle's and
Thompson sampling's figures on the same world (`learning_arms`), the shares seen,
the heuristics check and the details.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.learning import (
    GRIMOIRE_CONFIG,
    LearningWatch,
    WorldOptions,
    act_on_recall,
    configure_agent,
    end_run,
    episodes_decided,
    percentiles,
    publish_run,
    recall_before_run,
    run_episodes,
    run_event_ids,
    runs_ended,
    watching,
)
from bench.learning_arms import arm_summary, reference_arms
from bench.learning_env import (
    EPS0,
    EPS_DECAY,
    EPS_MIN,
    RUN_SPACING_MS,
    T0_MS,
    Environment,
    Run,
    render_run,
    run_id,
    schedule,
)
from bench.services import ready_client, run_on_own_services
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.clade.store import RedisCladeRegistry
from grimoire.tables.codec.curator_state import bookkeeping_from_json
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.redis_client import create_redis
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames

__all__ = [
    "ARMS",
    "CLADE_CONFIG",
    "TARGET_RATIO",
    "CladeOptions",
    "copies_check",
    "evidence_state",
    "exit_code",
    "heuristics_check",
    "read_held",
    "run_clade",
    "run_clade_bench",
]

logger = logging.getLogger(__name__)

#: The two pipeline arms, in the report's order.
ARMS: Final = ("clade_on", "clade_off")
#: Issue 36: with sharing on, the mean regret per agent at most 0.6 x without.
TARGET_RATIO: Final = 0.6
#: The siblings' configuration: `bench learning`'s learner, sharing its evidence.
CLADE_CONFIG: Final[Mapping[str, bool | float | str]] = {
    **GRIMOIRE_CONFIG,
    "share_policy": "auto",
}
_PREFIXES: Final = {"clade_on": "sib", "clade_off": "solo"}
#: The witness op of a share applied at its recipient (agents/handlers/clade.py).
SHARE_OP: Final = "clade_share"
# What a curator cycle's report counts (summed per agent in the report).
_CURATOR_COUNTS: Final = frozenset(
    {"promoted", "proposed", "demoted", "pruned", "entries_seen", "episodes_seen"}
)


@dataclass(frozen=True, slots=True)
class CladeOptions(WorldOptions):
    """A slot: a clade member and a lone agent."""

    maintenance: bool = True
    block_interval_s: float = 4.0  # the worker's block timer, with maintenance on
    # How long a round waits for the shares its run ends caused: at most
    # `share_timeout_s`, and no longer than `share_quiet_s` after the last one seen.
    share_timeout_s: float = 30.0
    share_quiet_s: float = 3.0
    curator_timeout_s: float = 90.0  # the last curator cycle of every sibling


def agent_id(arm: str, slot: int) -> str:
    return f"{_PREFIXES[arm]}-{slot}"


# -- what the pipeline says it did ----------------------------------------------------


class _CladeWatch(LearningWatch):
    """`bench learning`'s watch, and what clades and maintenance do: the witness
    records of clade operations (per agent, the shares applied at it), each agent's
    curator cycles and what they did, the maintenance tasks run."""

    task_name = "bench-clade-watch"

    def __init__(self, bootstrap: str, topics: TopicNames, partitions: int) -> None:
        super().__init__(bootstrap, topics, partitions)
        self.clade_shared: Counter[str] = Counter()  # agent -> shares applied at it
        self.clade_ops: Counter[str] = Counter()  # op -> count
        self.curator_cycles: Counter[str] = Counter()
        self.curator_as_of: dict[str, int] = {}  # agent -> latest cycle's event time
        self.curator_report: dict[str, Counter[str]] = {}
        self.maintenance_tasks: Counter[str] = Counter()

    def _note(self, topic: str, event: dict[str, Any]) -> None:
        agent = str(event.get("agent_id") or "")
        kind = str(event.get("type") or "")
        if topic == self._topics.memory_events:
            op = str(event.get("op") or "")
            if kind == "GrimoireWitness" and op.startswith("clade"):
                self.clade_ops[op] += 1
                self.clade_shared[agent] += op == SHARE_OP
            elif kind == "CuratorCycleComplete":
                self.curator_cycles[agent] += 1
                as_of = int(event.get("ts") or 0)
                self.curator_as_of[agent] = max(self.curator_as_of.get(agent, 0), as_of)
                totals = self.curator_report.setdefault(agent, Counter())
                for name, value in (event.get("report") or {}).items():
                    if name in _CURATOR_COUNTS and isinstance(value, int | float):
                        totals[name] += value
            elif kind == "GrimoireMaintenance":
                self.maintenance_tasks.update(str(t) for t in event.get("tasks") or ())
        super()._note(topic, event)


# -- the bench -----------------------------------------------------------------------


@dataclass
class _Arm:
    """One arm's agents, what they played and how they read their recalls."""

    name: str
    agents: tuple[str, ...]  # by slot
    runs: list[Run] = field(default_factory=list)
    books: dict[str, dict[str, Run]] = field(default_factory=dict)  # agent -> event id -> run
    visits: dict[str, Counter[int]] = field(default_factory=dict)  # agent -> situation -> n
    explored: int = 0
    evidence_led: int = 0  # recalls (past a first visit) led by an evidence entry
    clade_led: int = 0  # ... led by a sibling's copy
    evidence_due: int = 0
    configured: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class _Shares:
    """How the rounds waited for the clade arm's shares."""

    mode: str = "probe"  # until one is seen: "witnessed"; never seen: "none_seen"
    expected_per_round: int = 0
    waited_ms: list[float] = field(default_factory=list)
    # rounds whose shares stopped short of `expected_per_round`: {round, shares}
    short_rounds: list[dict[str, int]] = field(default_factory=list)
    received: dict[str, int] = field(default_factory=dict)


def _ts(index: int) -> int:
    return T0_MS + index * RUN_SPACING_MS


async def _shares_applied(
    watch: _CladeWatch,
    siblings: Sequence[str],
    before: int,
    index: int,
    shares: _Shares,
    options: CladeOptions,
) -> None:
    """Wait until the siblings witnessed `shares.expected_per_round` shares more than
    `before`: each sibling's run end shares the evidence entry of its run's
    (situation, action) with the others, N x (N - 1) copies a round. A round whose
    shares stop arriving short of that (none for `share_quiet_s`) is noted and the
    bench goes on. When the first round's wait sees none, the later rounds do not
    wait (a pipeline that does not share must not stall every round) unless a share
    shows up after all."""
    began = time.perf_counter()
    expected = shares.expected_per_round

    def total() -> int:
        return sum(watch.clade_shared[a] for a in siblings)

    deadline = began + options.share_timeout_s
    while shares.mode != "none_seen" and total() - before < expected:
        seen = total()
        try:
            await watch.until(
                lambda seen=seen: total() > seen,
                timeout=max(0.0, min(options.share_quiet_s, deadline - time.perf_counter())),
                what="the round's clade shares",
            )
        except TimeoutError:
            break
    got = total() - before
    if got < expected:
        shares.short_rounds.append({"round": index, "shares": got})
    if got or total():
        shares.mode = "witnessed"
    elif shares.mode == "probe":
        shares.mode = "none_seen"
    shares.waited_ms.append((time.perf_counter() - began) * 1000)


async def _round(
    client: GrimoireClient,
    watch: _CladeWatch,
    env: Environment,
    options: CladeOptions,
    arms: Sequence[_Arm],
    index: int,
    bench_id: str,
    shares: _Shares,
    timings: dict[str, list[float]],
) -> None:
    """Run `index` of every slot in both arms: recall, act, publish, end, then wait
    for the ends and the shares they caused."""
    began = time.perf_counter()
    situations = [schedule(env, slot)[index] for slot in range(options.agents)]
    serving: dict[str, tuple[_Arm, int, str]] = {
        agent: (arm, slot, run_id(f"{bench_id}{_PREFIXES[arm.name]}", slot, index))
        for arm in arms
        for slot, agent in enumerate(arm.agents)
    }
    answers = await asyncio.gather(
        *(
            recall_before_run(
                client,
                agent,
                env.situations[situations[slot]].query,
                serving_run_id=rid,
                k=options.k,
                timeout=options.step_timeout_s,
            )
            for agent, (_arm, slot, rid) in serving.items()
        )
    )
    timings["recall_round_ms"].append((time.perf_counter() - began) * 1000)
    used: Counter[str] = Counter()
    played: dict[str, Run] = {}
    for (agent, (arm, slot, rid)), reply in zip(serving.items(), answers, strict=True):
        items = reply.get("items") or []
        situation = situations[slot]
        seen = arm.visits.setdefault(agent, Counter())
        used[agent] += bool(items)
        book = arm.books.setdefault(agent, {})
        run, explored, _advice = act_on_recall(
            env, slot, index, situation, seen[situation], items, book, rid
        )
        arm.explored += explored
        if seen[situation]:
            arm.evidence_due += 1
            first = items[0] if items else {}
            arm.evidence_led += bool(first.get("evidence"))
            arm.clade_led += bool(first.get("origin")) or first.get("provenance") == "clade"
        arm.runs.append(run)
        played[agent] = run
    for agent, run in played.items():
        arm = serving[agent][0]
        await publish_run(client, env, agent, run, _ts(index), arm.books[agent])
    await client.flush()
    # As in `bench learning`: a run ends once its episodes are decided and the
    # recall that served it is applied.
    await watch.until(
        episodes_decided(watch, {a: run_event_ids(r) for a, r in played.items()}, used),
        timeout=options.step_timeout_s,
        what=f"the episodes of round {index}",
    )
    siblings = arms[0].agents
    shared_before = sum(watch.clade_shared[a] for a in siblings)
    for agent, run in played.items():
        await end_run(client, agent, run, _ts(index))
    await watch.until(
        runs_ended(watch, tuple(played), index + 1),
        timeout=options.step_timeout_s,
        what=f"the ends of round {index}",
    )
    for agent, run in played.items():
        serving[agent][0].visits[agent][run.situation] += 1
    if len(siblings) > 1:
        await _shares_applied(watch, siblings, shared_before, index, shares, options)
    timings["round_ms"].append((time.perf_counter() - began) * 1000)


def _last_episode_ts(env: Environment, run: Run) -> int:
    texts = render_run(env, run.slot, run.index, run.situation, run.action, run.success)
    return max(episode.ts for episode in run_episodes("", run, texts, _ts(run.index), env))


async def _last_curator_cycle(
    watch: _CladeWatch,
    env: Environment,
    agents: Sequence[str],
    runs: Sequence[Run],
    options: CladeOptions,
) -> dict[str, Any]:
    """Wait until every agent's curator has run as of its last episode (a cycle
    whose event time, the agent's watermark, reaches it: the last run moved the
    agent's tick past the curator's period), so the check reads what the curator
    made of every run."""
    if not options.maintenance:
        return {"waited": False}
    last = max(_last_episode_ts(env, run) for run in runs)
    began = time.perf_counter()
    try:
        await watch.until(
            lambda: all(watch.curator_as_of.get(a, 0) >= last for a in agents),
            timeout=options.curator_timeout_s,
            what="a curator cycle of every sibling as of its last run",
        )
        seen = True
    except TimeoutError:
        seen = False
    return {
        "waited": True,
        "seen": seen,
        "waited_s": round(time.perf_counter() - began, 1),
        "last_episode_ts": last,
        "as_of": {a: watch.curator_as_of.get(a) for a in agents},
    }


# -- what the siblings hold -------------------------------------------------------------

_FIELDS: Final = (
    "kind",
    "provenance",
    "source_event_id",
    "source_ids",
    "event_type",
    "validated_count",
    "contradicted_count",
    "archived",
    "quarantined",
)
_MAX_DEPTH: Final = 4


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _is_clade(doc: Mapping[str, str]) -> bool:
    return doc.get("provenance") == "clade" or doc.get("source_event_id", "").startswith("clade:")


@dataclass(frozen=True, slots=True)
class Held:
    """What one agent holds: memory id -> the fields of `_FIELDS` its hash has, and
    the curator's bookkeeping per curated entry."""

    docs: dict[str, dict[str, str]]
    books: dict[str, Any]
    playbook: frozenset[str] = frozenset()  # the heuristic ids in its playbook


async def read_held(redis: Any, prefix: str, agents: Sequence[str]) -> dict[str, Held]:
    """Every memory hash of each agent (SCAN of its keys) and its curator entries."""
    keys = Keyspace(prefix)
    held: dict[str, Held] = {}
    for agent in agents:
        names = [
            k async for k in redis.scan_iter(match=keys.agent_memory_pattern(agent), count=500)
        ]
        docs: dict[str, dict[str, str]] = {}
        for start in range(0, len(names), 200):
            chunk = names[start : start + 200]
            async with redis.pipeline(transaction=False) as pipe:
                for name in chunk:
                    pipe.hmget(name, list(_FIELDS))
                rows = await pipe.execute()
            for name, row in zip(chunk, rows, strict=True):
                if row and row[0] is not None:
                    docs[keys.memory_id_of(name)] = {
                        f: _text(v) for f, v in zip(_FIELDS, row, strict=True) if v is not None
                    }
        raw = await redis.hgetall(keys.curator_entries(agent))
        books = {_text(k): bookkeeping_from_json(v) for k, v in raw.items()}
        playbook = frozenset(_text(m) for m in await redis.smembers(keys.curator_playbook(agent)))
        held[agent] = Held(docs, books, playbook)
    return held


def _sources(memory_id: str, held: Held) -> list[str]:
    """The memory ids an entry says it was made from: its hash's `source_ids`, else
    the curator's bookkeeping."""
    listed = [s for s in held.docs.get(memory_id, {}).get("source_ids", "").split("|") if s]
    if not listed and memory_id in held.books:
        listed = list(held.books[memory_id].source_ids)
    return listed


def _support(memory_id: str, held: Held, depth: int = 0) -> str:
    """What the entry rests on: "local", at least one memory of the agent's own (a
    source that is no clade copy, followed through curated entries); "clade", only
    clade copies; "unknown", nothing that can be read."""
    doc = held.docs.get(memory_id)
    if doc is None:
        return "unknown"  # compacted, forgotten or never there
    if _is_clade(doc):
        return "clade"
    sources = _sources(memory_id, held)
    if not sources or depth >= _MAX_DEPTH:
        return "local"
    found = {_support(s, held, depth + 1) for s in sources}
    if "local" in found:
        return "local"
    return "clade" if "clade" in found else "unknown"


def heuristics_check(held: Mapping[str, Held]) -> dict[str, Any]:
    """Every memory of kind `heuristic` each agent holds (archived ones too). One of
    its own (provenance not `clade`) must rest on at least one memory of its own:
    not on clade copies alone (`clade_only`). A sibling's heuristic it holds as a
    copy (provenance `clade`, shared once the sibling's curator promoted it) must not
    be promoted by its own curator (`clade_copy_promoted`: in its playbook, or its
    curator entry says playbook). Counts per agent, the offenders, and `ok`."""
    per_agent: dict[str, dict[str, Any]] = {}
    offenders: list[dict[str, str]] = []
    for agent, state in held.items():
        copies = Counter(d.get("kind", "?") for d in state.docs.values() if _is_clade(d))
        counts: Counter[str] = Counter()
        for memory_id, doc in sorted(state.docs.items()):
            if doc.get("kind") != "heuristic":
                continue
            book = state.books.get(memory_id)
            status = book.status.value if book is not None else "none"
            promoted = memory_id in state.playbook or status == "playbook"
            if _is_clade(doc):
                counts["clade_copies"] += 1
                if promoted:
                    counts["clade_copy_promoted"] += 1
                    offenders.append(
                        {"agent": agent, "memory_id": memory_id, "why": "clade_copy_promoted"}
                    )
                continue
            counts["own"] += 1
            counts[f"own_status_{status}"] += 1
            sources = _sources(memory_id, state)
            if any(_is_clade(state.docs.get(s, {})) for s in sources):
                counts["own_with_a_clade_source"] += 1
            support = _support(memory_id, state) if sources else "no_sources"
            counts[f"own_support_{support}"] += 1
            if support == "clade":
                counts["clade_only"] += 1
                offenders.append({"agent": agent, "memory_id": memory_id, "why": "clade_only"})
        per_agent[agent] = {
            **dict(sorted(counts.items())),
            "memories": len(state.docs),
            "copies_held": dict(sorted(copies.items())),
        }

    def total(name: str) -> int:
        return sum(a.get(name, 0) for a in per_agent.values())

    return {
        "ok": not offenders,
        "own_heuristics": total("own"),
        "own_promoted": total("own_status_playbook"),
        "clade_only": total("clade_only"),
        "clade_copies": total("clade_copies"),
        "clade_copy_promoted": total("clade_copy_promoted"),
        "offenders": offenders,
        "per_agent": per_agent,
    }


def _counts(doc: Mapping[str, str]) -> tuple[int, int]:
    return (
        int(float(doc.get("validated_count") or 0)),
        int(float(doc.get("contradicted_count") or 0)),
    )


def evidence_state(held: Mapping[str, Held]) -> dict[str, Any]:
    """The agents' own evidence entries: how many, and those no longer live
    (archived or quarantined: recall no longer shows them, nor are they shared)."""
    entries = 0
    gone: list[dict[str, Any]] = []
    for agent, state in held.items():
        for memory_id, doc in sorted(state.docs.items()):
            if doc.get("event_type") != "evidence" or _is_clade(doc):
                continue
            entries += 1
            flags = [f for f in ("archived", "quarantined") if doc.get(f) == "1"]
            if flags:
                gone.append(
                    {
                        "agent": agent,
                        "memory_id": memory_id,
                        "flags": flags,
                        "counts": list(_counts(doc)),
                    }
                )
    return {"entries": entries, "not_live": len(gone), "not_live_entries": gone[:10]}


def copies_check(held: Mapping[str, Held]) -> dict[str, Any]:
    """Each sibling's own evidence entries against the copies the others hold at the
    end: a copy missing, or with other counts than its original's."""
    agents = list(held)
    originals = 0
    found = missing = differ = 0
    examples: list[dict[str, Any]] = []
    for origin in agents:
        for memory_id, doc in sorted(held[origin].docs.items()):
            if doc.get("event_type") != "evidence" or _is_clade(doc):
                continue
            originals += 1
            source = f"clade:{origin}/{memory_id}"
            for recipient in agents:
                if recipient == origin:
                    continue
                copy = next(
                    (
                        d
                        for d in held[recipient].docs.values()
                        if d.get("source_event_id") == source
                    ),
                    None,
                )
                if copy is None:
                    missing += 1
                    if len(examples) < 5:
                        examples.append({"origin": origin, "memory_id": memory_id, "at": recipient})
                    continue
                found += 1
                if _counts(copy) != _counts(doc):
                    differ += 1
                    if len(examples) < 5:
                        examples.append(
                            {
                                "origin": origin,
                                "memory_id": memory_id,
                                "at": recipient,
                                "counts": list(_counts(doc)),
                                "copy_counts": list(_counts(copy)),
                            }
                        )
    return {
        "evidence_entries": originals,
        "copies_expected": originals * (len(agents) - 1),
        "copies_found": found,
        "copies_missing": missing,
        "copies_with_other_counts": differ,
        "examples": examples,
    }


# -- the report ------------------------------------------------------------------------


def _per_agent(summary: Mapping[str, Any], agents: int) -> dict[str, Any]:
    return {
        "regret_per_agent": round(summary["regret"] / agents, 4),
        **summary,
    }


def _ratio(top: float, bottom: float) -> float | None:
    return round(top / bottom, 4) if bottom else None


def _report(
    env: Environment,
    options: CladeOptions,
    arms: Sequence[_Arm],
    watch: _CladeWatch,
    shares: _Shares,
    check: Mapping[str, Any],
    baseline: Mapping[str, Any],
    curator: Mapping[str, Any],
    timings: Mapping[str, list[float]],
) -> dict[str, Any]:
    figures: dict[str, dict[str, Any]] = {}
    for arm in arms:
        summary = _per_agent(
            arm_summary(env, sorted(arm.runs, key=lambda r: (r.slot, r.index))), options.agents
        )
        runs = summary["runs"]
        summary["explored_share"] = round(arm.explored / runs, 4) if runs else None
        due = arm.evidence_due
        summary["evidence_led_share"] = round(arm.evidence_led / due, 4) if due else None
        summary["clade_led_share"] = round(arm.clade_led / due, 4) if due else None
        figures[arm.name] = summary
    reference = reference_arms(env)
    for name in ("oracle", "thompson", "uniform"):
        figures[name] = _per_agent(arm_summary(env, reference[name]), options.agents)
    on, off = figures["clade_on"], figures["clade_off"]
    ratio = _ratio(on["regret_per_agent"], off["regret_per_agent"])
    configured = {agent: answers for arm in arms for agent, answers in arm.configured.items()}
    refused = sorted(
        f"{agent}: {name} {answer}"
        for agent, answers in configured.items()
        for name, answer in answers.items()
        if answer != "applied"
    )
    siblings = arms[0].agents
    shares.received = {a: watch.clade_shared[a] for a in siblings}
    report: dict[str, Any] = {
        "bench": "clade",
        "regret_per_agent": {name: figures[name]["regret_per_agent"] for name in figures},
        "late_success_rate": {name: figures[name]["late_success_rate"] for name in figures},
        "target": {
            "clade_on_over_clade_off_regret": ratio,
            "max": TARGET_RATIO,
            "met": None if ratio is None else ratio <= TARGET_RATIO,
        },
        "heuristics_check": {
            **check,
            "rule": "a sibling's own heuristic rests on at least one memory of its own, not "
            "on clade copies alone; a copy of a sibling's heuristic (provenance clade, shared "
            "once that sibling promoted it) is never in the holder's playbook",
            "maintenance": options.maintenance,
            "curator_cycles": {a: watch.curator_cycles[a] for a in siblings},
            "last_curator_cycle": dict(curator),
            "note": (
                "the worker ran maintenance (the curator) on its block timer during the bench"
                if options.maintenance
                else "maintenance off: no curator ran, so no heuristic could be made and the "
                "check is vacuous"
            ),
            "clade_off_agents": {
                "own_heuristics": baseline.get("own_heuristics", 0),
                "own_promoted": baseline.get("own_promoted", 0),
            },
        },
        "arms": figures,
        "shares": {
            "wait": shares.mode,
            "expected_per_round": shares.expected_per_round,
            "rounds_short": len(shares.short_rounds),
            "rounds_short_first": shares.short_rounds[:10],
            "received_per_sibling": shares.received,
            "ops": dict(sorted(watch.clade_ops.items())),
            "wait_ms": percentiles(shares.waited_ms),
        },
        "policy": "each agent as bench learning's `grimoire` arm: the first recalled item "
        "about one of the situation's actions (an evidence entry, pooled with the "
        "siblings' copies in clade_on; a memory of its own run), not followed when its "
        "posterior mean is under 0.5 or its run failed; ε = max"
        f"({EPS_MIN}, {EPS0} / (1 + own visits / {EPS_DECAY})); slots in lockstep",
        **options.described(env, pipeline_agents=2 * options.agents),
        "config": {"clade_on": dict(CLADE_CONFIG), "clade_off": dict(GRIMOIRE_CONFIG)},
        "configured": configured,
        "configure_refused": refused,
        "maintenance": {
            "enabled": options.maintenance,
            "block_interval_s": options.block_interval_s if options.maintenance else None,
            "tasks": dict(sorted(watch.maintenance_tasks.items())),
            "curator_report_totals": {
                a: dict(sorted(watch.curator_report.get(a, Counter()).items())) for a in siblings
            },
        },
        "decisions": dict(sorted(watch.decisions.items())),
        "dead_letters": dict(sorted(watch.dead_letters.items())),
        "timings": {name: percentiles(values) for name, values in timings.items()},
    }
    if refused:
        logger.warning("bench clade: configure refused: %s", "; ".join(refused))
    return report


async def run_clade(base: Settings, options: CladeOptions, *, log_dir: Path) -> dict[str, Any]:
    """The bench against running services (`base` names them): its own topic prefix,
    its own worker process (started here, stopped at the end)."""
    if options.agents < 1:
        raise ValueError("agents must be at least 1")
    bench_id = uuid.uuid4().hex[:6]
    settings = base.with_values(
        topic_prefix=f"clade{bench_id}",
        app_id=f"grimoire-clade{bench_id}",
        maintenance_enabled=options.maintenance,
        block_interval_s=options.block_interval_s,
    )
    env = options.environment()
    arms = [
        _Arm(name, tuple(agent_id(name, slot) for slot in range(options.agents))) for name in ARMS
    ]
    clade = f"bench-{bench_id}"
    shares = _Shares(expected_per_round=options.agents * (options.agents - 1))
    timings: dict[str, list[float]] = {"recall_round_ms": [], "round_ms": []}
    redis = create_redis(settings.redis.url, 8)
    began = time.perf_counter()
    worker = start_worker(settings, log_dir / f"worker-{settings.broker.topic_prefix}.log")
    try:
        # Membership lives in the key store, as the worker reads it (infra/runtime.py).
        keystore = (
            create_redis(settings.redis.keystore_url, 8) if settings.redis.keystore_url else None
        )
        registry = RedisCladeRegistry(keystore or redis, settings.broker.topic_prefix)
        for agent in arms[0].agents:
            await registry.join(clade, agent)
        if keystore is not None:
            await keystore.aclose()
        async with ready_client(settings, timeout=180) as client:
            ready = time.perf_counter()
            async with watching(_CladeWatch, settings, client) as watch:
                for arm, config in zip(arms, (CLADE_CONFIG, GRIMOIRE_CONFIG), strict=True):
                    for agent in arm.agents:
                        arm.configured[agent] = await configure_agent(
                            client,
                            watch,
                            agent,
                            config,
                            bench_id=bench_id,
                            timeout=options.step_timeout_s,
                        )
                for index in range(options.runs):
                    await _round(
                        client, watch, env, options, arms, index, bench_id, shares, timings
                    )
                finished = time.perf_counter()
                last_runs = [r for r in arms[0].runs if r.index == options.runs - 1]
                curator = await _last_curator_cycle(watch, env, arms[0].agents, last_runs, options)
        siblings = await read_held(redis, settings.broker.topic_prefix, arms[0].agents)
        solos = await read_held(redis, settings.broker.topic_prefix, arms[1].agents)
        check = heuristics_check(siblings)
        copies = copies_check(siblings)
        baseline = heuristics_check(solos)
        evidence = {"clade_on": evidence_state(siblings), "clade_off": evidence_state(solos)}
    finally:
        stop_worker(worker)
        await redis.aclose()
    report = _report(env, options, arms, watch, shares, check, baseline, curator, timings)
    report["clade"] = {"name": clade, "members": list(arms[0].agents)}
    report["shares"]["copies_at_the_end"] = copies
    report["evidence_entries"] = evidence
    report["timings"].update(
        {"startup_s": round(ready - began, 1), "runs_s": round(finished - ready, 1)}
    )
    return report


def run_clade_bench(settings: Settings, options: CladeOptions) -> dict[str, Any]:
    """Its own broker and Redis (ports GRIMOIRE_BENCH_CLADE_KAFKA_PORT / _REDIS_PORT,
    default 19641 / 16941), stopped at the end if started here."""
    return run_on_own_services(
        settings,
        "clade",
        lambda base, log_dir: run_clade(base, options, log_dir=log_dir),
        kafka_port=19641,
        redis_port=16941,
    )


def exit_code(report: Mapping[str, Any]) -> int:
    """Non-zero when a sibling holds a heuristic from clade evidence alone."""
    return 0 if report.get("heuristics_check", {}).get("ok") else 1
