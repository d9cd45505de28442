"""Ingest: validate → dead-letter → key → field state → embed once → admit → store → events."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.ports import (
    CommitEffects,
    Decided,
    Embedder,
    EmbedUsage,
    EventSink,
    InputMessage,
    Staged,
    embed_with_usage,
)
from grimoire.streams.inbound.events import Accepted, Rejection, normalize_event
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.learn.runs import (
    DEFAULT_RUN_POLICY,
    RUN_EDGE_PREFIX,
    RunPolicy,
    learn_from_late_members,
    run_edge_id,
)
from grimoire.streams.model.eidolon import (
    DEFAULT_STATE_WEIGHT,
    eidolon_vector,
    state_key,
    state_vector,
)
from grimoire.streams.model.field_state import FieldState, FieldUpdate, advance
from grimoire.streams.model.records import EventType, MemoryCandidate, MemoryRecord
from grimoire.streams.write.admission import Action, AdmissionPolicy
from grimoire.streams.write.changes import StateVector, WriteBatch
from grimoire.streams.write.plan import (
    PlanItem,
    StoredNeighbour,
    WriteOutcome,
    aggregate_id,
    plan_batch,
)
from grimoire.streams.write.view import IngestView
from grimoire.tables.codec.memory_hash import hash_fields
from grimoire.tables.learn.store import LearningWrite
from grimoire.tables.ports.learn import LearningStore
from grimoire.tables.ports.memory import IngestStore
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MemoryEventV1

__all__ = ["IngestHandler", "IngestReport", "field_update"]

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "internal_error"
_EVENT_TYPES = {
    Action.ADMIT: "GrimoireWrite",
    Action.QUARANTINE: "GrimoireQuarantine",
    Action.REJECT: "GrimoireReject",
    Action.MERGE: "GrimoireMerge",
    Action.AGGREGATE: "GrimoireAggregate",
}


@dataclass(frozen=True, slots=True)
class IngestReport:
    candidates: int
    written: int
    duplicates: int
    dead_lettered: int
    # Per input message, in order: the decisions its candidates got in this batch
    # (empty for a dead-lettered message or one already decided), so the journal's
    # witness can summarise each entry on its own, whatever the batch boundaries.
    by_message: tuple[tuple[Decided, ...], ...] = field(default=(), compare=False)


@dataclass
class IngestHandler:
    store: IngestStore
    embedder: Embedder
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)
    policy: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    eidolon_weight: float = DEFAULT_STATE_WEIGHT
    # A member of a run whose outcome was learned from before it was written is
    # credited as it is written (None: no learning from runs).
    learning: LearningStore | None = field(default=None, kw_only=True)
    run_policy: RunPolicy = field(default=DEFAULT_RUN_POLICY, kw_only=True)

    def _normalize(self, event_type: EventType, message: InputMessage) -> Accepted | Rejection:
        try:
            return normalize_event(event_type, message.value, self.limits)
        except Exception as exc:  # a bug must dead-letter the event, not stop the partition
            logger.exception("normalizer failed on %s@%s", message.topic, message.offset)
            return Rejection(INTERNAL_ERROR, repr(exc)[:500], None, None)

    async def handle(self, event_type: EventType, messages: Sequence[InputMessage]) -> IngestReport:
        return await self.handle_mixed([(event_type, message) for message in messages])

    async def handle_mixed(
        self,
        messages: Sequence[tuple[EventType, InputMessage]],
        effects: CommitEffects | None = None,
        *,
        ingest_off: Collection[str] = (),
    ) -> IngestReport:
        """One batch of inputs of any ingest kind, decided in the order given.

        With `effects`, what the decisions tell the world (events, witness records)
        is staged by it into the decisions' own transaction and published by it;
        without, the memory-events are sent after the commit. The candidates of
        agents in `ingest_off` (their configuration turned ingest off) are skipped:
        validated as always, announced as `GrimoireSkipped`, never decided."""
        # Each input is validated once; the splits below pass the outcomes along.
        outcomes = [self._normalize(event_type, message) for event_type, message in messages]
        # What the batch's candidates and agents stand at, read once (`IngestView`).
        # Which of its memories an outcome waits for stays true through the batch:
        # only this agent's lane holds or releases its outcomes (a pair released
        # below is merely looked at again).
        view = await self.store.ingest_view(
            [
                (cand.agent_id, cand.id)
                for outcome in outcomes
                if isinstance(outcome, Accepted)
                for cand in outcome.candidates
            ]
        )
        if ingest_off:
            return await self._skipping(messages, outcomes, effects, ingest_off, view.held)
        return await self._decide(messages, outcomes, effects, view.held, view)

    async def _decide(
        self,
        messages: Sequence[tuple[EventType, InputMessage]],
        outcomes: Sequence[Accepted | Rejection],
        effects: CommitEffects | None,
        held: Collection[tuple[str, str]],
        view: IngestView | None = None,
    ) -> IngestReport:
        """Decide and commit `messages`; `view` is what the store held before them
        (None: read it here)."""
        split = _held_split(outcomes, held)
        if split is not None:
            # An outcome waits for a memory this batch writes: it must take effect
            # right after that input, before anything later is decided against the
            # memory (as when the input ends a batch), so the batch ends there. What
            # the rest is decided against is read after the first part's commit.
            first = await self._decide(
                messages[:split],
                outcomes[:split],
                effects.sliced(0, split) if effects else None,
                held,
                view,
            )
            rest = await self._decide(
                messages[split:],
                outcomes[split:],
                effects.sliced(split, len(messages)) if effects else None,
                held,
            )
            return _joined(first, rest)
        candidates: list[MemoryCandidate] = []
        origin: dict[str, int] = {}  # candidate id -> the message it came from (first)
        dead = 0
        for index, ((_, message), outcome) in enumerate(zip(messages, outcomes, strict=True)):
            if isinstance(outcome, Rejection):
                await dead_letter(self.sink, self.topics.dead_letters, message, outcome)
                dead += 1
                continue
            candidates.extend(outcome.candidates)
            for cand in outcome.candidates:
                origin.setdefault(cand.id, index)

        if view is None:
            view = await self.store.ingest_view([(c.agent_id, c.id) for c in candidates])
        decided = {candidate_id for _, candidate_id in view.decided}
        fresh = [c for c in _first_of_each(candidates) if c.id not in decided]
        if not fresh:
            return IngestReport(
                len(candidates), 0, len(candidates), dead, tuple(() for _ in messages)
            )

        fields = {
            agent_id: view.fields[agent_id] for agent_id in sorted({c.agent_id for c in fresh})
        }
        states: list[FieldState] = []
        for cand in fresh:
            fields[cand.agent_id] = advance(fields[cand.agent_id], field_update(cand))
            states.append(fields[cand.agent_id])

        items, usage, state_vectors = await self._plan_items(fresh, states)
        batch, outcomes = plan_batch(items, fields, policy=self.policy)
        # Each agent's latest state vector, composed above, is kept for its recalls.
        kept = [
            StateVector(state.agent_id, key, state_vectors[key].astype(np.float32).tobytes())
            for state in batch.fields
            if (key := state_key(state.digest_parts())) in state_vectors
        ]
        counters = {
            "embed_hits": float(usage.hits),
            "embed_misses": float(usage.misses),
            "embed_model_calls": float(usage.model_calls),
            "embed_model_seconds": usage.model_seconds,
            "ingest_batches": 1.0,
            "ingest_candidates": float(len(fresh)),
        }
        batch = replace(batch, metrics=tuple(sorted(counters.items())), state_vectors=tuple(kept))
        by_message: list[list[Decided]] = [[] for _ in messages]
        records = {record.id: record for record in batch.records}
        for result in outcomes:
            cand = result.candidate
            by_message[origin[cand.id]].append(
                Decided(
                    agent_id=cand.agent_id,
                    candidate_id=cand.id,
                    memory_id=result.memory_id or cand.id,
                    action=result.decision.action.value,
                    event=_event(result),
                    # Only the candidate's own record: a merge or fold names a target
                    # that may have been written earlier in the same batch.
                    written=_written(records.get(cand.id)),
                )
            )
        decided_by_message = tuple(tuple(decided) for decided in by_message)
        if effects is None:
            await self.store.commit(batch)
        else:
            # The decisions' witness and events go in the decisions' transaction.
            staged = await effects.stage(decided_by_message)
            try:
                await self.store.commit(batch, staged.parts)
            except BaseException:
                staged.abandoned()
                raise
            await staged.committed()
        await self._apply_held_outcomes(batch.records, held)
        if effects is None:
            for decided in decided_by_message:
                for one in decided:
                    await self.sink.send(self.topics.memory_events, one.agent_id, one.event)
        written = len(batch.records)
        return IngestReport(
            len(candidates),
            written,
            len(candidates) - len(fresh),
            dead,
            decided_by_message,
        )

    async def _skipping(
        self,
        messages: Sequence[tuple[EventType, InputMessage]],
        outcomes: Sequence[Accepted | Rejection],
        effects: CommitEffects | None,
        ingest_off: Collection[str],
        held: Collection[tuple[str, str]],
    ) -> IngestReport:
        """The batch with the skipped agents' inputs taken out and announced (an
        invalid input is dead-lettered as usual, whatever its agent's configuration)."""
        skipped_at = [
            index
            for index, outcome in enumerate(outcomes)
            if isinstance(outcome, Accepted) and outcome.agent_id in ingest_off
        ]
        kept_at = [index for index in range(len(messages)) if index not in set(skipped_at)]
        by_message: list[tuple[Decided, ...]] = [() for _ in messages]
        candidates = 0
        for index in skipped_at:
            accepted = outcomes[index]
            assert isinstance(accepted, Accepted)
            candidates += len(accepted.candidates)
            by_message[index] = tuple(_skipped(cand) for cand in accepted.candidates)
        if skipped_at:
            skipped = tuple(by_message[index] for index in skipped_at)
            await self._announce(skipped, _Picked.of(effects, skipped_at) if effects else None)
        rest = IngestReport(0, 0, 0, 0, ())
        if kept_at:
            rest = await self._decide(
                [messages[index] for index in kept_at],
                [outcomes[index] for index in kept_at],
                _Picked.of(effects, kept_at) if effects else None,
                held,
            )
            for index, decided in zip(kept_at, rest.by_message, strict=True):
                by_message[index] = decided
        return IngestReport(
            rest.candidates + candidates,
            rest.written,
            rest.duplicates,
            rest.dead_lettered,
            tuple(by_message),
        )

    async def _announce(
        self, decided: Sequence[Sequence[Decided]], effects: CommitEffects | None
    ) -> None:
        """Skips write nothing but their witness and events (in one transaction)."""
        if effects is None:
            for one in (d for group in decided for d in group):
                await self.sink.send(self.topics.memory_events, one.agent_id, one.event)
            return
        staged = await effects.stage(decided)
        try:
            await self.store.commit(WriteBatch(), staged.parts)
        except BaseException:
            staged.abandoned()
            raise
        await staged.committed()

    async def _apply_held_outcomes(
        self, records: Sequence[MemoryRecord], held: Collection[tuple[str, str]]
    ) -> None:
        """Outcomes that named these memories before they were written take effect now."""
        written: dict[str, list[str]] = {}
        for record in records:
            if (record.candidate.agent_id, record.id) in held:
                written.setdefault(record.candidate.agent_id, []).append(record.id)
        for agent_id, memory_ids in sorted(written.items()):
            # Applied, then released: nothing is seen released and not applied, and
            # a crash between leaves them held for the retry (once per outcome id).
            for outcome in await self.store.held_outcomes(agent_id, memory_ids):
                await self.store.apply_outcome(outcome)
            await self.store.release_held_outcomes(agent_id, memory_ids)
        if self.learning is not None:
            await self._credit_late_members(records, self.learning)

    async def _credit_late_members(
        self, records: Sequence[MemoryRecord], learning: LearningStore
    ) -> None:
        """Members of runs that ended (and were learned from) before they were
        written get the run's credit now (`learn_from_late_members`)."""
        by_agent: dict[str, dict[str, set[str]]] = {}
        for record in records:
            edge = record.candidate.hyperedge
            if edge is not None and edge.edge_id.startswith(RUN_EDGE_PREFIX):
                runs = by_agent.setdefault(record.candidate.agent_id, {})
                runs.setdefault(edge.edge_id, set()).add(record.id)
        for agent_id, runs in sorted(by_agent.items()):
            ended = await learning.ended_runs(
                agent_id, [edge_id.removeprefix(RUN_EDGE_PREFIX) for edge_id in runs]
            )
            for run_id, run in sorted(ended.items()):
                edge_id = run_edge_id(run_id)
                late = frozenset(runs[edge_id])
                found = await self.store.recall_source(agent_id).hyperedges([edge_id])
                members = dict(found.get(edge_id, {}))
                actions = sorted(m for m, role in members.items() if role == "action")
                stored = await learning.out_edges(agent_id, actions)
                plan = learn_from_late_members(
                    run,
                    members,
                    late,
                    stored,
                    self.run_policy,
                )
                part = await learning.outcome_part(LearningWrite(agent_id, edges=plan.edges))
                # Once per (run outcome, late group): a member is written only once.
                marker = Outcome(
                    outcome_id=f"{run.outcome_id}+{min(late)}",
                    agent_id=agent_id,
                    ts_ms=run.ts_ms,
                    kind=OutcomeKind.RUN_ENDED,
                    memory_ids=(),
                    run_id=run_id,
                    quality=run.quality,
                )
                await self.store.apply_credits(marker, plan.credits, dict(plan.uplifts), [part])

    async def _plan_items(
        self, fresh: Sequence[MemoryCandidate], states: Sequence[FieldState]
    ) -> tuple[list[PlanItem], EmbedUsage, dict[str, npt.NDArray[np.float32]]]:
        """Embed contents and the states' parts in one model call; blend the
        eidolon vectors. Also each state's vector, by its `state_key`."""
        parts = [state.digest_parts() for state in states]
        texts = list(
            dict.fromkeys([*(c.text for c in fresh), *(part for each in parts for part in each)])
        )
        vectors, usage = await embed_with_usage(self.embedder, texts)
        by_text = {text: vectors[row] for row, text in enumerate(texts)}
        keys = [state_key(state_parts) for state_parts in parts]
        by_key: dict[str, npt.NDArray[np.float32]] = {}
        for key, state_parts in zip(keys, parts, strict=True):
            if key not in by_key and (vector := state_vector(state_parts, by_text)) is not None:
                by_key[key] = vector
        canonical = [by_text[c.text] for c in fresh]
        stored = await self.store.nearest(
            [
                (c.agent_id, v.astype(np.float32).tobytes())
                for c, v in zip(fresh, canonical, strict=True)
            ]
        )
        groups = await self._existing_groups(fresh, stored)
        items = [
            PlanItem(
                candidate=cand,
                canonical=vector,
                eidolon=eidolon_vector(vector, by_key.get(key), state_weight=self.eidolon_weight),
                now_ms=state.watermark_ms,
                stored=neighbour,
                stored_group_exists=neighbour is not None
                and aggregate_id(cand.agent_id, neighbour.neighbour.memory_id) in groups,
            )
            for cand, vector, key, state, neighbour in zip(
                fresh, canonical, keys, states, stored, strict=True
            )
        ]
        return items, usage, by_key

    async def _existing_groups(
        self, fresh: Sequence[MemoryCandidate], stored: Sequence[StoredNeighbour | None]
    ) -> set[str]:
        """Which aggregates standing for the stored neighbours' groups exist already."""
        wanted = sorted(
            {
                (cand.agent_id, aggregate_id(cand.agent_id, neighbour.neighbour.memory_id))
                for cand, neighbour in zip(fresh, stored, strict=True)
                if neighbour is not None
            }
        )
        missing = await self.store.missing_memories(wanted)
        return {group for agent_id, group in wanted if (agent_id, group) not in missing}


