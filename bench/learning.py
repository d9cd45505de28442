"""`python -m bench learning`: do agents that act on Grimoire's recall learn what
works, against the same world played by reference learners?

A generated world (`learning_env.py`): agents meet recurring situations whose
candidate actions have hidden success probabilities. Five arms play it with the
same situations in the same order and the same outcome draw per (agent, run)
(common random numbers), scored alike (`learning_arms.py`):
- `oracle`: always the best action; `thompson`: Thompson sampling with Beta(1, 1)
  priors per situation x action, per agent, seeded; `uniform`: a seeded uniform
  choice. These need no pipeline.
- `grimoire`: per agent slot a learner that, through the real pipeline (tansu +
  Redis + a worker process), recalls before acting (the request names the run it
  serves), acts on what it recalled (`learning_env.recalled_choice` and
  `choose_action`: the first recalled item about one of the situation's actions,
  an evidence entry (followed unless its posterior mean is under 0.5, when an
  action the reply holds no evidence for is tried) or a memory of one of its
  runs (a failed run's action is not repeated); ε-greedy exploration, decaying),
  publishes the run's trigger (an alert episode tagged with the alert's name, as
  a monitoring system names it), action (a tool event: the tool is the action)
  and outcome report under one `run_id`, then the run's end (`run_ended` with the
  run's quality). The next recall waits until the run is
  applied (its episodes decided, then its end witnessed, read on memory-events).
- `grimoire_learning_off`: the same agent and policy with learning switched off
  (`configure`), acting on its own recalls: its own runs.

Ranking alone: every learner has two shadows that receive byte-identical events
(same texts, event ids, runs, outcomes, event times; their own agent ids) and make
the same recall at the same point without acting on it: one with learning off, one
with learning on and the fixed outcome prior off (`outcome_bias` 0). Their
`success_first_rate` against the learner's says what learning, and what the fixed
prior alone, did to the ranking.

Last line: one JSON object (per arm `regret` and `late_success_rate`, the targets,
`success_first_rate` with learning, without it and without the outcome prior, the
learned weights from the recall's explain section, and the details).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.event_tail import EventTail
from bench.learning_arms import ARMS, arm_summary, reference_arms, targets
from bench.learning_env import (
    EPS0,
    EPS_DECAY,
    EPS_MIN,
    RUN_SPACING_MS,
    SUCCESS_QUALITY,
    T0_MS,
    Environment,
    Run,
    ScoredRecall,
    build_environment,
    choose_action,
    draw_outcome,
    recalled_choice,
    render_run,
    run_id,
    schedule,
    success_first,
    top_run,
    uniform_regret,
)
from bench.services import ready_client, run_on_own_services
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import CommandV1, EpisodeV1, OutcomeV1, ToolEventV1

__all__ = [
    "GRIMOIRE_CONFIG",
    "LEARNING_OFF",
    "LEARNING_ON",
    "NO_OUTCOME_PRIOR_CONFIG",
    "LearningOptions",
    "LearningWatch",
    "WorldOptions",
    "act_on_recall",
    "configure_agent",
    "end_run",
    "episodes_decided",
    "percentiles",
    "publish_run",
    "recall_before_run",
    "run_episodes",
    "run_event_ids",
    "run_learning",
    "run_learning_bench",
    "runs_ended",
    "watching",
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
# The learner's configuration (the `grimoire` arm): learning on, the fixed outcome
# prior at its default, said explicitly; its second shadow's: the prior off (the
# run record's premium `1 + outcome_bias * (2 * outcome - 1)` is then 1; the
# outcome factor the learned weights can grow stays).
GRIMOIRE_CONFIG: Mapping[str, bool | float] = {**LEARNING_ON, "outcome_bias": 1.0}
NO_OUTCOME_PRIOR_CONFIG: Mapping[str, bool | float] = {**LEARNING_ON, "outcome_bias": 0.0}


@dataclass(frozen=True, slots=True)
class WorldOptions:
    """The generated world an agent plays, shared with `bench clade`: the same options,
    the same world in every arm."""

    agents: int = 4  # agent slots (what a slot holds is the bench's)
    situations: int = 3
    actions: int = 4
    runs: int = 60  # per agent
    seed: int = 7
    k: int = 8  # items per recall
    step_timeout_s: float = 120.0  # how long one step may wait on the pipeline

    def environment(self) -> Environment:
        return build_environment(
            seed=self.seed,
            agents=self.agents,
            situations=self.situations,
            actions=self.actions,
            runs_per_agent=self.runs,
        )

    def described(self, env: Environment, *, pipeline_agents: int) -> dict[str, Any]:
        """The report's account of the world played (`pipeline_agents`: the agent ids
        the slots use in the pipeline)."""
        return {
            "agents": self.agents,
            "pipeline_agents": pipeline_agents,
            "situations": self.situations,
            "actions": self.actions,
            "runs_per_agent": self.runs,
            "seed": self.seed,
            "k": self.k,
            "environment": env.to_json(),
        }


@dataclass(frozen=True, slots=True)
class LearningOptions(WorldOptions):
    """A slot: a learner, its two shadows and a learning-off actor."""

    warmup: int = 3  # an agent's first visits of a situation are not scored


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
    """Where the weights came from, how many runs they learned from, the outcome
    bias and whether causal scoring is on, as far as the reply says."""
    section = reply.get("learning")
    if not isinstance(section, Mapping):
        return {}
    return {
        key: section[key]
        for key in ("source", "updates", "outcome_bias", "causal_scoring")
        if key in section
    }


# -- what the pipeline says it did ---------------------------------------------------


class LearningWatch(EventTail):
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


# The agents that receive the learner's runs, as the report names them: the learner,
# its shadow with learning off, its shadow with the fixed outcome prior off.
_SCORED_ROLES = ("learning", "without_learning", "without_outcome_prior")


@dataclass
class _Tally:
    runs: list[Run] = field(default_factory=list)  # the `grimoire` arm's (the learners')
    off_runs: list[Run] = field(default_factory=list)  # the `grimoire_learning_off` arm's
    scored: list[ScoredRecall] = field(default_factory=list)
    explored: Counter[str] = field(default_factory=Counter)  # arm -> ε or failure explorations
    advice: Counter[str] = field(default_factory=Counter)  # arm -> choices read as advice
    # arm -> recalls whose first item was an evidence entry of the situation, and
    # recalls made once the agent had ended a run of the situation
    evidence_led: Counter[str] = field(default_factory=Counter)
    evidence_due: Counter[str] = field(default_factory=Counter)
    recall_ms: list[float] = field(default_factory=list)
    run_ms: list[float] = field(default_factory=list)
    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    no_prior_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    off_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    configured: dict[str, dict[str, str]] = field(default_factory=dict)
    weight_sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    top_roles: dict[str, Counter[str]] = field(
        default_factory=lambda: {role: Counter() for role in _SCORED_ROLES}
    )


def _role(event_id: str) -> str:
    """The bench's event ids end in the episode's role: -trigger, -action, -outcome."""
    return event_id.rsplit("-", 1)[-1]


@dataclass(frozen=True, slots=True)
class _Agents:
    """The four agents of one slot: the learner (the `grimoire` arm), its two
    shadows (same events, recalls not acted on) and the learning-off actor (the
    `grimoire_learning_off` arm, its own runs)."""

    learner: str
    shadow: str  # learning off
    no_prior: str  # learning on, the fixed outcome prior off
    off: str

    @classmethod
    def of(cls, slot: int) -> _Agents:
        return cls(f"learner-{slot}", f"shadow-{slot}", f"noprior-{slot}", f"off-{slot}")

    @property
    def all(self) -> tuple[str, str, str, str]:
        return (self.learner, self.shadow, self.no_prior, self.off)

    @property
    def scored(self) -> tuple[str, str, str]:
        """The agents that receive the learner's runs, in `_SCORED_ROLES` order."""
        return (self.learner, self.shadow, self.no_prior)


