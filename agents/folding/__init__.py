"""The fold's rules: one per kind of journal entry, each turning a run of opened
entries into calls on its handler and witness records of what changed.

The apply loop (`grimoire.agents.journal.apply`) knows none of them: it dispatches
through the `EntryRule` registry that the composition root fills with
`fold_rules`. A deployment without facts simply registers no fact rule; an entry of
a kind with no rule is a poison entry."""

from __future__ import annotations

from collections.abc import Mapping

from grimoire.agents.folding.clade import CladeRule
from grimoire.agents.folding.command import FORGOTTEN_CHAIN, CommandRule
from grimoire.agents.folding.fact import FactRule
from grimoire.agents.folding.ingest import IngestRule
from grimoire.agents.folding.maintenance import MaintenanceRule
from grimoire.agents.folding.outcome import OutcomeRule
from grimoire.agents.folding.usage import UsageRule
from grimoire.agents.handlers.clade import AutoShare, CladeReceiver
from grimoire.agents.handlers.facts import FactHandler
from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.journal.publication import Publication
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import CommandApplier, EntryRule, UsageApplier, WitnessPort
from grimoire.streams.journal.entry import INGEST_KINDS, EntryKind
from grimoire.tables.journal.witness_due import NoWitnessDue
from grimoire.tables.ports.config import ConfigStore
from grimoire.tables.ports.journal import WitnessDueReader

__all__ = [
    "FORGOTTEN_CHAIN",
    "CladeRule",
    "CommandRule",
    "FactRule",
    "IngestRule",
    "MaintenanceRule",
    "OutcomeRule",
    "UsageRule",
    "fold_rules",
]


def fold_rules(
    *,
    ingest: IngestHandler,
    outcomes: OutcomeHandler,
    maintenance: MaintenanceHandler,
    usage: UsageApplier,
    commands: CommandApplier,
    witness: WitnessPort,
    publication: Publication | None = None,
    configs: ConfigStore | None = None,
    facts: FactHandler | None = None,
    due: WitnessDueReader | None = None,
    clade: CladeReceiver | None = None,
    auto_share: AutoShare | None = None,
) -> Mapping[EntryKind, EntryRule]:
    """The registry of a worker's fold: every entry kind to the rule applying it.

    `publication` stores an ingest run's witness records and events with its
    decisions (an outbox; without it they are recorded and sent after the
    commit); `configs` may turn an agent's ingest off; `due` reads the witness
    records an outcome's or a fact's effects left due (a retry after a crash);
    `clade` folds what siblings share (None: a clade entry is a poison entry);
    `auto_share` shares what agents with `share_policy` auto write or promote."""
    reader = due if due is not None else NoWitnessDue()
    ingest_rule = IngestRule(ingest, witness, publication, configs, auto_share)
    rules: dict[EntryKind, EntryRule] = dict.fromkeys(INGEST_KINDS, ingest_rule)
    rules[EntryKind.OUTCOME] = OutcomeRule(outcomes, witness, reader)
    rules[EntryKind.MAINTENANCE] = MaintenanceRule(maintenance, witness, auto_share)
    rules[EntryKind.USAGE] = UsageRule(usage, witness)
    rules[EntryKind.COMMAND] = CommandRule(commands, witness)
    if facts is not None:
        rules[EntryKind.FACT] = FactRule(facts, witness, reader)
    if clade is not None:
        rules[EntryKind.CLADE] = CladeRule(clade, witness)
    return rules
