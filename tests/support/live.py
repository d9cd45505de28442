"""A running deployment as an end-to-end test drives it: the `live` fixture of
tests/integration/conftest.py bundles what such a test otherwise asks for one fixture
at a time (a client of the running worker, its Redis, its settings, two fresh
agents, the polling and topic-reading helpers). The deployment is the session's, or
a module's own where the module overrides the `deployed` fixture."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.tables.keyspace import Keyspace
from grimoire.topics.client import GrimoireClient
from tests.support.dead_letters import ReadTopic
from tests.support.stored import Eventually

__all__ = ["Live"]


@dataclass(frozen=True)
class Live:
    """A running worker and what a test reads it with."""

    client: GrimoireClient  # started, of the deployment's worker
    redis: Redis  # the deployment's Redis (a cluster client where it is one)
    settings: Settings
    agents: tuple[str, str]  # two agents no other test writes for
    eventually: Eventually  # poll a check until it is truthy
    read_topic: ReadTopic  # a topic's records from the start until enough are in

    @property
    def prefix(self) -> str:
        return self.settings.broker.topic_prefix

    @property
    def keys(self) -> Keyspace:
        return Keyspace(self.prefix)
