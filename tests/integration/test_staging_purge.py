"""The staging purge against the durable local broker: tansu on its s3:// engine over
SeaweedFS, as `grimoire up` runs it, on a stack of this test's own.

Batches go to an input topic, the journal, dead letters and a reply topic; the
workers' group commits the input mid-way (inside a batch) and the journal at its
end; the dead letters and the reply topic get old batches and, seconds later,
young ones. One pass must then delete exactly the input batches wholly below the
committed offset and the old batches, leave the journal whole, leave what remains
readable from the earliest offset and by the group, and, after its vacuum, leave
none of the deleted records' text in the object store's files.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.purge import build_staging_purge, local_staging_settings
from grimoire.infra.purge_plan import Vacuum
from grimoire.infra.settings import Settings
from grimoire.topics.declarations import TopicNames, ensure_topics
from tests.support.stacks import WHEEL_CACHE, services_up

pytestmark = pytest.mark.integration

# This test's own ports (the object store takes 20942..20946 and each + 10000).
KAFKA, REDIS = 19942, 17242
GROUP = "purge-test-workers"
PER_BATCH = 3
# S3's LastModified has whole seconds: old and young batches are this far apart.
AGE_GAP_S = 2.5


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServices]:
    state = tmp_path_factory.mktemp("purge") / "state"
    ports = ServicePorts(kafka=KAFKA, redis=REDIS)
    with services_up(LocalServices(state, ports, wheel_cache=WHEEL_CACHE, durable=True)) as stack:
        yield stack


async def _produce_batches(
    producer: AIOKafkaProducer, topic: str, label: str, batches: int
) -> list[list[bytes]]:
    """`batches` batches of PER_BATCH records each (a flush per batch: tansu stores
    each produced batch as one object)."""
    written: list[list[bytes]] = []
    for b in range(batches):
        values = [f"{label}-b{b}-r{r}-{uuid.uuid4().hex}".encode() for r in range(PER_BATCH)]
        for value in values:
            await producer.send(topic, value, key=b"agent-forgotten", partition=0)
        await producer.flush()
        written.append(values)
    return written


async def _read_from_earliest(
    bootstrap: str, topic: str, *, quiet_s: float = 1.5
) -> list[tuple[int, bytes]]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        found: list[tuple[int, bytes]] = []
        while True:
            got = await consumer.getmany(tp, timeout_ms=int(quiet_s * 1000))
            if not got.get(tp):
                return found
            found.extend((m.offset, m.value) for m in got[tp])
    finally:
        await consumer.stop()


async def _commit(bootstrap: str, topic: str, offset: int) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.commit({tp: OffsetAndMetadata(offset, "")})
    finally:
        await consumer.stop()


async def _group_reads(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """What the workers' group reads next on `topic`: from its committed offset."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = await consumer.getmany(timeout_ms=500)
            records = [(m.offset, m.value) for batch in got.values() for m in batch]
            if records:
                return records
        return []
    finally:
        await consumer.stop()


def _in_object_store(directory: Path, needles: list[bytes]) -> set[bytes]:
    """Which of `needles` appear in any file under `directory`."""
    found: set[bytes] = set()
    for path in directory.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found.update(needle for needle in needles if needle in data)
    return found


async def test_a_pass_purges_what_was_taken_and_what_expired(services: LocalServices) -> None:
    bootstrap = services.kafka_bootstrap
    prefix = f"pg{uuid.uuid4().hex[:6]}"
    names = TopicNames(prefix)
    reply = names.reply_topic("client-1")
    await ensure_topics(
        bootstrap, {names.episodes: 1, names.journal: 1, names.dead_letters: 1, reply: 1}
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        episodes = await _produce_batches(producer, names.episodes, "episode", 6)
        journal = await _produce_batches(producer, names.journal, "journal", 2)
        old_dead = await _produce_batches(producer, names.dead_letters, "dead-old", 3)
        old_replies = await _produce_batches(producer, reply, "reply-old", 2)
        await asyncio.sleep(AGE_GAP_S)
        young_started = time.time()
        young_dead = await _produce_batches(producer, names.dead_letters, "dead-young", 2)
    finally:
        await producer.stop()
    # The sequencer has taken offsets 0..9: batches 0-2, 3-5 and 6-8 wholly, 9-11 in part.
    await _commit(bootstrap, names.episodes, 10)
    await _commit(bootstrap, names.journal, 2 * PER_BATCH)

    purged_text = [v for batch in episodes[:3] + old_dead + old_replies for v in batch]
    kept_text = [v for batch in episodes[3:] + journal + young_dead for v in batch]
    store_dir = services.object_store_dir
    assert _in_object_store(store_dir, purged_text + kept_text) == set(purged_text + kept_text)

    settings = Settings(
        _env_file=None,
        broker_url=f"kafka://{bootstrap}",
        topic_prefix=prefix,
        staging_retention_s=600.0,
        **local_staging_settings(services),
    )
    # The cutoff falls between the old batches and the young ones (LastModified
    # rounds down to the second).
    cutoff = young_started - 1.2
    purge = build_staging_purge(settings, group=GROUP)
    assert purge is not None
    purge._clock = lambda: cutoff + settings.staging.retention_s
    try:
        started = time.perf_counter()
        report = await purge.run_once()
        took = time.perf_counter() - started
    finally:
        await purge.close()

    assert report.failures == 0
    assert report.per_topic[names.episodes].batches == 3
    assert report.per_topic[names.episodes].records == 3 * PER_BATCH
    assert report.per_topic[names.dead_letters].batches == 3
    assert report.per_topic[reply].batches == 2
    assert names.journal not in report.per_topic
    # Vacuumed after the volume servers had every deletion: the bytes go in this pass.
    assert report.vacuum is Vacuum.DONE
    assert took < 30, took

    # From the earliest offset: the first batch left, whole, and everything after it.
    left = await _read_from_earliest(bootstrap, names.episodes)
    assert [value for _, value in left] == [v for batch in episodes[3:] for v in batch]
    assert left[0][0] == 3 * PER_BATCH
    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await probe.start()
    try:
        starts = await probe.beginning_offsets([TopicPartition(names.episodes, 0)])
    finally:
        await probe.stop()
    assert starts[TopicPartition(names.episodes, 0)] == 3 * PER_BATCH
    # The group goes on from where it committed.
    resumed = await _group_reads(bootstrap, names.episodes)
    assert resumed[0] == (10, episodes[3][1])
    # The journal is never purged, whatever the group committed on it.
    assert [v for _, v in await _read_from_earliest(bootstrap, names.journal)] == [
        v for batch in journal for v in batch
    ]
    # Dead letters: the young ones stay; the reply topic is empty, and still works.
    dead = await _read_from_earliest(bootstrap, names.dead_letters)
    assert [v for _, v in dead] == [v for batch in young_dead for v in batch]
    assert await _read_from_earliest(bootstrap, reply, quiet_s=0.5) == []
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        fresh = await _produce_batches(producer, reply, "reply-new", 1)
    finally:
        await producer.stop()
    after = await _read_from_earliest(bootstrap, reply)
    assert [v for _, v in after] == fresh[0]
    assert after[0][0] == 2 * PER_BATCH  # offsets go on from where they were

    # The deleted records' text has left the store's files; what is kept is there.
    assert _in_object_store(store_dir, purged_text) == set()
    assert _in_object_store(store_dir, kept_text) == set(kept_text)
