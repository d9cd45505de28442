"""`python -m bench learning`: do agents that learn from run outcomes recall their
successful experience first?

A generated world (`learning_env.py`): agents meet recurring situations whose
candidate actions have hidden success probabilities. Each run, through the real
pipeline (tansu + Redis + a worker process), an agent recalls before acting (the
request names the run it serves), follows the action of the top memory of the
situation it recalled, unless that memory's run failed (it then tries another
action) or the ε draw says explore, publishes the run's trigger, action and
outcome episodes under one `run_id`, then the run's end (`run_ended` with the
run's quality). The next recall of that agent waits until the run is applied (its
episodes decided, then its end witnessed, read on memory-events).

"Without learning" is the same recalls: every learning agent has a shadow agent
with learning switched off (`configure`) that receives byte-identical events (same
texts, event ids, runs, outcomes, event times; its own agent id) and makes the
same recall at the same point. The shadow does not act on its recalls: its runs
are the learner's, so the two differ only by what learning did to the ranking.

Last line: one JSON object (runs, success_first_rate and the rate without learning,
regret, the learned weights from the recall's explain section, and the details).
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.event_tail import EventTail
from bench.learning_env import (
    RUN_SPACING_MS,
    SUCCESS_QUALITY,
    T0_MS,
    Environment,
    Run,
    ScoredRecall,
    build_environment,
    choose_action,
    draw_outcome,
    regret,
    render_run,
    run_id,
    schedule,
    success_first,
    top_run,
)
from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import CommandV1, EpisodeV1, OutcomeV1

__all__ = [
    "LEARNING_OFF",
    "LEARNING_ON",
    "LearningOptions",
    "recall_before_run",
    "run_learning",
    "run_learning_bench",
]

logger = logging.getLogger(__name__)

TARGET = 0.9
# The agent configuration that switches learning on and off (SPEC §7). Sent one
# setting per `configure`, so a pipeline that knows only some of them still
# applies those (a command naming an unknown setting is refused whole).
LEARNING_ON: Mapping[str, bool] = {
    "learn_from_outcomes": True,
    "use_learned_weights": True,
    "use_causal_scoring": True,
}
LEARNING_OFF: Mapping[str, bool] = {name: False for name in LEARNING_ON}


@dataclass(frozen=True, slots=True)
class LearningOptions:
    agents: int = 4  # learning agents (each with its shadow)
    situations: int = 3
    actions: int = 4
    runs: int = 60  # per agent
    seed: int = 7
    warmup: int = 3  # an agent's first visits of a situation are not scored
    k: int = 8  # items per recall
    step_timeout_s: float = 120.0  # how long one step may wait on the pipeline


# -- the recall an agent makes before acting -----------------------------------------


async def recall_before_run(
    client: GrimoireClient,
    agent_id: str,
    query: str,
    *,
    serving_run_id: str,
    k: int,
    timeout: float,
) -> dict[str, Any]:
    """The recall an agent makes before acting in run `serving_run_id`, with explain:
    `{"items": [item as on the wire], "learning": the reply's learning section}`."""
    answer = await client.recall(
        agent_id,
        query,
        k=k,
        explain=True,
        serving_run_id=serving_run_id,
        timeout=timeout,
    )
    return {"items": [item.asdict() for item in answer.items], "learning": answer.learning}


def learned_weights(reply: Mapping[str, Any]) -> dict[str, float] | None:
    """The agent's rerank weights from a recall reply: its `learning` section
    (`{"source": learned | static, "updates": n, "weights": {factor: weight}}`),
    else an `explain` section or a top-level `weights`."""
    for section in (reply.get("learning"), reply.get("explain"), reply):
        found = section.get("weights") if isinstance(section, Mapping) else None
        if isinstance(found, Mapping) and found:
            return {str(name): float(value) for name, value in found.items()}
    return None


def learning_source(reply: Mapping[str, Any]) -> dict[str, Any]:
    """Where the weights came from and how many runs they learned from, if said."""
    section = reply.get("learning")
    if not isinstance(section, Mapping):
        return {}
    return {key: section[key] for key in ("source", "updates") if key in section}


# -- what the pipeline says it did ---------------------------------------------------


class _Watch(EventTail):
    """memory-events and dead-letters, read from their ends (assigned, no group): which
    source events were decided, how many outcomes each agent has witnessed, which
    commands were applied or refused."""

    task_name = "bench-learning-watch"

    def __init__(self, bootstrap: str, topics: TopicNames, partitions: int) -> None:
        super().__init__(bootstrap, topics, partitions)
        self._changed = asyncio.Condition()
        self.decided: dict[str, set[str]] = {}
        self.outcomes: Counter[str] = Counter()  # agent -> outcome entries witnessed
        self.usages: Counter[str] = Counter()  # agent -> recall usage entries witnessed
        self.commands: dict[str, str] = {}  # command event id -> "applied" | refusal
        self.decisions: Counter[str] = Counter()
        self.dead_letters: Counter[str] = Counter()
        self.commands_pending: set[str] = set()  # command event ids sent

    async def batch_read(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def note(self, topic: str, event: dict[str, Any], now: float) -> None:
        self._note(topic, event)

    def _note(self, topic: str, event: dict[str, Any]) -> None:
        agent = str(event.get("agent_id") or "")
        if topic == self._topics.dead_letters:
            reason = str(event.get("reason") or "unknown")
            self.dead_letters[reason] += 1
            payload = str(event.get("payload") or "")
            for event_id in self.commands_pending:
                if event_id in payload:
                    self.commands[event_id] = f"refused: {reason} {event.get('detail', '')}"
            return
        kind = str(event.get("type") or "")
        if kind == "GrimoireWitness":
            if event.get("op") == "outcome":
                self.outcomes[agent] += 1
            elif event.get("op") == "usage":
                self.usages[agent] += 1
            return
        if kind == "GrimoireCommand":
            self.commands[str(event.get("source_event_id"))] = "applied"
            return
        if kind.startswith("Grimoire") and event.get("source_event_id"):
            source = str(event["source_event_id"])
            self.decisions[f"{kind}/{_role(source)}"] += 1
            self.decided.setdefault(agent, set()).add(source)

    async def until(self, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(ready), timeout)
            except TimeoutError:
                raise TimeoutError(f"bench learning: {what} not seen within {timeout}s") from None


# -- the bench -----------------------------------------------------------------------


@dataclass
class _Tally:
    runs: list[Run] = field(default_factory=list)
    scored: list[ScoredRecall] = field(default_factory=list)
    explored: int = 0
    recall_ms: list[float] = field(default_factory=list)
    run_ms: list[float] = field(default_factory=list)
    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    shadow_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    configured: dict[str, dict[str, str]] = field(default_factory=dict)
    weight_sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    top_roles: Counter[str] = field(default_factory=Counter)  # the top memory's episode
    shadow_top_roles: Counter[str] = field(default_factory=Counter)


def _role(event_id: str) -> str:
    """The bench's event ids end in the episode's role: -trigger, -action, -outcome."""
    return event_id.rsplit("-", 1)[-1]


def _learner(slot: int) -> str:
    return f"learner-{slot}"


def _shadow(slot: int) -> str:
    return f"shadow-{slot}"


async def _configure(
    client: GrimoireClient,
    watch: _Watch,
    agent_id: str,
    settings: Mapping[str, bool],
    *,
    bench_id: str,
    timeout: float,
) -> dict[str, str]:
    """Each setting in a `configure` of its own, waited for: applied, or refused."""
    result: dict[str, str] = {}
    for name, value in settings.items():
        event_id = f"{bench_id}-{agent_id}-cfg-{name}"
        watch.commands_pending.add(event_id)
        await client.send_command(
            CommandV1(
                agent_id=agent_id,
                command="configure",
                config={name: value},
                ts=T0_MS - 1,
                event_id=event_id,
            )
        )
        await watch.until(
            _answered(watch, event_id), timeout=timeout, what=f"configure {name} of {agent_id}"
        )
        result[name] = watch.commands[event_id]
    return result


def _answered(watch: _Watch, event_id: str) -> Callable[[], bool]:
    return lambda: event_id in watch.commands


def _decided(
    watch: _Watch, agents: tuple[str, ...], event_ids: set[str], used: Counter[str]
) -> Callable[[], bool]:
    return lambda: all(
        event_ids <= watch.decided.get(agent, set()) and watch.usages[agent] >= used[agent]
        for agent in agents
    )


def _ended(watch: _Watch, agents: tuple[str, ...], runs: int) -> Callable[[], bool]:
    return lambda: all(watch.outcomes[agent] >= runs for agent in agents)


# How important the agent marks each episode of a run, the same whatever the run's
# result (so importance tells nothing of it). Unmarked, the write gate rejects about
# a third of the outcome reports (a report's type prior is low).
_IMPORTANCE: Mapping[str, float] = {"trigger": 0.7, "action": 0.6, "outcome": 0.8}


def _episodes(agent_id: str, run: Run, texts: Any, ts: int) -> list[EpisodeV1]:
    return [
        EpisodeV1(
            agent_id=agent_id,
            ts=ts,
            text=texts.trigger,
            event_id=f"{run.run_id}-trigger",
            episode_type="alert",
            importance=_IMPORTANCE["trigger"],
            run_id=run.run_id,
        ),
        EpisodeV1(
            agent_id=agent_id,
            ts=ts + 60_000,
            text=texts.action,
            event_id=f"{run.run_id}-action",
            episode_type="action",
            importance=_IMPORTANCE["action"],
            run_id=run.run_id,
        ),
        EpisodeV1(
            agent_id=agent_id,
            ts=ts + 120_000,
            text=texts.outcome,
            event_id=f"{run.run_id}-outcome",
            episode_type="report",
            outcome="success" if run.success else "failure",
            importance=_IMPORTANCE["outcome"],
            run_id=run.run_id,
        ),
    ]


async def _slot(
    client: GrimoireClient,
    watch: _Watch,
    env: Environment,
    options: LearningOptions,
    slot: int,
    bench_id: str,
    tally: _Tally,
) -> None:
    learner, shadow = _learner(slot), _shadow(slot)
    agents = (learner, shadow)
    timeout = options.step_timeout_s
    tally.configured[learner] = await _configure(
        client, watch, learner, LEARNING_ON, bench_id=bench_id, timeout=timeout
    )
    tally.configured[shadow] = await _configure(
        client, watch, shadow, LEARNING_OFF, bench_id=bench_id, timeout=timeout
    )
    runs_by_event: dict[str, Run] = {}
    visits: Counter[int] = Counter()
    succeeded: set[int] = set()  # situations with a successful run so far
    used: Counter[str] = Counter()
    for index, situation in enumerate(schedule(env, slot)):
        began = time.perf_counter()
        rid = run_id(bench_id, slot, index)
        query = env.situations[situation].query
        replies = await asyncio.gather(
            *(
                recall_before_run(
                    client, agent, query, serving_run_id=rid, k=options.k, timeout=timeout
                )
                for agent in agents
            )
        )
        tally.recall_ms.append((time.perf_counter() - began) * 1000)
        for agent, reply in zip(agents, replies, strict=True):
            used[agent] += bool(reply.get("items"))  # a recall that returned items is a use
        tops = [top_run(reply.get("items") or (), runs_by_event, situation) for reply in replies]
        for counts, top in zip((tally.top_roles, tally.shadow_top_roles), tops, strict=True):
            counts[_role(top[1]) if top else "none"] += 1
        mine, theirs = (top[0] if top else None for top in tops)
        action, explored = choose_action(
            env,
            slot,
            index,
            situation,
            visits[situation],
            mine.action if mine else None,
            recalled_failed=mine is not None and not mine.success,
        )
        tally.explored += explored
        success, quality = draw_outcome(env, slot, index, situation, action)
        run = Run(rid, slot, index, situation, action, success, quality)
        tally.scored.append(
            ScoredRecall(
                slot,
                situation,
                visits[situation],
                mine.success if mine else None,
                theirs.success if theirs else None,
                success_known=situation in succeeded,
            )
        )
        tally.runs.append(run)
        if success:
            succeeded.add(situation)
        texts = render_run(env, slot, index, situation, action, success)
        ts = T0_MS + index * RUN_SPACING_MS
        for agent in agents:
            for episode in _episodes(agent, run, texts, ts):
                runs_by_event[episode.event_id or ""] = run
                await client.publish_raw(
                    client.topics.episodes, agent, episode.dumps_json(), wait=False
                )
        await client.flush()
        # The run's end goes out once its episodes are decided and the recall's use
        # (which names the run it served) is applied: they reach the journal by
        # other paths, and the end must find the run's memories and what served it.
        await watch.until(
            _decided(watch, agents, {f"{rid}-trigger", f"{rid}-action", f"{rid}-outcome"}, used),
            timeout=timeout,
            what=f"the episodes of {rid}",
        )
        for agent in agents:
            await client.publish_outcome(
                OutcomeV1(
                    agent_id=agent,
                    ts=ts + 180_000,
                    outcome="run_ended",
                    run_id=rid,
                    quality=quality,
                    event_id=f"{rid}-end",
                )
            )
        await watch.until(
            _ended(watch, agents, index + 1),
            timeout=timeout,
            what=f"the end of {rid}",
        )
        visits[situation] += 1
        tally.run_ms.append((time.perf_counter() - began) * 1000)
        for agent, reply in zip(agents, replies, strict=True):
            weights = learned_weights(reply)
            if weights is not None:
                (tally.weights if agent == learner else tally.shadow_weights)[agent] = weights
            source = learning_source(reply)
            if source:
                tally.weight_sources[agent] = source


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(share: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)

    return {"p50": at(0.5), "p95": at(0.95), "max": round(ordered[-1], 1)}


def _mean_weights(per_agent: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    names = sorted({name for weights in per_agent.values() for name in weights})
    return {
        name: round(statistics.fmean(w[name] for w in per_agent.values() if name in w), 4)
        for name in names
    }


def _report(
    env: Environment, options: LearningOptions, tally: _Tally, watch: _Watch
) -> dict[str, Any]:
    # The headline rate is over the recalls that could put a successful run's memory
    # first (the situation had one); over every recall it is reported beside it.
    rates = success_first([r for r in tally.scored if r.success_known], options.warmup)
    every = success_first(tally.scored, options.warmup)
    runs = len(tally.runs)
    total_regret = regret(env, tally.runs)
    uniform = sum(
        env.situations[r.situation].p_best
        - statistics.fmean(a.p_success for a in env.situations[r.situation].actions)
        for r in tally.runs
    )
    half = tally.runs[len(tally.runs) // 2 :]
    best_share = sum(1 for r in half if r.action == env.situations[r.situation].best)
    report: dict[str, Any] = {
        "runs": runs,
        "success_first_rate": rates.learner.rate,
        "success_first_rate_without_learning": rates.shadow.rate,
        "success_first_rate_all_recalls": every.learner.rate,
        "success_first_rate_all_recalls_without_learning": every.shadow.rate,
        "recalls_before_any_success": sum(1 for r in tally.scored if not r.success_known),
        "target": TARGET,
        "regret": total_regret,
        "regret_per_run": round(total_regret / runs, 4) if runs else None,
        "regret_uniform_choice": round(uniform, 4),
        "weights": {agent: tally.weights[agent] for agent in sorted(tally.weights)},
    }
    if tally.weights:
        report["weights_mean"] = _mean_weights(tally.weights)
    else:
        report["weights_note"] = (
            "no weights in the recall replies' learning/explain section (not in this pipeline)"
        )
    report["success_first"] = {
        "rule": "per recall before a run: the first recalled item that is a memory of the "
        "situation's runs (any role); success-first when that run's quality >= "
        f"{SUCCESS_QUALITY}; an agent's first {options.warmup} visits of each situation "
        "are not scored, recalls with no memory of the situation are counted apart, and so "
        "are recalls made before any run of the situation succeeded (no ranking can put a "
        "success first then; success_first_rate_all_recalls includes them)",
        "warmup_visits": options.warmup,
        "warmup_recalls_skipped": every.warmup_skipped,
        # past warm-up, the recalls made while no run of the situation had succeeded
        "before_any_success": every.learner.scored
        + every.learner.without_memory
        - rates.learner.scored
        - rates.learner.without_memory,
        "learning": {
            "scored": rates.learner.scored,
            "success_first": rates.learner.success_first,
            "without_situation_memory": rates.learner.without_memory,
        },
        "without_learning": {
            "scored": rates.shadow.scored,
            "success_first": rates.shadow.success_first,
            "without_situation_memory": rates.shadow.without_memory,
        },
        "top_memory_differs": rates.top_differs,
        "top_memory_role": dict(sorted(tally.top_roles.items())),
        "top_memory_role_without_learning": dict(sorted(tally.shadow_top_roles.items())),
    }
    report.update(
        {
            "run_success_rate": round(sum(r.success for r in tally.runs) / runs, 4)
            if runs
            else None,
            "explored_share": round(tally.explored / runs, 4) if runs else None,
            "best_action_share_second_half": round(best_share / len(half), 4) if half else None,
            "agents": options.agents,
            "shadow_agents": options.agents,
            "situations": options.situations,
            "actions": options.actions,
            "runs_per_agent": options.runs,
            "seed": options.seed,
            "k": options.k,
            "environment": env.to_json(),
            "learning_config": tally.configured,
            "shadow_weights": {a: tally.shadow_weights[a] for a in sorted(tally.shadow_weights)},
            "weights_source": {a: tally.weight_sources[a] for a in sorted(tally.weight_sources)},
            "decisions": dict(sorted(watch.decisions.items())),
            "dead_letters": dict(sorted(watch.dead_letters.items())),
            "events_published": runs * 2 * 4,
            "recalls": runs * 2,
            "maintenance": False,
            "timings": {
                "recall_pair_ms": _percentiles(tally.recall_ms),
                "run_ms": _percentiles(tally.run_ms),
            },
        }
    )
    return report


async def run_learning(
    base: Settings, options: LearningOptions, *, log_dir: Path
) -> dict[str, Any]:
    """The bench against running services (`base` names them): its own topic prefix,
    its own worker process (started here, stopped at the end)."""
    bench_id = uuid.uuid4().hex[:6]
    settings = base.model_copy(
        update={
            "topic_prefix": f"learn{bench_id}",
            "app_id": f"grimoire-learn{bench_id}",
            # The block timer's maintenance runs on the wall clock, so it would land at
            # different places in a learner's and its shadow's journals.
            "maintenance_enabled": False,
        }
    )
    env = build_environment(
        seed=options.seed,
        agents=options.agents,
        situations=options.situations,
        actions=options.actions,
        runs_per_agent=options.runs,
    )
    began = time.perf_counter()
    worker = start_worker(settings, log_dir / f"worker-{settings.topic_prefix}.log")
    tally = _Tally()
    try:
        async with GrimoireClient(
            settings.bootstrap_servers, settings.topic_prefix, partitions=settings.partitions
        ) as client:
            await client.wait_until_ready(timeout=180)
            ready = time.perf_counter()
            watch = _Watch(settings.bootstrap_servers, client.topics, settings.partitions)
            await watch.start()
            try:
                await asyncio.gather(
                    *(
                        _slot(client, watch, env, options, slot, bench_id, tally)
                        for slot in range(options.agents)
                    )
                )
            finally:
                await watch.stop()
            finished = time.perf_counter()
    finally:
        stop_worker(worker)
    report = _report(env, options, tally, watch)
    report["timings"].update(
        {"startup_s": round(ready - began, 1), "runs_s": round(finished - ready, 1)}
    )
    return report


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def run_learning_bench(settings: Settings, options: LearningOptions) -> dict[str, Any]:
    """Its own broker and Redis (ports GRIMOIRE_BENCH_LEARNING_KAFKA_PORT /
    _REDIS_PORT, default 19631 / 16931), stopped at the end if started here."""
    began = time.perf_counter()
    state_dir = Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire")).resolve()
    ports = ServicePorts(
        kafka=int(os.environ.get("GRIMOIRE_BENCH_LEARNING_KAFKA_PORT", "19631")),
        redis=int(os.environ.get("GRIMOIRE_BENCH_LEARNING_REDIS_PORT", "16931")),
    )
    services = LocalServices(
        state_dir / "bench-learning", ports, wheel_cache=state_dir / "wheels", ready_timeout=120.0
    )
    started = services.up()
    base = settings.model_copy(
        update={
            "broker_url": f"kafka://{services.kafka_bootstrap}",
            "redis_url": services.redis_url,
        }
    )
    try:
        report = asyncio.run(
            run_learning(base, options, log_dir=state_dir / "bench-learning" / "log")
        )
    finally:
        if started:
            services.down()
    report["elapsed_s"] = round(time.perf_counter() - began, 1)
    report["cpu"] = _cpu_model()
    report["cpus"] = os.cpu_count()
    return report
