"""Local stacks of broker and Redis (and object store) that integration tests start
for themselves: the wheel cache they share, one started and stopped around a fixture,
and the settings of a deployment on one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from grimoire.infra.local.services import LocalServices
from grimoire.infra.settings import Settings
from tests.support.paths import ROOT

__all__ = ["WHEEL_CACHE", "services_up", "stack_settings"]

# The service wheels every local stack of the tests installs from (downloaded once).
WHEEL_CACHE: Final = ROOT / ".grimoire" / "wheels"

Stack = TypeVar("Stack", bound=LocalServices)


@contextmanager
def services_up(services: Stack) -> Iterator[Stack]:
    """`services` started, and stopped on the way out, a failure included."""
    services.up()
    try:
        yield services
    finally:
        services.down()


def stack_settings(bootstrap: str, redis_url: str, head: str, **values: Any) -> Settings:
    """A deployment on this broker and Redis, on a prefix of its own (`head` and 8
    random hex digits), with `values`; maintenance off (it has tests and workers of its
    own: elsewhere it would add curator insights to what a test recalls); no .env file."""
    return Settings(
        broker_url=f"kafka://{bootstrap}",
        redis_url=redis_url,
        topic_prefix=f"{head}{uuid.uuid4().hex[:8]}",
        maintenance_enabled=False,
        _env_file=None,
        **values,
    )
