"""Topic names and how they are created. Every topic is keyed by `agent_id`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.partitioner import murmur2

from grimoire.topics.security import KafkaSecurity

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicNames:
    prefix: str

    def _name(self, suffix: str) -> str:
        return f"{self.prefix}.{suffix}"

    @property
    def episodes(self) -> str:
        return self._name("episodes")

    @property
    def tool_events(self) -> str:
        return self._name("tool-events")

    @property
    def transcripts(self) -> str:
        return self._name("transcripts")

    @property
    def outcomes(self) -> str:
        return self._name("outcomes")

    @property
    def facts(self) -> str:
        """Bi-temporal fact asserts, journaled like any input."""
        return self._name("facts")

    @property
    def fact_queries(self) -> str:
        """Reads of an agent's facts, answered on the caller's reply topic."""
        return self._name("fact-queries")

    @property
    def recall_requests(self) -> str:
        return self._name("recall-requests")

    @property
    def memory_events(self) -> str:
        return self._name("memory-events")

    @property
    def dead_letters(self) -> str:
        return self._name("dead-letters")

    @property
    def maintenance(self) -> str:
        return self._name("maintenance")

    @property
    def clade(self) -> str:
        """What the workers send an agent on behalf of its clade (shares, their
        withdrawal, credit for a shared entry): the workers' own topic, like
        maintenance, journaled into the recipient's journal."""
        return self._name("clade")

    @property
    def commands(self) -> str:
        """Operator commands: retract, forget, pin, unpin."""
        return self._name("commands")

    @property
    def journal(self) -> str:
        """Every input and command, sequenced per agent: the system of record."""
        return self._name("journal")

    @property
    def reply_namespace(self) -> str:
        """The prefix every reply topic starts with."""
        return self._name("replies.")

    def reply_topic(self, client_id: str) -> str:
        return self._name(f"replies.{client_id}")

    def all_partitioned(self) -> tuple[str, ...]:
        return (
            self.episodes,
            self.tool_events,
            self.transcripts,
            self.outcomes,
            self.recall_requests,
            self.memory_events,
            self.dead_letters,
            self.maintenance,
            self.clade,
            self.commands,
            self.journal,
            self.facts,
            self.fact_queries,
        )


async def ensure_topics(
    bootstrap_servers: str,
    topics: dict[str, int],
    *,
    replication_factor: int = 1,
    security: KafkaSecurity | None = None,
) -> None:
    """Create missing topics with an explicit partition count.

    Brokers that auto-create topics pick their own partition count (tansu: 4);
    creating them up front keeps partitioning under the deployment's control.
    `security`: SASL and TLS for a broker that wants them (None: plaintext).
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers, **(security or KafkaSecurity()).aiokafka_kwargs()
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(name=name, num_partitions=partitions, replication_factor=replication_factor)
            for name, partitions in sorted(topics.items())
            if name not in existing
        ]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                logger.debug("topics created concurrently by another process")
            logger.info("created topics %s", [topic.name for topic in missing])
    finally:
        await admin.close()


def partition_of(agent_id: str, partitions: int) -> int:
    """The partition of every agent-keyed topic that holds `agent_id`: the default
    partitioner of the producers that write them (aiokafka's murmur2 of the key),
    so an agent's inputs, journal entries and commands share one partition number."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    return (murmur2(agent_id.encode()) & 0x7FFFFFFF) % partitions