def _held_split(
    outcomes: Sequence[Accepted | Rejection], held: Collection[tuple[str, str]]
) -> int | None:
    """Where a batch must end (after the first input writing a memory an outcome is
    held for), or None when it need not."""
    for index, outcome in enumerate(outcomes[:-1]):
        if isinstance(outcome, Accepted) and any(
            (cand.agent_id, cand.id) in held for cand in outcome.candidates
        ):
            return index + 1
    return None


def _written(record: MemoryRecord | None) -> dict[str, object] | None:
    if record is None:
        return None
    fields = hash_fields(record, recorded_at_ms=0)
    fields.pop("recorded_at", None)  # transaction time: never part of a summary
    return fields


def _joined(first: IngestReport, rest: IngestReport) -> IngestReport:
    return IngestReport(
        first.candidates + rest.candidates,
        first.written + rest.written,
        first.duplicates + rest.duplicates,
        first.dead_lettered + rest.dead_lettered,
        first.by_message + rest.by_message,
    )


def _first_of_each(candidates: Sequence[MemoryCandidate]) -> list[MemoryCandidate]:
    # The first copy wins, as it does across batches, so batch boundaries never
    # change what a replay stores.
    first: dict[str, MemoryCandidate] = {}
    for candidate in candidates:
        first.setdefault(candidate.id, candidate)
    return list(first.values())


