"""Pressure signals for maintenance: the worker's ingest lag and dead-letter rate.

These are operational readings (wall-clock windows, broker offsets), so they only
ever postpone maintenance; what a task does when it runs never depends on them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from grimoire.agents.ports import EventSink
from grimoire.streams.maintenance.schedule import PressureSignals

logger = logging.getLogger(__name__)


class CountingSink:
    """An EventSink that counts what went to the dead-letter and memory-events topics
    over the current window (one block interval)."""

    def __init__(
        self,
        inner: EventSink,
        dead_letters_topic: str,
        memory_events_topic: str,
        window_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._dead_letters_topic = dead_letters_topic
        self._memory_events_topic = memory_events_topic
        self._window_s = window_s
        self._clock = clock
        self._window_started = clock()
        self._dead_letters = 0
        self._written = 0
        self._previous = (0, 0)

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        self._roll()
        if topic == self._dead_letters_topic:
            self._dead_letters += 1
        elif topic == self._memory_events_topic:
            self._written += 1
        await self._inner.send(topic, key, value, partition=partition)

    async def flush(self) -> None:
        await self._inner.flush()

    def _roll(self) -> None:
        now = self._clock()
        if now - self._window_started >= self._window_s:
            self._previous = (self._dead_letters, self._written)
            self._dead_letters = self._written = 0
            self._window_started = now

    def window(self) -> tuple[int, int]:
        """(dead letters, other events) over the last full window and the current one."""
        self._roll()
        return (self._previous[0] + self._dead_letters, self._previous[1] + self._written)


class WorkerPressure:
    """Lag over the worker's assigned partitions of the ingest topics, plus the
    dead-letter window of its sink."""

    def __init__(self, counting: CountingSink, lag: Callable[[], int]) -> None:
        self._counting = counting
        self._lag = lag

    def signals(self) -> PressureSignals:
        dead, written = self._counting.window()
        return PressureSignals(consumer_lag=self._lag(), dead_letters=dead, ingested=written)


def faust_consumer_lag(app: Any, topics: Collection[str]) -> Callable[[], int]:
    """Messages behind the high-water mark on the assigned partitions of `topics`."""

    def lag() -> int:
        try:
            consumer = app.consumer
            behind = 0
            for tp in consumer.assignment():
                if tp.topic not in topics:
                    continue
                # The high watermark the fetch responses carry, which tansu gets right
                # (unlike its ListOffsets: topics/offsets.py); no request of its own.
                high = consumer.highwater(tp)
                read = consumer._read_offset.get(tp)  # faust keeps no public accessor
                if high is not None and read is not None:
                    behind += max(0, int(high) - int(read) - 1)
            return behind
        except Exception:  # no consumer yet (starting up): no reading, no pressure
            logger.debug("consumer lag unavailable", exc_info=True)
            return 0

    return lag
