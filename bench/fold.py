"""`python -m bench fold`: the apply loop alone, what it costs per event.

The worker's own composition (`grimoire.infra.runtime.compose`) over a real Redis
started by the project's services manager; the model is left out (a hashed
bag-of-words embedder, no model time), and so are the broker and Faust: the inputs
are sequenced in process and the journal records read back as the apply loop's
consumer would read them, one batch per journal partition at a time.

Reported: CPU of this process per folded event (the fold's event-loop share of
issue 35's "event-loop CPU per decided event", without Faust's and the producer's),
Redis requests per batch (a pipeline or a transaction is one) and Redis commands
per event (inside them). The journal is sequenced before the clock starts.

What it does not show: the model (bench-ingest), the broker and Faust's consumers
(bench-fleet), or several worker processes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from redis.asyncio.connection import AbstractConnection

from bench.services import bench_ports, state_root
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.infra.local.services import LocalServices
from grimoire.infra.runtime import compose
from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import EntryKind
from grimoire.tables.journal.keystore import CachedKeyStore, RedisKeyStore
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.redis_client import create_redis
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import EpisodeV1

__all__ = ["FoldOptions", "redis_traffic", "run_fold_bench"]

T0_MS = 1_790_000_000_000
DIMS = 384


@dataclass(frozen=True, slots=True)
class FoldOptions:
    agents: int = 600
    events: int = 6_000
    batch: int = 256  # journal records per apply call, as the worker's consumer takes them


class _HashedEmbedder:
    """Casefolded words hashed into DIMS buckets, L2-normalised: no model time."""

    dims = DIMS
    vector_space = f"bench-hashed-words-{DIMS}:float32"

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.casefold().split():
                out[row, hashlib.sha256(word.encode()).digest()[0] % DIMS] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    async def embed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self.embed(texts)


@contextmanager
def redis_traffic() -> Iterator[Counter[str]]:
    """Redis requests (`requests`: a pipeline or a transaction is one) and the
    commands inside them (`commands`) sent by any connection while open, both filled
    in when it closes. The requests are only kept while open and walked afterwards,
    so a CPU clock read inside does not time the counting."""
    seen: Counter[str] = Counter()
    sent: list[Any] = []
    original = AbstractConnection.send_packed_command

    async def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        sent.append(command)
        await original(self, command, check_health)

    AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
        seen["requests"] = len(sent)
        for command in sent:
            chunks = command if isinstance(command, list) else [command]
            seen["commands"] += _resp_commands(b"".join(bytes(chunk) for chunk in chunks))


def _resp_commands(raw: bytes) -> int:
    """How many commands a packed request holds: RESP arrays of bulk strings, walked
    by their lengths (a vector's bytes may hold anything)."""
    count, at = 0, 0
    while at < len(raw):
        end = raw.index(b"\r\n", at)
        parts = int(raw[at + 1 : end])  # `*<n>`
        at = end + 2
        for _ in range(parts):
            end = raw.index(b"\r\n", at)
            at = end + 2 + int(raw[at + 1 : end]) + 2  # `$<len>`, the bytes, CRLF
        count += 1
    return count


def _inputs(options: FoldOptions, topic: str) -> list[InputMessage]:
    """All-distinct episodes, agents round robin, event time one second apart."""
    return [
        InputMessage(
            EpisodeV1(
                agent_id=f"agent-{i % options.agents}",
                ts=T0_MS + i * 1_000,
                event_id=f"e{i}",
                text=f"agent {i % options.agents} ran task {i} on host h{i % 37}: "
                f"{uuid.UUID(int=i * 7919 + 3).hex[:12]} finished with code {i % 5}",
            ).dumps_json(),
            topic,
            0,
            i,
        )
        for i in range(options.events)
    ]


async def _fold(settings: Settings, options: FoldOptions) -> dict[str, Any]:
    prefix = f"fold{uuid.uuid4().hex[:8]}"
    configured = settings.with_values(
        topic_prefix=prefix, auth_enabled=False, maintenance_enabled=False
    )
    redis = create_redis(configured.redis.url, configured.redis.max_connections)
    sink = MemorySink()
    topics = TopicNames(prefix)
    try:
        composed = await compose(
            configured,
            prefix=prefix,
            redis=redis,
            keys=CachedKeyStore(RedisKeyStore(redis, prefix)),
            embedder=_HashedEmbedder(),
            sink=sink,
            worker_id="bench-fold",
        )
        inputs = _inputs(options, topics.episodes)
        for start in range(0, len(inputs), options.batch):
            await composed.handlers.sequencer.append(
                EntryKind.EPISODE, inputs[start : start + options.batch]
            )
        journal: dict[int, list[InputMessage]] = {}
        for record in sink.as_consumed(topics.journal):
            journal.setdefault(record.partition or 0, []).append(record)
        applier = composed.handlers.applier
        batches = 0
        with redis_traffic() as seen:
            cpu, wall = time.process_time(), time.perf_counter()
            for records in journal.values():
                for start in range(0, len(records), options.batch):
                    await applier.apply(records[start : start + options.batch])
                    batches += 1
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        events = sum(len(records) for records in journal.values())
        return {
            "agents": options.agents,
            "events": events,
            "batch": options.batch,
            "batches": batches,
            "journal_partitions": len(journal),
            "cpu_ms_per_event": round(cpu / events * 1000, 3),
            "wall_s": round(wall, 2),
            "events_per_cpu_s": round(events / cpu, 1) if cpu else None,
            "redis_requests_per_batch": round(seen["requests"] / batches, 1),
            "redis_commands_per_event": round(seen["commands"] / events, 2),
        }
    finally:
        await wipe_memory_state(redis, prefix)
        left = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1_000)]
        for start in range(0, len(left), 1_000):
            await redis.unlink(*left[start : start + 1_000])
        await redis.aclose()


def run_fold_bench(settings: Settings, options: FoldOptions) -> dict[str, Any]:
    services = LocalServices(state_root() / "bench-fold", bench_ports(19702, 16989))
    started = services.up()
    try:
        configured = settings.with_values(redis_url=services.redis_url)
        report = asyncio.run(_fold(configured, options))
        report["cpus"] = os.cpu_count()
        return report
    finally:
        if started:
            services.down()
