"""Deterministic synthetic event streams for the ingest benchmark.

`repetitive`: what a fleet really sends: heartbeats drawn from a few templates
with a handful of values, tool calls with recurring results and errors, and
chat lines from a small pool. `distinct`: the same mix, every text unique.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import EpisodeV1, ToolEventV1, TranscriptV1

GENESIS_MS = 1_790_000_000_000
BLOCK_MS = 12_000

HEARTBEATS = (
    "heartbeat: pool depth {a}% and gas {b} gwei, no action needed",
    "heartbeat: position health factor {a}.{b}, within bounds",
    "heartbeat: oracle price deviation {a} bps over {b} blocks",
)
TOOL_CALLS = (
    ("price_feed", None, "ETH {a}.{b} USDC"),
    ("swap", "execution reverted: slippage exceeded 0.{a}%", None),
    ("rpc_call", "request timed out after {a}000 ms", None),
    ("read_file", None, "loaded /srv/golem/strategies/s{a}.yaml"),
)
_CHAT = (
    ("user", "text", "How is the {a} position doing after block {b}?"),
    ("assistant", "thinking", "Depth changed by {a}% so impermanent loss risk moved."),
    ("assistant", "text", "The position is fine: health factor {a}.{b}."),
)
_VOCABULARY = (
    "liquidity oracle reorg validator mempool bridge vault collateral spread funding "
    "basis hedge rebalance keeper sequencer rollup calldata blob epoch slashing staking "
    "governance proposal quorum delegate treasury grant audit exploit patch upgrade proxy "
    "router pool tick range fee tier volatility drawdown momentum mean reversion carry"
)
WORDS = tuple(_VOCABULARY.split(" "))


@dataclass(frozen=True, slots=True)
class BenchEvent:
    topic: str
    key: str
    value: bytes


def _fill(template: str, rng: random.Random, distinct: bool, serial: int) -> str:
    text = template.format(a=rng.randint(1, 4), b=rng.randint(1, 3))
    if distinct:
        words = " ".join(rng.choice(WORDS) for _ in range(6))
        text = f"{text} [{serial}] {words}"
    return text


def generate(
    topics: TopicNames, *, events: int, agents: int, distinct: bool, seed: int = 7
) -> Iterator[BenchEvent]:
    """Per tick and agent: a heartbeat, then a tool event or a chat line (alternating)."""
    rng = random.Random(seed)
    serial = 0
    tick = 0
    while True:
        for index in range(agents):
            agent = f"bench-agent-{index:03d}"
            ts = GENESIS_MS + tick * BLOCK_MS + index
            for slot in range(2):
                if serial >= events:
                    return
                serial += 1
                if slot == 0:
                    text = _fill(rng.choice(HEARTBEATS), rng, distinct, serial)
                    episode = EpisodeV1(agent_id=agent, ts=ts, tick=tick, text=text)
                    yield BenchEvent(topics.episodes, agent, episode.dumps_json())
                elif tick % 2 == 0:
                    tool, error, result = rng.choice(TOOL_CALLS)
                    event = ToolEventV1(
                        agent_id=agent,
                        ts=ts + 1,
                        tick=tick,
                        tool=tool,
                        error=_fill(error, rng, distinct, serial) if error else None,
                        result=_fill(result, rng, distinct, serial) if result else None,
                    )
                    yield BenchEvent(topics.tool_events, agent, event.dumps_json())
                else:
                    role, block_type, template = rng.choice(_CHAT)
                    content = _fill(template, rng, distinct, serial)
                    line = TranscriptV1(
                        agent_id=agent,
                        ts=ts + 2,
                        tick=tick,
                        session_id=f"{agent}-chat",
                        line={"role": role, "content": [{"type": block_type, block_type: content}]},
                    )
                    yield BenchEvent(topics.transcripts, agent, line.dumps_json())
        tick += 1