async def configure_agent(
    client: GrimoireClient,
    watch: LearningWatch,
    agent_id: str,
    settings: Mapping[str, bool | float | str],
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


Watch = TypeVar("Watch", bound=LearningWatch)


@asynccontextmanager
async def watching(
    kind: type[Watch], settings: Settings, client: GrimoireClient
) -> AsyncIterator[Watch]:
    """A watch of `kind` on the deployment's events, started, and stopped on the way out."""
    watch = kind(settings.bootstrap_servers, client.topics, settings.broker.partitions)
    await watch.start()
    try:
        yield watch
    finally:
        await watch.stop()


def _answered(watch: LearningWatch, event_id: str) -> Callable[[], bool]:
    return lambda: event_id in watch.commands


def episodes_decided(
    watch: LearningWatch, wanted: Mapping[str, set[str]], used: Counter[str]
) -> Callable[[], bool]:
    return lambda: all(
        event_ids <= watch.decided.get(agent, set()) and watch.usages[agent] >= used[agent]
        for agent, event_ids in wanted.items()
    )


def runs_ended(watch: LearningWatch, agents: tuple[str, ...], runs: int) -> Callable[[], bool]:
    return lambda: all(watch.outcomes[agent] >= runs for agent in agents)


# How important the agent marks each episode of a run, the same whatever the run's
# result (so importance tells nothing of it). Unmarked, the write gate rejects about
# a third of the outcome reports (a report's type prior is low).
_IMPORTANCE: Mapping[str, float] = {"trigger": 0.7, "action": 0.6, "outcome": 0.8}


def run_episodes(
    agent_id: str, run: Run, texts: Any, ts: int, env: Environment
) -> list[EpisodeV1 | ToolEventV1]:
    """The run's three inputs: the alert that triggered it (tagged with the alert's
    name, as a monitoring system names its alerts: the situation), the tool call
    that was the action (the tool is the action's name) and the report of how it
    went."""
    situation = env.situations[run.situation]
    return [
        EpisodeV1(
            agent_id=agent_id,
            ts=ts,
            text=texts.trigger,
            event_id=f"{run.run_id}-trigger",
            episode_type="alert",
            importance=_IMPORTANCE["trigger"],
            run_id=run.run_id,
            tags=[f"alert/{situation.key}"],
        ),
        ToolEventV1(
            agent_id=agent_id,
            ts=ts + 60_000,
            tool=situation.actions[run.action].name,
            result=texts.action,
            event_id=f"{run.run_id}-action",
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


def run_event_ids(run: Run) -> set[str]:
    return {f"{run.run_id}-{role}" for role in ("trigger", "action", "outcome")}


async def publish_run(
    client: GrimoireClient,
    env: Environment,
    agent_id: str,
    played: Run,
    ts: int,
    book: dict[str, Run],
) -> None:
    """The run's three inputs from `agent_id` (not flushed), each noted in `book`
    by its event id."""
    texts = render_run(
        env, played.slot, played.index, played.situation, played.action, played.success
    )
    for episode in run_episodes(agent_id, played, texts, ts, env):
        book[episode.event_id or ""] = played
        topic = (
            client.topics.tool_events
            if isinstance(episode, ToolEventV1)
            else client.topics.episodes
        )
        await client.publish_raw(topic, agent_id, episode.dumps_json(), wait=False)


async def end_run(client: GrimoireClient, agent_id: str, played: Run, ts: int) -> None:
    """The run's end (`run_ended` with its quality), after its episodes at `ts`."""
    await client.publish_outcome(
        OutcomeV1(
            agent_id=agent_id,
            ts=ts + 180_000,
            outcome="run_ended",
            run_id=played.run_id,
            quality=played.quality,
            event_id=f"{played.run_id}-end",
        )
    )


def act_on_recall(
    env: Environment,
    slot: int,
    index: int,
    situation: int,
    visits: int,
    items: Any,
    runs_by_event: Mapping[str, Run],
    rid: str,
) -> tuple[Run, bool, bool]:
    """One agent's run on its recall: (the run, explored, acted on advice)."""
    read = recalled_choice(env, situation, items or (), runs_by_event)
    action, explored = choose_action(
        env,
        slot,
        index,
        situation,
        visits,
        read.action if read else None,
        recalled_failed=read is not None and read.succeeded is False,
        known=read.known if read else (),
    )
    success, quality = draw_outcome(env, slot, index, situation, action)
    advice = read is not None and read.succeeded is None and not explored
    return Run(rid, slot, index, situation, action, success, quality), explored, advice


async def _slot(
    client: GrimoireClient,
    watch: LearningWatch,
    env: Environment,
    options: LearningOptions,
    slot: int,
    bench_id: str,
    tally: _Tally,
) -> None:
    who = _Agents.of(slot)
    timeout = options.step_timeout_s
    for agent, config in (
        (who.learner, GRIMOIRE_CONFIG),
        (who.shadow, LEARNING_OFF),
        (who.no_prior, NO_OUTCOME_PRIOR_CONFIG),
        (who.off, LEARNING_OFF),
    ):
        tally.configured[agent] = await configure_agent(
            client, watch, agent, config, bench_id=bench_id, timeout=timeout
        )
    runs_by_event: dict[str, Run] = {}  # the learner's runs (its shadows' too)
    off_by_event: dict[str, Run] = {}  # the learning-off actor's runs
    visits: Counter[int] = Counter()
    succeeded: set[int] = set()  # situations where a learner's run succeeded so far
    used: Counter[str] = Counter()
    for index, situation in enumerate(schedule(env, slot)):
        began = time.perf_counter()
        rid, off_rid = run_id(bench_id, slot, index), run_id(f"{bench_id}x", slot, index)
        serving = {who.learner: rid, who.shadow: rid, who.no_prior: rid, who.off: off_rid}
        query = env.situations[situation].query
        answers = await asyncio.gather(
            *(
                recall_before_run(
                    client, agent, query, serving_run_id=run, k=options.k, timeout=timeout
                )
                for agent, run in serving.items()
            )
        )
        replies = dict(zip(serving, answers, strict=True))
        tally.recall_ms.append((time.perf_counter() - began) * 1000)
        for agent, reply in replies.items():
            used[agent] += bool(reply.get("items"))  # a recall that returned items is a use
        tops = {
            role: top_run(replies[agent].get("items") or (), runs_by_event, situation)
            for role, agent in zip(_SCORED_ROLES, who.scored, strict=True)
        }
        for role, top in tops.items():
            tally.top_roles[role][_role(top[1]) if top else "none"] += 1
        learner_top, shadow_top, no_prior_top = (
            top[0].success if top else None for top in tops.values()
        )
        run, explored, advice = act_on_recall(
            env,
            slot,
            index,
            situation,
            visits[situation],
            replies[who.learner].get("items"),
            runs_by_event,
            rid,
        )
        off_run, off_explored, off_advice = act_on_recall(
            env,
            slot,
            index,
            situation,
            visits[situation],
            replies[who.off].get("items"),
            off_by_event,
            off_rid,
        )
        tally.explored.update({"grimoire": explored, "grimoire_learning_off": off_explored})
        tally.advice.update({"grimoire": advice, "grimoire_learning_off": off_advice})
        if visits[situation]:
            for arm, agent in (("grimoire", who.learner), ("grimoire_learning_off", who.off)):
                items = replies[agent].get("items") or ()
                tally.evidence_due[arm] += 1
                tally.evidence_led[arm] += bool(items and items[0].get("evidence"))
        tally.scored.append(
            ScoredRecall(
                slot,
                situation,
                visits[situation],
                learner_top,
                shadow_top,
                success_known=situation in succeeded,
                no_prior=no_prior_top,
            )
        )
        tally.runs.append(run)
        tally.off_runs.append(off_run)
        if run.success:
            succeeded.add(situation)
        ts = T0_MS + index * RUN_SPACING_MS
        published: list[tuple[str, Run]] = [(agent, run) for agent in who.scored]
        published.append((who.off, off_run))
        for agent, played in published:
            book = off_by_event if played is off_run else runs_by_event
            await publish_run(client, env, agent, played, ts, book)
        await client.flush()
        # The run's end goes out once its episodes are decided and the recall's use
        # (which names the run it served) is applied: they reach the journal by
        # other paths, and the end must find the run's memories and what served it.
        await watch.until(
            episodes_decided(
                watch, {agent: run_event_ids(played) for agent, played in published}, used
            ),
            timeout=timeout,
            what=f"the episodes of {rid}",
        )
        for agent, played in published:
            await end_run(client, agent, played, ts)
        await watch.until(
            runs_ended(watch, who.all, index + 1),
            timeout=timeout,
            what=f"the end of {rid}",
        )
        visits[situation] += 1
        tally.run_ms.append((time.perf_counter() - began) * 1000)
        for agent, reply in replies.items():
            weights = learned_weights(reply)
            if weights is not None:
                book_of = {
                    who.learner: tally.weights,
                    who.no_prior: tally.no_prior_weights,
                }.get(agent, tally.off_weights)
                book_of[agent] = weights
            source = learning_source(reply)
            if source:
                tally.weight_sources[agent] = source


def percentiles(values: list[float]) -> dict[str, float]:
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


def _gain_share(on: float | None, off: float | None, no_prior: float | None) -> float | None:
    """The share of learning's success-first gain (on - off) that the fixed outcome
    prior gives on its own (on - no prior)."""
    if on is None or off is None or no_prior is None or on <= off:
        return None
    return round((on - no_prior) / (on - off), 4)


def _sorted_runs(runs: list[Run]) -> list[Run]:
    return sorted(runs, key=lambda r: (r.slot, r.index))


def _arms(env: Environment, tally: _Tally) -> dict[str, dict[str, Any]]:
    played = reference_arms(env)
    played["grimoire"] = _sorted_runs(tally.runs)
    played["grimoire_learning_off"] = _sorted_runs(tally.off_runs)
    arms = {arm: arm_summary(env, played[arm]) for arm in ARMS}
    for arm in ("grimoire", "grimoire_learning_off"):
        runs = arms[arm]["runs"]
        arms[arm]["explored_share"] = round(tally.explored[arm] / runs, 4) if runs else None
        arms[arm]["advice_followed"] = tally.advice[arm]
        due = tally.evidence_due[arm]
        arms[arm]["evidence_led_share"] = round(tally.evidence_led[arm] / due, 4) if due else None
    arms["uniform"]["regret_expected"] = uniform_regret(env)
    return arms


def _report(
    env: Environment, options: LearningOptions, tally: _Tally, watch: LearningWatch
) -> dict[str, Any]:
    # The headline rate is over the recalls that could put a successful run's memory
    # first (the situation had one); over every recall it is reported beside it.
    rates = success_first([r for r in tally.scored if r.success_known], options.warmup)
    every = success_first(tally.scored, options.warmup)
    runs = len(tally.runs)
    arms = _arms(env, tally)
    refused = sorted(
        f"{agent}: {name} {answer}"
        for agent, answers in tally.configured.items()
        for name, answer in answers.items()
        if answer != "applied"
    )
    prior_settable = all(
        answers.get("outcome_bias") == "applied"
        for agent, answers in tally.configured.items()
        if agent.startswith("noprior-")
    )
    no_prior_rate = rates.no_prior.rate if prior_settable else None
    report: dict[str, Any] = {
        "runs": runs,
        "arms": arms,
        "targets": targets(arms),
        "success_first_rate": rates.learner.rate,
        "success_first_rate_without_learning": rates.shadow.rate,
        "success_first_rate_without_outcome_prior": no_prior_rate,
        "outcome_prior_gain_share": _gain_share(
            rates.learner.rate, rates.shadow.rate, no_prior_rate
        ),
        "success_first_rate_all_recalls": every.learner.rate,
        "success_first_rate_all_recalls_without_learning": every.shadow.rate,
        "success_first_rate_all_recalls_without_outcome_prior": every.no_prior.rate
        if prior_settable
        else None,
        "recalls_before_any_success": sum(1 for r in tally.scored if not r.success_known),
        "target": TARGET,
        "weights": {agent: tally.weights[agent] for agent in sorted(tally.weights)},
    }
    if not prior_settable:
        report["outcome_prior_note"] = (
            "not configurable: the pipeline refused `outcome_bias` in `configure`"
        )
    if tally.weights:
        report["weights_mean"] = _mean_weights(tally.weights)
    else:
        report["weights_note"] = (
            "no weights in the recall replies' learning/explain section (not in this pipeline)"
        )
    if tally.no_prior_weights:
        report["weights_mean_without_outcome_prior"] = _mean_weights(tally.no_prior_weights)
    report["success_first"] = {
        "rule": "per recall before a learner's run: the first recalled item that is a memory "
        "of the situation's runs (any role); success-first when that run's quality >= "
        f"{SUCCESS_QUALITY}; an agent's first {options.warmup} visits of each situation "
        "are not scored, recalls with no memory of the situation are counted apart, and so "
        "are recalls made before any run of the situation succeeded (no ranking can put a "
        "success first then; success_first_rate_all_recalls includes them); the shadows "
        "(learning off; learning on with outcome_bias 0) receive the learner's events and "
        "make the same recalls",
        "warmup_visits": options.warmup,
        "warmup_recalls_skipped": every.warmup_skipped,
        # past warm-up, the recalls made while no run of the situation had succeeded
        "before_any_success": every.learner.scored
        + every.learner.without_memory
        - rates.learner.scored
        - rates.learner.without_memory,
        **{
            role: {
                "scored": rate.scored,
                "success_first": rate.success_first,
                "without_situation_memory": rate.without_memory,
            }
            for role, rate in zip(
                _SCORED_ROLES, (rates.learner, rates.shadow, rates.no_prior), strict=True
            )
        },
        "top_memory_differs": rates.top_differs,
        "top_memory_role": dict(sorted(tally.top_roles["learning"].items())),
        "top_memory_role_without_learning": dict(
            sorted(tally.top_roles["without_learning"].items())
        ),
        "top_memory_role_without_outcome_prior": dict(
            sorted(tally.top_roles["without_outcome_prior"].items())
        ),
    }
    report.update(
        {
            "policy": "each run: the first recalled item about one of the situation's actions "
            "(an evidence entry, a memory of the agent's own run of it, or an entry naming "
            "one action); an evidence entry with a posterior mean under 0.5 is not followed "
            "(an action the reply holds no evidence for is tried, else another), nor is a "
            "failed run's action (another is tried); else that action, "
            f"unless the ε draw (ε = max({EPS_MIN}, {EPS0} / (1 + visits / {EPS_DECAY}))) "
            "says explore; nothing recalled: a uniform choice",
            **options.described(env, pipeline_agents=4 * options.agents),
            "learning_config": tally.configured,
            "configure_refused": refused,
            "weights_without_outcome_prior": {
                a: tally.no_prior_weights[a] for a in sorted(tally.no_prior_weights)
            },
            "weights_learning_off": {a: tally.off_weights[a] for a in sorted(tally.off_weights)},
            "weights_source": {a: tally.weight_sources[a] for a in sorted(tally.weight_sources)},
            "decisions": dict(sorted(watch.decisions.items())),
            "dead_letters": dict(sorted(watch.dead_letters.items())),
            "events_published": runs * 4 * 4,
            "recalls": runs * 4,
            "maintenance": False,
            "timings": {
                "recall_round_ms": percentiles(tally.recall_ms),
                "run_ms": percentiles(tally.run_ms),
            },
        }
    )
    if refused:
        logger.warning("bench learning: configure refused: %s", "; ".join(refused))
    return report


async def run_learning(
    base: Settings, options: LearningOptions, *, log_dir: Path
) -> dict[str, Any]:
    """The bench against running services (`base` names them): its own topic prefix,
    its own worker process (started here, stopped at the end)."""
    bench_id = uuid.uuid4().hex[:6]
    settings = base.with_values(
        topic_prefix=f"learn{bench_id}",
        app_id=f"grimoire-learn{bench_id}",
        # The block timer's maintenance runs on the wall clock, so it would land at
        # different places in a learner's and its shadow's journals.
        maintenance_enabled=False,
    )
    env = options.environment()
    began = time.perf_counter()
    worker = start_worker(settings, log_dir / f"worker-{settings.broker.topic_prefix}.log")
    tally = _Tally()
    try:
        async with ready_client(settings, timeout=180) as client:
            ready = time.perf_counter()
            async with watching(LearningWatch, settings, client) as watch:
                await asyncio.gather(
                    *(
                        _slot(client, watch, env, options, slot, bench_id, tally)
                        for slot in range(options.agents)
                    )
                )
            finished = time.perf_counter()
    finally:
        stop_worker(worker)
    report = _report(env, options, tally, watch)
    report["timings"].update(
        {"startup_s": round(ready - began, 1), "runs_s": round(finished - ready, 1)}
    )
    return report


def run_learning_bench(settings: Settings, options: LearningOptions) -> dict[str, Any]:
    """Its own broker and Redis (ports GRIMOIRE_BENCH_LEARNING_KAFKA_PORT /
    _REDIS_PORT, default 19631 / 16931), stopped at the end if started here."""
    return run_on_own_services(
        settings,
        "learning",
        lambda base, log_dir: run_learning(base, options, log_dir=log_dir),
        kafka_port=19631,
        redis_port=16931,
    )
