"""Evidence at a run's end: read the run's members, plan the counts
(`grimoire.streams.learn.evidence`), write the entries that do not exist yet.

An entry is created without a count, before the run's learning transaction; the
count and the confidence come with that transaction, which also marks the outcome
applied. A crash in between leaves an entry at the prior with no count, and the
redelivered outcome finds it and counts the run once.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np

from grimoire.agents.ports import Embedder
from grimoire.streams.learn.evidence import (
    DEFAULT_EVIDENCE_POLICY,
    EVIDENCE_EVENT_TYPE,
    EvidenceCount,
    EvidencePlan,
    EvidencePolicy,
    NewEvidence,
    RunMember,
    evidence_id,
    plan_evidence,
    run_actions,
    run_situation,
)
from grimoire.streams.learn.runs import MemoryCredit
from grimoire.streams.model.records import (
    HyperedgeRef,
    Kind,
    Layer,
    MemoryCandidate,
    MemoryRecord,
    Provenance,
    Role,
)
from grimoire.streams.model.text import normalized_hash
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.ports.memory import MemoryWrites

__all__ = ["EVIDENCE_ROLE", "EvidenceWriter", "RunEvidence"]

logger = logging.getLogger(__name__)

# The role an evidence count takes among a run's credits.
EVIDENCE_ROLE = "evidence"


@dataclass(frozen=True, slots=True)
class RunEvidence:
    """A run's evidence, ready for its learning transaction: the counts as credits,
    and the evidence entries the run recalled (credited by count, not as recalled
    memories: an entry ranked above the one acted on did not cause the result)."""

    plan: EvidencePlan
    success: bool
    recalled_entries: frozenset[str] = field(default_factory=frozenset)
    # The run's members and recalled memories as read (what else its end needs).
    records: Mapping[str, RecallRecord] = field(default_factory=dict)

    def credits(self) -> tuple[MemoryCredit, ...]:
        return tuple(
            MemoryCredit(
                memory_id=update.memory_id,
                roles=(EVIDENCE_ROLE,),
                confidence_delta=update.confidence_delta,
                strength_delta=0.0,
                validated=1 if update.success else 0,
                contradicted=0 if update.success else 1,
            )
            for update in self.plan.updates
        )

    def merged(self, credits: tuple[MemoryCredit, ...]) -> tuple[MemoryCredit, ...]:
        """The run's credits with the evidence in place of any credit an entry had."""
        counted = set(self.plan.entry_ids) | self.recalled_entries
        kept = [credit for credit in credits if credit.memory_id not in counted]
        return tuple(sorted((*kept, *self.credits()), key=lambda c: c.memory_id))


@dataclass(frozen=True, slots=True)
class EvidenceWriter:
    writes: MemoryWrites
    embedder: Embedder
    policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY

    async def prepare(
        self,
        agent_id: str,
        source: RecallSource,
        *,
        success: bool,
        members: Mapping[str, str],
        recalled: Collection[str],
    ) -> RunEvidence:
        """Plan the run's counts and create the entries it is the first to count."""
        records = await source.records(sorted(set(members) | set(recalled)))
        run = [
            RunMember(memory_id, role, record.nexus_keys, record.text, record.ts_ms)
            for memory_id, role in sorted(members.items())
            if (record := records.get(memory_id)) is not None and _counts(record)
        ]
        recalled_entries = frozenset(
            memory_id
            for memory_id in recalled
            if (record := records.get(memory_id)) is not None
            and record.event_type == EVIDENCE_EVENT_TYPE
        )
        situation = run_situation((m for m in run if m.role == "trigger"), self.policy)
        actions = run_actions(m for m in run if m.role == "action")
        wanted = [evidence_id(agent_id, situation, action) for action in actions]
        stored = await source.records(wanted) if situation and wanted else {}
        plan = plan_evidence(
            agent_id,
            success=success,
            members=run,
            stored={
                memory_id: EvidenceCount(
                    memory_id, record.validated_count, record.contradicted_count, record.confidence
                )
                for memory_id, record in stored.items()
            },
            policy=self.policy,
        )
        if plan.created:
            await self._create(agent_id, plan.created)
        return RunEvidence(plan, success, recalled_entries, records)

    async def _create(self, agent_id: str, created: tuple[NewEvidence, ...]) -> None:
        vectors = await self.embedder.embed([entry.text for entry in created])
        records = tuple(
            MemoryRecord(
                MemoryCandidate(
                    id=entry.memory_id,
                    agent_id=agent_id,
                    kind=Kind.INSIGHT,
                    layer=Layer.CONTEMPLATION,
                    text=entry.text,
                    ts_ms=entry.ts_ms,
                    provenance=Provenance(
                        source_event_id=f"{EVIDENCE_EVENT_TYPE}/{entry.edge_id}/{entry.action}",
                        event_type=EVIDENCE_EVENT_TYPE,
                        tool=entry.action,
                    ),
                    normalized_hash=normalized_hash(entry.text),
                    tags=(EVIDENCE_EVENT_TYPE,),
                    keys=entry.keys,
                    hyperedge=HyperedgeRef(entry.edge_id, Role.ACTION),
                    # A count, not a belief: never compacted into a summary nor archived.
                    pinned=True,
                ),
                canonical=np.asarray(vectors[row], dtype=np.float32).tobytes(),
                confidence=entry.confidence,
            )
            for row, entry in enumerate(created)
        )
        await self.writes.commit(WriteBatch(records=records))
        logger.debug("created %d evidence entries for %s", len(records), agent_id)


def _counts(record: RecallRecord) -> bool:
    """A member that says what happened: not forgotten or retracted."""
    return not record.deleted
