"""The simulated agents of `make demo`: a small, deterministic trading-golem story.

Each tick publishes one heartbeat episode, one tool event and one transcript
line per agent, so every input stream is exercised.
"""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.topics.schemas import EpisodeV1, ToolEventV1, TranscriptV1

GENESIS_MS = 1_790_000_000_000  # event time of tick 0; the demo never reads the wall clock
BLOCK_MS = 12_000

_EPISODES = (
    ("observation", "ETH/USDC pool depth fell 18% while volatility rose"),
    ("action", "rebalanced 40% of the LP position into stablecoins"),
    ("alert", "RPC node timed out three times; switched to the backup provider"),
    ("regime_shift", "market regime moved from ranging to trending-up"),
    ("report", "tick PnL +0.4% after fees; drawdown 1.1%"),
    ("observation", "gas price spiked to 250 gwei during the NFT mint"),
)
_TOOLS = (
    ("price_feed", None, "ETH 3412.50 USDC", ["https://api.example.com/v1/price?pair=ETH-USDC"]),
    ("swap", "execution reverted: slippage exceeded 0.5%", None, []),
    ("read_file", None, "strategy loaded", ["/srv/golem/strategies/momentum.yaml"]),
)
_CHAT = (
    ("user", "text", "Why did you cut the LP position this morning?"),
    ("assistant", "thinking", "Depth dropped while volatility rose: impermanent loss risk."),
    ("assistant", "text", "Pool depth fell and volatility rose, so I moved to stablecoins."),
)


@dataclass(frozen=True, slots=True)
class TickEvents:
    episode: EpisodeV1
    tool_event: ToolEventV1
    transcript: TranscriptV1


def tick_events(agent_id: str, tick: int) -> TickEvents:
    ts = GENESIS_MS + tick * BLOCK_MS
    episode_type, text = _EPISODES[tick % len(_EPISODES)]
    tool, error, result, refs = _TOOLS[tick % len(_TOOLS)]
    role, block_type, content = _CHAT[tick % len(_CHAT)]
    block = {"type": block_type, block_type: content}
    return TickEvents(
        episode=EpisodeV1(
            agent_id=agent_id,
            event_id=f"{agent_id}-ep-{tick}",
            ts=ts,
            tick=tick,
            block=18_000_000 + tick,
            episode_type=episode_type,
            text=f"[{agent_id}] {text}",
            regime="trending-up" if tick >= 3 else "ranging",
            tags=["defi", "eth"],
        ),
        tool_event=ToolEventV1(
            agent_id=agent_id,
            event_id=f"{agent_id}-tool-{tick}",
            ts=ts + 1,
            tick=tick,
            tool=tool,
            error=error,
            result=result,
            paths=[r for r in refs if r.startswith("/")] or None,
            urls=[r for r in refs if r.startswith("http")] or None,
            latency_ms=40.0 + tick,
        ),
        transcript=TranscriptV1(
            agent_id=agent_id,
            event_id=f"{agent_id}-chat-{tick}",
            ts=ts + 2,
            tick=tick,
            session_id=f"{agent_id}-session",
            line={"role": role, "content": [block]},
        ),
    )


QUESTIONS = (
    "why did we move into stablecoins?",
    "RPC provider problems",
    "swap failed because of slippage",
)
