"""A partition's end offset, found by reading rather than by asking.

tansu (the local broker, 0.6.0) answers ListOffsets "latest" — aiokafka's
`end_offsets`, `seek_to_end` — with one past the *first* offset of the partition's
last record batch, not one past its last record: 1,000 records written in one
batch read as an end of 1. Its Fetch responses carry the true high watermark,
and a fetch of an offset inside a batch returns that whole batch (as Kafka does;
aiokafka drops the records before the offset asked for).

So the end is taken as the broker reports it, then the partition is read from the
record before it: on tansu that is the start of the last batch, whose records
carry the end; on Kafka the reported end is already right and the read only
confirms it (the end is never lowered). One ListOffsets for the ends, one for the
log starts (an empty partition is not read), and usually one fetch.

Light like the rest of `topics`: aiokafka and the standard library only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["true_end_offsets"]

logger = logging.getLogger(__name__)

# Longer than a fetch's wait on the broker (aiokafka's default fetch_max_wait_ms is
# 500): a round that brings nothing then means the broker has nothing more to give.
_ROUND_MS = 1_000


async def true_end_offsets(
    consumer: AIOKafkaConsumer,
    partitions: Iterable[TopicPartition],
    *,
    timeout_s: float = 10.0,
    paused: bool = False,
) -> dict[TopicPartition, int]:
    """{partition: one past its last offset} for a read_uncommitted consumer.

    `consumer` is started and outside any group: `partitions` become its whole
    assignment, each left positioned at the end found (a reader that starts there
    skips nothing written after the call), and `paused` when asked (a consumer
    that reads nothing from there would otherwise poll the broker). Past
    `timeout_s`, a partition not read to its end keeps what was found so far
    (never less than the broker's answer).
    """
    tps = list(dict.fromkeys(partitions))
    if not tps:
        return {}
    reported = await consumer.end_offsets(tps)
    starts = await consumer.beginning_offsets(tps)
    consumer.assign(tps)
    ends = {tp: int(reported[tp]) for tp in tps}
    pending = {tp for tp in tps if ends[tp] > int(starts[tp])}
    # Only the partitions still read are fetched: the broker answers a connection's
    # requests in turn, so a fetch waiting on an empty partition would hold up the
    # rest by its whole wait.
    consumer.pause(*(tp for tp in tps if tp not in pending))
    for tp in pending:
        # The batch holding the record before the reported end: tansu's last batch.
        consumer.seek(tp, ends[tp] - 1)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while pending:
            left_ms = int((deadline - loop.time()) * 1000)
            if left_ms <= 0:
                logger.warning(
                    "partition ends not confirmed within %.1fs: %s",
                    timeout_s,
                    ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending)),
                )
                break
            fetched = await consumer.getmany(*pending, timeout_ms=min(_ROUND_MS, left_ms))
            quiet = not any(fetched.values())
            for tp in list(pending):
                records = fetched.get(tp)
                if records:
                    ends[tp] = max(ends[tp], records[-1].offset + 1)
                # Past control batches and compacted gaps too, which bring no records.
                position = await consumer.position(tp)
                ends[tp] = max(ends[tp], position)
                high = consumer.highwater(tp)  # from the fetch responses: right on tansu
                if high is not None and (position >= high or quiet):
                    pending.discard(tp)
                    consumer.pause(tp)
    finally:
        for tp in tps:
            # At the end, not wherever the read stopped (nor where the consumer's
            # reset policy would put a partition never read).
            consumer.seek(tp, ends[tp])
        if not paused:
            consumer.resume(*tps)
    return ends
