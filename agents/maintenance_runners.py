"""The concrete maintenance tasks behind the handler's runners (decay, curator,
compaction), each built on its Redis store and adapted to `TaskRunner`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis

from grimoire.agents.maintenance import TaskRunner
from grimoire.infra.settings import Settings
from grimoire.streams.maintenance import Task
from grimoire.tables.memory_store import RedisMemoryStore

logger = logging.getLogger(__name__)


def build_runners(
    redis: Redis, store: RedisMemoryStore, embedder: Any, settings: Settings
) -> Mapping[Task, TaskRunner]:
    return {}
