"""grimoire.tables.ordered_search: the queries as value objects, and the
window reads against an index that returns tied memories in any order it likes.

The fake index below keeps RediSearch's contract and nothing more: `SORTBY ts`
orders by `ts` only (ties in whatever order the index holds them, here shuffled
anew on every query), `LIMIT` cuts that order, no query returns more than
MAXSEARCHRESULTS, and `WITHSORTKEYS` gives each `ts` as `#%.17g`.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
from collections.abc import Sequence
from typing import Any

import pytest

from grimoire.tables.ordered_search import (
    MAX_SAME_TIME,
    TsWindow,
    ordered_keys,
    sorted_keys,
    ts_windows,
)

WHERE = "@agent_id:{a} -@deleted:{1}"
T0 = 1_790_000_000_000

_RANGE = re.compile(r"@ts:\[(\(?)(\S+) (\S+)\]$")


def _bound(text: str) -> float:
    return float(text.replace("inf", "Infinity"))


class ShuffledIndex:
    """FT.SEARCH over (key, ts) documents, ties in a new order on every query."""

    def __init__(self, docs: dict[str, float], seed: int) -> None:
        self.docs = docs
        self.rng = random.Random(seed)
        self.queries: list[list[Any]] = []

    async def __call__(self, arguments: Sequence[Any]) -> list[Any]:
        self.queries.append(list(arguments))
        match = _RANGE.search(str(arguments[0]))
        assert match is not None, arguments[0]
        exclusive, low, high = match[1] == "(", _bound(match[2]), _bound(match[3])
        found = [
            (key, ts)
            for key, ts in self.docs.items()
            if (ts > low if exclusive else ts >= low) and ts <= high
        ]
        self.rng.shuffle(found)
        if "SORTBY" in arguments:
            found.sort(key=lambda doc: doc[1])  # stable: ties keep the shuffled order
        at = list(arguments).index("LIMIT")
        offset, count = int(arguments[at + 1]), int(arguments[at + 2])
        page = found[: min(len(found), 10_000)][offset : offset + count]
        reply: list[Any] = [len(found)]
        for key, ts in page:
            reply.append(key.encode())
            if "WITHSORTKEYS" in arguments:
                reply.append(b"#%.17g" % ts)
        return reply


def docs_with_ties() -> dict[str, float]:
    """650 memories at one instant between 40 on either side of it (one per ms)."""
    docs = {f"m:{{a}}:tie-{n:04d}": float(T0) for n in range(650)}
    docs |= {f"m:{{a}}:before-{n:02d}": float(T0 - 40 + n) for n in range(40)}
    docs |= {f"m:{{a}}:after-{n:02d}": float(T0 + 1 + n) for n in range(40)}
    return docs


def total_order(docs: dict[str, float]) -> list[str]:
    return [key for key, _ in sorted(docs.items(), key=lambda doc: (doc[1], doc[0]))]


# ---- the queries ------------------------------------------------------------------


def test_the_first_window_reads_from_the_start_sorted_with_its_times() -> None:
    assert TsWindow(WHERE, 500).arguments() == [
        f"({WHERE}) @ts:[-inf +inf]", "NOCONTENT", "WITHSORTKEYS",
        "SORTBY", "ts", "ASC", "LIMIT", 0, 500, "DIALECT", 2,
    ]  # fmt: skip


def test_a_later_window_starts_after_the_last_windows_time() -> None:
    window = TsWindow(WHERE, 100, after="1790000000000")
    assert window.query_string() == f"({WHERE}) @ts:[(1790000000000 +inf]"
    assert window.arguments()[-4:] == [0, 100, "DIALECT", 2]


def test_the_ties_query_reads_every_memory_at_one_time_unsorted() -> None:
    assert TsWindow(WHERE, 500).ties_arguments("1790000000000") == [
        f"({WHERE}) @ts:[1790000000000 1790000000000]", "NOCONTENT",
        "LIMIT", 0, MAX_SAME_TIME, "DIALECT", 2,
    ]  # fmt: skip


def test_the_untimed_query_reads_the_matches_in_no_window() -> None:
    assert TsWindow(WHERE).untimed_arguments() == [
        f"({WHERE}) -@ts:[-inf +inf]", "NOCONTENT", "LIMIT", 0, MAX_SAME_TIME, "DIALECT", 2,
    ]  # fmt: skip


@pytest.mark.parametrize("page", [0, -1, MAX_SAME_TIME + 1])
def test_a_page_outside_what_one_search_returns_is_refused(page: int) -> None:
    with pytest.raises(ValueError, match="page"):
        TsWindow(WHERE, page)


def test_sort_keys_are_read_in_either_protocol() -> None:
    resp2 = [3, b"k1", b"#1.5", b"k2", b"#1790000000000", b"k3", None]
    resp3 = {
        b"total_results": 3,
        b"results": [
            {b"id": b"k1", b"sortkey": b"#1.5", b"values": []},
            {b"id": b"k2", b"sortkey": b"#1790000000000", b"values": []},
            {b"id": b"k3", b"sortkey": None, b"values": []},
        ],
    }
    expected = [("k1", "1.5"), ("k2", "1790000000000"), ("k3", None)]
    assert sorted_keys(resp2) == expected
    assert sorted_keys(resp3) == expected
    assert sorted_keys([0]) == [] and sorted_keys({"results": []}) == []


# ---- the reads --------------------------------------------------------------------


@pytest.mark.parametrize("page", [1, 7, 100, 500, 1000])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_every_match_is_read_once_by_time_then_key_whatever_the_index_order(
    page: int, seed: int
) -> None:
    docs = docs_with_ties()
    found = await ordered_keys(ShuffledIndex(docs, seed), WHERE, 10_000, page=page)
    assert found == total_order(docs)


@pytest.mark.parametrize("limit", [1, 39, 40, 41, 300, 690, 700])
async def test_a_cap_keeps_the_first_by_time_then_key(limit: int) -> None:
    docs = docs_with_ties()
    picks = {
        tuple(await ordered_keys(ShuffledIndex(docs, seed), WHERE, limit, page=500))
        for seed in range(5)
    }
    assert picks == {tuple(total_order(docs)[:limit])}


async def test_a_window_never_splits_a_tie() -> None:
    docs = docs_with_ties()
    windows = [w async for w in ts_windows(ShuffledIndex(docs, 4), WHERE, page=100)]
    assert [key for window in windows for key in window] == total_order(docs)
    for earlier, later in itertools.pairwise(windows):
        assert docs[earlier[-1]] < docs[later[0]]
    assert max(len(window) for window in windows) == 40 + 650  # the tie read whole


async def test_a_short_last_page_needs_no_ties_query() -> None:
    docs = {f"k{n}": float(T0) for n in range(5)}
    index = ShuffledIndex(docs, 0)
    assert await ordered_keys(index, WHERE, 100, page=10) == sorted(docs)
    assert len(index.queries) == 1


async def test_nothing_matches() -> None:
    index = ShuffledIndex({}, 0)
    assert await ordered_keys(index, WHERE, 100) == []
    assert await ordered_keys(index, WHERE, 0) == []


async def test_more_ties_than_one_search_returns_are_cut_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    docs = {f"k{n:05d}": float(T0) for n in range(MAX_SAME_TIME + 5)}
    with caplog.at_level(logging.WARNING):
        found = await ordered_keys(ShuffledIndex(docs, 0), WHERE, 20_000, page=10)
    assert len(found) == MAX_SAME_TIME and found == sorted(found)
    assert "10005 memories at ts" in caplog.text
