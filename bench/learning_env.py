"""The generated world of `python -m bench learning`: pure, seeded, no I/O.

Agents meet recurring situations (a disk filling up, an RPC endpoint timing out, …);
each situation has a few candidate actions whose success probabilities are hidden
from the agent: one good (0.80 to 0.90), the others poor (0.15 to 0.35). Every arm
of the bench (`learning_arms.py` for the reference arms, `learning.py` for the
agents acting on Grimoire's recall) meets the same situations in the same order
and draws its outcomes from the same numbers.

Everything is drawn from `random.Random` seeded with strings (seeded by SHA-512,
so the same in every process), one stream per (agent slot, run, purpose): the
details of a run's texts and its outcome draw never depend on how the bench's
agents interleave, on which arm acts or on what any recall returned. The outcome
is one uniform number per (slot, run) compared with the chosen action's
probability whatever the action (common random numbers): two arms that choose the
same action in the same run get the same result, and an arm whose action is more
likely to succeed never fails where a less likely one succeeds.

The texts are neutral: a successful run's trigger, action and outcome texts are the
failed run's, word for word, except one verdict word ("success" or "failure", in no
query), so what a run's memories say matches a query equally well whatever its
result; only the outcome the agent reports (`outcome` of the episode, the run's
`quality`) says how it went.

How the bench scores a recall (`success_first`): among the recalled items that are
memories of the situation's own runs, the first (top) one; the recall counts as
"success first" when that memory's run succeeded. Recalls in an agent's first
`warmup` visits of a situation are not scored (too few memories to rank), and a
recall with no memory of the situation is counted apart.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SUCCESS_QUALITY",
    "T0_MS",
    "VERDICTS",
    "ActionSpec",
    "Environment",
    "Recalled",
    "Run",
    "RunTexts",
    "ScoredRecall",
    "Situation",
    "build_environment",
    "choose_action",
    "draw_outcome",
    "epsilon",
    "late_start",
    "outcome_draw",
    "recalled_choice",
    "regret",
    "render_run",
    "run_id",
    "run_stream",
    "schedule",
    "success_first",
    "top_run",
    "uniform_regret",
    "verdict",
]

T0_MS = 1_790_000_000_000
RUN_SPACING_MS = 300_000  # event time between an agent's runs
SUCCESS_QUALITY = 0.5  # a run with quality at or above this succeeded
# The only words in which a successful run's texts differ from a failed one's: the
# outcome memory ends "…, verdict success." or "…, verdict failure.", and neither
# word is in any situation's query (tested), so neither text matches a query better.
VERDICTS = ("success", "failure")

# ε-greedy with a decaying ε: ε(n) = max(EPS_MIN, EPS0 / (1 + n / EPS_DECAY)),
# n = the agent's earlier visits of the situation.
EPS0 = 0.5
EPS_DECAY = 4.0
EPS_MIN = 0.05

_HOSTS = ("db", "api", "edge", "batch", "cache", "ledger", "relay", "search", "auth", "queue")
_REGIONS = ("eu-west-1", "us-east-2", "ap-south-1", "sa-east-1", "eu-central-1", "us-west-2")
_PEOPLE = ("Ines", "Marek", "Yuki", "Tobias", "Amara", "Priya", "Lars", "Chen", "Olga", "Diego")
_WHEN = (
    "during the nightly batch window",
    "right after the {ver} deploy",
    "while {who} was on call",
    "in the middle of a traffic spike",
    "shortly after a config push by {who}",
    "at the start of the {region} business day",
    "during a partial network partition in {region}",
    "while a backup job was running",
    "after the weekly maintenance reboot",
    "while the canary for {ver} was at {pct}%",
)
_NOTES = (
    "Dashboards show {n} related warnings in the last hour.",
    "The incident channel has {n} people in it.",
    "Customer reports mention checkout errors in {region}.",
    "The runbook page was last edited {n} days ago.",
    "A similar page fired {n} times this quarter.",
    "Error budget for the month is down to {pct}%.",
    "No change freeze is in effect.",
    "{who} suspects the last schema migration.",
    "Synthetic probes from {region} agree.",
    "Paging escalated to the secondary after {n} minutes.",
)


_OPENERS = ("alert raised", "page received", "warning fired", "incident opened", "monitor tripped")
_HOW = (
    "through the deploy pipeline",
    "by hand from the bastion host",
    "with the runbook's step {n}.{m}",
    "after paging the owning team",
    "as a change request approved by {who}",
    "from the ops chatbot",
    "with a feature flag flip",
    "in a maintenance window opened for {region}",
    "after a dry run on staging",
    "from the incident commander's checklist",
)
_CHECK = (
    "Checked {m} minutes later by {who}.",
    "Verified against the {region} dashboards.",
    "Synthetic checks confirmed it after {n} runs.",
    "Noted in the postmortem draft for {ticket}.",
    "The pager was watched for the next hour.",
    "{who} signed off on the incident ticket.",
    "Graphs reviewed at the {n} o'clock standup.",
    "Customer support reported back within {m}0 minutes.",
)


@dataclass(frozen=True, slots=True)
class _Template:
    key: str
    query: str
    trigger: str  # format fields: host, region, n, m, pct, ticket, ver, who
    actions: tuple[tuple[str, str], ...]  # (name, text template)
    result: str  # what was checked after the action, the same words whatever the result


_TEMPLATES = (
    _Template(
        "disk-pressure",
        "disk filling up on a database host: what should be done?",
        "disk usage at {pct}% on {host} (volume /var/lib/pg{n}), growing {m} GB per hour; "
        "ticket {ticket}",
        (
            ("rotate-logs", "rotated and compressed the service logs on {host}"),
            ("prune-wal", "pruned archived write-ahead log segments on {host}"),
            ("expand-volume", "grew the data volume on {host} by {m}0 GB"),
            ("restart-database", "restarted the database service on {host}"),
        ),
        "disk usage on {host} checked again after {m} minutes",
    ),
    _Template(
        "rpc-timeouts",
        "RPC endpoint timing out for a service: how to fix it?",
        "RPC endpoint https://rpc-{n}.{region}.example.net/v1 timing out, {m} of {pct} "
        "calls failed for {host}; ticket {ticket}",
        (
            ("failover-endpoint", "failed {host} over to the standby RPC provider"),
            ("raise-timeout", "raised the RPC client timeout of {host} to {m} seconds"),
            ("retry-backoff", "enabled jittered retries with backoff on {host}"),
            ("restart-client", "restarted the RPC client pool of {host}"),
        ),
        "RPC calls from {host} checked again after {m} minutes",
    ),
    _Template(
        "consumer-lag",
        "message consumers lagging behind on a topic: what helps?",
        "consumer lag of {n}{m}00 messages on topic orders-{pct} for group {host}; ticket {ticket}",
        (
            ("scale-consumers", "scaled consumer group {host} out by {m} replicas"),
            ("increase-batch", "raised the fetch batch size of {host} to {n}00"),
            ("reset-offsets", "reset the offsets of {host} to the latest position"),
            ("restart-consumers", "restarted every consumer of group {host}"),
        ),
        "consumer lag of {host} checked again after {m} minutes",
    ),
    _Template(
        "oom-kills",
        "a service keeps getting OOM-killed: what should be done?",
        "pod {host}-{n}f{m} OOM-killed {m} times in {pct} minutes (limit {n}12 MiB); "
        "ticket {ticket}",
        (
            ("raise-limit", "raised the memory limit of {host} to {n}024 MiB"),
            ("tune-heap", "capped the heap of {host} at {pct}% of the container"),
            ("rollback-release", "rolled {host} back to the previous release"),
            ("shed-load", "shed {pct}% of the traffic away from {host}"),
        ),
        "memory of {host} checked again after {m} minutes",
    ),
    _Template(
        "cert-expiry",
        "a TLS certificate is about to expire and renewal failed: what works?",
        "TLS certificate for {host}.example.org expires in {m} days, renewal job "
        "acme-{n} failed; ticket {ticket}",
        (
            ("rerun-acme", "re-ran the ACME renewal for {host}.example.org"),
            ("dns-challenge", "switched {host}.example.org to the DNS-01 challenge"),
            ("manual-certificate", "installed a manually issued certificate on {host}"),
            ("restart-ingress", "restarted the ingress controllers serving {host}"),
        ),
        "certificate of {host}.example.org checked again after {m} minutes",
    ),
    _Template(
        "latency-slo",
        "p99 latency over the SLO for a service: how to bring it down?",
        "p99 latency of {host} at {n}{m}0 ms against an SLO of {pct}0 ms in {region}; "
        "ticket {ticket}",
        (
            ("add-cache", "put a read-through cache in front of {host}"),
            ("scale-out", "scaled {host} out by {m} instances in {region}"),
            ("kill-slow-queries", "killed the slow queries behind {host}"),
            ("drain-region", "drained traffic of {host} away from {region}"),
        ),
        "p99 latency of {host} checked again after {m} minutes",
    ),
)


@dataclass(frozen=True, slots=True)
class ActionSpec:
    name: str
    text: str  # a format template (see _Template)
    p_success: float  # hidden from the agent


@dataclass(frozen=True, slots=True)
class Situation:
    key: str
    query: str  # what the agent asks before acting
    trigger: str
    actions: tuple[ActionSpec, ...]
    result: str

    @property
    def best(self) -> int:
        return max(range(len(self.actions)), key=lambda i: (self.actions[i].p_success, -i))

    @property
    def p_best(self) -> float:
        return self.actions[self.best].p_success


@dataclass(frozen=True, slots=True)
class Environment:
    seed: int
    agents: int
    runs_per_agent: int
    situations: tuple[Situation, ...]

    def to_json(self) -> dict[str, Any]:
        return {s.key: {a.name: round(a.p_success, 3) for a in s.actions} for s in self.situations}


def build_environment(
    *, seed: int, agents: int, situations: int, actions: int, runs_per_agent: int
) -> Environment:
    if not 1 <= situations <= len(_TEMPLATES):
        raise ValueError(f"situations must be 1..{len(_TEMPLATES)}")
    if not 2 <= actions <= 4:
        raise ValueError("actions must be 2..4")
    if agents < 1 or runs_per_agent < 1:
        raise ValueError("agents and runs must be at least 1")
    rng = random.Random(f"learning-env/{seed}")
    chosen = rng.sample(_TEMPLATES, situations)
    built: list[Situation] = []
    for template in chosen:
        names = rng.sample(template.actions, actions)
        best = rng.randrange(actions)
        specs = tuple(
            ActionSpec(
                name,
                text,
                round(rng.uniform(0.80, 0.90) if i == best else rng.uniform(0.15, 0.35), 3),
            )
            for i, (name, text) in enumerate(names)
        )
        built.append(
            Situation(
                template.key,
                template.query,
                template.trigger,
                specs,
                template.result,
            )
        )
    return Environment(seed, agents, runs_per_agent, tuple(built))


def run_stream(env: Environment, slot: int, run: int, purpose: str) -> random.Random:
    return random.Random(f"learning/{env.seed}/{slot}/{run}/{purpose}")


def schedule(env: Environment, slot: int) -> list[int]:
    """The situation of each of the slot's runs: every situation once per cycle, in a
    seeded order per cycle."""
    rng = random.Random(f"learning/{env.seed}/{slot}/schedule")
    order: list[int] = []
    while len(order) < env.runs_per_agent:
        cycle = list(range(len(env.situations)))
        rng.shuffle(cycle)
        order.extend(cycle)
    return order[: env.runs_per_agent]


def run_id(bench_id: str, slot: int, run: int) -> str:
    return f"{bench_id}-s{slot}-r{run:03d}"


@dataclass(frozen=True, slots=True)
class RunTexts:
    trigger: str
    action: str
    outcome: str


def _fill(template: str, details: Mapping[str, str]) -> str:
    return template.format(**details)


def render_run(
    env: Environment, slot: int, run: int, situation: int, action: int, success: bool
) -> RunTexts:
    """The run's three episode texts. Hosts, numbers, tickets and two context
    clauses vary per run so that no two runs' texts are near-duplicates (the write
    path folds those into one aggregate memory)."""
    rng = run_stream(env, slot, run, "texts")
    details = {
        "host": f"{rng.choice(_HOSTS)}-{rng.randrange(2, 99)}",
        "region": rng.choice(_REGIONS),
        "n": str(rng.randrange(1, 9)),
        "m": str(rng.randrange(2, 9)),
        "pct": str(rng.randrange(61, 99)),
        "ticket": f"INC-{rng.randrange(1000, 99999)}",
        "ver": f"v{rng.randrange(1, 9)}.{rng.randrange(0, 30)}.{rng.randrange(0, 9)}",
        "who": rng.choice(_PEOPLE),
    }
    when = f"{rng.choice(_OPENERS)} {_fill(rng.choice(_WHEN), details)}"
    note = " ".join(_fill(n, details) for n in rng.sample(_NOTES, 2))
    how = _fill(rng.choice(_HOW), details)
    check = _fill(rng.choice(_CHECK), details)
    spec = env.situations[situation]
    chosen = spec.actions[action]
    result = f"{_fill(spec.result, details)}, verdict {verdict(success)}"
    return RunTexts(
        trigger=f"{when.capitalize()}, {_fill(spec.trigger, details)}. {note}",
        action=f"{how.capitalize()}, {_fill(chosen.text, details)} ({chosen.name}) for "
        f"{details['ticket']}, {rng.choice(_PEOPLE)} watching",
        outcome=f"{check} Outcome of {chosen.name} on {details['ticket']}: {result}.",
    )


def verdict(success: bool) -> str:
    """The one word of a run's texts that says how it turned out."""
    return VERDICTS[0] if success else VERDICTS[1]


