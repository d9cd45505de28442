"""A large, realistic memory store for one agent, written the way the worker writes it.

`python -m bench recall` needs 100,000 memories; embedding that many texts with
the model would take longer than the benchmark itself on a small machine. So:

* events come from a deterministic generator of one golem's life (heartbeats,
  alerts, tool calls, transcript turns, actions, reports, lessons) with the
  fields producers really send: runs, sessions, turns, tags, channels, regimes,
  entities, paths, URLs and affect;
* they go through the real normalizer, so memories carry real nexus keys,
  hyperedges (runs and turns, with roles), kinds, layers and provenance;
* the first `pool_size` candidate texts are embedded with the real model; every
  later one gets a vector derived from a real vector of its own template (same
  template, other values), rotated away from it by a seeded random angle, so
  the vector space keeps the model's geometry at any size;
* the states' parts are embedded with the real model, composed and blended
  into the eidolon lane exactly as ingest does;
* the real planner (`plan_batch`: admission gate, quality, aggregates, merges)
  decides every candidate, and everything (records, nexus index, hyperedges,
  decisions, field state, watermark, stats) is committed through
  `RedisMemoryWrites.commit`; only the nearest stored memory is simulated
  (see `CorpusLoader`).
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import orjson

# The worker's own mapping of a candidate to its field update: the loaded store's
# field state is then the one the worker's ingest would have left.
from grimoire.agents.handlers.ingest import field_update
from grimoire.agents.ports import Embedder
from grimoire.streams.inbound.events import Accepted, normalize_event
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.eidolon import DEFAULT_STATE_WEIGHT, eidolon_vector, state_vector
from grimoire.streams.model.field_state import FieldState, advance
from grimoire.streams.model.records import EventType, MemoryCandidate
from grimoire.streams.write.admission import Action as AdmissionAction
from grimoire.streams.write.admission import AdmissionPolicy, NearMemory
from grimoire.streams.write.plan import PlanItem, StoredNeighbour, WriteOutcome, plan_batch
from grimoire.tables.ports.memory import MemoryStore

logger = logging.getLogger(__name__)

Vector = npt.NDArray[np.float32]

GENESIS_MS = 1_790_000_000_000
BLOCK_MS = 12_000
FIRST_BLOCK = 21_000_000
TICKS_PER_RUN = 6
TICKS_PER_REGIME = 240
TICKS_PER_SESSION = 300
# Derived vectors sit this close (cosine) to the real vector they come from:
# about how close two fills of one template are with the real model.
DERIVED_SIMILARITY = (0.85, 0.95)

_ASSETS = ("ETH", "WBTC", "ARB", "OP", "LINK", "UNI", "AAVE", "LDO")
_QUOTES = ("USDC", "DAI", "ETH")
_PROTOCOLS = ("Uniswap", "Aave", "Curve", "Balancer", "Lido", "Chainlink", "Morpho")
_HOSTS = ("rpc.mainnet.example.net", "arb1.rpc.example.org", "base.rpc.example.io")
_STRATEGIES = ("range_lp", "delta_hedge", "basis_carry", "vault_rotation", "twap_exit")
_TOPICS = ("liquidity", "oracle", "gas", "hedging", "rebalance", "governance", "bridge", "mev")
_REGIMES = ("calm", "trending", "volatile", "crisis")
_AFFECT = {
    "calm": {"pleasure": 0.4, "arousal": -0.4, "dominance": 0.4, "SEEKING": 0.3},
    "trending": {"pleasure": 0.5, "arousal": 0.4, "dominance": 0.3, "SEEKING": 0.8},
    "volatile": {"pleasure": -0.2, "arousal": 0.6, "dominance": -0.1, "FEAR": 0.6},
    "crisis": {"pleasure": -0.7, "arousal": 0.9, "dominance": -0.5, "FEAR": 0.9},
}
_NOTE_WORDS = (
    "liquidity oracle reorg validator mempool bridge vault collateral spread funding basis "
    "hedge rebalance keeper sequencer rollup calldata blob epoch slashing staking governance "
    "proposal quorum delegate treasury audit exploit patch upgrade proxy router tick range "
    "fee tier volatility drawdown momentum reversion carry"
)
_NOTES = tuple(_NOTE_WORDS.split(" "))

_HEARTBEATS = (
    "heartbeat: {pool} pool depth {pct}% and gas {gwei} gwei at block {block}",
    "heartbeat: {asset} position health factor {hf}, within bounds at block {block}",
    "heartbeat: oracle price deviation {bps} bps over {n} blocks for {asset}",
    "heartbeat: funding on {asset} perps at {rate}% with open interest {oi}M",
    "heartbeat: mempool holds {n} pending swaps on {pool}, median tip {tip} gwei",
)
_ALERTS = (
    "alert: {asset} dropped {pct}% in {n} blocks on {protocol}; collateral ratio {hf}",
    "alert: {protocol} oracle feed for {asset} stale for {n} blocks",
    "alert: gas spiked to {gwei} gwei while rebalancing {pool} #gas",
    "alert: liquidation risk on {protocol} {asset} vault, health factor {hf}",
)
_ACTIONS = (
    "rebalanced {pool} range to [{lo}, {hi}] moving {amt} {asset}",
    "hedged {amt} {asset} delta with a short on {protocol} perps at {price}",
    "paused new positions on {pool} until volatility drops below {pct}%",
    "rotated {amt} USDC from {protocol} into the {strategy} vault",
)
_REPORTS = (
    ("episode", "report: run {run} closed with pnl {pnl} USDC after {n} blocks on {pool}"),
    ("heuristic", "when gas is above {gwei} gwei, delay rebalances on {pool} by {n} blocks"),
    ("insight", "{asset} oracle deviations above {bps} bps preceded liquidations on {protocol}"),
    ("causal_link", "slippage reverts on {pool} followed mempool congestion above {n} swaps"),
    ("warning", "never route {asset} swaps through {protocol} during {regime} markets"),
)
_USER_LINES = (
    "How is the {asset} position doing after block {block}?",
    "Should we widen the {pool} range given the {topic} situation?",
    "Why did the last swap on {pool} fail at block {block}?",
    "What does the {strategy} strategy do when gas goes above {gwei} gwei?",
)
_THOUGHTS = (
    "Depth on {pool} changed by {pct}% so impermanent loss risk moved; check {topic} first.",
    "The {protocol} feed lagged {n} blocks; the {asset} price may be stale.",
    "Gas at {gwei} gwei makes a rebalance cost about {amt} USDC, more than the fees it earns.",
)
_ANSWERS = (
    "The {asset} position is fine: health factor {hf}, {topic} risk is low.",
    "The swap on {pool} reverted because slippage exceeded {slip}% during {regime} markets.",
    "I would keep the {pool} range; fees of {amt} USDC cover the drift so far.",
)


@dataclass(frozen=True, slots=True)
class CorpusEvent:
    """One raw event and the template it was filled from (its vector family)."""

    event_type: EventType
    template: str
    value: bytes


def _event_id(agent_id: str, serial: int) -> str:
    return f"{agent_id}-{serial:08d}"


class _Filler:
    """Template values for one event: a few shared draws so one text is coherent."""

    def __init__(self, rng: random.Random, tick: int, regime: str, run: str) -> None:
        asset = rng.choice(_ASSETS)
        self.values = {
            "asset": asset,
            "pool": f"{asset}/{rng.choice(_QUOTES)}" if asset != "ETH" else "ETH/USDC",
            "protocol": rng.choice(_PROTOCOLS),
            "strategy": rng.choice(_STRATEGIES),
            "topic": rng.choice(_TOPICS),
            "regime": regime,
            "run": run,
            "block": FIRST_BLOCK + tick,
            "pct": rng.randint(2, 60),
            "gwei": rng.randint(8, 240),
            "tip": round(rng.uniform(0.5, 9.0), 1),
            "hf": round(rng.uniform(1.05, 3.5), 2),
            "bps": rng.randint(5, 400),
            "n": rng.randint(2, 90),
            "rate": round(rng.uniform(-0.05, 0.12), 3),
            "oi": rng.randint(10, 900),
            "lo": rng.randint(1500, 3000),
            "hi": rng.randint(3001, 4800),
            "amt": rng.randint(100, 90_000),
            "price": round(rng.uniform(0.5, 4000.0), 2),
            "pnl": rng.randint(-9_000, 12_000),
            "slip": round(rng.uniform(0.1, 3.0), 1),
        }
        self.note = " ".join(rng.sample(_NOTES, 3)) if rng.random() < 0.5 else ""

    def fill(self, template: str) -> str:
        text = template.format(**self.values)
        return f"{text} ({self.note})" if self.note else text


def corpus_events(agent_id: str, *, seed: int = 7) -> Iterator[CorpusEvent]:
    """One agent's endless event stream, two events a block (12 s of event time).

    Every block has a heartbeat; the second event follows the run's phase:
    trigger (alert or regime shift), tool call, user question, assistant turn
    (thinking, tool use, answer), action or tool call, outcome (report or lesson).
    """
    rng = random.Random(seed)
    serial = 0
    tick = 0
    while True:
        regime = _REGIMES[(tick // TICKS_PER_REGIME) % len(_REGIMES)]
        run = f"run-{tick // TICKS_PER_RUN:06d}"
        session = f"session-{tick // TICKS_PER_SESSION:05d}"
        phase = tick % TICKS_PER_RUN
        ts = GENESIS_MS + tick * BLOCK_MS
        common = {"agent_id": agent_id, "tick": tick, "block": FIRST_BLOCK + tick}
        fill = _Filler(rng, tick, regime, run)
        topic = fill.values["topic"]
        index = rng.randrange(len(_HEARTBEATS))
        serial += 1
        heartbeat = {
            **common,
            "ts": ts,
            "event_id": _event_id(agent_id, serial),
            "text": fill.fill(_HEARTBEATS[index]),
            "episode_type": "observation",
            "run_id": run,
            "regime": regime,
            "channel": "ops-feed",
            "tags": ["src/heartbeat", f"topic/{topic}"],
            "entities": [fill.values["asset"]],
        }
        yield CorpusEvent(EventType.EPISODE, f"heartbeat/{index}", orjson.dumps(heartbeat))
        serial += 1
        fill = _Filler(rng, tick, regime, run)
        base = {**common, "ts": ts + 1, "event_id": _event_id(agent_id, serial)}
        yield _phase_event(rng, fill, phase, base, run=run, session=session, tick=tick)
        tick += 1


def _phase_event(
    rng: random.Random,
    fill: _Filler,
    phase: int,
    base: dict[str, object],
    *,
    run: str,
    session: str,
    tick: int,
) -> CorpusEvent:
    regime = str(fill.values["regime"])
    topic = str(fill.values["topic"])
    tags = [f"topic/{topic}", f"ops/{rng.choice(_STRATEGIES)}"]
    if phase == 0:
        shift = tick % TICKS_PER_REGIME < TICKS_PER_RUN
        index = rng.randrange(len(_ALERTS))
        text = (
            f"regime shift: market turned {regime} after {fill.values['asset']} moved "
            f"{fill.values['pct']}% in {fill.values['n']} blocks"
            if shift
            else fill.fill(_ALERTS[index])
        )
        episode = {
            **base,
            "text": text,
            "episode_type": "regime_shift" if shift else "alert",
            "run_id": run,
            "regime": regime,
            "tags": tags,
            "affect": _AFFECT[regime],
        }
        template = "regime_shift" if shift else f"alert/{index}"
        return CorpusEvent(EventType.EPISODE, template, orjson.dumps(episode))
    if phase in (1, 4) and (phase == 1 or rng.random() < 0.5):
        return _tool_event(rng, fill, base, run=run, tags=tags)
    if phase == 2:
        index = rng.randrange(len(_USER_LINES))
        line: dict[str, object] = {"role": "user", "content": fill.fill(_USER_LINES[index])}
        return _transcript(base, line, f"user/{index}", session=session, run=run, tags=tags)
    if phase == 3:
        thought, answer = rng.randrange(len(_THOUGHTS)), rng.randrange(len(_ANSWERS))
        asset = fill.values["asset"]
        line = {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": fill.fill(_THOUGHTS[thought])},
                {
                    "type": "tool_use",
                    "name": "price_feed",
                    "input": {"asset": asset, "block": fill.values["block"]},
                },
                {"type": "text", "text": fill.fill(_ANSWERS[answer])},
            ],
        }
        template = f"assistant/{thought}/{answer}"
        return _transcript(base, line, template, session=session, run=run, tags=tags)
    if phase == 4:
        index = rng.randrange(len(_ACTIONS))
        episode = {
            **base,
            "text": fill.fill(_ACTIONS[index]),
            "episode_type": "action",
            "run_id": run,
            "tags": tags,
            "entities": [fill.values["protocol"]],
        }
        return CorpusEvent(EventType.EPISODE, f"action/{index}", orjson.dumps(episode))
    index = rng.randrange(len(_REPORTS))
    kind, template = _REPORTS[index]
    episode = {
        **base,
        "text": fill.fill(template),
        "episode_type": "report",
        "kind": kind,
        "outcome": "positive" if rng.random() < 0.6 else "negative",
        "run_id": run,
        "tags": tags,
        "affect": _AFFECT[regime],
    }
    return CorpusEvent(EventType.EPISODE, f"report/{index}", orjson.dumps(episode))


def _tool_event(
    rng: random.Random, fill: _Filler, base: dict[str, object], *, run: str, tags: list[str]
) -> CorpusEvent:
    values = fill.values
    host = rng.choice(_HOSTS)
    strategy = values["strategy"]
    choices: tuple[tuple[str, str, str | None, str | None, list[str], list[str]], ...] = (
        ("price_feed", "ok", f"{values['asset']} {values['price']} USDC at block {values['block']}",
         None, [], [f"https://api.coingecko.com/api/v3/simple/price?ids={values['asset']}"]),
        ("swap", "err", None, f"execution reverted: slippage exceeded {values['slip']}% on "
         f"{values['pool']}", [], []),
        ("swap", "ok", f"swapped {values['amt']} {values['asset']} via {values['protocol']}, "
         f"tx 0x{rng.getrandbits(64):016x}", None, [], []),
        ("rpc_call", "err", None, f"request to {host} timed out after {values['n']}000 ms",
         [], [f"https://{host}/v1/eth_call"]),
        ("rpc_call", "429", None, f"HTTP 429 Too Many Requests from {host}", [],
         [f"https://{host}/v1/eth_getLogs"]),
        ("read_file", "ok", f"loaded {strategy} with {values['n']} rules", None,
         [f"/srv/golem/strategies/{strategy}.yaml"], []),
        ("read_file", "err", None, f"FileNotFoundError: /srv/golem/strategies/{strategy}.bak",
         [f"/srv/golem/strategies/{strategy}.bak"], []),
    )  # fmt: skip
    index = rng.randrange(len(choices))
    tool, outcome, result, error, paths, urls = choices[index]
    event = {
        **base,
        "tool": tool,
        "result": fill.fill(result) if result else None,
        "error": error,
        "paths": paths,
        "urls": urls,
        "latency_ms": rng.randint(20, 4000),
        "run_id": run,
        "tags": tags,
    }
    payload = orjson.dumps({k: v for k, v in event.items() if v is not None})
    return CorpusEvent(EventType.TOOL, f"tool/{tool}/{outcome}", payload)


def _transcript(
    base: dict[str, object],
    line: dict[str, object],
    template: str,
    *,
    session: str,
    run: str,
    tags: list[str],
) -> CorpusEvent:
    # The user's question and the assistant's answer form one turn (hyperedge).
    event = {**base, "line": line, "session_id": session, "turn_id": f"turn-{run}", "tags": tags}
    return CorpusEvent(EventType.TRANSCRIPT, template, orjson.dumps(event))


_QUERY_TEMPLATES = (
    "why did the swap on {pool} revert",
    "rpc timeouts against {host}",
    "what was the health factor of the {asset} position",
    "oracle price deviation for {asset} on {protocol}",
    "gas spikes during the {pool} rebalance",
    "what did the user ask about the {asset} position",
    "lessons about {topic} in {regime} markets",
    "when should I delay rebalances on {pool}",
    "rate limited by {host}",
    "which runs lost money on {pool}",
    "liquidation risk on {protocol} {asset} vaults",
    "strategy file {strategy} could not be loaded",
    "hedging {asset} delta on {protocol} perps",
    "funding rate on {asset} perps and open interest",
)


def recall_queries(count: int, *, seed: int = 11) -> list[str]:
    """`count` distinct questions an agent would ask its memory (none repeats, so
    no query embedding is ever served from a cache)."""
    rng = random.Random(seed)
    queries: dict[str, None] = {}
    while len(queries) < count:
        values = {
            "asset": rng.choice(_ASSETS),
            "pool": f"{rng.choice(_ASSETS)}/{rng.choice(_QUOTES)}",
            "host": rng.choice(_HOSTS),
            "protocol": rng.choice(_PROTOCOLS),
            "topic": rng.choice(_TOPICS),
            "regime": rng.choice(_REGIMES),
            "strategy": rng.choice(_STRATEGIES),
        }
        text = rng.choice(_QUERY_TEMPLATES).format(**values)
        if rng.random() < 0.7:
            text = f"{text} {rng.choice(('recently', 'last week', 'today'))} {rng.choice(_NOTES)}"
        queries.setdefault(text)
    return list(queries)


def derive_vector(
    base: Vector,
    memory_id: str,
    *,
    seed: int,
    similarity: tuple[float, float] = DERIVED_SIMILARITY,
) -> Vector:
    """A unit vector at a seeded cosine in `similarity` from the unit vector `base`.

    The random direction is orthogonal to `base`, so the cosine is exact, and
    the generator is keyed by (seed, memory id): a memory gets the same vector
    whatever order or batch it is loaded in.
    """
    digest = hashlib.blake2b(memory_id.encode(), digest_size=8).digest()
    rng = np.random.default_rng([seed, int.from_bytes(digest, "big")])
    target = float(rng.uniform(*similarity))
    anchor = base.astype(np.float64)
    anchor /= np.linalg.norm(anchor)
    noise: npt.NDArray[np.float64] = rng.standard_normal(int(anchor.shape[0]))
    noise -= float(noise @ anchor) * anchor
    noise /= np.linalg.norm(noise)
    vector = target * anchor + math.sqrt(max(0.0, 1.0 - target * target)) * noise
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def pool_pick(memory_id: str, seed: int, size: int) -> int:
    """Which of a template's `size` real vectors a derived memory starts from."""
    digest = hashlib.blake2b(f"{seed}:{memory_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % size


@dataclass(frozen=True, slots=True)
class LoadReport:
    memories: int  # records and aggregates stored for the agent
    candidates: int
    actions: tuple[tuple[str, int], ...]  # admission decisions by action
    seconds: float
    model_texts: int  # texts the real model embedded (the pool and the state digests)
    derived_vectors: int


@dataclass(frozen=True, slots=True)
class _Item:
    candidate: MemoryCandidate
    template: str


@dataclass(frozen=True, slots=True)
class _Stored:
    memory_id: str
    kind: str
    vector: Vector
    confidence: float
    text: str


@dataclass
class CorpusLoader:
    """Grows one agent's store to an exact number of memories; call again to grow it more.

    Candidates go through the real planner (`plan_batch`) in batches the size of
    the worker's, so records, folds, reinforcements, decisions, field state and
    stats are built by the write path's own code. Only the nearest stored
    memory is simulated, as the worker's KNN per candidate would make loading
    100,000 memories take as long as ingesting them: it is the memory with the
    same text when there is one (so repeats fold into aggregates), otherwise
    the latest memory of the same template.
    """

    store: MemoryStore
    embedder: Embedder
    agent_id: str
    seed: int = 7
    pool_size: int = 4_000
    batch_size: int = 64
    eidolon_weight: float = DEFAULT_STATE_WEIGHT
    limits: InputLimits = field(default_factory=InputLimits)
    policy: AdmissionPolicy = field(default_factory=AdmissionPolicy)

    def __post_init__(self) -> None:
        self.memories = 0
        self.candidates = 0
        self.model_texts = 0
        self.derived = 0
        self.actions: dict[str, int] = {}
        self._events = corpus_events(self.agent_id, seed=self.seed)
        self._queue: deque[_Item] = deque()
        self._state = FieldState(agent_id=self.agent_id)
        self._real: dict[str, Vector] = {}  # what the model embedded: pool texts, state parts
        self._pool: dict[str, list[str]] = {}  # template → its texts with real vectors
        self._pooled: set[str] = set()
        self._by_hash: dict[str, _Stored] = {}
        self._latest: dict[str, _Stored] = {}  # template → its latest admitted memory
        self._aggregates: set[str] = set()

    async def load_until(self, memories: int, *, progress: bool = True) -> LoadReport:
        """Load until the store holds `memories`; a progress bar on stderr (a
        100,000-memory load takes minutes)."""
        from tqdm import tqdm

        started = time.perf_counter()
        bar = tqdm(
            total=memories,
            initial=self.memories,
            unit="memory",
            desc="bench load",
            file=sys.stderr,
            disable=not progress,
        )
        while self.memories < memories:
            # A candidate adds at most one memory, so the last batches shrink to
            # land exactly on the target.
            before = self.memories
            await self._load_batch(min(self.batch_size, memories - self.memories))
            bar.update(self.memories - before)
        bar.close()
        return LoadReport(
            memories=self.memories,
            candidates=self.candidates,
            actions=tuple(sorted(self.actions.items())),
            seconds=time.perf_counter() - started,
            model_texts=self.model_texts,
            derived_vectors=self.derived,
        )

    def _take(self, count: int) -> list[_Item]:
        while len(self._queue) < count:
            event = next(self._events)
            outcome = normalize_event(event.event_type, event.value, self.limits)
            if not isinstance(outcome, Accepted):
                raise RuntimeError(f"corpus generator produced an invalid event: {outcome}")
            for part, cand in enumerate(outcome.candidates):
                self._queue.append(_Item(cand, f"{event.template}#{part}"))
        return [self._queue.popleft() for _ in range(count)]

    async def _load_batch(self, count: int) -> None:
        items = self._take(count)
        states: list[FieldState] = []
        for item in items:
            self._state = advance(self._state, field_update(item.candidate))
            states.append(self._state)
        for item in items:
            text = item.candidate.text
            family = self._pool.setdefault(item.template, [])
            # A template first seen after the pool is full still gets one real
            # vector, so every derived vector starts from its own kind of text.
            if text not in self._pooled and (len(self._pooled) < self.pool_size or not family):
                family.append(text)
                self._pooled.add(text)
        parts = [state.digest_parts() for state in states]
        # Contents and the states' parts in one model call, as ingest does.
        pooled = [item.candidate.text for item in items if item.candidate.text in self._pooled]
        await self._embed_missing([*pooled, *(part for each in parts for part in each)])

        plan: list[PlanItem] = []
        for item, state, state_parts in zip(items, states, parts, strict=True):
            canonical = self._canonical(item)
            plan.append(
                PlanItem(
                    candidate=item.candidate,
                    canonical=canonical,
                    eidolon=eidolon_vector(
                        canonical,
                        state_vector(state_parts, self._real),
                        state_weight=self.eidolon_weight,
                    ),
                    now_ms=state.watermark_ms,
                    stored=self._nearest(item, canonical),
                )
            )
        batch, outcomes = plan_batch(plan, {self.agent_id: self._state}, policy=self.policy)
        await self.store.commit(batch)
        self._remember(items, plan, outcomes)
        new_aggregates = {fold.aggregate_id for fold in batch.folds} - self._aggregates
        self._aggregates |= new_aggregates
        self.memories += len(batch.records) + len(new_aggregates)
        self.candidates += len(items)

    async def _embed_missing(self, texts: Sequence[str]) -> None:
        missing = list(dict.fromkeys(text for text in texts if text and text not in self._real))
        if missing:
            vectors = await self.embedder.embed(missing)
            self._real.update(zip(missing, vectors, strict=True))
            self.model_texts += len(missing)

    def _canonical(self, item: _Item) -> Vector:
        text = item.candidate.text
        if text in self._pooled:
            return self._real[text]
        family = self._pool[item.template]
        base = self._real[family[pool_pick(item.candidate.id, self.seed, len(family))]]
        self.derived += 1
        return derive_vector(base, item.candidate.id, seed=self.seed)

    def _nearest(self, item: _Item, canonical: Vector) -> StoredNeighbour | None:
        same = self._by_hash.get(item.candidate.normalized_hash)
        if same is not None:
            # The text's own stored copy: the real KNN finds it at similarity 1.
            return StoredNeighbour(
                NearMemory(same.memory_id, 1.0, same.confidence, same.text), same.kind
            )
        latest = self._latest.get(item.template)
        if latest is None:
            return None
        similarity = float(canonical @ latest.vector)
        neighbour = NearMemory(latest.memory_id, similarity, latest.confidence, latest.text)
        return StoredNeighbour(neighbour, latest.kind)

    def _remember(
        self, items: Sequence[_Item], plan: Sequence[PlanItem], outcomes: Sequence[WriteOutcome]
    ) -> None:
        for item, planned, outcome in zip(items, plan, outcomes, strict=True):
            action = outcome.decision.action
            self.actions[action.value] = self.actions.get(action.value, 0) + 1
            if action is not AdmissionAction.ADMIT:
                continue
            cand = item.candidate
            stored = _Stored(
                cand.id, cand.kind.value, planned.canonical, outcome.decision.confidence, cand.text
            )
            self._by_hash.setdefault(cand.normalized_hash, stored)
            self._latest[item.template] = stored
