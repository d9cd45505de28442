"""``Settings`` for tests that build the app, its clients or its purge from
configuration: no ``.env`` file read, topics on the ``unit`` prefix, the rest
the defaults unless given."""

from __future__ import annotations

from grimoire.infra.settings import Settings


def unit_settings(**overrides: object) -> Settings:
    """Settings from ``overrides`` alone (no .env file), on the ``unit`` topic prefix."""
    return Settings(_env_file=None, topic_prefix="unit", **overrides)
