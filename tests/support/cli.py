"""The `grimoire` command's connections replaced in tests: ``patch_opener`` swaps one of
the async context managers a command module opens (``common.api_keys``,
``common.memory_redis``, a module's own store opener) for one that yields a given fake."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

import pytest

T = TypeVar("T")


def patch_opener(monkeypatch: pytest.MonkeyPatch, module: object, name: str, value: T) -> T:
    """``module.name`` opens ``value`` from now on, whatever it is called with (the
    settings, a key); returns ``value``."""

    @contextlib.asynccontextmanager
    async def opened(*args: object) -> AsyncIterator[T]:
        yield value

    monkeypatch.setattr(module, name, opened)
    return value
