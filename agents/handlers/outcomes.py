"""Outcomes: decode, apply once to the agent's memories, report on memory-events.

An outcome may name a memory whose event is later in the journal: that part of the
outcome is held for the memory and applied when the write path writes it (see
IngestHandler), so what an outcome does never depends on which arrived first.

A run's outcome (`run_ended` with a quality) is learned from (docs/design.md §7): the run's
hyperedge members are credited or blamed by role, what the run recalled is
credited (and strengthened on a success), the run's action → outcome edges move
in the causal graph, and the agent's rerank weights take one Hedge step
(`grimoire.streams.learn.runs`). It acts on the members the journal holds when it
is applied: a memory of the run journaled after its end is not credited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.handlers.clade import Sharing, copies_used
from grimoire.agents.handlers.evidence import EvidenceWriter, RunEvidence
from grimoire.agents.ports import EventSink, InputMessage
from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.outcome import parse_outcome
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.learn.hedge import RANK, initial_weights
from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.learn.runs import (
    DEFAULT_RUN_POLICY,
    EndedRun,
    RunPolicy,
    learn_from_run,
    run_edge_id,
    run_recall_counters,
)
from grimoire.streams.recall.rerank import DEFAULT_RERANK_WEIGHTS, RerankWeights
from grimoire.tables.learn.store import LearningWrite
from grimoire.tables.ports.config import ConfigStore
from grimoire.tables.ports.learn import LearningStore
from grimoire.tables.ports.memory import OutcomeEffects
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MemoryEventV1

logger = logging.getLogger(__name__)


@dataclass
class OutcomeHandler:
    store: OutcomeEffects
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)
    # Learning from runs (None: a run's outcome only closes it, as before docs/design.md §7).
    learning: LearningStore | None = field(default=None, kw_only=True)
    configs: ConfigStore | None = field(default=None, kw_only=True)
    run_policy: RunPolicy = field(default=DEFAULT_RUN_POLICY, kw_only=True)
    rerank: RerankWeights = field(default=DEFAULT_RERANK_WEIGHTS, kw_only=True)
    # Evidence per situation x action (None: a run's end counts no evidence).
    evidence: EvidenceWriter | None = field(default=None, kw_only=True)
    # Clades: evidence reaches the agent's clades (published entries, and all with
    # `share_policy` auto); a run that used siblings' copies credits their origins.
    sharing: Sharing | None = field(default=None, kw_only=True)

    async def handle(self, message: InputMessage, journal: tuple[int, int] | None = None) -> int:
        """How many memories changed; -1 for an outcome applied before (redelivery).
        With the `journal` entry applying it, the count is stored due with the
        effects (`grimoire.tables.journal.witness_due`)."""
        outcome = parse_outcome(message.value, self.limits)
        if isinstance(outcome, Rejection):
            await dead_letter(self.sink, self.topics.dead_letters, message, outcome)
            return 0
        if outcome.ends_run and self.learning is not None:
            return await self._learn(outcome, self.learning, journal)
        changed = await self.store.apply_outcome(outcome, journal)
        held: list[str] = []
        if changed >= 0 and outcome.effect.touches_memories:
            missing = await self.store.missing_memories(
                [(outcome.agent_id, memory_id) for memory_id in outcome.memory_ids]
            )
            held = [m for m in outcome.memory_ids if (outcome.agent_id, m) in missing]
            if held:
                await self.store.hold_outcome(outcome, held)
        if changed > 0 or (changed == 0 and outcome.memory_ids):
            effect = outcome.effect
            event = MemoryEventV1(
                type="GrimoireOutcome",
                agent_id=outcome.agent_id,
                memory_id=",".join(outcome.memory_ids),
                source_event_id=outcome.outcome_id,
                kind="outcome",
                layer="",
                ts=outcome.ts_ms,
                action=outcome.kind.value,
                reason=f"applied to {changed} of {len(outcome.memory_ids)} memories"
                + (f", held for {len(held)} not written yet" if held else ""),
                admission={
                    "confidence_delta": effect.confidence_delta,
                    "strength_delta": effect.strength_delta,
                },
            )
            await self.sink.send(self.topics.memory_events, outcome.agent_id, event.dumps_json())
        return changed

    async def _learn(
        self, outcome: Outcome, learning: LearningStore, journal: tuple[int, int] | None
    ) -> int:
        agent = outcome.agent_id
        config = (
            (await self.configs.load([agent]))[agent] if self.configs is not None else AgentConfig()
        )
        if not config.learn_from_outcomes:
            # Learning off: the run closes and nothing moves (its recalls are dropped);
            # marked applied all the same.
            drop = await learning.outcome_part(LearningWrite(agent, outcome.run_id))
            changed = await self.store.apply_credits(outcome, (), {}, [drop], journal=journal)
            await self._report(outcome, changed, 0, 0, "learning off")
            return changed
        assert outcome.quality is not None
        edge_id = run_edge_id(outcome.run_id)
        members_by_edge, recalled, fields, weights = await asyncio.gather(
            self.store.recall_source(agent).hyperedges([edge_id]),
            learning.run_recalls(agent, outcome.run_id),
            self.store.load_fields([agent]),
            learning.learned_weights(agent),
        )
        members = dict(members_by_edge.get(edge_id, {}))
        actions = sorted(m for m, role in members.items() if role == "action")
        out_edges = await learning.out_edges(agent, actions)
        plan = learn_from_run(
            quality=outcome.quality,
            members=members,
            recalled=recalled,
            out_edges=out_edges,
            block=fields[agent].block or 0,
            weights=weights,
            initial=initial_weights(self.rerank),
            learn_weights=config.use_learned_weights,
            causal_active=config.use_causal_scoring,
            policy=self.run_policy,
        )
        credits = plan.credits
        run_evidence: RunEvidence | None = None
        if self.evidence is not None:
            run_evidence = await self.evidence.prepare(
                agent,
                self.store.recall_source(agent),
                success=outcome.quality >= self.run_policy.success_line,
                members=members,
                recalled=recalled.keys(),
            )
            credits = run_evidence.merged(credits)
        block = fields[agent].block or 0
        ended = EndedRun(outcome.run_id, outcome.outcome_id, outcome.quality, outcome.ts_ms, block)
        part = await learning.outcome_part(
            LearningWrite(agent, outcome.run_id, plan.edges, plan.weights, ended)
        )
        changed = await self.store.apply_credits(
            outcome,
            credits,
            dict(plan.uplifts),
            [part],
            counters=run_recall_counters(plan.credits, recalled),
            journal=journal,
        )
        if changed >= 0:
            await self._report(outcome, changed, len(plan.edges), len(recalled), "")
        if changed >= 0 and run_evidence is not None and self.sharing is not None:
            await self._share(outcome, config, run_evidence, members, recalled)
        return changed

    async def _share(
        self,
        outcome: Outcome,
        config: AgentConfig,
        evidence: RunEvidence,
        members: Mapping[str, str],
        recalled: Mapping[str, Mapping[str, float]],
    ) -> None:
        """After the run's learning: its evidence to the clades, its credit to the
        origins of the siblings' copies it acted on."""
        assert self.sharing is not None
        agent, cause = outcome.agent_id, outcome.outcome_id
        await self.sharing.share_changed(
            agent,
            evidence.plan.entry_ids,
            outcome.route,
            outcome.ts_ms,
            cause,
            auto=config.share_policy == "auto",
        )
        depth = self.run_policy.recalled_depth
        used = set(members) | {m for m, f in recalled.items() if int(f.get(RANK, 0.0)) < depth}
        copies = copies_used({m: r for m, r in evidence.records.items() if m in used})
        if copies:
            await self.sharing.credit_origins(agent, copies, evidence.success, outcome.ts_ms, cause)

    async def _report(
        self, outcome: Outcome, changed: int, edges: int, recalled: int, note: str
    ) -> None:
        event = MemoryEventV1(
            type="GrimoireOutcome",
            agent_id=outcome.agent_id,
            memory_id="",
            source_event_id=outcome.outcome_id,
            kind="outcome",
            layer="",
            ts=outcome.ts_ms,
            action=outcome.kind.value,
            reason=note
            or f"run {outcome.run_id} ended at quality {outcome.quality}: {changed} memories "
            f"credited ({recalled} recalled), {edges} causal edges",
            target_id=outcome.run_id,
        )
        await self.sink.send(self.topics.memory_events, outcome.agent_id, event.dumps_json())