def field_update(cand: MemoryCandidate) -> FieldUpdate:
    """What a candidate tells its agent's field state (`advance`): the write path's
    rule, which a store loaded outside the worker (the benchmarks') follows too."""
    return FieldUpdate(
        ts_ms=cand.ts_ms,
        keys=cand.keys,
        tick=cand.tick,
        block=cand.block,
        regime=cand.regime,
        affect=cand.affect,
    )


def _event(result: WriteOutcome) -> bytes:
    cand, decision = result.candidate, result.decision
    return MemoryEventV1(
        type=_EVENT_TYPES[decision.action],
        agent_id=cand.agent_id,
        memory_id=result.memory_id or cand.id,
        candidate_id=cand.id,
        source_event_id=cand.provenance.source_event_id,
        kind=cand.kind.value,
        layer=cand.layer.value,
        ts=cand.ts_ms,
        action=decision.action.value,
        reason=decision.reason,
        confidence=decision.confidence,
        quality=result.quality.total if result.quality else None,
        admission=decision.breakdown(),
        off_topic=decision.off_topic,
        target_id=decision.target_id,
        nexus_keys=list(cand.keys),
        hyperedge_id=cand.hyperedge.edge_id if cand.hyperedge else None,
    ).dumps_json()


SKIP_ACTION = "skip"
SKIP_REASON = "ingest disabled by the agent's configuration"


