"""Purging tansu's `s3://` storage engine, object by object (the local durable broker).

tansu 0.6.0 implements neither DeleteRecords (its s3 engine's `delete_records` is a
`todo!()` that panics) nor retention. It stores each produced batch as one object,

    clusters/<cluster>/topics/<topic>/partitions/<partition:10>/records/<base offset:20>.batch

and its Fetch lists a partition's objects and returns those from the batch holding
the offset asked for, while ListOffsets "earliest" names the oldest object left. So
deleting whole objects from a partition's start is DeleteRecords there: a consumer
from the earliest offset starts at the first batch left, one with a committed
offset never notices (tests/integration/test_staging_purge.py checks both).

S3 deletes leave the bytes in the store's volume files until it compacts them. With
a SeaweedFS master URL (`grimoire up`'s `weed mini`), each pass that deleted
something waits for the filer to pass the deletions to the volume servers (it does
so in the background, about a second later) and then asks the master to vacuum, so
the bytes leave the disk too.

Requests are unsigned: this speaks to a SeaweedFS gateway without identities, as
`grimoire up` runs it on loopback, not to a cloud bucket.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final
from xml.sax.saxutils import escape

import httpx

from grimoire.infra.purge_plan import (
    BATCH_HEADER_BYTES,
    Purged,
    StoredBatch,
    Vacuum,
    consumed_prefix,
    expired_prefix,
    header_end_offset,
    spans,
)

__all__ = ["TANSU_CLUSTER", "SeaweedVacuum", "TansuObjectStore"]

logger = logging.getLogger(__name__)

# tansu's default cluster id (`--kafka-cluster-id`); LocalServices never sets one.
TANSU_CLUSTER: Final = "tansu_cluster"
_S3_NS: Final = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_BATCH_KEY: Final = re.compile(r"/partitions/(\d{10})/records/(\d{20})\.batch$")
# S3's most keys in one DeleteObjects request.
_DELETE_CHUNK: Final = 1000
_SETTLE_POLL_S: Final = 0.2


class TansuObjectStore:
    """A `StagingStore` over tansu's bucket: lists a topic's batch objects and
    deletes a prefix of each partition's."""

    def __init__(
        self,
        url: str,
        bucket: str,
        *,
        cluster: str = TANSU_CLUSTER,
        vacuum_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = 30.0,
        settle_timeout_s: float = 10.0,
    ) -> None:
        self._bucket_url = f"{url.rstrip('/')}/{bucket}"
        self._cluster = cluster
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._owns_client = client is None
        self._vacuum = (
            SeaweedVacuum(vacuum_url, client=self._client, settle_timeout_s=settle_timeout_s)
            if vacuum_url
            else None
        )
        # Objects deleted since the last vacuum, and the volume servers' deletion
        # count before the first of them (None: not read).
        self._deleted = 0
        self._baseline: int | None = None
        # The last vacuum may have run before every deletion had reached the volumes.
        self._vacuum_again = False

    # -- StagingStore -----------------------------------------------------------------------

    async def delete_consumed(self, topic: str, committed: Mapping[int, int]) -> Purged:
        purged = Purged()
        if not any(offset > 0 for offset in committed.values()):
            return purged  # nothing taken: not even worth a listing
        by_partition = await self._batches(topic)
        for partition, batches in sorted(by_partition.items()):
            upto = committed.get(partition)
            if upto is None or upto <= 0 or not batches:
                continue
            last = max(batches, key=lambda batch: batch.base_offset)
            # Only the last batch needs its header: the others end where the next begins.
            last_end = await self._end_of(last) if last.base_offset < upto else None
            doomed = consumed_prefix(batches, upto, last_end)
            purged += await self._delete_prefix(batches, doomed, last_end)
        return purged

    async def delete_expired(self, topic: str, cutoff: float) -> Purged:
        purged = Purged()
        by_partition = await self._batches(topic)
        for _partition, batches in sorted(by_partition.items()):
            doomed = expired_prefix(batches, cutoff)
            if not doomed:
                continue
            last_end = None
            if len(doomed) == len(batches):
                # The whole partition goes: only the last batch's header says how far.
                last_end = await self._end_of(doomed[-1])
            purged += await self._delete_prefix(batches, doomed, last_end)
        return purged

    async def settle(self) -> Vacuum:
        """Vacuum once the deletions since the last vacuum have reached the volume
        servers (or again, when the last one may have come before they did)."""
        if self._vacuum is None or not (self._deleted or self._vacuum_again):
            return Vacuum.NONE
        reached = True
        if self._deleted:
            target = None if self._baseline is None else self._baseline + self._deleted
            reached = await self._vacuum.await_deletions(target)
        await self._vacuum.vacuum()
        # A vacuum before the deletions reached the volumes left their bytes: the
        # next pass vacuums again whatever it deletes.
        self._vacuum_again = bool(self._deleted) and not reached
        self._deleted = 0
        self._baseline = None
        return Vacuum.DONE if reached else Vacuum.EARLY

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    # -- internals --------------------------------------------------------------------------

    def _topic_prefix(self, topic: str) -> str:
        return f"clusters/{self._cluster}/topics/{topic}/partitions/"

    async def _batches(self, topic: str) -> dict[int, list[StoredBatch]]:
        """Every batch object of `topic`, by partition."""
        found: dict[int, list[StoredBatch]] = {}
        params = {"list-type": "2", "prefix": self._topic_prefix(topic), "max-keys": "1000"}
        while True:
            answer = await self._client.get(self._bucket_url, params=params)
            answer.raise_for_status()
            root = ET.fromstring(answer.content)
            for item in root.iter(f"{_S3_NS}Contents"):
                batch = _listed_batch(item)
                if batch is not None:
                    found.setdefault(batch[0], []).append(batch[1])
            token = root.findtext(f"{_S3_NS}NextContinuationToken")
            if root.findtext(f"{_S3_NS}IsTruncated") != "true" or not token:
                return found
            params = {**params, "continuation-token": token}

    async def _end_of(self, batch: StoredBatch) -> int | None:
        """One past the last offset of `batch`, from its header (None: unreadable)."""
        answer = await self._client.get(
            f"{self._bucket_url}/{batch.key}",
            headers={"Range": f"bytes=0-{BATCH_HEADER_BYTES - 1}"},
        )
        if answer.status_code not in (200, 206):
            logger.warning("reading %s's header: HTTP %d", batch.key, answer.status_code)
            return None
        return header_end_offset(batch.base_offset, answer.content[:BATCH_HEADER_BYTES])

    async def _delete_prefix(
        self, batches: Sequence[StoredBatch], doomed: Sequence[StoredBatch], last_end: int | None
    ) -> Purged:
        if not doomed:
            return Purged()
        # `doomed` is a prefix of the partition in offset order: the first batch after
        # it says where the purge stopped.
        ordered = sorted(batch.base_offset for batch in batches)
        following = ordered[len(doomed)] if len(doomed) < len(ordered) else last_end
        deleted = await self._delete_keys([batch.key for batch in doomed])
        if deleted < len(doomed):
            # Counts only what went; the rest is tried again by the next pass.
            return Purged(batches=deleted)
        return Purged(
            batches=len(doomed),
            records=spans(doomed, following),
            bytes=sum(batch.size for batch in doomed),
        )

    async def _delete_keys(self, keys: Sequence[str]) -> int:
        if self._vacuum is not None and self._baseline is None and not self._deleted:
            self._baseline = await self._vacuum.deletions()
        deleted = 0
        for start in range(0, len(keys), _DELETE_CHUNK):
            chunk = keys[start : start + _DELETE_CHUNK]
            body = _delete_body(chunk)
            answer = await self._client.post(
                f"{self._bucket_url}?delete",
                content=body,
                headers={
                    "Content-Type": "application/xml",
                    # S3 asks for it on DeleteObjects (the body is a list of names).
                    "Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode(),
                },
            )
            answer.raise_for_status()
            errors = list(ET.fromstring(answer.content).iter(f"{_S3_NS}Error"))
            for error in errors[:3]:
                logger.warning(
                    "deleting %s: %s",
                    error.findtext(f"{_S3_NS}Key"),
                    error.findtext(f"{_S3_NS}Message") or error.findtext(f"{_S3_NS}Code"),
                )
            deleted += len(chunk) - len(errors)
        self._deleted += deleted
        return deleted


