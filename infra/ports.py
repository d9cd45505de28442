"""The composition layer's ports: every `typing.Protocol` that `grimoire.infra` declares.

The HTTP routes send through a `Gateway` (the client SDK is one, the tests pass a
recording fake); the staging purge deletes through a `StagingStore` (Kafka's
DeleteRecords, or tansu's bucket) and asks a `BrokerView` for committed offsets;
exports and imports report progress to a `ProgressBar`. Declaring them in one
module keeps what `infra` expects of its collaborators readable in one place,
apart from the code that wires the real ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from grimoire.infra.purge_plan import Purged, Vacuum
from grimoire.topics.client import RecallAnswer
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import CommandV1

__all__ = ["BrokerView", "Gateway", "ProgressBar", "StagingStore"]


class Gateway(Protocol):
    """What the routes send through Kafka: `GrimoireClient` is one."""

    topics: TopicNames

    async def recall(
        self,
        agent_id: str,
        query: str,
        *,
        k: int | None = None,
        as_of: int | None = None,
        filters: Any = None,
        budgets: Any = None,
        state: Any = None,
        mode: Any = None,
        explain: bool | None = None,
        expand_episodes: bool | None = None,
        record_usage: bool | None = None,
        timeout: float = 10.0,
    ) -> RecallAnswer: ...

    async def send_command(self, command: CommandV1) -> None: ...

    async def request_maintenance(self, agent_id: str, *, compact: bool = False) -> None: ...

    async def publish_raw(
        self, topic: str, key: str, value: bytes, *, wait: bool = True, api_key: str | None = None
    ) -> None:
        """Publish with `api_key` (default: the gateway's own) as the record's
        `grimoire-api-key` header."""
        ...


class StagingStore(Protocol):
    """Where a broker keeps its log, as far as deleting from a partition's start goes."""

    async def delete_consumed(self, topic: str, committed: Mapping[int, int]) -> Purged:
        """Delete, per partition, the records below its committed offset."""
        ...

    async def delete_expired(self, topic: str, cutoff: float) -> Purged:
        """Delete, per partition, the records written before `cutoff` (Unix seconds)."""
        ...

    async def settle(self) -> Vacuum:
        """Make what was deleted leave the disk where the store needs asking, and
        say how far that went."""
        ...

    async def close(self) -> None: ...


class BrokerView(Protocol):
    """What the purge asks the broker: the topics there are, and a group's offsets."""

    async def topics(self) -> set[str]: ...

    async def committed(self, group: str, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        """{topic: {partition: next offset to read}} for the partitions the group has
        committed (the others are left out)."""
        ...

    async def close(self) -> None: ...


class ProgressBar(Protocol):
    """What an export or an import reports its progress to: a tqdm bar on stderr,
    or one that shows nothing."""

    def update(self, n: int = 1) -> Any: ...

    def close(self) -> None: ...
