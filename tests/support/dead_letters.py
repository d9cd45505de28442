"""A deployment's dead letters as the integration tests read them: decoded, those a
test picks, read from the start of the topic until enough are in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from grimoire.infra.settings import Settings
from grimoire.topics.declarations import TopicNames

__all__ = ["ReadTopic", "dead_letters_where"]

# The `read_topic` fixture: a topic's records from the start until `until(records)`
# holds or `timeout` passes (tests/integration/conftest.py).
ReadTopic = Callable[..., Awaitable[list[Any]]]


async def dead_letters_where(
    read_topic: ReadTopic,
    settings: Settings,
    picked: Callable[[dict[str, Any]], bool],
    *,
    at_least: int = 1,
    timeout: float,
) -> list[dict[str, Any]]:
    """The dead letters `picked` chooses, in topic order, once there are `at_least` of
    them (fewer when `timeout` passes first)."""

    def chosen(records: list[Any]) -> list[dict[str, Any]]:
        return [letter for letter in (orjson.loads(r.value) for r in records) if picked(letter)]

    records = await read_topic(
        settings.bootstrap_servers,
        TopicNames(settings.broker.topic_prefix).dead_letters,
        until=lambda rs: len(chosen(rs)) >= at_least,
        timeout=timeout,
    )
    return chosen(records)
