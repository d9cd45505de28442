"""The staging purge's planning and its stores, without a broker: which batches go
given listings, committed offsets and times; what the S3 store asks tansu's bucket
and SeaweedFS; what the Kafka store asks DeleteRecords; which topics a pass touches
(never the journal)."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import faust
import httpx
import pytest
from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata, OffsetAndTimestamp

from grimoire.infra.app import create_app
from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.purge import (
    PURGE_COUNTERS,
    KafkaBrokerView,
    PurgeReport,
    RedisPurgeTally,
    StagingPurge,
    StagingTargets,
    build_staging_purge,
    local_staging_settings,
    register_staging_purge,
)
from grimoire.infra.purge_kafka import KafkaRecordsStore
from grimoire.infra.purge_plan import (
    Purged,
    StoredBatch,
    Vacuum,
    consumed_prefix,
    expired_prefix,
    forget_bound_s,
    header_end_offset,
    spans,
)
from grimoire.infra.purge_s3 import TANSU_CLUSTER, TansuObjectStore
from grimoire.infra.settings import Settings
from grimoire.topics.declarations import TopicNames
from tests.support.settings import unit_settings

NOW = 1_800_000_000.0


def _batch(base: int, age_s: float = 0.0, size: int = 100) -> StoredBatch:
    return StoredBatch(base, f"k/{base:020d}.batch", NOW - age_s, size)


def _header(last_delta: int, magic: int = 2) -> bytes:
    # base offset, length, leader epoch, magic, crc, attributes, last offset delta, …
    head = struct.pack(">qiibIhi", 0, 100, -1, magic, 0, 0, last_delta)
    return head + bytes(61 - len(head))


# -- planning ---------------------------------------------------------------------------------


def test_only_batches_wholly_below_the_committed_offset_go() -> None:
    batches = [_batch(6), _batch(0), _batch(3), _batch(9)]  # listed in any order
    # 0..2 and 3..5 are taken; 6..8 straddles 7: kept whole.
    assert [b.base_offset for b in consumed_prefix(batches, 7, 12)] == [0, 3]
    assert [b.base_offset for b in consumed_prefix(batches, 6, 12)] == [0, 3]
    assert [b.base_offset for b in consumed_prefix(batches, 9, 12)] == [0, 3, 6]


def test_the_last_batch_goes_only_when_its_end_is_known_and_taken() -> None:
    batches = [_batch(0), _batch(3)]
    assert [b.base_offset for b in consumed_prefix(batches, 6, 6)] == [0, 3]
    assert [b.base_offset for b in consumed_prefix(batches, 6, None)] == [0]
    assert [b.base_offset for b in consumed_prefix(batches, 5, 6)] == [0]


def test_nothing_goes_without_a_commit() -> None:
    batches = [_batch(0), _batch(3)]
    assert consumed_prefix(batches, None, 6) == []
    assert consumed_prefix(batches, 0, 6) == []
    assert consumed_prefix([], 10, None) == []


def test_expired_batches_go_from_the_start_up_to_the_first_young_one() -> None:
    batches = [_batch(0, age_s=900), _batch(3, age_s=700), _batch(6, age_s=10), _batch(9, 800)]
    cutoff = NOW - 600
    # 9 is old but written after 6 (a racing producer): it waits, no hole is made.
    assert [b.base_offset for b in expired_prefix(batches, cutoff)] == [0, 3]
    assert expired_prefix([_batch(0, age_s=5)], cutoff) == []
    assert [b.base_offset for b in expired_prefix([_batch(0, 601)], cutoff)] == [0]


def test_spans_count_offsets_up_to_the_first_kept() -> None:
    doomed = [_batch(3), _batch(6)]
    assert spans(doomed, 9) == 6
    assert spans(doomed, None) == 0
    assert spans([], 9) == 0


def test_batch_header_gives_the_end() -> None:
    assert header_end_offset(24, _header(2)) == 27
    assert header_end_offset(0, _header(0)) == 1
    assert header_end_offset(24, _header(2, magic=1)) is None
    assert header_end_offset(24, b"\x00" * 10) is None
    assert header_end_offset(24, _header(-1)) is None


def test_forget_bound_is_retention_plus_interval() -> None:
    assert forget_bound_s(600, 60) == 660
    assert Purged(1, 3, 10) + Purged(2, 4, 0) == Purged(3, 7, 10)
    assert not Purged()


# -- which topics -----------------------------------------------------------------------------


def test_targets_cover_inputs_queries_events_dead_letters_and_replies_never_the_journal() -> None:
    names = TopicNames("gm")
    targets = StagingTargets.of("gm")
    existing = {*names.all_partitioned(), "gm.replies.abc", "gm.replies.k-1", "other.episodes"}
    consumed = targets.consumed_among(existing)
    expiring = targets.expiring_among(existing)
    # Consumed: every topic the prefix declares (inputs and queries), but for those
    # purged by age and the journal. A rule, not a copy of the list `of` builds.
    expiring_or_kept = {names.dead_letters, names.memory_events, names.journal}
    assert set(consumed) == set(names.all_partitioned()) - expiring_or_kept
    assert len(consumed) == 10
    assert expiring == [names.dead_letters, names.memory_events, "gm.replies.abc", "gm.replies.k-1"]
    assert names.journal not in consumed + expiring
    # Every topic the prefix declares is purged by one rule, except the journal.
    assert set(consumed) | set(expiring) | {names.journal} >= set(names.all_partitioned())
    assert "other.episodes" not in consumed + expiring
    # Topics not created yet are skipped.
    assert targets.consumed_among({names.episodes}) == [names.episodes]


class _FakeStore:
    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self.consumed: list[tuple[str, dict[int, int]]] = []
        self.expired: list[tuple[str, float]] = []
        self.settled = 0
        self.closed = False
        self._failing = failing

    async def delete_consumed(self, topic: str, committed: Mapping[int, int]) -> Purged:
        if topic in self._failing:
            raise RuntimeError("listing timed out")
        self.consumed.append((topic, dict(committed)))
        return Purged(1, sum(committed.values()), 10) if committed else Purged()

    async def delete_expired(self, topic: str, cutoff: float) -> Purged:
        self.expired.append((topic, cutoff))
        return Purged(1, 2, 20)

    async def settle(self) -> Vacuum:
        self.settled += 1
        return Vacuum.DONE

    async def close(self) -> None:
        self.closed = True


class _FakeBroker:
    def __init__(self, topics: set[str], committed: dict[str, dict[int, int]]) -> None:
        self._topics = topics
        self._committed = committed
        self.asked: list[tuple[str, list[str]]] = []

    async def topics(self) -> set[str]:
        return set(self._topics)

    async def committed(self, group: str, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        self.asked.append((group, list(topics)))
        return {t: v for t, v in self._committed.items() if t in topics}

    async def close(self) -> None:
        pass


async def test_a_pass_purges_by_rule_and_tallies() -> None:
    names = TopicNames("gm")
    store = _FakeStore()
    broker = _FakeBroker(
        {*names.all_partitioned(), "gm.replies.c1"},
        {names.episodes: {0: 5, 2: 7}, names.journal: {0: 100}},
    )
    tallied: list[PurgeReport] = []

    async def tally(report: PurgeReport) -> None:
        tallied.append(report)

    purge = StagingPurge(
        store,
        broker,
        prefix="gm",
        group="grimoire",
        retention_s=600,
        interval_s=60,
        clock=lambda: NOW,
        tally=tally,
    )
    report = await purge.run_once()
    assert broker.asked[0][0] == "grimoire"
    assert names.journal not in broker.asked[0][1]
    assert (names.episodes, {0: 5, 2: 7}) in store.consumed
    assert all(topic != names.journal for topic, _ in store.consumed)
    assert [topic for topic, _ in store.expired] == [
        names.dead_letters,
        names.memory_events,
        "gm.replies.c1",
    ]
    assert {cutoff for _, cutoff in store.expired} == {NOW - 600}
    assert report.consumed == Purged(1, 12, 10)
    assert report.expired == Purged(3, 6, 60)
    assert report.vacuum is Vacuum.DONE and store.settled == 1
    assert report.vacuumed and not report.bytes_pending
    assert tallied == [report]
    assert purge.bound_s == 660
    await purge.close()
    assert store.closed


async def test_one_failing_topic_leaves_the_others_to_the_pass() -> None:
    names = TopicNames("gm")
    store = _FakeStore(failing=frozenset({names.episodes}))
    broker = _FakeBroker(set(names.all_partitioned()), {names.outcomes: {0: 3}})
    purge = StagingPurge(
        store, broker, prefix="gm", group="g", retention_s=1, interval_s=1, clock=lambda: NOW
    )
    report = await purge.run_once()
    assert report.failures == 1
    assert (names.outcomes, {0: 3}) in store.consumed
    assert len(store.expired) == 2


# -- the S3 store (tansu's bucket, SeaweedFS) ----------------------------------------------------

S3 = "http://s3.test"
MASTER = "http://master.test"


def _key(topic: str, partition: int, base: int) -> str:
    return (
        f"clusters/{TANSU_CLUSTER}/topics/{topic}/partitions/{partition:010d}/records/"
        f"{base:020d}.batch"
    )


def _listing(entries: Sequence[tuple[str, float, int]], token: str | None = None) -> bytes:
    contents = "".join(
        f"<Contents><Key>{key}</Key><Size>{size}</Size><LastModified>"
        f"{datetime.fromtimestamp(written, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}</LastModified>"
        "</Contents>"
        for key, written, size in entries
    )
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"{more if token else '<IsTruncated>false</IsTruncated>'}{contents}</ListBucketResult>"
    ).encode()


class _Bucket:
    """A fake of tansu's bucket behind SeaweedFS's S3 gateway, master and volume server."""

    def __init__(self, objects: dict[str, tuple[float, int, bytes]], page: int = 1000) -> None:
        self.objects = objects
        self.page = page
        self.deleted: list[str] = []
        self.delete_count = 0
        self.vacuums = 0
        self.requests: list[httpx.Request] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        url = urlsplit(str(request.url))
        query = parse_qs(url.query, keep_blank_values=True)
        date = {"Date": format_datetime(datetime.fromtimestamp(NOW, UTC), usegmt=True)}
        if url.netloc == "master.test":
            if url.path == "/vol/status":
                nodes = {"volume.test:8080": [{"Id": 1}]}
                return httpx.Response(
                    200, json={"Volumes": {"DataCenters": {"dc": {"rack": nodes}}}}
                )
            assert url.path == "/vol/vacuum"
            assert query["garbageThreshold"] == ["0.0001"]
            self.vacuums += 1
            return httpx.Response(200, json={})
        if url.netloc == "volume.test:8080":
            return httpx.Response(200, json={"Volumes": [{"DeleteCount": self.delete_count}]})
        if request.method == "GET" and "list-type" in query:
            prefix = query["prefix"][0]
            keys = sorted(k for k in self.objects if k.startswith(prefix))
            start = int(query.get("continuation-token", ["0"])[0])
            chunk = keys[start : start + self.page]
            token = str(start + self.page) if start + self.page < len(keys) else None
            entries = [(k, self.objects[k][0], self.objects[k][1]) for k in chunk]
            return httpx.Response(200, content=_listing(entries, token), headers=date)
        if request.method == "GET":
            key = url.path.removeprefix("/tansu/")
            assert request.headers["Range"] == "bytes=0-60"
            return httpx.Response(206, content=self.objects[key][2][:61])
        assert request.method == "POST" and "delete" in query
        assert "Content-MD5" in request.headers
        body = request.content.decode()
        keys = [part.split("</Key>")[0] for part in body.split("<Key>")[1:]]
        for key in keys:
            self.objects.pop(key, None)
            self.deleted.append(key)
            self.delete_count += 1  # the filer hands the deletion to the volume at once
        return httpx.Response(200, content=b"<DeleteResult/>")


def _objects(topic: str, spec: Sequence[tuple[int, int, int, float]]) -> dict[str, Any]:
    """(partition, base, records, age) -> the bucket's objects for `topic`."""
    return {
        _key(topic, partition, base): (NOW - age, 100 + records, _header(records - 1))
        for partition, base, records, age in spec
    }


