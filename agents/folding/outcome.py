"""The rule for outcome entries: credit and blame to the memories an outcome names,
or a run's end learned from, witnessed with how many memories changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from grimoire.agents.folding.due import owed_record
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.ports import Opened, WitnessPort
from grimoire.streams.journal.fold import Run
from grimoire.tables.ports.journal import WitnessDueReader

__all__ = ["OUTCOME_OP", "OutcomeRule"]

OUTCOME_OP = "outcome"


@dataclass(frozen=True, slots=True)
class OutcomeRule:
    outcomes: OutcomeHandler
    witness: WitnessPort
    due: WitnessDueReader

    async def apply(self, run: Run[Opened]) -> bool:
        item = run.items[0]
        changed = await self.outcomes.handle(item.message, item.journal)
        if changed < 0:  # applied before: witnessed then, or owed now
            owed = await owed_record(self.due, self.witness, item)
            changed = int(owed.fields["changed"]) if owed is not None else -1
        if changed >= 0:
            await self.witness.record(
                item.entry.agent_id,
                OUTCOME_OP,
                (),
                {"changed": changed, "payload": _json_or_text(item.message.value)},
                journal=item.journal,
            )
        return True


def _json_or_text(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")
