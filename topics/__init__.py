"""grimoire.topics: the wire side and the light client SDK.

`pip install 'grimoire[client]'` is enough for everything here (aiokafka and orjson);
the worker's stack (Faust, Redis, the embedding models) is the `worker` extra.
"""

from grimoire.topics.client import (
    ClientError,
    GrimoireClient,
    RecallAnswer,
    RecallFailed,
    RecallTimeout,
    RecallUnauthorized,
)
from grimoire.topics.options import (
    Kind,
    Layer,
    RecallAffect,
    RecallBudgets,
    RecallFilters,
    RecallMode,
    RecallState,
)
from grimoire.topics.schemas import (
    EpisodeV1,
    OutcomeV1,
    RecallItemV1,
    ToolEventV1,
    TranscriptV1,
)
from grimoire.topics.security import KafkaSecurity, KafkaSecurityError

__all__ = [
    "ClientError",
    "EpisodeV1",
    "GrimoireClient",
    "KafkaSecurity",
    "KafkaSecurityError",
    "Kind",
    "Layer",
    "OutcomeV1",
    "RecallAffect",
    "RecallAnswer",
    "RecallBudgets",
    "RecallFailed",
    "RecallFilters",
    "RecallItemV1",
    "RecallMode",
    "RecallState",
    "RecallTimeout",
    "RecallUnauthorized",
    "ToolEventV1",
    "TranscriptV1",
]