async def test_s3_store_deletes_consumed_batches_per_partition() -> None:
    topic = "gm.episodes"
    bucket = _Bucket(
        {
            **_objects(
                topic, [(0, 0, 3, 0), (0, 3, 3, 0), (0, 6, 3, 0), (1, 0, 2, 0), (1, 2, 2, 0)]
            ),
            f"clusters/{TANSU_CLUSTER}/topics/{topic}/partitions/0000000000/watermark.json": (
                NOW,
                40,
                b"{}",
            ),
        }
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(bucket.handler)) as client:
        store = TansuObjectStore(S3, "tansu", client=client, vacuum_url=MASTER)
        # p0: committed 7 (6..8 straddles); p1: committed 4 = its last batch's end.
        purged = await store.delete_consumed(topic, {0: 7, 1: 4, 3: 9})
        assert sorted(bucket.deleted) == sorted(
            [_key(topic, 0, 0), _key(topic, 0, 3), _key(topic, 1, 0), _key(topic, 1, 2)]
        )
        assert purged == Purged(batches=4, records=6 + 4, bytes=103 * 2 + 102 * 2)
        assert await store.settle() is Vacuum.DONE
        assert bucket.vacuums == 1
        # Nothing new deleted, and the last vacuum came after the deletions: no vacuum.
        assert await store.settle() is Vacuum.NONE
        await store.close()
    assert _key(topic, 0, 6) in bucket.objects


