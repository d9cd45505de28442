"""The Faust agents' retry loop: outages are retried with backoff (and the store
given a chance to recover), but a stopping worker never waits out an outage."""

from __future__ import annotations

import asyncio

import pytest

from grimoire.agents.faust_agents import _with_retry


async def test_an_outage_is_retried_and_reported_until_it_passes() -> None:
    attempts: list[int] = []
    seen: list[str] = []

    async def flaky() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("redis gone")

    async def recover(failure: BaseException) -> None:
        seen.append(str(failure))

    assert await _with_retry("apply", flaky, on_failure=recover)
    assert len(attempts) == 3 and seen == ["redis gone", "redis gone"]


async def test_a_stopping_worker_leaves_the_batch_for_the_next_owner() -> None:
    async def down() -> None:
        raise ConnectionError("no such index")

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(_with_retry("apply", down, stopping=lambda: True), timeout=1)


async def test_a_bounded_retry_gives_up() -> None:
    async def down() -> None:
        raise RuntimeError("bug")

    assert not await _with_retry("recall", down, attempts=2)
