"""The witness record a retry owes: an outcome's or a fact's effects are stored with
the record they should leave (`grimoire.tables.journal.witness_due`), so an attempt
that died between the effects and the witness is completed by the retry of the same
entry, and the chain matches a run that never crashed."""

from __future__ import annotations

import logging

from grimoire.agents.ports import Opened, WitnessPort
from grimoire.tables.journal.witness_due import WitnessDue
from grimoire.tables.ports.journal import WitnessDueReader

__all__ = ["owed_record"]

logger = logging.getLogger(__name__)


async def owed_record(
    due: WitnessDueReader, witness: WitnessPort, item: Opened
) -> WitnessDue | None:
    """The record `item`'s effects left due, when an earlier attempt applied them
    and died before witnessing (the chain falls short of the entry); None when they
    were applied by another entry (a copy of the input) or witnessed."""
    agent_id = item.entry.agent_id
    owed = await due.due(agent_id)
    if owed is None or owed.journal != item.journal:
        return None
    if await witness.witnessed(agent_id, item.journal):
        return None
    logger.info(
        "journal entry %s@%s of %s: applied before, witnessed now",
        item.journal[0], item.journal[1], agent_id,
    )  # fmt: skip
    return owed