async def test_s3_store_says_when_it_vacuumed_before_the_volumes_had_the_deletions() -> None:
    topic = "gm.dead-letters"
    bucket = _Bucket(_objects(topic, [(0, 0, 1, 1000), (0, 1, 1, 1)]))
    handler = bucket.handler

    def filer_behind(request: httpx.Request) -> httpx.Response:
        answer = handler(request)
        if request.method == "POST":
            bucket.delete_count = 0  # the filer has not handed the deletion over yet
        return answer

    async with httpx.AsyncClient(transport=httpx.MockTransport(filer_behind)) as client:
        store = TansuObjectStore(
            S3, "tansu", client=client, vacuum_url=MASTER, settle_timeout_s=0.3
        )
        assert (await store.delete_expired(topic, NOW - 600)).batches == 1
        # Vacuumed anyway (the wait is bounded), and said so.
        assert await store.settle() is Vacuum.EARLY
        assert bucket.vacuums == 1
        # The next pass vacuums again though it deleted nothing; the deletion has
        # reached the volumes by then.
        bucket.delete_count = 1
        assert await store.settle() is Vacuum.DONE
        assert bucket.vacuums == 2
        assert await store.settle() is Vacuum.NONE
        await store.close()


async def test_a_pass_that_vacuumed_early_says_its_bytes_are_pending() -> None:
    class _EarlyStore(_FakeStore):
        async def settle(self) -> Vacuum:
            self.settled += 1
            return Vacuum.EARLY

    names = TopicNames("gm")
    purge = StagingPurge(
        _EarlyStore(),
        _FakeBroker({names.dead_letters}, {}),
        prefix="gm",
        group="grimoire",
        retention_s=600,
        interval_s=60,
        clock=lambda: NOW,
    )
    report = await purge.run_once()
    assert report.vacuumed and report.bytes_pending
    await purge.close()


