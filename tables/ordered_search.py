"""Reading a filtered set of one agent's memories in a total order: event time, then id.

A fold that pages or caps a search decides with what it read, so what it reads
must not depend on the index. RediSearch sorts by one field only, and memories
sharing a `ts` come back in its internal document order: the order their hashes
were last written, or the order a rebuilt index (a restart, a migration) scanned
the keyspace in. A replay into an empty Redis reproduces neither, so a read that
pages with `SORTBY ts … LIMIT offset n`, or caps at n, could take other tied
memories than the first fold did.

So a read here goes in windows of event time that never split a tie: the next
`page` matches from where the last window ended (`SORTBY ts`, each with its
`ts` as the index keeps it, `WITHSORTKEYS`); when that page is full, every match
at its last `ts` too; the window sorted by (ts, key); the next window starts
after that `ts`. An agent's memory keys differ only by memory id, so within an
agent (every query names one) key order is id order.

Every query reads at most `MAX_SAME_TIME` documents: the deployment's
MAXSEARCHRESULTS (docker-compose.yml, `grimoire.infra.local.services`), past which
no search returns anything, whatever its offset. So memories of one agent at one
event time beyond that are not read (a warning says so), and offsets never reach
past it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.search_replies import nocontent_keys, total_results
from grimoire.tables.routing import SearchTarget

__all__ = [
    "DEFAULT_PAGE",
    "MAX_SAME_TIME",
    "Search",
    "TsWindow",
    "index_search",
    "ordered_keys",
    "sorted_keys",
    "ts_windows",
]

logger = logging.getLogger(__name__)

DEFAULT_PAGE: Final = 500
MAX_SAME_TIME: Final = 10_000

# Runs one FT.SEARCH on the agent's index: the arguments after the index name,
# the raw reply back.
Search = Callable[[Sequence[Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class TsWindow:
    """One window's two queries. `where` is a RediSearch filter that names one
    agent; `after` is the last window's `ts` as the index gave it (exclusive),
    None for the first window."""

    where: str
    page: int = DEFAULT_PAGE
    after: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.page <= MAX_SAME_TIME:
            raise ValueError(f"a window's page must be 1..{MAX_SAME_TIME}, not {self.page}")

    def query_string(self) -> str:
        lower = "-inf" if self.after is None else f"({self.after}"
        return f"({self.where}) @ts:[{lower} +inf]"

    def arguments(self) -> list[str | int]:
        """The next `page` matches, oldest first, each with its `ts` (the sort key)."""
        return [
            self.query_string(), "NOCONTENT", "WITHSORTKEYS",
            "SORTBY", "ts", "ASC", "LIMIT", 0, self.page, "DIALECT", 2,
        ]  # fmt: skip

    def untimed_arguments(self) -> list[str | int]:
        """The matches without a `ts` (in no numeric range, so in no window), for a
        read that must see every document."""
        return [
            f"({self.where}) -@ts:[-inf +inf]", "NOCONTENT",
            "LIMIT", 0, MAX_SAME_TIME, "DIALECT", 2,
        ]  # fmt: skip

    def ties_arguments(self, ts: str) -> list[str | int]:
        """Every match at `ts` (as a sort key gave it: the same double), in any order."""
        return [
            f"({self.where}) @ts:[{ts} {ts}]", "NOCONTENT",
            "LIMIT", 0, MAX_SAME_TIME, "DIALECT", 2,
        ]  # fmt: skip


def sorted_keys(reply: Any) -> list[tuple[str, str | None]]:
    """(document key, `ts` as text) of a `NOCONTENT WITHSORTKEYS` reply sorted by
    `ts`, in either protocol; the sort key's `#` (a number) is dropped, and a
    document without the field has None."""
    if isinstance(reply, dict):  # RESP3
        rows: list[Any] = list(reply.get("results", reply.get(b"results")) or [])
        pairs = [
            (row.get("id", row.get(b"id")), row.get("sortkey", row.get(b"sortkey"))) for row in rows
        ]
    else:  # RESP2: [total, key, sortkey, key, sortkey, ...]
        items = list(reply or [])[1:]
        pairs = list(zip(items[0::2], items[1::2], strict=False))
    return [
        (text_of(key), None if value is None else text_of(value).removeprefix("#"))
        for key, value in pairs
    ]


def _ordered(rows: Sequence[tuple[str, str]]) -> list[str]:
    return [key for key, _ in sorted(rows, key=lambda row: (float(row[1]), row[0]))]


async def ts_windows(
    search: Search, where: str, *, page: int = DEFAULT_PAGE
) -> AsyncIterator[list[str]]:
    """Every match of `where` with a `ts`, a window at a time, each window's keys by
    (ts, key) and every window after the one before. A window holds at least
    `page` keys unless it is the last, and all of one `ts` (up to MAX_SAME_TIME)."""
    window = TsWindow(where, page)
    while True:
        rows = sorted_keys(await search(window.arguments()))
        timed = [(key, ts) for key, ts in rows if ts is not None]
        if not timed:
            return
        if len(rows) < page:  # the rest of the matches: nothing beyond to split
            yield _ordered(timed)
            return
        last = timed[-1][1]
        ties = await search(window.ties_arguments(last))
        tied = nocontent_keys(ties)
        if total_results(ties) > len(tied):
            logger.warning(
                "%d memories at ts %s match %s: the %d the index lists first are read",
                total_results(ties), last, where, len(tied),
            )  # fmt: skip
        within = {key: ts for key, ts in timed if ts != last}
        within.update(dict.fromkeys(tied, last))
        yield _ordered(list(within.items()))
        window = TsWindow(where, page, after=last)


async def ordered_keys(
    search: Search, where: str, limit: int, *, page: int = DEFAULT_PAGE
) -> list[str]:
    """The first `limit` matches of `where` by (ts, key): the cap picks by that
    order too, never by the index's."""
    found: list[str] = []
    if limit <= 0:
        return found
    async for window in ts_windows(search, where, page=min(page, limit)):
        found += window
        if len(found) >= limit:
            break
    return found[:limit]


def index_search(redis: Redis, target: SearchTarget) -> Search:
    """FT.SEARCH on `target`, pipelined so the reply comes back raw whatever
    callbacks the client has."""

    async def search(arguments: Sequence[Any]) -> Any:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.execute_command("FT.SEARCH", target.index, *arguments, **target.options)
            (reply,) = await pipe.execute()
        return reply

    return search
