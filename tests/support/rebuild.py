"""A deployment rebuilt from its journal alone, as the integration tests check replay:
its worker stopped and its memory state wiped, the journal replayed, then every
agent's digests compared with what they were and its witness log audited."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from grimoire.infra.local.worker_process import stop_worker
from grimoire.infra.replay import ReplayReport, replay
from grimoire.infra.settings import Settings
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.trust.digest import agent_digest, state_digest
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit

__all__ = ["assert_rebuilt", "replay_journal", "stop_and_wipe"]


async def stop_and_wipe(redis: Any, settings: Settings, worker: subprocess.Popen[bytes]) -> None:
    """The deployment's worker stopped, so nothing but the replay writes, and its memory
    state wiped (there was some)."""
    stop_worker(worker)
    assert await wipe_memory_state(redis, settings.broker.topic_prefix) > 0


async def replay_journal(settings: Settings) -> ReplayReport:
    """The deployment's journal replayed into its own prefix: it read entries and
    dead-lettered none."""
    report = await replay(settings, progress=False)
    assert report.entries > 0 and report.dead_lettered == 0
    return report


async def assert_rebuilt(
    redis: Any,
    prefix: str,
    agents: Sequence[str],
    digests: Sequence[str],
    *,
    states: Sequence[str] | None = None,
) -> None:
    """Every agent's full digest is in `digests` (and its state digest in `states`),
    in `agents`' order, and its witness log audits clean."""
    assert [(await agent_digest(redis, prefix, a)).sha256 for a in agents] == list(digests)
    if states is not None:
        assert [(await state_digest(redis, prefix, a)).sha256 for a in agents] == list(states)
    for agent in agents:
        assert (await audit(RedisWitnessLog(redis, prefix), agent)).ok, agent