async def test_s3_store_expires_old_batches_and_pages_through_listings() -> None:
    topic = "gm.dead-letters"
    bucket = _Bucket(
        _objects(topic, [(0, base, 1, 1000 - base) for base in range(0, 5)] + [(0, 5, 1, 1)]),
        page=2,
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(bucket.handler)) as client:
        store = TansuObjectStore(S3, "tansu", client=client)
        purged = await store.delete_expired(topic, NOW - 600)
        await store.settle()
    assert sorted(bucket.deleted) == [_key(topic, 0, base) for base in range(5)]
    assert purged.batches == 5 and purged.records == 5
    assert bucket.vacuums == 0  # no master given
    listings = [r for r in bucket.requests if "list-type" in str(r.url)]
    assert len(listings) == 3


async def test_s3_store_reads_the_last_header_when_a_partition_empties() -> None:
    topic = "gm.replies.c1"
    bucket = _Bucket(_objects(topic, [(0, 0, 4, 900), (0, 4, 3, 800)]))
    async with httpx.AsyncClient(transport=httpx.MockTransport(bucket.handler)) as client:
        store = TansuObjectStore(S3, "tansu", client=client)
        purged = await store.delete_expired(topic, NOW - 600)
    assert purged == Purged(batches=2, records=7, bytes=104 + 103)
    assert bucket.objects == {}


