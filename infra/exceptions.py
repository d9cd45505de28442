"""Error hierarchy for grimoire's infrastructure helpers."""

from __future__ import annotations

from grimoire.streams.exceptions import GrimoireError


class GrimoireInfraError(GrimoireError):
    """Root of every error raised by ``grimoire.infra``; a GrimoireError like the rest."""


class ServiceError(GrimoireInfraError):
    """A local service could not be fetched, started, verified or stopped."""