def epsilon(visits: int) -> float:
    return max(EPS_MIN, EPS0 / (1.0 + visits / EPS_DECAY))


@dataclass(frozen=True, slots=True)
class Recalled:
    """What the agent reads off the first recalled item that tells it about an action
    of the situation: the action, whether that run succeeded (None: the item is not
    a memory of one of the agent's own runs, e.g. an entry distilled from several,
    and it is read as advice) and the item's source event id."""

    action: int
    succeeded: bool | None
    source: str
    # The actions the reply holds evidence entries for: the others are untried, at
    # the prior's mean (0.5), which an action failing more often than not is under.
    known: tuple[int, ...] = ()


def _names(text: str, names: Sequence[str]) -> list[int]:
    return [
        i
        for i, name in enumerate(names)
        if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
    ]


def recalled_choice(
    env: Environment,
    situation: int,
    items: Iterable[Mapping[str, Any]],
    runs_by_event: Mapping[str, Run],
) -> Recalled | None:
    """The policy's reading of a recall, items in the order Grimoire ranked them: the
    first evidence entry about one of the situation's actions gives that action
    (followed unless its posterior mean is under 0.5); the first item that is a
    memory of one of the agent's own runs of the situation
    (any role: the agent knows its runs by their event ids, and an outcome
    memory says its verdict) gives that run's action and result; the first item
    that is none of the agent's runs and whose text or gist names exactly one of
    the situation's actions gives that action as advice. Items of other
    situations, and items naming no action or several, are skipped."""
    names = [a.name for a in env.situations[situation].actions]
    items_seen = list(items)
    for item in items_seen:
        source = str(item.get("source_event_id", ""))
        evidence = item.get("evidence")
        if isinstance(evidence, Mapping) and evidence.get("action") in names:
            # An evidence entry: the action's record over the agent's runs. One
            # that fails more often than not (a posterior mean under the uniform
            # prior's 0.5) is read like a failed run: try an untried action.
            # its action's counts pooled with the clade's, when a clade shares them
            mean = evidence.get("pooled_posterior_mean", evidence.get("posterior_mean", 0.0))
            works = float(mean) >= 0.5
            known = tuple(
                sorted(
                    {
                        names.index(str(e["action"]))
                        for each in items_seen
                        if isinstance(e := each.get("evidence"), Mapping)
                        and e.get("action") in names
                    }
                )
            )
            action = names.index(str(evidence["action"]))
            return Recalled(action, None if works else False, source, known)
        run = runs_by_event.get(source)
        if run is not None:
            if run.situation == situation:
                return Recalled(run.action, run.success, source)
            continue
        text = f"{item.get('text') or ''} {item.get('gist') or ''}"
        named = _names(text, names)
        if len(named) == 1:
            return Recalled(named[0], None, source)
    return None