async def test_s3_store_keeps_a_last_batch_whose_header_is_unreadable() -> None:
    topic = "gm.facts"
    objects = _objects(topic, [(0, 0, 2, 0), (0, 2, 2, 0)])
    key = _key(topic, 0, 2)
    objects[key] = (objects[key][0], objects[key][1], b"garbage")
    bucket = _Bucket(objects)
    async with httpx.AsyncClient(transport=httpx.MockTransport(bucket.handler)) as client:
        store = TansuObjectStore(S3, "tansu", client=client)
        purged = await store.delete_consumed(topic, {0: 100})
    assert bucket.deleted == [_key(topic, 0, 0)]
    assert purged.records == 2


# -- the Kafka store (DeleteRecords) ------------------------------------------------------------


class _FakeAdmin:
    def __init__(self) -> None:
        self.deleted: dict[TopicPartition, int] = {}

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        return [
            {"topic": t, "error_code": 0, "partitions": [{"partition": 0}, {"partition": 1}]}
            for t in topics
        ]

    async def delete_records(self, wanted: dict[TopicPartition, Any]) -> dict[TopicPartition, int]:
        self.deleted = {tp: r.before_offset for tp, r in wanted.items()}
        return dict(self.deleted)

    async def list_consumer_group_offsets(
        self, group: str, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(10 if tp.partition == 0 else -1, "") for tp in partitions}


