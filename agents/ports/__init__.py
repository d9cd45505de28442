"""The agents layer's ports: every Protocol its handlers, rules and workers depend
on, with the plain values they exchange, so each runs against Kafka, Redis and the
model in the worker and against in-memory stand-ins in unit tests.

One home per kind of thing: a Protocol of this layer is declared in this package
(the layering test checks it), by concern: `io` (records in, events out, the
embedder), `fold` (the apply loop's rules and what they record), `commands`
(retraction, import, forgetting), `maintenance` (the block cadence's tasks),
`replies` (answering on a reply topic) and `workers` (the Faust side)."""

from grimoire.agents.ports.commands import AgentEraser, Eraser, Importer, Retractor
from grimoire.agents.ports.fold import (
    CommandApplier,
    CommitEffects,
    Decided,
    EntryRule,
    Opened,
    Staged,
    UsageApplier,
    WitnessPort,
)
from grimoire.agents.ports.io import (
    UNKNOWN_AGENT,
    Embedder,
    EmbedUsage,
    EventSink,
    InputMessage,
    MemorySink,
    UsageRecorder,
    Vectors,
    embed_with_usage,
    payload_preview,
    source_of,
)
from grimoire.agents.ports.maintenance import (
    CountEstimates,
    DecayOutlooks,
    DecayScheduler,
    FieldStates,
    LiveCount,
    PressureProbe,
    Reschedule,
    TaskRunner,
)
from grimoire.agents.ports.replies import AddressedRequest, ReplyingHandler
from grimoire.agents.ports.workers import DeadLetterTally, HandlerSource

__all__ = [
    "UNKNOWN_AGENT",
    "AddressedRequest",
    "AgentEraser",
    "CommandApplier",
    "CommitEffects",
    "CountEstimates",
    "DeadLetterTally",
    "DecayOutlooks",
    "DecayScheduler",
    "Decided",
    "EmbedUsage",
    "Embedder",
    "EntryRule",
    "Eraser",
    "EventSink",
    "FieldStates",
    "HandlerSource",
    "Importer",
    "InputMessage",
    "LiveCount",
    "MemorySink",
    "Opened",
    "PressureProbe",
    "ReplyingHandler",
    "Reschedule",
    "Retractor",
    "Staged",
    "TaskRunner",
    "UsageApplier",
    "UsageRecorder",
    "Vectors",
    "WitnessPort",
    "embed_with_usage",
    "payload_preview",
    "source_of",
]