def choose_action(
    env: Environment,
    slot: int,
    run: int,
    situation: int,
    visits: int,
    recalled: int | None,
    recalled_failed: bool = False,
    known: Sequence[int] = (),
) -> tuple[int, bool]:
    """(action, explored): the recalled action, unless nothing of the situation was
    recalled or the ε draw says explore (uniform over the actions). When the
    recalled run failed the agent does not repeat that action: it explores the
    others, those the reply holds no evidence for (`known`) first."""
    rng = run_stream(env, slot, run, "policy")
    explore_draw = rng.random()
    count = len(env.situations[situation].actions)
    pick = rng.randrange(count)
    if recalled is not None and recalled_failed:
        untried = [a for a in range(count) if a not in known and a != recalled]
        others = untried or [a for a in range(count) if a != recalled]
        return others[pick % len(others)], True
    if recalled is None or explore_draw < epsilon(visits):
        return pick, True
    return recalled, False


def outcome_draw(env: Environment, slot: int, run: int) -> tuple[float, float]:
    """(draw, grade): the two uniform numbers of the slot's run `run`, the same
    whichever arm acts and whatever it chooses (common random numbers)."""
    rng = run_stream(env, slot, run, "outcome")
    return rng.random(), rng.random()


def draw_outcome(
    env: Environment, slot: int, run: int, situation: int, action: int
) -> tuple[bool, float]:
    """(success, quality): the run's draw against the action's hidden probability;
    quality in [0.7, 1.0] for a success, [0.0, 0.3] for a failure."""
    draw, grade = outcome_draw(env, slot, run)
    success = draw < env.situations[situation].actions[action].p_success
    quality = 0.7 + 0.3 * grade if success else 0.3 * grade
    return success, round(quality, 3)