def _skipped(cand: MemoryCandidate) -> Decided:
    event = MemoryEventV1(
        type="GrimoireSkipped",
        agent_id=cand.agent_id,
        memory_id=cand.id,
        candidate_id=cand.id,
        source_event_id=cand.provenance.source_event_id,
        kind=cand.kind.value,
        layer=cand.layer.value,
        ts=cand.ts_ms,
        action=SKIP_ACTION,
        reason=SKIP_REASON,
    ).dumps_json()
    return Decided(cand.agent_id, cand.id, cand.id, SKIP_ACTION, event)


class _Picked:
    """The effects of some messages of a batch, in their order (a batch whose
    skipped inputs are announced apart from the ones decided)."""

    def __init__(self, parts: Sequence[CommitEffects]) -> None:
        self._parts = list(parts)

    @classmethod
    def of(cls, effects: CommitEffects, indexes: Sequence[int]) -> _Picked:
        return cls([effects.sliced(index, index + 1) for index in indexes])

    async def stage(self, decided: Sequence[Sequence[Decided]]) -> Staged:
        staged = [await part.stage((one,)) for part, one in zip(self._parts, decided, strict=True)]
        return _StagedTogether(staged)

    def sliced(self, start: int, stop: int) -> CommitEffects:
        return _Picked(self._parts[start:stop])


class _StagedTogether:
    def __init__(self, staged: Sequence[Staged]) -> None:
        self._staged = list(staged)

    @property
    def parts(self) -> Sequence[TransactionPart]:
        return [part for one in self._staged for part in one.parts]

    async def committed(self) -> None:
        for one in self._staged:
            await one.committed()

    def abandoned(self) -> None:
        for one in self._staged:
            one.abandoned()
