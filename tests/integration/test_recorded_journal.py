"""A journal recorded before a change folds, after it, to the digests it gave then.

`tests/data/recorded-journal.json` holds a journal of three agents with every kind
of entry (episodes, tool events, transcripts, facts and a superseding fact,
configure / pin / retract / retract-fact commands, a forced maintenance pass,
outcomes, the usage of served recalls), the key store that opens it and each
agent's state digest, as the code of its day folded it
(`tests.support.recorded_journal`). Today's code folds it into an empty prefix: a
refactor of the fold that changes any decision changes a digest.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import EntryKind, decode_entry
from grimoire.tables.trust.witness_store import RedisWitnessLog
from tests.support.recorded_journal import AGENTS, RecordedJournal, fold
from tests.support.stored import drop_deployment

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "recorded-journal.json"


def test_the_recording_holds_every_kind_of_entry() -> None:
    recorded = RecordedJournal.loads(DATA.read_bytes())
    kinds = Counter(decode_entry(value).kind for _, _, value in recorded.records)
    assert set(kinds) == {
        EntryKind.EPISODE,
        EntryKind.TOOL_EVENT,
        EntryKind.TRANSCRIPT,
        EntryKind.FACT,
        EntryKind.COMMAND,
        EntryKind.MAINTENANCE,
        EntryKind.OUTCOME,
        EntryKind.USAGE,
    }
    assert sorted(recorded.digests) == sorted(AGENTS)


async def test_the_recorded_journal_folds_to_the_recorded_digests(
    settings: Settings, redis_client: Redis
) -> None:
    recorded = RecordedJournal.loads(DATA.read_bytes())
    prefix = f"rep{uuid.uuid4().hex[:8]}"
    try:
        assert await fold(redis_client, settings, recorded, prefix) == dict(recorded.digests)
        # The entries did what they were recorded for (a fold that decided nothing
        # would leave digests of nothing; these are the recorded ones).
        log = RedisWitnessLog(redis_client, prefix)
        ops: Counter[str] = Counter()
        for agent in AGENTS:
            ops.update(r.op for r in await log.records(agent))
        assert {"ingest", "fact", "configure", "pin", "retract", "outcome", "usage"} <= set(ops)
        assert any(op.startswith("maintenance") for op in ops), ops
    finally:
        await drop_deployment(redis_client, prefix)