@dataclass(frozen=True, slots=True)
class Run:
    """One run of one arm: the slot (agent) and its run index, the situation, the
    action chosen and how it turned out. The pipeline's learner and its two
    shadows share their runs."""

    run_id: str
    slot: int
    index: int
    situation: int
    action: int
    success: bool
    quality: float


def top_run(
    items: Iterable[Mapping[str, Any]], runs_by_event: Mapping[str, Run], situation: int
) -> tuple[Run, str] | None:
    """The run behind the first recalled item that is a memory of `situation`'s runs,
    and that item's source event id (items are matched by it; others are skipped)."""
    for item in items:
        source = str(item.get("source_event_id", ""))
        run = runs_by_event.get(source)
        if run is not None and run.situation == situation:
            return run, source
    return None


@dataclass(frozen=True, slots=True)
class ScoredRecall:
    """One recall made before a run, the learner and its shadows side by side:
    whether the top memory of the situation came from a successful run (None: none
    recalled)."""

    slot: int
    situation: int
    visit: int  # the slot's earlier visits of the situation
    learner: bool | None
    shadow: bool | None  # learning off
    # Whether any earlier run of the slot in this situation succeeded: when none
    # did, no ranking can put a successful run's memory first.
    success_known: bool = True
    no_prior: bool | None = None  # learning on, the fixed outcome prior off