class _FakeConsumer:
    def __init__(self) -> None:
        self.starts = {0: 2, 1: 0}
        self.ends = {0: 50, 1: 40}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.starts[tp.partition] for tp in tps}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp.partition] for tp in tps}

    async def offsets_for_times(
        self, stamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        assert set(stamps.values()) == {int((NOW - 600) * 1000)}
        # p0 has a record at/after the cutoff at 30; p1's records are all older.
        return {tp: OffsetAndTimestamp(30, 0) if tp.partition == 0 else None for tp in stamps}


async def test_kafka_store_deletes_below_committed_and_below_the_cutoff() -> None:
    admin, consumer = _FakeAdmin(), _FakeConsumer()
    store = KafkaRecordsStore("unused:9092", admin=admin, consumer=consumer)
    purged = await store.delete_consumed("gm.episodes", {0: 10, 1: 0})
    assert admin.deleted == {TopicPartition("gm.episodes", 0): 10}
    assert purged == Purged(batches=1, records=8)
    # A committed offset at the log start already: nothing asked.
    admin.deleted = {}
    consumer.starts[0] = 10
    assert await store.delete_consumed("gm.episodes", {0: 10}) == Purged()
    assert admin.deleted == {}
    purged = await store.delete_expired("gm.dead-letters", NOW - 600)
    assert admin.deleted == {
        TopicPartition("gm.dead-letters", 0): 30,
        TopicPartition("gm.dead-letters", 1): 40,
    }
    assert purged.records == 20 + 40
    assert await store.settle() is Vacuum.NONE


async def test_broker_view_names_partitions_and_keeps_committed_ones() -> None:
    view = KafkaBrokerView("unused:9092")
    view._admin = _FakeAdmin()
    view._started = True
    found = await view.committed("grimoire", ["gm.episodes", "gm.facts"])
    assert found == {"gm.episodes": {0: 10}, "gm.facts": {0: 10}}
    assert await view.committed("grimoire", []) == {}


# -- settings and wiring ------------------------------------------------------------------------


def test_purge_is_off_by_default_and_s3_needs_its_url() -> None:
    settings = unit_settings()
    assert settings.staging.purge == "off"
    assert build_staging_purge(settings) is None
    with pytest.raises(ValueError, match="STAGING_S3_URL"):
        build_staging_purge(unit_settings(staging_purge="s3"))


async def test_settings_build_the_store_they_name() -> None:
    s3 = build_staging_purge(
        unit_settings(staging_purge="s3", staging_s3_url=S3, staging_retention_s=30)
    )
    assert s3 is not None and isinstance(s3._store, TansuObjectStore)
    assert s3.bound_s == 30 + 60
    await s3.close()
    kafka = build_staging_purge(unit_settings(staging_purge="kafka"), group="other")
    assert kafka is not None and isinstance(kafka._store, KafkaRecordsStore)
    assert kafka._group == "other"


def test_env_names_the_purge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIMOIRE_STAGING_PURGE", "kafka")
    monkeypatch.setenv("GRIMOIRE_STAGING_RETENTION_S", "120")
    monkeypatch.setenv("GRIMOIRE_STAGING_PURGE_INTERVAL_S", "15")
    settings = Settings(_env_file=None)
    assert (settings.staging.purge, settings.staging.retention_s) == ("kafka", 120)
    assert settings.staging.purge_interval_s == 15


def test_local_durable_services_turn_the_s3_purge_on(tmp_path: Any) -> None:
    durable = LocalServices(tmp_path, ServicePorts(kafka=19942, redis=17242), durable=True)
    assert local_staging_settings(durable) == {
        "staging_purge": "s3",
        "staging_s3_url": "http://127.0.0.1:20942",
        "staging_s3_bucket": "tansu",
        "staging_s3_vacuum_url": "http://127.0.0.1:20943",
    }
    memory = LocalServices(tmp_path, ServicePorts(kafka=19942, redis=17242))
    assert local_staging_settings(memory) == {}


async def test_tally_adds_a_pass_to_the_metrics_hash() -> None:
    class _Pipe:
        def __init__(self) -> None:
            self.calls: list[tuple[str, str, int]] = []

        async def __aenter__(self) -> _Pipe:
            return self

        async def __aexit__(self, *_: object) -> None:
            pass

        def hincrby(self, key: str, name: str, value: int) -> None:
            self.calls.append((key, name, value))

        async def execute(self) -> None:
            pass

    pipe = _Pipe()

    class _Redis:
        def pipeline(self, transaction: bool) -> _Pipe:
            return pipe

    tally = RedisPurgeTally(_Redis(), "gm")
    await tally(PurgeReport(consumed=Purged(2, 6, 100), expired=Purged(1, 1, 0)))
    assert pipe.calls == [
        ("gm:metrics", PURGE_COUNTERS[0], 1),
        ("gm:metrics", "staging_purged_batches", 3),
        ("gm:metrics", "staging_purged_records", 7),
        ("gm:metrics", "staging_purged_bytes", 100),
    ]
    pipe.calls.clear()
    await tally(PurgeReport(expired=Purged(1, 1, 0), vacuum=Vacuum.EARLY))
    assert ("gm:metrics", "staging_vacuums_early", 1) in pipe.calls


async def test_the_worker_has_a_purge_timer_when_the_purge_is_on() -> None:
    def timers(app: Any) -> list[str]:
        return [task.__name__ for task in app._app_tasks]

    assert "staging_purge" not in timers(create_app(unit_settings()))
    app = create_app(unit_settings(staging_purge="s3", staging_s3_url=S3, app_id="workers"))
    assert "staging_purge" in timers(app)
    # The group whose commits it reads is the workers' own (Faust's is its app id).
    purge = register_staging_purge(faust.App("other-workers"), unit_settings(staging_purge="kafka"))
    assert purge is not None and purge._group == "other-workers"
    await purge.close()