class SeaweedVacuum:
    """A SeaweedFS master: its volume servers' deletion counts and its vacuum."""

    def __init__(
        self,
        master_url: str,
        *,
        client: httpx.AsyncClient,
        settle_timeout_s: float = 10.0,
        garbage_threshold: float = 0.0001,
    ) -> None:
        self._master = master_url.rstrip("/")
        self._client = client
        self._settle_timeout_s = settle_timeout_s
        self._threshold = garbage_threshold

    async def deletions(self) -> int | None:
        """Needles deleted on every volume server since its last compaction (None:
        the servers could not be read)."""
        try:
            status = await self._client.get(f"{self._master}/vol/status")
            status.raise_for_status()
            total = 0
            for node in _volume_servers(status.json()):
                answer = await self._client.get(f"http://{node}/status")
                answer.raise_for_status()
                total += sum(int(v.get("DeleteCount", 0)) for v in answer.json().get("Volumes", []))
            return total
        except (httpx.HTTPError, ValueError) as failure:
            logger.warning("volume servers' deletion counts unavailable: %s", failure)
            return None

    async def await_deletions(self, target: int | None) -> bool:
        """Wait until the volume servers count `target` deletions (the filer hands
        them over in the background); False when they did not within the timeout."""
        if target is None:
            return False
        deadline = time.monotonic() + self._settle_timeout_s
        while True:
            count = await self.deletions()
            if count is not None and count >= target:
                return True
            if time.monotonic() >= deadline:
                logger.warning(
                    "deletions not on the volume servers after %.0fs", self._settle_timeout_s
                )
                return False
            await asyncio.sleep(_SETTLE_POLL_S)

    async def vacuum(self) -> None:
        # Compacts every volume with any garbage: the bytes of deleted objects leave
        # the volume files (the master answers when it is done).
        answer = await self._client.get(
            f"{self._master}/vol/vacuum",
            params={"garbageThreshold": str(self._threshold)},
            timeout=max(60.0, self._settle_timeout_s),
        )
        answer.raise_for_status()


def _listed_batch(item: ET.Element) -> tuple[int, StoredBatch] | None:
    key = item.findtext(f"{_S3_NS}Key") or ""
    match = _BATCH_KEY.search(key)
    if match is None:
        return None  # the partition's watermark.json
    written = item.findtext(f"{_S3_NS}LastModified") or ""
    try:
        written_at = datetime.fromisoformat(written).timestamp()
    except ValueError:
        # Unknown age: never expired, still deletable once consumed.
        written_at = float("inf")
    size = int(item.findtext(f"{_S3_NS}Size") or 0)
    return int(match[1]), StoredBatch(int(match[2]), key, written_at, size)


def _delete_body(keys: Sequence[str]) -> bytes:
    objects = "".join(f"<Object><Key>{escape(key)}</Key></Object>" for key in keys)
    return f"<Delete><Quiet>true</Quiet>{objects}</Delete>".encode()


def _volume_servers(status: Any) -> list[str]:
    """The volume servers' addresses in a master's /vol/status answer."""
    centres = (status.get("Volumes") or {}).get("DataCenters") or {}
    return sorted(node for racks in centres.values() for nodes in racks.values() for node in nodes)