@dataclass(frozen=True, slots=True)
class _Rate:
    scored: int = 0
    success_first: int = 0
    without_memory: int = 0

    @property
    def rate(self) -> float | None:
        return round(self.success_first / self.scored, 4) if self.scored else None


@dataclass(frozen=True, slots=True)
class SuccessFirst:
    learner: _Rate = field(default_factory=_Rate)
    shadow: _Rate = field(default_factory=_Rate)
    warmup_skipped: int = 0
    top_differs: int = 0  # scored recalls where learner and shadow disagree
    no_prior: _Rate = field(default_factory=_Rate)


def success_first(recalls: Sequence[ScoredRecall], warmup: int) -> SuccessFirst:
    """Rates over the recalls past each (slot, situation)'s first `warmup` visits."""
    counted = [r for r in recalls if r.visit >= warmup]

    def rate(values: list[bool | None]) -> _Rate:
        known = [v for v in values if v is not None]
        return _Rate(len(known), sum(known), len(values) - len(known))

    return SuccessFirst(
        learner=rate([r.learner for r in counted]),
        shadow=rate([r.shadow for r in counted]),
        warmup_skipped=len(recalls) - len(counted),
        top_differs=sum(1 for r in counted if r.learner != r.shadow),
        no_prior=rate([r.no_prior for r in counted]),
    )


def regret(env: Environment, runs: Iterable[Run]) -> float:
    """sum of (p_best - p_chosen) over the runs: what the choices cost in expectation
    (the hidden probabilities, not the draws)."""
    total = 0.0
    for run in runs:
        spec = env.situations[run.situation]
        total += spec.p_best - spec.actions[run.action].p_success
    return round(total, 4)


def uniform_regret(env: Environment) -> float:
    """The expected regret of choosing uniformly at random, in closed form: per run,
    p_best minus the mean of the situation's probabilities."""
    total = 0.0
    for slot in range(env.agents):
        for situation in schedule(env, slot):
            spec = env.situations[situation]
            total += spec.p_best - sum(a.p_success for a in spec.actions) / len(spec.actions)
    return round(total, 4)


def late_start(runs_per_agent: int) -> int:
    """The first run index of an agent's last third of runs (at least its last run)."""
    return runs_per_agent - max(1, runs_per_agent // 3)
