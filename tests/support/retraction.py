"""What the retraction tests share: a witness callback that records each step, the
swap tool's episodes embedded by the fake embedder the handlers use, the insight and
playbook heuristic a curator cycle distils from them, and the steps the witness sees
as they are retracted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from grimoire.agents.handlers.retraction import PLAYBOOK_OP
from grimoire.streams.learn.curator.distill import Situation
from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
from grimoire.streams.model.records import Kind, MemoryRecord
from grimoire.tables.ports.maintenance import CuratorStore

from .builders import memory_candidate, memory_record
from .curator import curated_entry, new_entries_cycle
from .embedders import FakeEmbedder

__all__ = [
    "SWAP_SITUATION",
    "Step",
    "Witness",
    "curate_over",
    "demoted_steps",
    "retracted_steps",
    "swap_record",
]

# A witnessed step without its details: the op and the memory ids.
Step = tuple[str, tuple[str, ...]]

# Where the swap tool's episodes happen: what the curated entries work in.
SWAP_SITUATION = Situation("swap", ("entity:eth", "entity:usdc"), "calm", "eth-dca")


@dataclass
class Witness:
    """The retraction handler's witness callback: every step it reports, in order."""

    seen: list[tuple[str, tuple[str, ...], dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, op: str, ids: Sequence[str], details: Mapping[str, object]) -> None:
        self.seen.append((op, tuple(ids), dict(details)))

    def ops(self) -> list[Step]:
        """The steps seen since the last call, without their details."""
        found = [(op, ids) for op, ids, _ in self.seen]
        self.seen.clear()
        return found


def swap_record(
    fake: FakeEmbedder, agent: str, event: str, text: str, ts: int, **fields: Any
) -> MemoryRecord:
    """An episode observation of the swap tool from source event ``event``, on both lanes
    the fake embedder's vector of its text; ``fields`` are further candidate fields."""
    candidate = memory_candidate(
        agent,
        event,
        text,
        ts=ts,
        tool="swap",
        **fields,
    )
    return memory_record(candidate, fake.vector(text))


async def curate_over(
    curator: CuratorStore, fake: FakeEmbedder, agent: str, now: int, sources: tuple[str, ...]
) -> tuple[CuratedEntry, CuratedEntry]:
    """An active insight ("insight-1") distilled from `sources` and the playbook
    heuristic ("heuristic-1") derived from it, written by one curator cycle at `now`,
    each embedded by `fake`; the cycle applied."""
    entry = partial(curated_entry, situation=SWAP_SITUATION, now=now)
    insight = entry("insight-1", Kind.INSIGHT, EntryStatus.ACTIVE, sources)
    heuristic = entry("heuristic-1", Kind.HEURISTIC, EntryStatus.PLAYBOOK, ("insight-1",))
    vectors = {e.memory_id: fake.vector(e.text).tobytes() for e in (insight, heuristic)}
    assert await curator.apply(new_entries_cycle(agent, now, (insight, heuristic), vectors))
    return insight, heuristic


def demoted_steps(episode: str, insight: str) -> list[Step]:
    """What the witness sees when one of an insight's two sources is retracted: the
    episode gone, the insight demoted (its heuristic keeps it)."""
    return [("retract.memory", (episode,)), ("retract.insight_demoted", (insight,))]


def retracted_steps(episode: str, insight: str, heuristic: str) -> list[Step]:
    """What the witness sees when an insight's last source is retracted: the episode,
    the insight and the heuristic derived from it gone, the playbook written again."""
    return [
        ("retract.memory", (episode,)),
        ("retract.memory", (insight,)),
        ("retract.memory", (heuristic,)),
        (PLAYBOOK_OP, (heuristic, insight)),
    ]
